"""scripts/cpu_eval_ranks.py's pieces (the evaluation of ranks that run at different speeds,
docs/evaluation.md "Unequal ranks on the CPU"): its idle measure and table, and one tiny run of
every mode under torchrun. Figures are not asserted: the evaluation reports them."""
import importlib.util
import os

from conftest import REPO, run_guarded, torchrun

SCRIPT = os.path.join(REPO, "scripts", "cpu_eval_ranks.py")


def load():
    spec = importlib.util.spec_from_file_location("cpu_eval_ranks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_idle_per_rank_and_the_table():
    m = load()
    # Step 1: rank 1 takes 2 s, rank 0 1 s; step 2: both 1 s. Rank 0 waits 1 s of 3.
    assert m.idle_per_rank([[1.0, 2.0], [1.0, 1.0]]) == [1 / 3, 0.0]
    runs = {mode: [{"idle": [0.1 * i, 0.0], "samples_per_s": 2.0 + i, "steps": 7} for i in range(3)]
            for mode in m.MODES}
    text = m.table(runs)
    assert ("| learned | 3 | 7 | 0.100 [0.000, 0.200] | 0.000 [0.000, 0.000] | 0.050 [0.000, 0.100] | "
            "3.000 [2.000, 4.000] | 0 |") in text
    assert len(m.rows(5)) == 10


def test_every_mode_runs_under_torchrun(tmp_path):
    cmd, env = torchrun(2, tmp_path / "logs")
    cmd += [SCRIPT, "--reps", "1", "--subset", "12", "--epoch-seconds", "0.2", "--out", str(tmp_path)]
    rc, out, _ = run_guarded(cmd, env, 240, "cpu_eval_ranks.py")
    assert rc == 0, out[-3000:]
    for mode in ("equal", "uniform", "stated", "learned"):
        assert f"| {mode} | 1 |" in out, out[-3000:]
    assert (tmp_path / "runs.json").exists()
