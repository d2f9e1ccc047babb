"""A real two-process run: torchrun (torch.distributed.run) with gloo on CPU, each rank
iterating (and resuming mid-epoch) its AdaptiveBatchSampler; the union of the sample ids
all ranks saw covers every planned row exactly once."""
import collections
import json
import os
import subprocess

from conftest import DATASETS, HERE, torchrun

MANIFESTS = [os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]


def test_torchrun_two_ranks_gloo(tmp_path):
    out = tmp_path / "result.json"
    cmd, env = torchrun(2, tmp_path / "logs", [HERE])
    cmd += [os.path.join(HERE, "dist_sampler_worker.py"), str(out)] + MANIFESTS
    # The timeout only guards against a hang: a loaded machine is slow, not wrong.
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    ranks = sorted(result["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["steps"] == ranks[1]["steps"]  # same steps, same global counts on every rank
    assert [s[0] for s in ranks[0]["steps"]] == list(range(ranks[0]["num_steps"]))
    count = collections.Counter(i for r in ranks for i in r["seen"])
    padded = sum(s[1] for s in ranks[0]["steps"]) - len(set(count))
    assert set(count) == set(ranks[0]["planned"])
    assert sum(c - 1 for c in count.values()) == padded
    assert result["total_seen"] == sum(len(r["seen"]) for r in ranks) == sum(s[1] for s in ranks[0]["steps"])
