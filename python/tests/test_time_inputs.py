"""calibrate --time-inputs and train_dit's timing of the inputs: a profile fitted with each
micro-batch's inputs drawn inside its timing says so (fit.inputs_timed), and train_dit then
draws each micro-batch's inputs inside its timer, so the measured and priced seconds hold the
same work (the miniature's data loading); without it both leave the inputs out, as before."""
import json
import time

import pytest

from adaptiveload import calibrate, calibrate_step
from adaptiveload.training import train_dit
from test_train_dit import TINY, real_rows, write_csv

SHAPES = [(1, 32, 48), (5, 32, 48), (1, 64, 64)]
SLOW_S = 0.05  # what the spied input draw sleeps: the wall clock sees it only inside a timing


def slow_draws(monkeypatch):
    calls = []
    draw = calibrate_step.draw_inputs

    def spy(size, device):
        calls.append(len(size))
        time.sleep(SLOW_S)
        return draw(size, device)
    monkeypatch.setattr(calibrate_step, "draw_inputs", spy)
    return calls


def calibrate_tiny(tmp_path, extra):
    out, meas = tmp_path / "p.json", tmp_path / "m.jsonl"
    summary = calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1",
                              "--reps", "1", "--max-batch", "2", "--out", str(out), "--measurements-out",
                              str(meas), *extra])
    return summary, json.loads(out.read_text()), [json.loads(s) for s in meas.read_text().splitlines()]


@pytest.mark.parametrize("timed", [False, True])
def test_calibrate_times_the_inputs_only_when_asked(timed, tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", SHAPES)
    calls = slow_draws(monkeypatch)
    summary, profile, points = calibrate_tiny(
        tmp_path, ["--interleave", "2", "--packs", "1", "--max-tokens", "64"] + (["--time-inputs"] if timed else []))
    n = len(points)
    assert n == 6  # 3 shapes at B = 1, 2
    if timed:
        # Every timing draws its own: the sweep (a warm-up and a repetition a point), 2 interleaved
        # rounds, the pack (a warm-up and a repetition; latents, noise and text of each sample).
        assert calls[:4 * n] == [2] * (4 * n) and len(calls) == 4 * n + 2 and calls[-1] % 3 == 0
        assert all(pt["time_s"] >= SLOW_S for pt in points)  # the draw is inside the wall-clock timing
        assert profile["packs"][0]["time_s"] >= SLOW_S
        assert profile["fit"]["inputs_timed"] is True and summary["inputs_timed"] is True
    else:
        assert calls == []
        assert "inputs_timed" not in profile["fit"] and "inputs_timed" not in summary


@pytest.fixture
def timer_spy(monkeypatch):
    """Which of train_dit's input draws ran, and whether its timer was running then: a list of
    (draw, inside the timer) per micro-batch."""
    active, seen = [False], []

    class Spied(train_dit.Timer):
        def __enter__(self):
            active[0] = True
            return super().__enter__()

        def __exit__(self, *exc):
            active[0] = False
            return super().__exit__(*exc)
    monkeypatch.setattr(train_dit, "Timer", Spied)

    def spy_on(name, draw):  # binds this draw's name and function now, not the loop's last
        def spy(*a, **k):
            seen.append((name, active[0]))
            return draw(*a, **k)
        return spy

    for name in ("make_batch", "sample_inputs", "pack_inputs"):
        monkeypatch.setattr(train_dit, name, spy_on(name, getattr(train_dit, name)))
    return seen


def test_train_dit_times_the_inputs_where_the_profile_was_fitted_with_them(tmp_path, timer_spy):
    manifest = write_csv(tmp_path / "m.csv", real_rows(4, 12))
    # Two profiles alike but for what they say of the inputs (a written cost, not a calibration:
    # a fit to a loaded machine's few tiny points can be flat, which the planner refuses).
    cost = {"a": 2e-6, "b": 1e-9, "c0": 1e-4, "overhead_s": 1e-3, "half_efficiency_tokens": 0}
    timed, untimed = tmp_path / "p.json", tmp_path / "untimed.json"
    for path, fit in ((timed, {"inputs_timed": True}), (untimed, {})):
        path.write_text(json.dumps({"format": "adaptiveload-profile", "version": 1, "cost": cost, "fit": fit}))
    assert train_dit.profile_inputs_timed(str(timed)) is True
    assert train_dit.profile_inputs_timed(str(untimed)) is False and train_dit.profile_inputs_timed(None) is False
    base = TINY + ["--layers", "1", "-m", manifest, "-w", "2", "--epoch", "--strategy", "balanced"]
    runs = {}
    for profile, extra, draw, inside in [
            (timed, [], "make_batch", True),  # the stream draw (default without --parallel)
            (untimed, [], "make_batch", False),
            (timed, ["--time-inputs", "off"], "make_batch", False),  # said outright, whatever the profile says
            (untimed, ["--time-inputs", "on"], "make_batch", True),
            (timed, ["--inputs", "per-sample"], "sample_inputs", True),
            (untimed, ["--inputs", "per-sample"], "sample_inputs", False),
            (timed, ["--packing", "on", "--inputs", "per-sample"], "pack_inputs", True),
            (untimed, ["--packing", "on", "--inputs", "per-sample"], "pack_inputs", False)]:
        timer_spy.clear()
        r, = train_dit.main(base + ["--profile", str(profile)] + extra)
        # Every micro-batch's inputs drawn once, by the path's own draw, inside its timer or before it.
        assert timer_spy and set(timer_spy) == {(draw, inside)}, (profile.name, extra, set(timer_spy))
        assert r["inputs_timed"] is inside
        runs[(profile.name, tuple(extra))] = r
    # Where the inputs are drawn changes no plan: the same predicted times either way.
    for extra in [(), ("--inputs", "per-sample")]:
        a, b = runs[("p.json", extra)], runs[("untimed.json", extra)]
        assert a["predicted_rank_times"] == b["predicted_rank_times"] and a["predicted"] == b["predicted"]
