"""Training on real media: examples/train_dit.py --data media under torchrun (2 processes, gloo,
CPU), clips and images made at run time with ffmpeg / PIL, decoded at their planned buckets by
adaptiveload.media.MediaDataset in 2 DataLoader workers per rank and encoded in the loop by a tiny
randomly initialised AutoencoderKLWan. Each run is checked against the plan (every planned sample
loaded and trained exactly once) and against one process emulating the 2 ranks on the same plan
and the same samples (per micro-batch losses within TRAIN_RTOL), and it reports the seconds each
rank waited for the loader. Two runs cover DDP with packing off and FSDP2 with packing on."""
import os

import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("torchcodec")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import adaptiveload  # noqa: E402
import media_gen  # noqa: E402
from adaptiveload.training import train_dit  # noqa: E402
from conftest import REPO, run_guarded, torchrun  # noqa: E402
from test_train_cache import TRAIN_RTOL, read_logs  # noqa: E402

SCRIPT = os.path.join(REPO, "examples", "train_dit.py")
pytestmark = [pytest.mark.skipif(not media_gen.have_ffmpeg(), reason="the ffmpeg command is not installed"),
              pytest.mark.filterwarnings("ignore:AdaptiveBatchSampler:UserWarning")]


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("train_media"))
    paths = media_gen.make_set(folder, 6, 4)
    return folder, media_gen.manifest(folder, paths)


def train_args(media, packing, parallel):
    folder, manifest = media
    sync = "micro" if parallel == "fsdp2" else "step"
    return ["--config", "tiny", "--device", "cpu", "--threads", "1", "--epoch", "--warmup", "0", "--seed", "0",
            "--data", "media", "--manifest", manifest, "--media-root", folder, "--packing", packing,
            "--strategy", "balanced", "--sync", sync]


@pytest.mark.parametrize("parallel,packing", [("ddp", "off"), ("fsdp2", "on")])
def test_torchrun_trains_every_decoded_sample_once_with_loader_workers(media, tmp_path, parallel, packing):
    base = train_args(media, packing, parallel)
    cmd, env = torchrun(2, tmp_path / "logs")
    log, out_json = tmp_path / "run.jsonl", tmp_path / "summary.json"
    code, out, _ = run_guarded(cmd + [SCRIPT] + base + ["--parallel", parallel, "--num-workers", "2",
                                                       "--log-samples", str(log), "--out", str(out_json)], env, 300,
                               f"train_dit --data media under torchrun ({parallel}, packing {packing})")
    assert code == 0, out[-3000:]
    ref_log = tmp_path / "ref.jsonl"
    threads = torch.get_num_threads()
    try:
        train_dit.main(base + ["--world-size", "2", "--log-samples", str(ref_log)])
    finally:
        torch.set_num_threads(threads)
    got, ref = read_logs([f"{log}.rank0", f"{log}.rank1"]), read_logs([ref_log])
    planned = adaptiveload.AdaptiveBatchSampler(media[1], model="tiny-dit", grid="tiny", device="cpu", world_size=2,
                                                rank=0).planned_rows()
    assert len(planned) >= 8
    trained = sorted(i for e in got.values() if not e["padded"] for i in e["ids"])
    assert trained == sorted(planned)  # every planned sample loaded and trained once
    assert got.keys() == ref.keys()
    for k, e in got.items():
        assert e["losses"] == pytest.approx(ref[k]["losses"], rel=TRAIN_RTOL), k
    import json

    measured = json.load(open(out_json))[0]["measured"]
    assert measured["loader_workers"] == 2
    assert len(measured["data_wait_s"]) == 2 and all(w >= 0 for w in measured["data_wait_s"])
    assert "waited for data (s): r0" in out


def test_media_needs_a_manifest(capsys):
    with pytest.raises(SystemExit) as e:
        train_dit.main(["--config", "tiny", "--device", "cpu", "--data", "media", "--world-size", "2"])
    assert "--data media decodes the files of a manifest: give --manifest" in str(e.value)


def test_media_vae_must_be_a_folder(media, tmp_path):
    with pytest.raises(SystemExit) as e:
        train_dit.main(train_args(media, "off", "ddp") + ["--world-size", "2", "--vae", str(tmp_path / "none")])
    assert "--vae" in str(e.value) and "is no folder" in str(e.value)


def test_vae_from_a_folder_is_the_one_trained_with(media, tmp_path):
    """--vae loads a local diffusers folder: the tiny VAE the cache tests save (the same config
    and seed as the default tiny VAE) gives the default's losses, sample for sample, and the
    same VAE with other weights gives other losses (the folder's weights are the ones used)."""
    from diffusers import AutoencoderKLWan

    import cache_fixtures

    same = cache_fixtures.make_models(str(tmp_path / "models"))["vae"]
    other = AutoencoderKLWan.from_pretrained(same)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)
    other.save_pretrained(str(tmp_path / "other_vae"))
    base = train_args(media, "off", "ddp") + ["--world-size", "2"]
    threads = torch.get_num_threads()
    try:
        for name, extra in (("default", []), ("same", ["--vae", same]),
                            ("other", ["--vae", str(tmp_path / "other_vae")])):
            train_dit.main(base + extra + ["--log-samples", str(tmp_path / f"{name}.jsonl")])
    finally:
        torch.set_num_threads(threads)
    a, b, c = (read_logs([tmp_path / f"{n}.jsonl"]) for n in ("default", "same", "other"))
    assert a.keys() == b.keys() == c.keys() and a
    for k in a:
        assert b[k]["losses"] == pytest.approx(a[k]["losses"], rel=1e-6), k
    assert any(c[k]["losses"] != pytest.approx(a[k]["losses"], rel=1e-3) for k in a)
