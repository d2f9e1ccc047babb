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
