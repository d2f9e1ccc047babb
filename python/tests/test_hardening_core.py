"""Issue 11 through the core binding the sampler uses (adaptiveload._C): which micro-batches
are padding repeats (Plan.rank_step_padded), and the core's errors for nothing to plan and
out-of-range options, which the sampler gets as well as the CLI."""
import math

import pytest

from adaptiveload import _C

HEADER = ["path", "num_frames", "height", "width", "fps"]


def manifest(rows):
    m = _C.Manifest()
    cols = list(zip(*rows)) if rows else [[] for _ in HEADER]
    m.add_rows(*[list(c) for c in cols], "rows", False)
    return m


ROWS = [("a.mp4", "81", "480", "832", "16"), ("b.jpg", "1", "480", "832", ""), ("c.mp4", "33", "720", "1280", "24")]


@pytest.mark.parametrize("strategy", ["balanced", "dual", "equal_tokens"])
def test_rank_step_padded_marks_exactly_the_padded_samples(strategy):
    cfg = _C.PlannerConfig()
    cfg.world_size = 8  # 3 samples over 8 ranks: the final step is completed with repeats
    planner = _C.Planner(manifest(ROWS), cfg)
    plan = planner.plan(strategy)
    assert plan.padded_samples > 0
    marked = 0
    for t in range(plan.num_steps):
        step_marked = 0
        for r in range(plan.world_size):
            mbs, flags = plan.rank_step(t, r), plan.rank_step_padded(t, r)
            assert len(flags) == len(mbs)
            assert all(isinstance(f, bool) for f in flags)
            step_marked += sum(len(mb) for mb, f in zip(mbs, flags) if f)
        assert step_marked == plan.step_info(t)[2]  # the step's padded count
        marked += step_marked
    assert marked == plan.padded_samples
    with pytest.raises(IndexError):
        plan.rank_step_padded(plan.num_steps, 0)
    with pytest.raises(IndexError):
        plan.rank_step_padded(0, plan.world_size)


def test_nothing_to_plan_is_an_error():
    with pytest.raises(Exception, match="nothing to plan"):
        _C.Planner(manifest([]), _C.PlannerConfig())
    with pytest.raises(Exception, match="nothing to plan: 1 row"):
        _C.Planner(manifest([("tiny.jpg", "1", "8", "8", "")]), _C.PlannerConfig())


@pytest.mark.parametrize("field,value", [("p", 100.0), ("p", math.nan), ("comp_budget", math.inf),
                                         ("comp_budget", math.nan), ("step_budget_s", math.inf)])
def test_non_finite_or_out_of_range_options_are_errors_naming_them(field, value):
    cfg = _C.PlannerConfig()
    setattr(cfg, field, value)
    with pytest.raises(Exception, match=field.split("_s")[0]):
        _C.Planner(manifest(ROWS), cfg)
