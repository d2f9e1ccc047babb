"""compare's tables (adaptiveload.training.compare, which examples/compare.py runs) without
training: the repetitions' medians and ranges, the paired ratios, the split of a measured epoch
beside its prediction, and the speed probe (moved out of test_diffusers_wan.py, which skips
without diffusers; these need none)."""
import json

import pytest

from adaptiveload.training import compare


def test_compare_summarizes_repetitions():
    """compare.py --repeat: median and range of the measured figures per (strategy, kernel),
    the prediction once, speedups from the medians; the paper's figures in their own table."""

    def result(strategy, fused, idle, sps, pred_idle=0.1, pred_sps=50.0):
        return {"strategy": strategy, "fused_adaln": fused, "plan_steps": 5,
                "measured": {"imbalance": idle, "throughput_samples_per_s": sps, "steps": 5, "samples": 40,
                             "time_s": 40 / sps},
                "predicted": {"imbalance": pred_idle, "throughput_samples_per_s": pred_sps}}

    repeats = [[result("equal_tokens", False, 0.30 + d, 100.0 + 10 * d), result("balanced", False, 0.05 + d, 150 + d)]
               for d in (0.02, 0.0, 0.01)]
    rows = compare.summarize(repeats)
    eq, bal = rows
    assert (eq["imbalance_median"], eq["imbalance_min"], eq["imbalance_max"]) == pytest.approx((0.31, 0.30, 0.32))
    assert eq["samples_per_s_runs"] == pytest.approx([100.2, 100.0, 100.1])
    assert eq["samples_per_s_median"] == pytest.approx(100.1)
    assert bal["imbalance_predicted"] == 0.1 and bal["samples_per_s_predicted"] == 50.0 and bal["repeats"] == 3
    assert bal["speedup_vs_equal_tokens"] == pytest.approx(150.01 / 100.1)
    md = compare.markdown_repeated(rows, "test")
    table, paper = md.split("Reported by the paper")
    assert "| balanced | off | 5 | 6.0% [5.0% - 7.0%] | 10.0% | 150.01 [150.00 - 150.02] | 50.00 | 1.50x |" in table
    assert "measured" in table and "predicted" in table and "39.0%" in paper and "39.0%" not in table
    # Paired: balanced over equal_tokens in each repetition (the same samples, one after the other).
    assert eq["balanced_over_runs"] == pytest.approx([150.02 / 100.2, 150.0 / 100.0, 150.01 / 100.1])
    assert bal["balanced_over_runs"] is None
    assert "| equal_tokens | off | off | 1.497 / 1.500 / 1.499 | 1.499 | 3 of 3 | 1.000 |" in table, table
    assert "Idle measured at the ranks" not in table  # emulated ranks: no barrier
    for rep, w in zip(repeats, (0.04, 0.02, 0.03)):
        rep[1]["measured"]["idle_measured"] = w
    md = compare.markdown_repeated(compare.summarize(repeats), "test")
    assert "| balanced | off | off | 3.0% [2.0% - 4.0%] | 6.0% |" in md, md


def test_compare_time_split():
    """compare.py's split of a measured epoch beside its prediction: the epoch's seconds over the
    predicted, the compute over its price (every rank and step), the slowest ranks over their
    price, and the seconds per step outside the compute, measured and modelled."""
    # 2 steps x 2 ranks; measured: compute maxima 3 + 5 = 8 s, plus 0.5 s a step outside it.
    r = {"rank_times": [[3.0, 2.0], [1.0, 5.0]], "predicted_rank_times": [[2.5, 2.5], [2.0, 4.0]],
         "measured": {"time_s": 9.0}, "predicted": {"time_s": 6.7}}
    split = compare.time_split(r)
    assert split["epoch_over_predicted"] == pytest.approx(9.0 / 6.7)
    assert split["compute_over_price"] == pytest.approx(11.0 / 11.0)
    assert split["step_max_over_price"] == pytest.approx(8.0 / 6.5)
    assert split["outside_compute_s_per_step"] == pytest.approx(0.5)
    assert split["outside_compute_predicted_s_per_step"] == pytest.approx(0.1)
    assert split["outside_compute_share"] == pytest.approx(1.0 / 9.0)
    # A result without per-step times (an older JSON) has no split, and the table leaves it out.
    assert compare.time_split({"measured": {"time_s": 1.0}, "predicted": {}}) is None
    row = {"strategy": "balanced", "fused_adaln": False, "packing": "off", "time_split_runs": [split, split]}
    lines = compare.time_split_table([row])
    assert "| balanced | off | off | 1.343 | 1.000 | 1.231 | 500.00 ms | 100.00 ms | 11.1% |" in lines, lines
    assert compare.time_split_table([dict(row, time_split_runs=None)]) == []
    # With the speed probe of every repetition: its ratios, and the compute over price by repetition.
    lines = compare.time_split_table([dict(row, probe_runs=[0.9, 1.1])])
    assert "ran at 0.900 / 1.100 of its price (median 1.000)" in lines[1], lines[1]
    assert lines[3].endswith(" compute / price by repetition |") and lines[4].count("|") == 11
    assert lines[5].endswith("| 11.1% | 1.000 / 1.000 |"), lines[5]


def test_compare_speed_probe(tmp_path):
    """The speed probe times its micro-batch on the runs' model and prices it with the profile:
    a profile that prices it at a thousandth of a second reads as a machine far slower than
    calibrated, one that prices it at 1000 s as far faster; none without a profile."""
    args = ["--config", "tiny", "--layers", "1", "--device", "cpu", "--clock", "thread"]
    assert compare.speed_probe(args) is None
    for seconds, lo, hi in ((1e-3, 1.0, 1e6), (1e3, 0.0, 1.0)):
        prof = tmp_path / f"p{seconds}.json"
        # c0 only: the probe's price is PROBE_BATCH * c0 (no overhead, no ramp).
        prof.write_text(json.dumps({"format": "adaptiveload-profile", "version": 1, "cost": {
            "a": 0, "b": 0, "c0": seconds / compare.PROBE_BATCH, "overhead_s": 0, "half_efficiency_tokens": 0}}))
        r = compare.speed_probe(args + ["--profile", str(prof)], seconds=0.05)
        assert lo < r < hi, (seconds, r)
    assert compare.speed_probe(args + ["--profile", str(prof), "--model", "diffusers-wan"]) is None
