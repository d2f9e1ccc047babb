"""calibrate --co-runners: the measurement taken while other processes train on the host's
other cores (as torchrun's ranks do on one CPU machine), recorded in the profile."""
import json
import multiprocessing

import pytest

from adaptiveload import calibrate, co_runners

SHAPES = [(1, 32, 48), (5, 32, 48), (1, 64, 64)]


def test_co_runners_train_beside_the_measurement_and_are_stopped(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", SHAPES)
    out = tmp_path / "p.json"
    summary = calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1",
                              "--reps", "2", "--max-batch", "2", "--co-runners", "1", "--out", str(out)])
    fit = json.loads(out.read_text())["fit"]
    assert fit["co_runners"] == 1 and summary["co_runners"] == 1
    # The co-runner had finished a step before the first point was timed, and was still
    # training when the last one was (else main raises).
    assert len(fit["co_runner_steps"]) == 1 and fit["co_runner_steps"][0] >= 1
    assert not multiprocessing.active_children()


def test_without_co_runners_the_profile_says_nothing_of_them(tmp_path, monkeypatch):
    monkeypatch.setitem(calibrate.SHAPES, "tiny", SHAPES)
    out = tmp_path / "p.json"
    calibrate.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--threads", "1", "--reps", "1",
                    "--max-batch", "1", "--out", str(out)])
    assert "co_runners" not in json.loads(out.read_text())["fit"]


def test_a_co_runner_that_dies_is_reported_by_name():
    # A model config that does not exist makes the co-runner raise before its first step.
    with pytest.raises(RuntimeError, match="co-runner 0 exited with status 1 before its first step"):
        with co_runners.co_running(1, "no-such-config", 1, SHAPES, 1, None):
            pass
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("bad", [["--co-runners", "-1"], ["--co-runners", "257"]])
def test_bad_co_runner_counts_are_refused(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        calibrate.main(["--config", "tiny", "--device", "cpu", "--out", str(tmp_path / "p.json"), *bad])
    assert e.value.code == 2
    assert "--co-runners must be a count of processes from 0 (off) to 256" in capsys.readouterr().err
