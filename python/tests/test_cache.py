"""The latent cache (adaptiveload.cache): written at the planner's shapes, resumable after kills,
shared over torchrun ranks, read back through the documented DataLoader, and musubi-tuner's
cache folders read as manifests. Tiny random encoders (cache_fixtures.py); nothing downloaded."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import save_file

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import adaptiveload  # noqa: E402
import cache_fixtures as fx  # noqa: E402
from adaptiveload.cache import (  # noqa: E402
    CacheDataset,
    CacheEntryError,
    CacheShapeError,
    Encoders,
    _format,
    collate_pack,
    collate_stack,
    load_encoders,
    write_index,
    write_rows,
)
from conftest import HERE, run_guarded, torchrun  # noqa: E402

SAMPLER = dict(model="tiny-dit", grid="tiny", device="cpu", world_size=1, rank=0, seed=0)


def sampler_of(manifest, **kw):
    return adaptiveload.AdaptiveBatchSampler(manifest, **{**SAMPLER, **kw})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("cache")
    return {"manifest": fx.write_manifest(str(d)), "models": fx.make_models(str(d / "models")), "root": d}


@pytest.fixture(scope="module")
def encoders(setup):
    m = setup["models"]
    return load_encoders(m["vae"], m["text_encoder"], m["tokenizer"], text_len=fx.TEXT_LEN)


@pytest.fixture(scope="module")
def reference(setup, encoders):
    """An uninterrupted cache of the manifest, written in this process."""
    out, rep = fx.write_reference(sampler_of(setup["manifest"]), encoders, str(setup["root"] / "reference"))
    assert rep.written == list(sampler_of(setup["manifest"]).planned_rows()) and not rep.done
    return out


def cache_cmd(setup, out, extra=()):
    m = setup["models"]
    return [sys.executable, "-m", "adaptiveload.cache", "--manifest", setup["manifest"], "--model", "tiny-dit",
            "--grid", "tiny", "--device-preset", "cpu", "--vae", m["vae"], "--text-encoder", m["text_encoder"],
            "--tokenizer", m["tokenizer"], "--text-len", str(fx.TEXT_LEN), "--device", "cpu", "--out", out,
            "--source", "cache_fixtures:SyntheticSource", *extra]


def env_of():
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(adaptiveload.__file__))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"
    return env


def files_of(folder):
    """{name: bytes} of a cache folder's files (temporary files of killed writers left out)."""
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder)) if not n.startswith(".")}


def test_latent_shapes_equal_the_planners_for_every_bucket(setup, reference):
    s = sampler_of(setup["manifest"])
    buckets = set()
    for row in s.planned_rows():
        f, h, w = s.sample_geometry(row)
        expected = (16, 1 + (f - 1) // 4, h // 8, w // 8)  # Wan's VAE: the planner's rule, written out
        assert s.latent_shape(row) == expected
        entry = adaptiveload.cache.read_entry(os.path.join(reference, _format.entry_name(row)), row, expected)
        assert tuple(entry["latent"].shape) == expected, row
        assert entry["text"].shape[1] == fx.TEXT_DIM
        buckets.add((f, h, w))
    assert len(buckets) >= 6  # images and clips of several sizes and aspect ratios
    assert 8 not in s.planned_rows()  # the row that fits no bucket is not cached
    # The index plans from the cache at the same buckets as the manifest (fixed rows).
    c = sampler_of(reference)
    idx = [json.loads(line) for line in open(os.path.join(reference, "index.jsonl"))]
    assert [r["source_row"] for r in idx] == list(s.planned_rows())
    for i, r in enumerate(idx):
        assert c.sample_geometry(i) == s.sample_geometry(r["source_row"])


def test_a_vae_of_another_model_is_refused(setup, encoders):
    s = sampler_of(setup["manifest"])
    wrong = Encoders(latent=lambda px: encoders.latent(px)[:, :, :-1], text=encoders.text)
    with pytest.raises(CacheShapeError, match=r"row 0: the VAE gave a latent \(16, 5, 3, 8\).*expects \(16, 5, 4, 8\)"):
        write_rows(s, fx.SyntheticSource(s), wrong, str(setup["root"]), [0])


def test_a_latent_function_of_ones_own_is_recorded_as_unstated(setup, encoders, tmp_path):
    """A caller's own latent function says nothing of its normalisation unless it sets
    latent_norm: the file must not claim 'none' (raw) for it, and a value the format does not
    know is refused."""
    from safetensors import safe_open

    s = sampler_of(setup["manifest"])
    own = Encoders(latent=lambda px: encoders.latent(px) * 2.0, text=encoders.text)
    write_rows(s, fx.SyntheticSource(s), own, str(tmp_path), [0])
    with safe_open(str(tmp_path / _format.entry_name(0)), "pt") as f:
        assert f.metadata()["latent_norm"] == _format.LATENT_NORM_UNSTATED

    def stated(px):
        return encoders.latent(px)

    stated.latent_norm = _format.LATENT_NORM_SCALE
    write_rows(s, fx.SyntheticSource(s), Encoders(latent=stated, text=encoders.text), str(tmp_path), [1])
    with safe_open(str(tmp_path / _format.entry_name(1)), "pt") as f:
        assert f.metadata()["latent_norm"] == _format.LATENT_NORM_SCALE
    stated.latent_norm = "zscore"
    with pytest.raises(ValueError, match=r"latent_norm is 'zscore'; the cache records one of latents_mean_std"):
        write_rows(s, fx.SyntheticSource(s), Encoders(latent=stated, text=encoders.text), str(tmp_path), [2])


def test_a_killed_write_leaves_no_valid_file(tmp_path, monkeypatch):
    target = str(tmp_path / "x.safetensors")

    def crash(src, dst):
        raise KeyboardInterrupt("killed between the write and the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        _format.atomic_write(target, b"data")
    assert not os.path.exists(target)


def test_killed_at_random_points_and_rerun_is_byte_identical(setup, reference):
    out = str(setup["root"] / "killed")
    os.makedirs(out)
    rng = random.Random(7)
    env = env_of()
    # Each sample takes 0.15 s or more: the job's own speed (a loaded or an idle machine) would
    # otherwise decide how many kills land before it ends.
    env["AL_TEST_SOURCE_DELAY"] = "0.15"
    n_rows = len(sampler_of(setup["manifest"]).planned_rows())
    kills = 0
    while kills < 6:
        done = len([n for n in os.listdir(out) if n.endswith(".safetensors") and not n.startswith(".")])
        if done >= n_rows - 1:
            break
        # Kill once a random number of new entries is there, after a random extra delay (mid-row).
        target = done + rng.randint(0, 1)
        proc = subprocess.Popen(cache_cmd(setup, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        t0 = time.time()
        while proc.poll() is None and time.time() - t0 < 120:
            now = len([n for n in os.listdir(out) if n.endswith(".safetensors") and not n.startswith(".")])
            if now >= target:
                time.sleep(rng.uniform(0, 0.15))
                break
            time.sleep(0.01)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 5, f"only {kills} kills landed before the job finished"
    code, log, _ = run_guarded(cache_cmd(setup, out), env, 300, "the resumed cache job")
    assert code == 0, log
    assert files_of(out) == files_of(reference)


def test_two_process_torchrun_covers_every_row_once(setup, reference, tmp_path):
    out = str(tmp_path / "dist")
    cmd, env = torchrun(2, tmp_path / "logs", extra_paths=[HERE])
    cmd = cmd + ["-m", "adaptiveload.cache"] + cache_cmd(setup, out)[3:]
    code, log, _ = run_guarded(cmd, env, 300, "the 2-process cache job")
    assert code == 0, log
    ranks = [json.loads(line[line.index("{"):]) for line in log.splitlines() if '"rank"' in line]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    n_rows = len(sampler_of(setup["manifest"]).planned_rows())
    assert sum(r["written"] for r in ranks) == n_rows  # each row once: no row written by both ranks
    assert all(r["written"] in (n_rows // 2, (n_rows + 1) // 2) for r in ranks)
    assert files_of(out) == files_of(reference)


def epoch_rows(loader):
    rows, planned = [], 0
    for b in loader:
        rows += b["rows"]
        planned += b["planned"]
    return rows, planned


@pytest.mark.parametrize("packing", ["off", "on"])
def test_documented_loader_reads_every_planned_sample_once(reference, packing):
    s = sampler_of(reference, packing=packing)
    ds = CacheDataset(reference, s)
    collate = collate_pack if packing == "on" else collate_stack
    loader = torch.utils.data.DataLoader(ds, batch_sampler=s, num_workers=2, collate_fn=collate,
                                         persistent_workers=True, prefetch_factor=2)
    for epoch in (0, 1):
        s.set_epoch(epoch)
        rows, planned = epoch_rows(loader)
        assert sorted(rows) == sorted(s.planned_rows())
        assert planned == len(rows)
    first = next(iter(torch.utils.data.DataLoader(ds, batch_sampler=s, collate_fn=collate)))
    if packing == "off":
        assert first["latent"].shape[0] == len(first["rows"]) and first["text"].shape[2] == fx.TEXT_DIM
    else:
        assert first["packed"].num_samples == len(first["rows"])


def test_loader_resumes_with_the_samplers_state(reference):
    s = sampler_of(reference)
    ds = CacheDataset(reference, s)
    batches = list(s)
    s2 = sampler_of(reference)
    it = iter(s2)
    next(it)
    state = s2.state_dict()
    s3 = sampler_of(reference)
    s3.load_state_dict(state)
    rows, _ = epoch_rows(torch.utils.data.DataLoader(ds, batch_sampler=s3, num_workers=1, collate_fn=collate_stack))
    assert sorted(rows) == sorted(r for b in batches[1:] for r in b)


def broken_copy(reference, tmp_path, row, how):
    out = str(tmp_path / f"broken_{how}")
    shutil.copytree(reference, out)
    path = os.path.join(out, _format.entry_name(row))
    if how == "missing":
        os.remove(path)
    elif how == "truncated":
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) - 100])
    elif how in ("shape", "dtype", "key"):
        latent = torch.zeros(16, 1, 2, 2) if how == "shape" else torch.zeros(16, 5, 4, 8, dtype=torch.int32)
        tensors = {"latent": latent, "text": torch.zeros(3, fx.TEXT_DIM)}
        if how == "key":
            tensors = {"text": torch.zeros(3, fx.TEXT_DIM)}
        save_file(tensors, path, metadata={"format": _format.FORMAT, "row": str(row), "shape": "17,32,64",
                                           "latent_norm": _format.LATENT_NORM_MEAN_STD})
    return out, path


@pytest.mark.parametrize("how,message", [("missing", "the file is missing"), ("truncated", "truncated or corrupt"),
                                         ("shape", r"'latent' has shape \(16, 1, 2, 2\), the planner expects"),
                                         ("dtype", "'latent' is torch.int32"), ("key", "no 'latent' tensor")])
def test_bad_entries_name_row_and_file_or_are_skipped_with_true_counts(reference, tmp_path, how, message):
    out, path = broken_copy(reference, tmp_path, 0, how)
    s = sampler_of(out)
    with pytest.raises(CacheEntryError, match=f"cache row 0 \\({path}\\): .*{message}"):
        CacheDataset(out, s)[0]
    ds = CacheDataset(out, s, on_bad="skip")
    batch = next(b for b in (collate_stack([ds[r] for r in rows]) for rows in s) if b["skipped"])
    assert batch["skipped"][0][0] == 0 and message.split("'")[0] in batch["skipped"][0][1]
    assert batch["planned"] == len(batch["rows"]) + 1  # the plan's count, for the loss normalisation
    assert 0 not in batch["rows"] and ("latent" not in batch or batch["latent"].shape[0] == len(batch["rows"]))


def test_bad_media_is_reported_and_left_out_of_the_cache(setup, encoders, tmp_path):
    s = sampler_of(setup["manifest"])
    with pytest.raises(fx.BadMedia, match="row 3: v3.mp4"):
        write_rows(s, fx.SyntheticSource(s, bad_rows=[3]), encoders, str(tmp_path), [3], "error",
                   fx.SyntheticSource.bad_errors)
    rep = write_rows(s, fx.SyntheticSource(s, bad_rows=[3]), encoders, str(tmp_path), [2, 3], "skip",
                     fx.SyntheticSource.bad_errors)
    assert rep.written == [2] and rep.skipped[0][0] == 3 and "cannot decode" in rep.skipped[0][1]
    assert write_index(s, str(tmp_path), [2, 3]) == 1


def test_musubi_folder_plans_like_the_equivalent_manifest_and_reads(reference, tmp_path):
    out = str(tmp_path / "musubi")
    rows = fx.to_musubi(reference, out)
    m = sampler_of(out)
    eq = sampler_of([{"path": r["path"], "num_frames": r["num_frames"], "height": r["height"], "width": r["width"],
                      "fps": 16 if r["num_frames"] > 1 else None} for r in rows])
    assert list(m) == list(eq)  # row i is item i in both (names sort by source row)
    ds = CacheDataset(out, m)
    ref = CacheDataset(reference, sampler_of(reference))
    loader = torch.utils.data.DataLoader(ds, batch_sampler=m, num_workers=2, collate_fn=collate_stack)
    seen = []
    for b in loader:
        for i, row in enumerate(b["rows"]):
            assert torch.equal(b["latent"][i], ref[row]["latent"])
            assert torch.equal(b["text"][i, : b["text_lens"][i]], ref[row]["text"])
        seen += b["rows"]
    assert sorted(seen) == sorted(m.planned_rows())



def test_the_cache_job_encodes_real_media_through_mediadataset(setup, tmp_path):
    """python -m adaptiveload.cache with its default source (adaptiveload.media.MediaDataset):
    clips and images made with ffmpeg, decoded at their buckets, cached at the planner's latent
    shapes; the index plans them at the same buckets. Needs the media branch (adaptiveload.media,
    media_gen.py) and torchcodec: skipped without them."""
    pytest.importorskip("torchcodec")
    pytest.importorskip("adaptiveload.media")
    media_gen = pytest.importorskip("media_gen")

    if not media_gen.have_ffmpeg():
        pytest.skip("ffmpeg is not installed")
    folder = str(tmp_path / "media")
    os.makedirs(folder)
    paths = media_gen.make_set(folder, 4, 3)
    manifest = media_gen.manifest(folder, paths, use_scan=False)
    out = str(tmp_path / "cache")
    m = setup["models"]
    from adaptiveload.cache.__main__ import main

    assert main(["--manifest", manifest, "--root", folder, "--model", "tiny-dit", "--grid", "tiny", "--device-preset",
                 "cpu", "--vae", m["vae"], "--text-encoder", m["text_encoder"], "--tokenizer", m["tokenizer"],
                 "--text-len", str(fx.TEXT_LEN), "--device", "cpu", "--out", out]) == 0
    s = sampler_of(manifest)
    c = sampler_of(out)
    idx = [json.loads(line) for line in open(os.path.join(out, "index.jsonl"))]
    assert [r["source_row"] for r in idx] == list(s.planned_rows()) and len(idx) >= 5
    for i, r in enumerate(idx):
        assert c.sample_geometry(i) == s.sample_geometry(r["source_row"])
        e = adaptiveload.cache.read_entry(os.path.join(out, r["path"]), i, s.latent_shape(r["source_row"]))
        assert tuple(e["latent"].shape) == s.latent_shape(r["source_row"])


def test_latents_are_normalised_as_a_wan_dit_trains_on_them(setup, reference):
    """The cache holds (mode - latents_mean) / latents_std per channel (the VAE config's), as
    diffusers' Wan pipelines and Wan's own VAE (musubi-tuner's caches) give latents; diffusers'
    encode alone returns the raw mode. The file says so; an entry written raw is refused."""
    from adaptiveload.cache import load_vae, read_entry, vae_encoder

    vae = load_vae(setup["models"]["vae"], "cpu", torch.float32)
    mean = torch.tensor(vae.config.latents_mean).view(-1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(-1, 1, 1, 1)
    assert not torch.allclose(mean, torch.zeros_like(mean)) and not torch.allclose(std, torch.ones_like(std))
    source = fx.SyntheticSource(sampler_of(setup["manifest"]))
    row = json.loads(open(os.path.join(reference, "index.jsonl")).readline())
    pixels = source[row["source_row"]]["pixels"]
    with torch.no_grad():
        raw = vae.encode(pixels[None]).latent_dist.mode()[0]
    encode = vae_encoder(vae, "cpu", torch.float32)
    assert encode.latent_norm == _format.LATENT_NORM_MEAN_STD
    torch.testing.assert_close(encode(pixels), (raw - mean) / std)
    torch.testing.assert_close(vae_encoder(vae, "cpu", torch.float32, normalize=False)(pixels), raw)
    shape = (16, 1 + (row["num_frames"] - 1) // 4, row["height"] // 8, row["width"] // 8)
    path = os.path.join(reference, row["path"])
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        assert f.metadata()["latent_norm"] == _format.LATENT_NORM_MEAN_STD
    torch.testing.assert_close(read_entry(path, row["source_row"], shape)["latent"], (raw - mean) / std)
    old = read_entry(path, row["source_row"], shape)
    stale = str(setup["root"] / f"{row['source_row']:09d}.safetensors")
    save_file({_format.LATENT_KEY: old["latent"], _format.TEXT_KEY: old["text"]}, stale,
              metadata={"format": _format.FORMAT, "row": str(row["source_row"]),
                        "shape": f"{row['num_frames']},{row['height']},{row['width']}"})
    with pytest.raises(CacheEntryError, match="raw mode.*rerun python -m adaptiveload.cache"):
        read_entry(stale, row["source_row"], shape)


def test_a_vae_with_a_scaling_factor_is_scaled_as_its_pipelines_do():
    """CogVideoX's and HunyuanVideo's VAEs carry scaling_factor (no latents_mean / std): the cache
    holds (mode - shift_factor) * scaling_factor, as their diffusers pipelines train on."""
    from diffusers import AutoencoderKLCogVideoX

    from adaptiveload.cache import vae_encoder

    torch.manual_seed(0)
    vae = AutoencoderKLCogVideoX(block_out_channels=(8, 8, 8, 8), latent_channels=4, norm_num_groups=4,
                                 layers_per_block=1)
    encode = vae_encoder(vae, "cpu", torch.float32)
    assert encode.latent_norm == _format.LATENT_NORM_SCALE
    pixels = torch.rand(3, 5, 32, 32) * 2 - 1
    with torch.no_grad():
        raw = vae.encode(pixels[None]).latent_dist.mode()[0]
    torch.testing.assert_close(encode(pixels), raw * vae.config.scaling_factor)
