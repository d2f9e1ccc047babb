"""Whether the loader keeps up: the loader profile (adaptiveload.data_rate, written by
`adaptiveload calibrate -- --loader ...`), the sampler's loader_check (the core's
sim/loader_check.h, the check `adaptiveload plan --loader-profile` makes) with its warning in
Python's words, and calibrate's loader measurement end to end on a tiny latent cache."""
import json
import os
import subprocess
import warnings

import pytest

import adaptiveload
from adaptiveload import calibrate, data_rate
from conftest import REPO

MANIFEST = os.path.join(REPO, "data", "taichi_hd.csv")
CLI = os.path.join(REPO, "build", "cli", "adaptiveload")


def _profile(tmp_path, fixed_s, name="lp.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data_rate.loader_profile(
        [], "media") | {"fit": {"fixed_s": fixed_s, "per_token_s": 0.0}}))
    return str(path)


@pytest.fixture(scope="module")
def sampler():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return adaptiveload.AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, strategy="balanced")


def test_slow_loader_warns_in_python_words(sampler, tmp_path):
    lp = _profile(tmp_path, 100.0)  # 100 s a sample: slower than any step trains
    with pytest.warns(UserWarning, match="the loader would not keep up") as rec:
        out = sampler.loader_check(lp, 2)
    msg = str(rec[0].message)
    assert "raise loader_workers" in msg and "--loader-workers" not in msg
    assert "with 2 worker(s) per rank" in msg and msg.endswith(out["warning"])
    assert out["keeps_up"] is False and out["workers"] == 2
    assert out["slow_rank_steps"] == out["rank_steps"] > 0
    assert out["max_load_train_ratio"] > 1
    assert out["worst"]["load_s"] > out["worst"]["train_s"]


def test_fast_loader_keeps_up_silently(sampler, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = sampler.loader_check(_profile(tmp_path, 1e-9), 1)
    assert out["keeps_up"] is True and out["warning"] is None and out["slow_rank_steps"] == 0


def test_workers_divide_the_load(sampler, tmp_path):
    lp = _profile(tmp_path, 0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one, four = sampler.loader_check(lp, 1), sampler.loader_check(lp, 4)
    assert four["max_load_train_ratio"] == pytest.approx(one["max_load_train_ratio"] / 4, rel=1e-12)


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="the CLI is not built")
def test_sampler_and_cli_agree(sampler, tmp_path):
    lp = _profile(tmp_path, 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = sampler.loader_check(lp, 3)
    r = subprocess.run([CLI, "plan", "--manifest", MANIFEST, "-w", "4", "-s", "balanced", "--loader-profile", lp,
                        "--loader-workers", "3", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)["strategies"][0]["loader"]
    for k in ("keeps_up", "slow_rank_steps", "rank_steps", "workers"):
        assert cli[k] == ours[k], k
    assert cli["max_load_train_ratio"] == pytest.approx(ours["max_load_train_ratio"], rel=1e-12)


def test_loader_check_refusals(sampler, tmp_path):
    with pytest.raises(ValueError, match="loader_workers"):
        sampler.loader_check(_profile(tmp_path, 1.0), 0)
    with pytest.raises(ValueError, match="loader_profile .* is no file"):
        sampler.loader_check(str(tmp_path / "none.json"), 1)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "adaptiveload-loader-1", "buckets": [], "fit": {"fixed_s": "x"}}))
    with pytest.raises(ValueError, match="bad.json: loader profile field 'fit.fixed_s' must be a number"):
        sampler.loader_check(str(bad), 1)


def test_fit_rate():
    entries = [{"tokens": t, "seconds": 0.002 + 1e-6 * t, "samples": n} for t, n in ((100, 2), (1000, 3), (5000, 1))]
    fixed, slope = data_rate.fit_rate(entries)
    assert fixed == pytest.approx(0.002, rel=1e-9) and slope == pytest.approx(1e-6, rel=1e-9)
    flat = [{"tokens": t, "seconds": s, "samples": 1} for t, s in ((100, 0.5), (1000, 0.1))]
    assert data_rate.fit_rate(flat) == (pytest.approx(0.3), 0.0)  # a falling rate: the mean, flat
    steep = [{"tokens": t, "seconds": s, "samples": 1} for t, s in ((100, 0.0), (1000, 1.0))]
    fixed, slope = data_rate.fit_rate(steep)
    assert fixed == 0.0 and slope > 0  # never a negative fixed cost


def test_calibrate_measures_a_cache_loader(tmp_path, capsys):
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    import cache_fixtures as fx
    from adaptiveload.cache import load_encoders

    manifest = fx.write_manifest(str(tmp_path))
    m = fx.make_models(str(tmp_path / "models"))
    enc = load_encoders(m["vae"], m["text_encoder"], m["tokenizer"], text_len=fx.TEXT_LEN)
    opts = dict(model="tiny-dit", grid="tiny", device="cpu", world_size=1, rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = adaptiveload.AdaptiveBatchSampler(manifest, **opts)
        cache, _ = fx.write_reference(s, enc, str(tmp_path / "cache"))
        out = tmp_path / "loader.json"
        prof = calibrate.main(["--model", "tiny-dit", "--loader", "cache", "--loader-manifest", cache,
                               "--loader-device-preset", "cpu", "--loader-workers", "0,2", "--reps", "1",
                               "--loader-out", str(out)])
        cached = adaptiveload.AdaptiveBatchSampler(cache, **opts)
    assert prof is not None and json.loads(out.read_text()) == json.loads(json.dumps(prof))
    shapes = {tuple(cached.sample_geometry(r)) for r in cached.planned_rows()}
    assert {(e["frames"], e["height"], e["width"]) for e in prof["buckets"]} == shapes  # every bucket measured
    assert all(e["seconds"] > 0 and 1 <= e["samples"] <= 4 for e in prof["buckets"])
    assert set(prof["samples_per_s"]) == {"0", "2"} and prof["source"] == "cache"
    assert "wrote " + str(out) in capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check = cached.loader_check(str(out), 2)  # the core reads what calibrate wrote
    assert check["rank_steps"] > 0 and check["source"] == "cache"


def test_calibrate_loader_needs_its_manifest(capsys):
    with pytest.raises(SystemExit):
        calibrate.main(["--loader", "media"])
    assert "--loader media needs --loader-manifest" in capsys.readouterr().err
