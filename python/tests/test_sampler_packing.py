"""AdaptiveBatchSampler(packing="on"): micro-batches of mixed shapes (packs), every sample once
per epoch over the ranks, resumable; online adaptation observes packs by their shapes
(Planner.micro_batch_shape) and fits them (_C.fit_observations takes a pack as a list of
(tokens, batch) parts). The manifest is generated: images and clips of several lengths and
aspect ratios, so the cases need no files."""
import random

import pytest

from adaptiveload import _C
from adaptiveload.sampler import AdaptiveBatchSampler

F = [1, 33, 81, 49, 17, 1, 65, 1]
H = [480, 720, 480, 256, 480, 720, 480, 1024]
W = [832, 1280, 640, 448, 832, 1280, 480, 1024]
ROWS = [dict(path=f"s{i}.mp4", num_frames=F[i % 8], height=H[i % 8], width=W[i % 8],
             fps=None if F[i % 8] == 1 else 16) for i in range(400)]


def epoch_ids(samplers):
    ids, mixed = [], False
    loops = [s.steps() for s in samplers]
    for steps in zip(*loops):
        assert len({st.step for st in steps}) == 1
        for s, st in zip(samplers, steps):
            for mb, pad in zip(st.micro_batches, st.padded_micro_batches):
                shape = s._planner(s.world_size).micro_batch_shape(mb)
                mixed = mixed or len(shape) > 1
                if not pad:
                    ids.extend(mb)
    return ids, mixed


@pytest.mark.parametrize("sync", ["step", "micro"])
def test_packed_epoch_trains_every_sample_once_in_mixed_shape_micro_batches(sync):
    ss = [AdaptiveBatchSampler(ROWS, world_size=2, rank=r, seed=3, packing="on", sync=sync) for r in range(2)]
    ids, mixed = epoch_ids(ss)
    assert sorted(ids) == list(range(len(ROWS)))
    assert mixed, "no micro-batch mixes shapes"
    # Micro sync: every rank the same micro-batch count in a step (lockstep slots).
    if sync == "micro":
        for a, b in zip(ss[0].steps(), ss[1].steps()):
            assert len(a.micro_batches) == len(b.micro_batches)


def test_packing_off_is_the_default_and_plans_one_shape_per_micro_batch():
    s = AdaptiveBatchSampler(ROWS, world_size=1, rank=0, seed=3)
    planner = s._planner(1)
    for mb in s:
        assert len(planner.micro_batch_shape(mb)) == 1


def test_packing_accepts_true_and_refuses_other_values_naming_the_argument():
    s = AdaptiveBatchSampler(ROWS, world_size=1, rank=0, packing=True)
    assert sorted(i for mb in s for i in mb) == list(range(len(ROWS)))
    with pytest.raises(ValueError, match="packing"):
        AdaptiveBatchSampler(ROWS, world_size=1, rank=0, packing="maybe")


def test_packed_state_resumes_mid_epoch():
    kw = dict(world_size=1, rank=0, seed=5, packing="on")
    s = AdaptiveBatchSampler(ROWS, **kw)
    it = iter(s)
    first = [next(it) for _ in range(3)]
    state = s.state_dict()
    rest = list(it)
    t = AdaptiveBatchSampler(ROWS, **kw)
    t.load_state_dict(state)
    assert list(t) == rest
    assert sorted(i for mb in first + rest for i in mb) == list(range(len(ROWS)))
    # A state of a packed plan does not load into a sampler planning without packing.
    u = AdaptiveBatchSampler(ROWS, world_size=1, rank=0, seed=5)
    with pytest.raises(ValueError):
        u.load_state_dict(state)


def test_micro_batch_shape_groups_rows_by_bucket():
    s = AdaptiveBatchSampler(ROWS, world_size=1, rank=0)
    planner = s._planner(1)
    shape = planner.micro_batch_shape([0, 8, 1, 16])  # two of one image shape, a clip, the image again
    assert [n for _, n in shape] == [3, 1]
    assert shape[0][0] == planner.row_geometry(0)[3] and shape[1][0] == planner.row_geometry(1)[3]
    with pytest.raises(IndexError):
        planner.micro_batch_shape([len(ROWS)])


def test_fit_observations_takes_packs_as_lists_of_parts():
    a, b, c0, ov, nh = 1.75e-5, 1.94e-9, 1.3e-3, 3e-3, 2048.0
    t = lambda S: a * S + b * S * S + c0  # noqa: E731
    rng = random.Random(1)
    sizes = [1560, 9360, 18564, 32760, 75600]
    obs = []
    for _ in range(40):
        mbs, secs = [], 0.0
        for _ in range(rng.randint(1, 3)):
            parts = [(rng.choice(sizes), rng.randint(1, 3)) for _ in range(rng.randint(1, 3))]
            merged = {}
            for S, B in parts:
                merged[S] = merged.get(S, 0) + B
            parts = list(merged.items())
            if len(parts) == 1:
                S, B = parts[0]
                mbs.append((S, B))
                secs += ov + t(S) * (B + nh / S)
            else:
                mbs.append(parts)
                work = sum(B * t(S) for S, B in parts)
                secs += ov + work * (1 + nh / sum(B * S for S, B in parts))
        obs.append((mbs, secs))
    _, summary = _C.fit_observations(obs)
    assert summary["max_rel_error"] < 0.02
    assert abs(summary["b"] - b) < 0.1 * b


def test_online_adaptation_keeps_the_profiles_cost_per_sample_of_a_pack(tmp_path):
    # A profile fitted on packs (calibrate --packs N --fit-packs) prices a pack's samples beyond
    # their work; online adaptation refits how cost grows with S and keeps that term, as it
    # keeps the overhead: every refit and the cost it re-plans with carry the profile's.
    import json
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"format": "adaptiveload-profile", "version": 1, "cost": {
        "a": 2e-6, "b": 3e-11, "c0": 1e-3, "overhead_s": 0.004, "half_efficiency_tokens": 0.0,
        "pack_sample_s": 0.002}}))
    kw = dict(world_size=2, seed=3, packing="on", cost_model="profile", profile=str(profile), adapt_every=1)
    ss = [AdaptiveBatchSampler(ROWS, rank=r, **kw) for r in range(2)]
    assert ss[0]._planner(2).cost_pack_sample_s == 0.002
    rng = random.Random(2)
    for steps in zip(*[s.steps() for s in ss]):
        # Each rank's time: the planner's own price of its micro-batches, 20% slower, +-3%.
        times = []
        for s, st in zip(ss, steps):
            p = s._planner(2)
            times.append(sum(p.micro_batch_seconds(mb) for mb in st.micro_batches) * 1.2
                         * (1 + 0.03 * (2 * rng.random() - 1)))
        for s in ss:
            s.observe_step(steps[0].step, times)
    assert ss[0].adaptations, "no refit in the epoch"
    assert all(a["pack_sample_s"] == 0.002 for a in ss[0].adaptations)
    costs = [c for _, _, c in _C.parse_state(ss[0].state_dict()["core"])["segments"] if c]
    assert costs and all(json.loads(c)["pack_sample_s"] == 0.002 for c in costs)
