"""The Python API against wrong input, as a class (issue 11): every public argument of
AdaptiveBatchSampler, its methods, fused_adaln and AdaLayerNormModulate is fed wrong types,
NaN, infinities, negative and huge values; each must raise TypeError / ValueError naming the
argument, and a failed call must change no state. Also: yes/no options given as words, a
set_epoch inside a running loop (an error, never a silently shortened epoch), bad step times
in online adaptation (rejected, naming step and rank; adaptation goes on), online
adaptation against times generated from a known cost model (no wall-clock timing), and
`calibrate` on a machine without CUDA or without the package (an error saying what to do,
never a traceback)."""
import collections
import math
import os
import random
import re
import shutil
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import adaptiveload
from adaptiveload import AdaptiveBatchSampler, fused_adaln
from adaptiveload.nn import AdaLayerNormModulate
from conftest import REPO

NAN, INF = float("nan"), float("inf")


def make_rows(n=240, seed=0):
    """A manifest of mixed clips and images (Wan grid), as a list of dicts."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if rng.random() < 0.5:
            rows.append(dict(path=f"v{i}.mp4", num_frames=rng.randrange(17, 200), height=rng.choice([360, 480, 720]),
                             width=rng.choice([640, 854, 1280]), fps=rng.choice([24, 30])))
        else:
            rows.append(dict(path=f"i{i}.jpg", num_frames=1, height=rng.choice([360, 480, 720, 1024]),
                             width=rng.choice([480, 640, 1024]), fps=None))
    return rows


ROWS = make_rows()
KW = dict(mem_budget=100_000, on_oversize="skip")  # a few dozen steps; checkpointing=False fits


def sampler(**kw):
    return AdaptiveBatchSampler(ROWS, **{**KW, **kw})


def position(s):
    """Everything a failed call must leave as it was."""
    return (s.epoch, s.step, s.num_steps, len(s), s.state_dict(), len(s.adaptations), s.world_size, s.rank)


# --- the constructor ----------------------------------------------------------------------

BAD_CONSTRUCTOR_ARGS = [
    # (argument, value, exception)
    ("world_size", 0, ValueError), ("world_size", -1, ValueError), ("world_size", 2**20 + 1, ValueError),
    ("world_size", 10**9, ValueError), ("world_size", True, TypeError), ("world_size", 2.0, TypeError),
    ("world_size", "2", TypeError), ("world_size", NAN, TypeError),
    ("rank", -1, ValueError), ("rank", 2, ValueError), ("rank", 10**30, ValueError), ("rank", True, TypeError),
    ("rank", 1.0, TypeError), ("rank", "0", TypeError),
    ("seed", -1, ValueError), ("seed", 2**64, ValueError), ("seed", 1.5, TypeError), ("seed", "0", TypeError),
    ("seed", True, TypeError), ("seed", NAN, TypeError), ("seed", None, TypeError),
    ("mem_budget", 0, ValueError), ("mem_budget", -5, ValueError), ("mem_budget", 1e30, ValueError),
    ("mem_budget", 10**16, ValueError), ("mem_budget", NAN, ValueError), ("mem_budget", INF, ValueError),
    ("mem_budget", -INF, ValueError), ("mem_budget", 1.5, ValueError), ("mem_budget", "4096", TypeError),
    ("mem_budget", True, TypeError),
    ("comp_budget", 0, ValueError), ("comp_budget", -1.0, ValueError), ("comp_budget", NAN, ValueError),
    ("comp_budget", INF, ValueError), ("comp_budget", 1e301, ValueError), ("comp_budget", "1", TypeError),
    ("comp_budget", True, TypeError),
    ("drop_last", "maybe", ValueError), ("drop_last", "", ValueError), ("drop_last", 2, TypeError),
    ("drop_last", None, TypeError), ("drop_last", 1.5, TypeError), ("drop_last", [], TypeError),
    ("checkpointing", "maybe", ValueError), ("checkpointing", "of", ValueError), ("checkpointing", -1, TypeError),
    ("checkpointing", None, TypeError), ("checkpointing", NAN, TypeError),
    ("on_bad_row", "ignore", ValueError), ("on_bad_row", None, TypeError), ("on_bad_row", 1, TypeError),
    ("on_oversize", "drop", ValueError), ("on_oversize", None, TypeError), ("on_oversize", True, TypeError),
    ("strategy", "nope", ValueError), ("strategy", "all", ValueError), ("strategy", "", ValueError),
    ("strategy", None, TypeError), ("strategy", 3, TypeError),
    ("model", "no-such-model", ValueError), ("model", "", ValueError), ("model", None, TypeError),
    ("model", 3, TypeError),
    ("device", "no-such-device", ValueError), ("device", None, TypeError),
    ("grid", "no-such-grid", ValueError), ("grid", "", ValueError), ("grid", 3, TypeError),
    ("cost_model", "nope", ValueError), ("cost_model", "profile", ValueError), ("cost_model", 3, TypeError),
    ("profile", "/nonexistent/profile.json", FileNotFoundError), ("profile", 3, TypeError),
    ("adapt_every", 0, ValueError), ("adapt_every", -1, ValueError), ("adapt_every", 2**63, ValueError),
    ("adapt_every", 1.5, TypeError), ("adapt_every", True, TypeError), ("adapt_every", "2", TypeError),
]


@pytest.mark.parametrize("arg,value,exc", BAD_CONSTRUCTOR_ARGS,
                         ids=[f"{a}={v!r}" for a, v, _ in BAD_CONSTRUCTOR_ARGS])
def test_constructor_rejects_bad_arguments_by_name(arg, value, exc):
    kw = {arg: value}
    if arg == "rank":
        kw["world_size"] = 2
    # Unknown presets and strategies are the core's errors ("unknown model preset 'x'"), which
    # name the argument too.
    with pytest.raises(exc, match=re.escape(arg)):
        sampler(**kw)


def test_world_size_up_to_the_cli_limit_plans_without_running_out_of_memory():
    s = AdaptiveBatchSampler(ROWS[:3], world_size=2**20, rank=2**20 - 1)
    assert s.world_size == 2**20 and s.num_steps >= 1


def test_grid_defaults_to_the_model_presets_own():
    for model, grid in (("tiny-dit", "tiny"), ("wan2.1-1.3b", "wan"), ("cogvideox-5b", "cogvideox")):
        kw = dict(model=model, device="cpu" if model == "tiny-dit" else "h200", mem_budget=None,
                  on_oversize="skip", on_bad_row="skip")
        assert core_options(sampler(**kw)) == core_options(sampler(**kw, grid=grid)), model
    assert core_options(sampler(model="tiny-dit", device="cpu", mem_budget=None)) != core_options(
        sampler(model="tiny-dit", device="cpu", mem_budget=None, grid="wan"))


def test_an_empty_manifest_is_an_error():
    for empty in ([], {"path": [], "num_frames": [], "height": [], "width": []}):
        with pytest.raises(ValueError, match="no rows|nothing to plan"):
            AdaptiveBatchSampler(empty)


def core_options(s):
    """The fingerprint of manifest and options: equal iff the planner got the same options."""
    return s.state_dict()["core"]


@pytest.mark.parametrize("option", ["drop_last", "checkpointing"])
@pytest.mark.parametrize(
    "word,meaning",
    [(True, True), (False, False), (1, True), (0, False), ("on", True), ("off", False), ("true", True),
     ("false", False), ("yes", True), ("no", False), ("1", True), ("0", False), ("OFF", False), ("False", False),
     ("True", True), (" Yes ", True)],
    ids=repr)
def test_yes_no_options_accept_the_cli_words(option, word, meaning):
    s = sampler(**{option: word})
    assert core_options(s) == core_options(sampler(**{option: meaning}))
    assert core_options(s) != core_options(sampler(**{option: not meaning}))
    if option == "drop_last":
        assert s.drop_last is meaning


@pytest.mark.parametrize("option,values", [
    ("strategy", ["balanced", "dual", "equal_tokens", "fixed"]),
    ("on_bad_row", ["error", "skip"]),
    ("on_oversize", ["error", "skip"]),
    ("cost_model", ["analytic", "power"]),
])
def test_enum_options_accept_their_values(option, values):
    prints = {v: core_options(sampler(**{option: v})) for v in values}
    if option in ("strategy", "cost_model"):
        assert len(set(prints.values())) == len(values)  # each value is a different plan


def test_numbers_given_as_numpy_or_torch_scalars_are_accepted():
    np = pytest.importorskip("numpy")
    a = sampler(world_size=np.int64(2), rank=np.int32(1), seed=np.uint64(7), mem_budget=np.int64(100_000))
    b = sampler(world_size=torch.tensor(2), rank=1, seed=7, mem_budget=100_000.0, comp_budget=np.float64(1e9))
    assert (a.world_size, a.rank, a.seed) == (2, 1, 7) and b.world_size == 2
    assert list(a) == list(sampler(world_size=2, rank=1, seed=7))


# --- the methods --------------------------------------------------------------------------


@pytest.mark.parametrize("epoch,exc", [(-1, ValueError), (2**63, ValueError), (2**64, ValueError),
                                       (1.5, TypeError), ("1", TypeError), (None, TypeError), (True, TypeError),
                                       (NAN, TypeError)], ids=repr)
def test_set_epoch_rejects_bad_epochs_and_keeps_the_position(epoch, exc):
    s = sampler(world_size=2)
    it = iter(s)
    head = [next(it) for _ in range(3)]
    before = position(s)
    with pytest.raises(exc, match="epoch"):
        s.set_epoch(epoch)
    assert position(s) == before
    assert head + list(it) == list(sampler(world_size=2))  # the running iteration goes on


@pytest.mark.parametrize("step,exc", [(-1, ValueError), (10**9, ValueError), (2**64, ValueError),
                                      (True, TypeError), ("1", TypeError), (1.0, TypeError), (NAN, TypeError)],
                         ids=repr)
def test_state_dict_step_is_checked(step, exc):
    s = sampler()
    before = position(s)
    with pytest.raises(exc, match="step"):
        s.state_dict(step=step)
    assert position(s) == before


def test_a_bad_state_leaves_a_mid_epoch_position_unchanged():
    s = sampler(world_size=2)
    s.set_epoch(3)
    it = iter(s)
    for _ in range(5):
        next(it)
    good = s.state_dict()
    bad = [
        "nope", {}, {**good, "format": "x"}, {**good, "version": True}, {**good, "core": 3},
        {**good, "core": good["core"][:-3]}, {**good, "step_offset": -1}, {**good, "step_offset": 10**6},
        {**good, "step_offset": True}, {**good, "world_size": 10**9}, {**good, "rank": 5},
        {**good, "world_size": 0}, {**good, "core": good["core"].replace('"epoch":3', '"epoch":-3')},
    ]
    t = sampler(world_size=2)
    t.set_epoch(1)
    it_t = iter(t)
    head = [next(it_t) for _ in range(4)]
    before = position(t)
    for st in bad:
        with pytest.raises(ValueError):
            t.load_state_dict(st)
        assert position(t) == before, st
    ref = sampler(world_size=2)
    ref.set_epoch(1)
    assert head + list(it_t) == list(ref)  # the running iteration went on untouched
    t.load_state_dict(good)
    assert list(t) == list(it)


def test_sample_geometry_checks_the_row():
    s = AdaptiveBatchSampler(ROWS + [dict(path="x", num_frames="lots", height=1, width=1)], on_bad_row="skip",
                             **KW)
    for row, exc in [(-1, ValueError), (len(ROWS) + 1, ValueError), (True, TypeError), ("0", TypeError),
                     (0.0, TypeError)]:
        with pytest.raises(exc, match="row"):
            s.sample_geometry(row)
    with pytest.raises(ValueError, match=f"row {len(ROWS)}"):
        s.sample_geometry(len(ROWS))  # the bad row: fits no bucket
    frames, height, width = s.sample_geometry(0)
    assert frames >= 1 and height % 16 == 0 and width % 16 == 0


# --- online adaptation: observe_step --------------------------------------------------------


def tokens_of(s, row):
    frames, height, width = s.sample_geometry(row)
    return (1 + (frames - 1) // 4) * (height // 16) * (width // 16)  # Wan: VAE 4x8x8, patch 1x2x2


TRUTH = dict(a=2e-6, b=3e-11, c0=1e-3)  # seconds per sample = a*S + b*S^2 + c0


def model_seconds(s, micro_batches, rng, noise=0.03):
    """A rank's step time under the known model TRUTH, with the planner's micro-batch overhead
    and small-batch efficiency (which online adaptation keeps), times (1 +- noise)."""
    p = s._planner(s._budget_world)
    overhead, half = p.cost_overhead_s, p.cost_half_efficiency_tokens
    t = 0.0
    for mb in micro_batches:
        S = tokens_of(s, mb[0])
        t += overhead + (TRUTH["a"] * S + TRUTH["b"] * S * S + TRUTH["c0"]) * (len(mb) + half / S)
    return t * (1 + noise * (2 * rng.random() - 1))


def run_adaptive_epoch(world_size, bad_at=None, **kw):
    """Trains one epoch on emulated ranks with adapt_every=1, feeding times from TRUTH; each
    rank's steps() loop runs once, through the re-plans. With bad_at=(step, rank, value), that
    step is first observed with a bad time for that rank (which must be rejected)."""
    ss = [sampler(world_size=world_size, rank=r, adapt_every=1, **kw) for r in range(world_size)]
    rng = random.Random(1)
    loops = [s.steps() for s in ss]
    trained, observed = collections.Counter(), []
    padded = 0
    while True:
        try:
            steps = [next(it) for it in loops]
        except StopIteration:
            break
        assert len({st.step for st in steps}) == 1
        for st in steps:
            for mb in st.micro_batches:
                trained.update(mb)
        padded += steps[0].padded_samples
        times = [model_seconds(s, st.micro_batches, rng) for s, st in zip(ss, steps)]
        if bad_at is not None and bad_at[0] == steps[0].step:
            step, rank, value = bad_at
            bad = list(times)
            bad[rank] = value
            for s in ss:
                before = position(s)
                n_obs = len(s._observations)
                with pytest.raises((ValueError, TypeError), match=rf"step={step}\).*rank {rank}"):
                    s.observe_step(step, bad)
                assert position(s) == before and len(s._observations) == n_obs
        fits = [s.observe_step(steps[0].step, times) for s in ss]
        assert all((f is None) == (fits[0] is None) for f in fits)  # every rank, the same decision
        observed.append(steps[0].step)
    for s in ss[1:]:
        assert s.adaptations == ss[0].adaptations
    return ss, trained, observed, padded


def first_eligible_step(s):
    """The first step after which adaptation may refit: MIN_OBSERVATIONS rank-steps at 3 or
    more distinct token counts (both read off the initial plan, which no timing changes)."""
    from adaptiveload import sampler as sampler_module

    fresh = sampler(world_size=s.world_size, rank=0)
    seen = set()
    for k, _ in enumerate(fresh.steps()):
        for r in range(s.world_size):
            for mb in fresh._plan.rank_step(k, r):
                seen.add(tokens_of(fresh, mb[0]))
        if (k + 1) * s.world_size >= sampler_module.MIN_OBSERVATIONS and len(seen) >= 3:
            return k
    raise AssertionError("the plan is too short to adapt")


@pytest.mark.parametrize("world_size", [2, 3])
def test_adaptation_to_a_known_cost_model(world_size):
    ss, trained, observed, padded = run_adaptive_epoch(world_size)
    s = ss[0]
    # Counted work: the loop ran every step of the (re-planned) epoch once, in order, and the
    # sampler refitted after every step from the first eligible one to the last but one.
    assert observed == list(range(s.num_steps))
    k0 = first_eligible_step(s)
    assert [a["step"] for a in s.adaptations] == list(range(k0 + 1, s.num_steps)), (k0, s.num_steps)
    assert len(s.adaptations) >= 2
    # Every planned sample trained exactly once across the re-plans (padded repeats aside).
    assert set(trained) == set(s.planned_rows())
    assert sum(c - 1 for c in trained.values()) == padded
    # The fit finds the model the times came from, to within the noise.
    last = s.adaptations[-1]
    for k in ("a", "b"):
        assert abs(last[k] - TRUTH[k]) / TRUTH[k] < 0.25, (k, last)
    for a in s.adaptations:
        assert a["median_rel_error"] < 0.15 and a["a"] >= 0 and a["b"] >= 0, a


@pytest.mark.parametrize("value,exc", [(NAN, ValueError), (INF, ValueError), (-INF, ValueError), (0.0, ValueError),
                                       (0, ValueError), (-0.5, ValueError), (1e10, ValueError),
                                       (None, TypeError), ("0.1", TypeError), (True, TypeError)], ids=repr)
def test_a_bad_step_time_is_rejected_naming_step_and_rank_and_adaptation_goes_on(value, exc):
    clean = run_adaptive_epoch(3)[0][0]
    k0 = first_eligible_step(clean)
    ss, trained, observed, padded = run_adaptive_epoch(3, bad_at=(k0 + 1, 2, value))
    s = ss[0]
    assert observed == list(range(s.num_steps))
    assert [a["step"] for a in s.adaptations] == list(range(k0 + 1, s.num_steps))
    assert set(trained) == set(s.planned_rows()) and sum(c - 1 for c in trained.values()) == padded
    assert s.adaptations == clean.adaptations  # the rejected value reached nothing


def test_observe_step_checks_step_and_list():
    s = sampler(world_size=2, adapt_every=1)
    gen = s.steps()
    next(gen), next(gen)
    before = position(s)
    cases = [
        (dict(step=2, rank_seconds=[1, 1]), ValueError, "not been handed out"),
        (dict(step=-1, rank_seconds=[1, 1]), ValueError, "not in the current plan"),
        (dict(step=10**6, rank_seconds=[1, 1]), ValueError, "not in the current plan"),
        (dict(step=1.0, rank_seconds=[1, 1]), TypeError, "step"),
        (dict(step=True, rank_seconds=[1, 1]), TypeError, "step"),
        (dict(step=0, rank_seconds=[1]), ValueError, "one time per rank, 2"),
        (dict(step=0, rank_seconds=[1, 1, 1]), ValueError, "one time per rank, 2"),
        (dict(step=0, rank_seconds=1.0), TypeError, "rank_seconds"),
        (dict(step=0, rank_seconds="12"), TypeError, "rank_seconds"),
        (dict(step=0, rank_seconds=[1, NAN]), ValueError, r"step=0\): rank 1"),
        (dict(step=0, rank_seconds=[[1], 1]), TypeError, r"step=0\): rank 0"),
    ]
    for kw, exc, pattern in cases:
        with pytest.raises(exc, match=pattern):
            s.observe_step(**kw)
        assert position(s) == before, kw
    assert s.observe_step(0, torch.tensor([0.5, 0.25])) is None  # a tensor of times is a list
    with pytest.raises(ValueError, match="already observed"):
        s.observe_step(0, [0.5, 0.25])


def test_gather_step_time_passes_a_non_number_on_as_nan_for_observe_step_to_reject():
    s = sampler(adapt_every=1)
    next(iter(s.steps()))
    for bad in (None, "fast", True, torch.tensor([1.0, 2.0])):
        times = AdaptiveBatchSampler.gather_step_time(bad)
        assert len(times) == 1 and math.isnan(times[0]), bad
        with pytest.raises(ValueError, match=r"step=0\): rank 0's compute seconds"):
            s.observe_step(0, times)
    assert AdaptiveBatchSampler.gather_step_time(torch.tensor(0.25)) == [0.25]


@pytest.mark.parametrize("strategy", ["balanced", "equal_tokens"])
@pytest.mark.parametrize("world_size", [8, 13])
def test_planned_steps_mark_the_padded_micro_batches(world_size, strategy):
    """The padded repeats of the end-of-epoch policy, per micro-batch, in steps() and
    schedule() alike: exactly the step's padded count, and exactly the repeated samples."""
    rows = ROWS[:5]  # fewer samples than ranks: the step is completed with repeats
    kw = dict(KW, strategy=strategy, world_size=world_size)
    per_rank = [list(AdaptiveBatchSampler(rows, rank=r, **kw).steps()) for r in range(world_size)]
    for r in range(world_size):
        assert list(AdaptiveBatchSampler(rows, rank=r, **kw).schedule()) == per_rank[r]
    seen, total = collections.Counter(), 0
    for steps in zip(*per_rank):
        marked = 0
        for st in steps:
            assert len(st.padded_micro_batches) == len(st.micro_batches)
            marked += sum(len(mb) for mb, p in zip(st.micro_batches, st.padded_micro_batches) if p)
            seen.update(i for mb, p in zip(st.micro_batches, st.padded_micro_batches) if not p for i in mb)
        assert marked == steps[0].padded_samples
        total += marked
    s = AdaptiveBatchSampler(rows, **kw)
    assert sorted(seen) == s.planned_rows() and set(seen.values()) == {1}  # unmarked: each sample once
    assert total == sum(st.padded_samples for st in per_rank[0]) > 0


# --- set_epoch / load_state_dict inside a running loop --------------------------------------


def test_set_epoch_inside_a_running_loop_raises_instead_of_ending_it():
    s = sampler(world_size=2)
    seen = []
    with pytest.raises(RuntimeError, match=r"set_epoch\(1\) was called while an iteration over epoch 0"):
        for i, mb in enumerate(s):
            seen.append(mb)
            if i == 2:
                s.set_epoch(1)
    assert len(seen) == 3 and s.epoch == 1
    fresh = sampler(world_size=2)
    fresh.set_epoch(1)
    assert list(s) == list(fresh)  # the new epoch is whole


def test_set_epoch_inside_a_steps_loop_raises():
    s = sampler(world_size=3, rank=1)
    with pytest.raises(RuntimeError, match=r"set_epoch\(4\).*micro-batch\(es\) of rank 1 were not handed out"):
        for st in s.steps():
            if st.step == 1:
                s.set_epoch(4)


def test_load_state_dict_inside_a_loop_raises():
    s = sampler()
    state = sampler().state_dict()
    with pytest.raises(RuntimeError, match=r"load_state_dict\(\) was called while an iteration"):
        for i, _mb in enumerate(s):
            if i == 1:
                s.load_state_dict(state)


class RowIds(Dataset):
    def __len__(self):
        return len(ROWS)

    def __getitem__(self, i):
        return torch.tensor(i)


def test_set_epoch_inside_a_dataloader_loop_raises():
    s = sampler(world_size=2)
    loader = DataLoader(RowIds(), batch_sampler=s, num_workers=0)
    with pytest.raises(RuntimeError, match=r"set_epoch\(1\)"):
        for i, _batch in enumerate(loader):
            if i == 1:
                s.set_epoch(1)


def test_set_epoch_inside_a_schedule_loop_raises():
    s = sampler(world_size=2)
    loader = DataLoader(RowIds(), batch_sampler=s, num_workers=0)
    plan = s.schedule()
    batches = iter(loader)
    with pytest.raises(RuntimeError, match=r"set_epoch\(1\).*a schedule\(\)"):
        for step in plan:
            for _ in step.micro_batches:
                next(batches)
            if step.step == 1:
                s.set_epoch(1)


def test_loops_that_use_set_epoch_correctly_run_whole_epochs():
    def epoch(e):
        ref = sampler(world_size=2)
        ref.set_epoch(e)
        return list(ref)

    s = sampler(world_size=2)
    for e in range(3):
        s.set_epoch(e)
        assert list(s) == epoch(e)
    # set_epoch with the current epoch inside the loop keeps the position: the loop goes on.
    s.set_epoch(5)
    got = []
    for mb in s:
        s.set_epoch(5)
        got.append(mb)
    assert got == epoch(5)
    # A loop left early (break), then the next epoch: no error, the new epoch is whole.
    for i, _mb in enumerate(s):
        if i == 2:
            break
    s.set_epoch(6)
    assert list(s) == epoch(6)


# --- fused_adaln and AdaLayerNormModulate ---------------------------------------------------

X = torch.randn(2, 3, 8)
MOD = torch.randn(2, 8)


@pytest.mark.parametrize("arg,value,exc", [
    ("x", None, TypeError), ("x", [[1.0]], TypeError), ("shift", None, TypeError), ("shift", 0.0, TypeError),
    ("scale", None, TypeError), ("scale", "s", TypeError), ("weight", 1.0, TypeError), ("bias", [0.0], TypeError),
    ("eps", NAN, ValueError), ("eps", INF, ValueError), ("eps", -1e-6, ValueError), ("eps", 1e30, ValueError),
    ("eps", "1e-6", TypeError), ("eps", True, TypeError), ("eps", None, TypeError),
], ids=lambda v: repr(v) if not isinstance(v, type) else v.__name__)
def test_fused_adaln_names_the_bad_argument(arg, value, exc):
    kw = dict(x=X, shift=MOD, scale=MOD)
    kw[arg] = value
    with pytest.raises(exc, match=rf"fused_adaln: {arg}\b"):
        fused_adaln(**kw)


def test_fused_adaln_accepts_good_arguments_after_the_checks():
    ref = torch.nn.functional.layer_norm(X, (8,), eps=1e-5) * (1 + MOD[:, None]) + MOD[:, None]
    torch.testing.assert_close(fused_adaln(X, MOD, MOD, eps=1e-5), ref, atol=1e-5, rtol=1e-5)
    assert fused_adaln(X, MOD, MOD, eps=0).shape == X.shape


@pytest.mark.parametrize("kw,exc,name", [
    (dict(dim=0), ValueError, "dim"), (dict(dim=-3), ValueError, "dim"), (dict(dim=8.0), TypeError, "dim"),
    (dict(dim="8"), TypeError, "dim"), (dict(dim=True), TypeError, "dim"), (dict(dim=None), TypeError, "dim"),
    (dict(dim=8, eps=NAN), ValueError, "eps"), (dict(dim=8, eps=INF), ValueError, "eps"),
    (dict(dim=8, eps=-1.0), ValueError, "eps"), (dict(dim=8, eps="1e-6"), TypeError, "eps"),
    (dict(dim=8, elementwise_affine="maybe"), ValueError, "elementwise_affine"),
    (dict(dim=8, elementwise_affine=None), TypeError, "elementwise_affine"),
], ids=repr)
def test_adalayernorm_module_names_the_bad_argument(kw, exc, name):
    with pytest.raises(exc, match=rf"AdaLayerNormModulate: {name}\b"):
        AdaLayerNormModulate(**kw)


def test_adalayernorm_module_forward_checks():
    m = AdaLayerNormModulate(8, elementwise_affine="on")
    assert m.elementwise_affine is True and m.weight is not None
    assert AdaLayerNormModulate(8, elementwise_affine="off").weight is None
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        m(None, MOD, MOD)
    with pytest.raises(ValueError, match="last dimension must be 8"):
        m(torch.randn(2, 3, 5), MOD, MOD)
    with pytest.raises(ValueError, match="last dimension must be 8"):
        m(torch.tensor(1.0), MOD, MOD)
    with pytest.raises(TypeError, match="fused_adaln: shift"):
        m(X, None, MOD)
    assert math.isfinite(m(X, MOD, MOD).sum().item())


# --- calibrate: errors that say what to do, not tracebacks ----------------------------------

PKG_ROOT = os.path.dirname(os.path.dirname(adaptiveload.__file__))
# The CLI under test: AL_CLI, else the repository's build.
CLI = os.environ.get("AL_CLI") or os.path.join(REPO, "build", "cli", "adaptiveload")
needs_cli = pytest.mark.skipif(not os.path.exists(CLI), reason=f"CLI not built ({CLI}; set AL_CLI)")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def script(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def python_with_the_package(tmp_path):
    """An interpreter that imports this build of the package (as the project's .venv does)."""
    return script(tmp_path / "with" / "python", f'PYTHONPATH="{PKG_ROOT}" exec "{sys.executable}" "$@"')


def python_without_the_package(tmp_path):
    """An interpreter without site-packages or PYTHONPATH: `import adaptiveload` fails."""
    return script(tmp_path / "without" / "python", f'exec "{sys.executable}" -S -E "$@"')


def run_cli(args, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("AL_PYTHON", "ADAPTIVELOAD_PYTHON", "PYTHONPATH")}
    e.update(env)
    return subprocess.run(args, env=e, capture_output=True, text=True, timeout=300)


@no_cuda
def test_calibrate_without_cuda_is_a_clear_error():
    res = run_cli([sys.executable, "-m", "adaptiveload.calibrate", "--device", "cuda"], PYTHONPATH=PKG_ROOT)
    assert res.returncode == 2, res.stderr
    assert "--device cuda: CUDA is not available" in res.stderr and "--device cpu" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("args,pattern", [
    (["--device", "tpu"], "--device 'tpu' is not a device"),
    (["--device", "cpu", "--reps", "0"], "--reps must be >= 1"),
    (["--device", "cpu", "--max-batch", "0"], "--max-batch must be >= 1"),
    (["--device", "cpu", "--layers", "-1"], "--layers must be >= 1"),
    (["--device", "cpu", "--memory-fraction", "nan"], "--memory-fraction must be in"),
    (["--device", "cpu", "--memory-fraction", "1.5"], "--memory-fraction must be in"),
    (["--device", "cpu", "--out", "/nonexistent/dir/profile.json"], "--out /nonexistent/dir/profile.json: cannot"),
    (["--device", "cpu", "--held-out"], "--held-out: the tiny sweep has no held-out shapes"),
    (["--device", "cpu", "--max-tokens", "0"], "--max-tokens must be >= 1"),
    (["--device", "cpu", "--threads", "0"], "--threads must be >= 1"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_calibrate_checks_its_options_before_measuring(args, pattern, capsys):
    from adaptiveload import calibrate

    with pytest.raises(SystemExit) as e:
        calibrate.main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and pattern in err, err


@needs_cli
@no_cuda
def test_cli_calibrate_runs_AL_PYTHON_and_passes_its_error_on(tmp_path):
    py = python_with_the_package(tmp_path)
    res = run_cli([CLI, "calibrate", "--", "--device", "cuda"], AL_PYTHON=py)
    assert res.returncode == 2, res.stderr
    assert f"measuring with {py} (from AL_PYTHON)" in res.stderr
    assert "CUDA is not available" in res.stderr and "Traceback" not in res.stderr


@needs_cli
def test_cli_calibrate_says_how_to_set_up_the_python(tmp_path):
    py = python_without_the_package(tmp_path)
    res = run_cli([CLI, "calibrate", "--", "--device", "cpu"], AL_PYTHON=py)
    assert res.returncode == 2, res.stderr
    assert f"{py} cannot import the adaptiveload package" in res.stderr
    assert "scripts/python_env.sh" in res.stderr and "AL_PYTHON=/path/to/python" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_cli([CLI, "calibrate"], AL_PYTHON=str(tmp_path / "no-such-python"))
    assert res.returncode == 2 and "AL_PYTHON=" in res.stderr and "is not an executable file" in res.stderr


@needs_cli
def test_cli_calibrate_finds_the_project_environment_beside_it(tmp_path):
    """<repo>/build/cli/adaptiveload runs <repo>/.venv/bin/python (not python3 from PATH), and
    its exit status is the command's."""
    repo = tmp_path / "repo"
    exe = repo / "build" / "cli" / "adaptiveload"
    exe.parent.mkdir(parents=True)
    shutil.copy(CLI, exe)
    venv_python = script(repo / ".venv" / "bin" / "python", 'echo "venv python $1 ... $3 $4 $5 $6 $7 $8"; exit 3')
    res = run_cli([str(exe), "calibrate", "--", "--device", "cpu"])
    assert res.returncode == 3, res.stderr
    assert f"measuring with {venv_python} (the project's environment beside this executable)" in res.stderr
    assert res.stdout.startswith("venv python -c ... --out profile.json --model wan2.1-1.3b --device cpu")


GOOD_POINT = {"tokens": 60, "batch": 2, "time_s": 0.01, "peak_bytes": None}


@pytest.mark.parametrize("field,value,exc", [
    ("tokens", 0, ValueError), ("tokens", 1.5, TypeError), ("tokens", None, TypeError), ("batch", -1, ValueError),
    ("batch", True, TypeError), ("time_s", NAN, ValueError), ("time_s", 0.0, ValueError), ("time_s", -1, ValueError),
    ("time_s", INF, ValueError), ("time_s", "0.1", TypeError), ("peak_bytes", NAN, ValueError),
    ("peak_bytes", -1, ValueError), ("peak_bytes", "1", TypeError),
], ids=repr)
def test_calibrate_fit_names_the_bad_measurement(field, value, exc):
    from adaptiveload import calibrate

    points = [dict(GOOD_POINT, tokens=S) for S in (6, 60, 120, 300)]
    points[2] = dict(points[2], **{field: value})
    with pytest.raises(exc, match=rf"measurement 2: {field}"):
        calibrate.fit(points, "tiny-dit", "cpu")
    with pytest.raises(ValueError, match="measurement 0 has no time_s"):
        calibrate.fit([{"tokens": 6, "batch": 1}], "tiny-dit", "cpu")
    with pytest.raises(TypeError, match="measurement 0 must be a dict"):
        calibrate.fit([(6, 1, 0.1)], "tiny-dit", "cpu")
