"""calibrate --packs: packs drawn within --max-tokens, measured through the packed path, and
the fit's errors on them in the profile (tiny config, one repetition; no timing assertions)."""
import json
import math

import pytest

from adaptiveload import calibrate


def test_draw_packs_stays_within_max_tokens_and_mixes_shapes():
    shapes = calibrate.SHAPES["mini"] + calibrate.HELD_OUT["mini"]
    packs = calibrate.draw_packs(shapes, 20, 64, 4096)
    assert packs == calibrate.draw_packs(shapes, 20, 64, 4096)  # a fixed seed
    for p in packs:
        assert 2 <= len(p) and sum(calibrate.shape_tokens(s) for s in p) <= 4096
        assert len({calibrate.shape_tokens(s) for s in p}) >= 2
    with pytest.raises(ValueError, match="raise --max-tokens"):
        calibrate.draw_packs(shapes, 1, 64, 100)


@pytest.mark.parametrize("bad", [["--packs", "-1"], ["--fit-packs"], ["--packs", "2", "--max-batch", "1"]])
def test_bad_packs_values_are_refused(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        calibrate.main(["--config", "tiny", "--out", str(tmp_path / "p.json"), *bad])
    assert e.value.code == 2 and "--packs" in capsys.readouterr().err


def test_packs_measured_and_their_errors_in_the_profile(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", [(1, 32, 48), (5, 32, 48), (1, 64, 64)])
    out, meas = tmp_path / "p.json", tmp_path / "m.jsonl"
    summary = calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1",
                              "--reps", "1", "--max-batch", "2", "--packs", "2", "--max-tokens", "64",
                              "--out", str(out), "--measurements-out", str(meas)])
    j = json.loads(out.read_text())
    assert j["fit"]["pack_points"] == 2 == summary["pack_points"]
    assert math.isfinite(j["fit"]["pack_median_rel_error"]) and math.isfinite(j["fit"]["pack_max_rel_error"])
    lines = [json.loads(s) for s in (tmp_path / "m.packs.jsonl").read_text().splitlines()]
    for m in j["packs"]:
        assert m["tokens"] == sum(S * B for S, B in m["parts"]) <= 64  # every sample's tokens, within the limit
        assert m["samples"] == sum(B for _, B in m["parts"]) and m["predicted_s"] > 0
    assert [m["parts"] for m in lines] == [m["parts"] for m in j["packs"]]
    assert all("parts" not in json.loads(s) for s in meas.read_text().splitlines())
    assert j["step"]["reps"] == 5 and j["step"]["optimizer_s"] > 0  # the optimizer: 5 repetitions at least


def test_optimizer_none_leaves_the_step_out(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", [(1, 32, 48), (5, 32, 48), (1, 64, 64)])
    out = tmp_path / "p.json"
    summary = calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1",
                              "--reps", "1", "--max-batch", "2", "--optimizer", "none", "--out", str(out)])
    assert "step" not in json.loads(out.read_text()) and "step" not in summary


def test_pack_price_is_the_cores_pack_formula_and_fit_observations_inverts_it():
    # The profile's pack predictions come from the core (_C.observation_time): a pack costs one
    # overhead, its samples' work and the ramp on its total tokens; a point is one part.
    from adaptiveload import _C
    cost = {"a": 2e-6, "b": 3e-10, "c0": 1e-4, "overhead_s": 0.01, "half_efficiency_tokens": 500.0}
    t = lambda S: cost["a"] * S + cost["b"] * S * S + cost["c0"]  # noqa: E731
    parts = [[1024, 2], [256, 5]]
    N = 1024 * 2 + 256 * 5
    want = 0.01 + (2 * t(1024) + 5 * t(256)) * (1 + 500.0 / N)
    assert calibrate.pack_price(cost, parts) == pytest.approx(want, rel=1e-12)
    assert calibrate.pack_price(cost, [[1024, 2]]) == pytest.approx(0.01 + t(1024) * (2 + 500.0 / 1024), rel=1e-12)
    # Two micro-batches run one after the other: their times add.
    both = _C.observation_time(cost, [[tuple(p) for p in parts], (1024, 2)])
    assert both == pytest.approx(want + calibrate.pack_price(cost, [[1024, 2]]), rel=1e-12)
    # Observations priced by it are fitted back to the same model (overhead and N_half kept).
    shapes = [[[S, B]] for S in (64, 256, 1024, 4096) for B in (1, 3)] + [[[4096, 1], [64, 7]], [[1024, 2], [256, 5]]]
    obs = [([[tuple(p) for p in s]], calibrate.pack_price(cost, s)) for s in shapes]
    _, fit = _C.fit_observations(obs, cost["overhead_s"], cost["half_efficiency_tokens"])
    for k in ("a", "b", "c0"):
        assert fit[k] == pytest.approx(cost[k], rel=1e-6)


def test_fit_packs_fits_a_packs_cost_per_sample_and_keeps_the_unfitted_errors():
    # Packs that cost 3 ms a sample more than their work (the packed forward's per-sample
    # work): --fit-packs fits that as cost.pack_sample_s, prices the packs with it, and keeps
    # the packs' errors under the points' own fit beside.
    from adaptiveload import _C
    cost = {"a": 1.5e-5, "b": 2e-8, "c0": 4e-4, "overhead_s": 0.005, "half_efficiency_tokens": 0.0}
    points = [{"tokens": S, "batch": B, "time_s": calibrate.pack_price(cost, [[S, B]])}
              for S in (88, 176, 352, 704, 1008) for B in (1, 2, 4, 8)]
    packs = []
    for i in range(12):
        parts = [[88, 1 + i % 4], [352, 1 + i % 3]] + ([[1008, 1]] if i % 2 else [])
        n = sum(B for _, B in parts)
        packs.append({"parts": parts, "samples": n, "time_s": calibrate.pack_price(cost, parts) + 0.003 * n})
    profile, summary = calibrate.fit(points, "tiny", "cpu")
    assert "pack_sample_s" not in json.loads(profile)["cost"]  # points alone have none to fit
    fitted, s = calibrate.with_packs(profile, summary, points, packs, True)
    j = json.loads(fitted)
    assert j["cost"]["pack_sample_s"] == pytest.approx(0.003, rel=1e-3) == s["pack_sample_s"]
    assert j["fit"]["pack_max_rel_error"] < 1e-4 and j["fit"]["max_rel_error"] < 1e-4
    assert j["fit"]["pack_unfitted_median_rel_error"] > 0.05  # what the points' fit alone misses
    for m in j["packs"]:
        assert m["predicted_s"] == pytest.approx(m["time_s"], rel=1e-4)
    # Not fitted: the profile is the points' (no term), the errors are the unfitted ones.
    plain = json.loads(calibrate.with_packs(profile, summary, points, packs, False)[0])
    assert "pack_sample_s" not in plain["cost"] and "pack_unfitted_median_rel_error" not in plain["fit"]
    assert plain["fit"]["pack_median_rel_error"] == pytest.approx(j["fit"]["pack_unfitted_median_rel_error"])
    # Given (online adaptation keeps the planner's), the term stays as given.
    obs = [([(p["tokens"], p["batch"])], p["time_s"]) for p in points]
    obs += [([[tuple(q) for q in m["parts"]]], m["time_s"]) for m in packs]
    _, kept = _C.fit_observations(obs, 0.005, 0.0, 0.002)
    assert kept["pack_sample_s"] == 0.002
