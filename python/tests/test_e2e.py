"""End-to-end on CPU with the tiny Wan-style DiT (issue 5's CI checks): rank emulation for
every strategy, a real two-process torchrun (gloo) with `balanced`, calibration, and the
loss going down on a fixed batch."""
import collections
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import adaptiveload
from adaptiveload.models import wan_dit
from conftest import DATASETS, HERE, REPO, require_datasets, torchrun

require_datasets("taichi_hd.csv", "coco2017_val_images.csv")
MANIFESTS = [os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]
sys.path.insert(0, os.path.join(REPO, "examples"))
import train_dit  # noqa: E402

TINY = ["--config", "tiny", "--device", "cpu", "--threads", "2"] + sum((["-m", m] for m in MANIFESTS), [])


def planned_ids(strategy, world_size, steps):
    """Multiset of sample ids the plan gives all ranks in its first `steps` steps (padded
    repeats included, as they are trained)."""
    ids = collections.Counter()
    for r in range(world_size):
        s = adaptiveload.AdaptiveBatchSampler(MANIFESTS, model="tiny-dit", device="cpu", grid="tiny",
                                              strategy=strategy, world_size=world_size, rank=r, mem_budget=4096,
                                              checkpointing=False, on_bad_row="skip", on_oversize="skip")
        for t, st in zip(range(steps), s.steps()):
            for mb in st.micro_batches:
                ids.update(mb)
    return ids


def check_summary(r):
    for part in ("measured", "predicted"):
        for k in ("imbalance", "imbalance_step_mean", "imbalance_step_maxmin", "throughput_samples_per_s",
                  "throughput_tokens_per_s"):
            v = r[part][k]
            assert math.isfinite(v) and v >= 0, (part, k, v)
        assert 0 <= r[part]["imbalance"] < 1
    assert r["measured"]["samples"] > 0
    assert len(r["rank_times"]) == r["measured"]["steps"] == len(r["predicted_rank_times"])


def test_emulated_ranks_every_strategy(tmp_path):
    log = tmp_path / "ids.jsonl"
    out = tmp_path / "summary.json"
    W, steps = 3, 2
    results = train_dit.main(TINY + ["--strategy", "equal_tokens,fixed,dual,balanced", "--world-size", str(W),
                                     "--steps", str(steps), "--warmup", "0", "--log-samples", str(log),
                                     "--out", str(out)])
    assert [r["strategy"] for r in results] == ["equal_tokens", "fixed", "dual", "balanced"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    got = collections.defaultdict(collections.Counter)
    with open(log) as f:
        for line in f:
            e = json.loads(line)
            got[e["strategy"]].update(e["ids"])
    for r in results:
        check_summary(r)
        assert r["world_size"] == W and r["mode"] == "emulated" and r["measured"]["steps"] == steps
        assert got[r["strategy"]] == planned_ids(r["strategy"], W, steps), (
            f"{r['strategy']}: trained ids differ from the plan's first {steps} steps")


def test_torchrun_two_processes_balanced(tmp_path):
    out, log = tmp_path / "summary.json", tmp_path / "ids"
    cmd, env = torchrun(2, tmp_path / "logs", [HERE])
    steps = 2
    cmd += [os.path.join(REPO, "examples", "train_dit.py")] + TINY + [
        "--strategy", "balanced", "--steps", str(steps), "--warmup", "0", "--threads", "1",
        "--out", str(out), "--log-samples", str(log)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(out.read_text())
    check_summary(r)
    assert r["mode"] == "ddp" and r["world_size"] == 2
    assert all(len(t) == 2 for t in r["rank_times"])  # both ranks' times gathered
    got = collections.Counter()
    for rank in (0, 1):
        for line in open(f"{log}.rank{rank}"):
            e = json.loads(line)
            assert e["rank"] == rank
            got.update(e["ids"])
    assert got == planned_ids("balanced", 2, steps)


def test_loss_decreases_on_a_fixed_batch():
    torch.manual_seed(0)
    c = wan_dit.config("tiny")
    model = wan_dit.WanDiT(c, fused_adaln=True)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    x0 = torch.randn(2, 16, 3, 8, 12)
    ctx = torch.randn(2, c.text_len, c.text_dim)
    losses = []
    for _ in range(30):
        g = torch.Generator().manual_seed(7)  # same t and noise every step: a fixed objective
        loss = wan_dit.flow_matching_loss(model, x0, ctx, g).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


def test_calibration_on_cpu_fits_its_measurements(tmp_path):
    from adaptiveload import calibrate

    prof = tmp_path / "profile.json"
    summary = calibrate.main(["--config", "tiny", "--device", "cpu", "--out", str(prof), "--max-batch", "4",
                              "--reps", "5"])
    assert summary["median_rel_error"] < 0.15, summary
    p = json.loads(prof.read_text())
    assert p["format"] == "adaptiveload-profile" and p["fit"]["points"] >= 12
    # The sampler and the planner accept it.
    s = adaptiveload.AdaptiveBatchSampler(MANIFESTS, model="tiny-dit", device="cpu", grid="tiny", profile=str(prof),
                                          world_size=2, rank=0, mem_budget=4096)
    assert s.num_steps > 0
    res = subprocess.run([os.path.join(REPO, "build", "cli", "adaptiveload"), "plan", "-m", MANIFESTS[0],
                          "--model", "tiny-dit", "--grid", "tiny", "--device", "cpu", "--profile", str(prof), "-q"],
                         capture_output=True, text=True)
    if res.returncode == 127 or not os.path.exists(os.path.join(REPO, "build", "cli", "adaptiveload")):
        pytest.skip("CLI not built")
    assert res.returncode == 0, res.stderr
    assert "cost model profile" in res.stdout


def test_online_adaptation_replans_and_trains_every_sample_once(tmp_path):
    # A small slice of the real manifests, trained for a whole epoch with a refit after every step.
    small = tmp_path / "small.csv"
    with open(MANIFESTS[0]) as f:
        rows = f.read().splitlines()[:201]
    with open(MANIFESTS[1]) as f:
        rows += f.read().splitlines()[1:201]
    small.write_text("\n".join(rows) + "\n")
    log, out = tmp_path / "ids.jsonl", tmp_path / "out.json"
    (r,) = train_dit.main(["--config", "tiny", "--device", "cpu", "--threads", "2", "-m", str(small),
                           "--strategy", "balanced", "--world-size", "3", "--steps", "1000", "--warmup", "0",
                           "--adapt-every", "1", "--log-samples", str(log), "--out", str(out)])
    check_summary(r)
    assert len(r["adaptations"]) >= 2, r["adaptations"]
    for a in r["adaptations"]:
        assert a["median_rel_error"] < 0.5 and a["a"] >= 0 and a["b"] >= 0
    got = collections.Counter(i for line in open(log) for i in json.loads(line)["ids"])
    s = adaptiveload.AdaptiveBatchSampler(str(small), model="tiny-dit", device="cpu", grid="tiny", world_size=3,
                                          rank=0, mem_budget=4096, checkpointing=False)
    assert sorted(got) == s.planned_rows()
    assert set(got.values()) == {1}, "a sample was trained twice across re-plans"
