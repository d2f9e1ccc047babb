"""The spread of micro-batch times in the prediction: calibration's per-point spread and its
fit sigma(T) = k T^q, the sampler's per-micro-batch prices, and train_dit's epoch priced with
that spread (a step waits for the slowest of its ranks' noisy sums)."""
import json
import math
import os

import pytest

from adaptiveload import AdaptiveBatchSampler, calibrate
from adaptiveload.training import train_dit
from conftest import DATASETS

MANIFEST = [os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]


def test_log_spread_is_the_stdev_of_log_seconds():
    assert calibrate.log_spread([0.1]) == 0.0
    assert calibrate.log_spread([0.1, 0.1, 0.1]) == 0.0
    times = [0.01, 0.02, 0.04]
    assert calibrate.log_spread(times) == pytest.approx(math.log(2), rel=1e-12)


def test_fit_jitter_recovers_a_power_law_and_needs_three_points():
    k, q = 0.05, -0.3
    pts = [{"time_s": t, "log_spread": k * t ** q} for t in (0.002, 0.01, 0.05, 0.2, 1.0)]
    pts.append({"time_s": 0.5, "log_spread": 0.0})  # one repetition, or none varied: not fitted
    j = calibrate.fit_jitter(pts)
    assert j["points"] == 5
    assert j["k"] == pytest.approx(k, rel=1e-9) and j["q"] == pytest.approx(q, rel=1e-9)
    assert j["median_rel_error"] == pytest.approx(0, abs=1e-9)
    assert calibrate.jitter_sigma(j, 0.01) == pytest.approx(k * 0.01 ** q, rel=1e-9)
    assert calibrate.jitter_sigma({"k": 10.0, "q": 0.0}, 1.0) == 1.0  # capped
    assert calibrate.fit_jitter(pts[:2]) is None


def test_the_profile_carries_the_jitter_fit(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", [(1, 32, 48), (5, 32, 48), (1, 64, 64)])
    out = tmp_path / "p.json"
    summary = calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1",
                              "--reps", "3", "--max-batch", "2", "--out", str(out)])
    j = json.loads(out.read_text())["jitter"]
    assert j == summary["jitter"] and j["points"] >= 3 and j["k"] > 0 and math.isfinite(j["q"])


def test_micro_batch_prices_add_up_to_the_rank_times():
    s = AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, strategy="balanced", global_batch="samples:64")
    per_mb, per_rank = s.predicted_micro_batch_times(), s.predicted_rank_times()
    assert len(per_mb) == len(per_rank) == s.num_steps
    plan_mbs = 0
    for t, (step, sums) in enumerate(zip(per_mb, per_rank)):
        assert len(step) == 4
        for r, (prices, total) in enumerate(zip(step, sums)):
            assert len(prices) == len(s._plan.rank_step(t, r))
            assert sum(prices) == pytest.approx(total, rel=1e-9)
            plan_mbs += len(prices)
    assert plan_mbs >= s.num_steps * 4  # every rank has work in every step


def test_jitter_prediction_prices_the_wait_for_the_slowest_rank():
    # Two steps of 4 ranks with equal sums: no idle without the spread; with it a step waits
    # for the slowest noisy sum, so idle rises and throughput falls, more with more spread.
    steps = [[[0.1, 0.1]] * 4, [[0.05, 0.05, 0.1]] * 4]
    flat = [[sum(r) for r in st] for st in steps]
    assert train_dit.metrics(flat, 16, 1000, [0.0, 0.0])["imbalance"] == pytest.approx(0, abs=1e-12)
    small = train_dit.jitter_prediction(steps, {"k": 0.02, "q": 0.0}, 16, 1000, [0.0, 0.0])
    large = train_dit.jitter_prediction(steps, {"k": 0.2, "q": 0.0}, 16, 1000, [0.0, 0.0])
    assert 0 < small["imbalance"] < large["imbalance"] < 0.5
    plain = train_dit.metrics(flat, 16, 1000, [0.0, 0.0])["throughput_samples_per_s"]
    assert large["throughput_samples_per_s"] < small["throughput_samples_per_s"] < plain
    # A fixed seed: the same figures every run.
    assert train_dit.jitter_prediction(steps, {"k": 0.2, "q": 0.0}, 16, 1000, [0.0, 0.0]) == large


def test_interleave_times_every_point_in_shuffled_rounds(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", [(1, 32, 48), (5, 32, 48), (1, 64, 64)])
    seen = []
    timed = calibrate.timed

    def spy(step, model, device, reps, clock="wall", warmup=True):
        seen.append((reps, warmup))
        return timed(step, model, device, reps, clock, warmup)
    monkeypatch.setattr(calibrate, "timed", spy)
    out, meas = tmp_path / "p.json", tmp_path / "m.jsonl"
    calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1", "--reps", "1",
                    "--max-batch", "2", "--interleave", "3", "--out", str(out), "--measurements-out", str(meas)])
    pts = [json.loads(s) for s in meas.read_text().splitlines()]
    n = len(pts)
    assert n == 6  # 3 shapes at B = 1, 2
    # The sweep (a warm-up and one repetition each), then 3 rounds of one unwarmed timing each.
    assert seen == [(1, True)] * n + [(1, False)] * (3 * n)
    for pt in pts:
        assert pt["interleaved"] == 3 and pt["time_s"] > 0 and pt["log_spread"] >= 0
        assert pt["tokens"] == calibrate.shape_tokens(pt["shape"])
    assert "jitter" in json.loads(out.read_text())


def test_interleave_out_of_range_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        calibrate.main(["--config", "tiny", "--out", str(tmp_path / "p.json"), "--interleave", "-1"])
    assert e.value.code == 2 and "--interleave" in capsys.readouterr().err
