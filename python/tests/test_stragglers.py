"""Stragglers found online (issue 53 item 3; docs/planner.md, "Stragglers found online"): the
sampler's refit learns a speed factor per rank from the gathered step times, re-plans the rest
of the epoch with it, says so in `adaptations`, and saves it in its state.

Simulated: every rank-step takes the planner's own predicted seconds over the rank's true
speed, so the only thing to learn is the speed; several samplers (ranks) are fed the same
gathered times."""
import os

import pytest

from adaptiveload import _C, AdaptiveBatchSampler
from conftest import DATASETS

MANIFEST = [os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]
W = 8
SLOW_RANK, SLOW = 5, 0.7


def make(rank=0, **kw):
    return AdaptiveBatchSampler(MANIFEST, world_size=W, rank=rank, **kw)


def rank_seconds(s, t, speeds):
    """Per rank, the predicted seconds of each of its micro-batches in step t (of the current
    plan) at the given speeds."""
    planner = s._planner(s._budget_world)
    return [[planner.micro_batch_seconds(mb) / speeds[r] for mb in s._plan.rank_step(t, r)] for r in range(W)]


def idle(steps, sync="step"):
    """The computational imbalance rate, 1 - sum of mean work / sum of step times, of
    [step][rank][micro-batch] seconds: a step takes its slowest rank's sum in step sync, the sum
    over its lockstep slots of the slowest rank's micro-batch in micro sync."""
    work = sum(sum(map(sum, step)) / len(step) for step in steps)
    if sync == "micro":
        span = sum(sum(max(mbs[k] if k < len(mbs) else 0.0 for mbs in step) for k in range(max(map(len, step))))
                   for step in steps)
    else:
        span = sum(max(map(sum, step)) for step in steps)
    return 1 - work / span


def run(samplers, speed_at, spike=None, stop_after=None):
    """Runs the samplers (ranks) through one epoch in lockstep; returns the [step][rank][micro-
    batch] seconds and, per step, the factors in effect. speed_at(step) -> true speed per rank; spike =
    (step, rank, factor) multiplies that one rank-step's time."""
    lead = samplers[0]
    loops = [s.steps() for s in samplers]
    times, factors = [], []
    for steps in zip(*loops):
        g = steps[0].step
        assert {st.step for st in steps} == {g}
        # Every rank holds the same plan: compare every rank's micro-batches of the step.
        t = g - lead._steps_before
        for s in samplers[1:]:
            assert [s._plan.rank_step(t, r) for r in range(W)] == [lead._plan.rank_step(t, r) for r in range(W)]
        mbs = rank_seconds(lead, t, speed_at(g))
        secs = [sum(m) for m in mbs]
        if spike and spike[0] == g:
            secs[spike[1]] *= spike[2]
        times.append(mbs)
        factors.append(lead.learned_speeds)
        for s in samplers:
            s.observe_step(g, secs)
        if stop_after is not None and g >= stop_after:
            break
    return times, factors


@pytest.mark.parametrize("sync,packing", [("step", "off"), ("step", "on"), ("micro", "on")])
def test_a_straggler_mid_epoch_is_found_within_two_refits_and_idle_falls_to_the_stated_plans(sync, packing):
    every = 3
    plan = dict(sync=sync, packing=packing)
    learner = [make(rank=r, adapt_every=every, adapt="speeds", **plan) for r in (0, 3, 7)]
    onset = learner[0].num_steps // 3

    def straggler(g):
        return [SLOW if r == SLOW_RANK and g >= onset else 1.0 for r in range(W)]

    times, factors = run(learner, straggler)
    ads = learner[0].adaptations
    assert ads, "the straggler was never found"
    first = ads[0]
    # Found at the first or second refit after it appeared (refits come every `every` steps).
    assert first["step"] <= onset + 2 * every, (onset, ads)
    assert all(s.adaptations == ads for s in learner)  # every rank, the same factors, the same step
    final = ads[-1]
    assert final["speeds"][SLOW_RANK] == pytest.approx(SLOW, abs=0.02)
    assert all(final["speeds"][r] == 1.0 for r in range(W) if r != SLOW_RANK)
    assert SLOW_RANK in first["ranks"]
    settled = next(g for g, f in enumerate(factors) if abs(f[SLOW_RANK] - SLOW) <= 0.02)
    learned_idle = idle(times[settled:], sync)

    stated = make(rank_speeds={SLOW_RANK: SLOW}, **plan)
    stated_times, _ = run([stated], lambda g: [SLOW if r == SLOW_RANK else 1.0 for r in range(W)])
    stated_idle = idle(stated_times[settled:], sync)
    blind = make(**plan)
    blind_times, _ = run([blind], straggler)
    blind_idle = idle(blind_times[settled:], sync)
    print(f"\n{sync} sync, packing {packing}: straggler rank {SLOW_RANK} at {SLOW}x from step {onset} of "
          f"{learner[0].num_steps}, refits every {every}: "
          f"found at step {first['step']} (factor {first['ranks'][SLOW_RANK]}), settled at step {settled}; idle of "
          f"steps {settled}.. : learned {100 * learned_idle:.2f}%, stated-speed plan {100 * stated_idle:.2f}%, "
          f"uniform balanced {100 * blind_idle:.2f}%")
    assert learned_idle <= stated_idle + 0.02
    assert learned_idle < blind_idle - 0.05


def test_a_one_step_spike_changes_nothing():
    plain = make(adapt_every=1, adapt="speeds")
    spiked = make(adapt_every=1, adapt="speeds")
    alike = [1.0] * W
    run([plain], lambda g: alike)
    g_spike = plain.num_steps // 2
    run([spiked], lambda g: alike, spike=(g_spike, 2, 4.0))
    assert spiked.adaptations == [] and plain.adaptations == []
    assert spiked.learned_speeds == alike
    assert spiked.state_dict(step=0)["core"] == plain.state_dict(step=0)["core"]
    # The same epoch planned afresh: nothing moved.
    fresh = make()
    assert [fresh._plan.rank_step(t, r) for t in range(fresh.num_steps) for r in range(W)] == [
        spiked._plan.rank_step(t, r) for t in range(spiked.num_steps) for r in range(W)]


def test_a_rank_that_recovers_gets_its_work_back():
    s = make(adapt_every=2, adapt="speeds")
    onset, end = 4, 16

    def spell(g):
        return [SLOW if r == SLOW_RANK and onset <= g < end else 1.0 for r in range(W)]

    _, factors = run([s], spell)
    ranks = [a["ranks"] for a in s.adaptations]
    assert ranks[0] == {SLOW_RANK: SLOW} and ranks[-1] == {SLOW_RANK: 1.0}, s.adaptations
    assert s.learned_speeds == [1.0] * W and factors[-1] == [1.0] * W
    # Back at 1: the current segment plans at the configured (uniform) speeds, no factors kept
    # for it (the earlier segment keeps those it was planned with, so a resume replays it).
    speeds = _C.parse_state(s.state_dict()["core"])["speeds"]
    assert speeds[-1] == [] and any(speeds[:-1])


def test_resume_mid_epoch_keeps_the_factors_and_the_remaining_plan():
    a = make(adapt_every=2, adapt="speeds")
    slow = [SLOW if r == SLOW_RANK else 1.0 for r in range(W)]
    run([a], lambda g: slow, stop_after=10)
    assert a.learned_speeds[SLOW_RANK] == pytest.approx(SLOW, abs=0.02)
    state = a.state_dict()
    assert '"speeds"' in state["core"]
    b = make(rank=0, adapt_every=2, adapt="speeds")
    b.load_state_dict(state)
    assert b.learned_speeds == a.learned_speeds
    assert b.step == a.step and b.num_steps == a.num_steps
    assert [(st.step, st.micro_batches) for st in b.schedule()] == [(st.step, st.micro_batches) for st in a.schedule()]
    # Another rank restored from the same state holds the same plan.
    c = make(rank=4, adapt_every=2, adapt="speeds")
    c.load_state_dict(state)
    assert [c._plan.rank_step(t, r) for t in range(c._plan.num_steps) for r in range(W)] == [
        a._plan.rank_step(t, r) for t in range(a._plan.num_steps) for r in range(W)]


def test_adapt_is_checked_and_cost_only_learns_no_speeds():
    with pytest.raises(ValueError, match="adapt"):
        make(adapt="sometimes")
    s = make(adapt_every=2, adapt="cost")
    slow = [SLOW if r == SLOW_RANK else 1.0 for r in range(W)]
    run([s], lambda g: slow, stop_after=10)
    assert s.learned_speeds == [1.0] * W
    assert all("ranks" not in a for a in s.adaptations)
