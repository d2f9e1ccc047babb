"""Training on a latent cache: examples/train_dit.py --data cache under torchrun (2 processes,
gloo, CPU), DDP and FSDP2, packing on and off, with 2 DataLoader workers per rank reading the
cache (adaptiveload.cache.CacheDataset). Each run is checked against the plan (every planned
sample trained exactly once) and against one process emulating the 2 ranks on the same plan and
the same samples (per micro-batch losses within TRAIN_RTOL). Tiny random encoders and DiT."""
import json
import os

import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("transformers")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import adaptiveload  # noqa: E402
import cache_fixtures as fx  # noqa: E402
from adaptiveload.cache import load_encoders  # noqa: E402
from adaptiveload.training import train_dit  # noqa: E402
from conftest import REPO, run_guarded, torchrun  # noqa: E402

TRAIN_RTOL = 1e-5  # per micro-batch loss against one process, relative (fp32; as test_sharded_torchrun.py)
SCRIPT = os.path.join(REPO, "examples", "train_dit.py")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("train_cache")
    manifest = fx.write_manifest(str(d))
    m = fx.make_models(str(d / "models"))
    enc = load_encoders(m["vae"], m["text_encoder"], m["tokenizer"], text_len=fx.TEXT_LEN)
    s = adaptiveload.AdaptiveBatchSampler(manifest, model="tiny-dit", grid="tiny", device="cpu", world_size=1, rank=0)
    out, _ = fx.write_reference(s, enc, str(d / "cache"))
    return out


def train_args(cache, packing, parallel):
    sync = "micro" if parallel == "fsdp2" else "step"
    return ["--config", "tiny", "--device", "cpu", "--threads", "1", "--epoch", "--warmup", "0", "--seed", "0",
            "--data", "cache", "--cache", cache, "--packing", packing, "--strategy", "balanced", "--sync", sync]


def read_logs(paths):
    """{(step, ids): log entry} of train_dit.py --log-samples files."""
    out = {}
    for p in paths:
        for line in open(p):
            e = json.loads(line)
            out[(e["step"], tuple(e["ids"]))] = e
    return out


@pytest.mark.parametrize("parallel", ["ddp", "fsdp2"])
@pytest.mark.parametrize("packing", ["off", "on"])
def test_torchrun_trains_every_cached_sample_once_with_loader_workers(cache, tmp_path, parallel, packing):
    base = train_args(cache, packing, parallel)
    cmd, env = torchrun(2, tmp_path / "logs")
    log = tmp_path / "run.jsonl"
    code, out, _ = run_guarded(cmd + [SCRIPT] + base + ["--parallel", parallel, "--num-workers", "2",
                                                       "--log-samples", str(log)], env, 300,
                               f"train_dit --data cache under torchrun ({parallel}, packing {packing})")
    assert code == 0, out[-3000:]
    ref_log = tmp_path / "ref.jsonl"
    threads = torch.get_num_threads()
    try:
        train_dit.main(base + ["--world-size", "2", "--log-samples", str(ref_log)])
    finally:
        torch.set_num_threads(threads)
    got, ref = read_logs([f"{log}.rank0", f"{log}.rank1"]), read_logs([ref_log])
    planned = adaptiveload.AdaptiveBatchSampler(cache, model="tiny-dit", grid="tiny", device="cpu", world_size=2,
                                                rank=0).planned_rows()
    trained = sorted(i for e in got.values() if not e["padded"] for i in e["ids"])
    assert trained == sorted(planned)  # every planned sample loaded and trained once
    assert got.keys() == ref.keys()
    for k, e in got.items():
        assert e["losses"] == pytest.approx(ref[k]["losses"], rel=TRAIN_RTOL), k


def test_a_musubi_tuner_cache_folder_trains_like_the_cache_it_was_made_from(cache, tmp_path):
    """A musubi-tuner latent cache folder (its file names and safetensors keys) is a training set:
    train_dit --data cache on it, 2 ranks emulated in one process with 2 DataLoader workers,
    trains every planned item once, in the steps and with the losses of the same samples read
    from this project's own cache."""
    musubi = str(tmp_path / "musubi")
    fx.to_musubi(cache, musubi)
    logs = {}
    threads = torch.get_num_threads()
    try:
        for name, folder in (("own", cache), ("musubi", musubi)):
            logs[name] = tmp_path / f"{name}.jsonl"
            train_dit.main(train_args(folder, "off", "ddp") + ["--world-size", "2", "--num-workers", "2",
                                                               "--log-samples", str(logs[name])])
    finally:
        torch.set_num_threads(threads)
    got, ref = read_logs([logs["musubi"]]), read_logs([logs["own"]])
    planned = adaptiveload.AdaptiveBatchSampler(musubi, model="tiny-dit", grid="tiny", device="cpu", world_size=2,
                                                rank=0).planned_rows()
    assert sorted(i for e in got.values() if not e["padded"] for i in e["ids"]) == sorted(planned)
    assert len(planned) >= 8 and got.keys() == ref.keys()
    for k, e in got.items():
        assert e["losses"] == pytest.approx(ref[k]["losses"], rel=TRAIN_RTOL), k
