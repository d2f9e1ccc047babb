"""AdaptiveBatchSampler on real manifests (TaiChi-HD clips + COCO val images): coverage,
determinism across rank instances, epochs, mid-epoch and elastic resume, bad states,
DataLoader use, and the manifest forms."""
import collections
import csv
import json
import os

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from adaptiveload import AdaptiveBatchSampler
from conftest import DATASETS

TAICHI = os.path.join(DATASETS, "taichi_hd.csv")
COCO = os.path.join(DATASETS, "coco2017_val_images.csv")
MANIFEST = [TAICHI, COCO]
STRATEGIES = ["balanced", "dual", "equal_tokens", "fixed"]


def ranks(world_size, **kw):
    kw.setdefault("strategy", "balanced")
    return [AdaptiveBatchSampler(MANIFEST, world_size=world_size, rank=r, **kw) for r in range(world_size)]


def check_coverage(batches_per_rank, sampler, padded):
    """Every planned row exactly once; the only repeats are the plan's padded samples, the
    only misses its dropped rows."""
    count = collections.Counter(i for batches in batches_per_rank for b in batches for i in b)
    planned = set(sampler.planned_rows())
    dropped = set(sampler.dropped_rows)
    assert set(count) == planned - dropped
    assert sum(c - 1 for c in count.values()) == padded
    return count


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("world_size", [1, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True], ids=["pad", "drop"])
def test_coverage_union_of_ranks(strategy, world_size, drop_last):
    ss = ranks(world_size, strategy=strategy, drop_last=drop_last)
    padded = sum(st.padded_samples for st in AdaptiveBatchSampler(
        MANIFEST, world_size=world_size, rank=0, strategy=strategy, drop_last=drop_last).steps())
    if drop_last:
        assert padded == 0
    check_coverage([list(s) for s in ss], ss[0], padded)
    assert len({s.num_steps for s in ss}) == 1  # lockstep


def test_steps_global_counts_and_lockstep():
    ss = ranks(3)
    per_rank = [list(s.steps()) for s in ss]
    assert len({len(p) for p in per_rank}) == 1
    for t, steps in enumerate(zip(*per_rank)):
        assert [st.step for st in steps] == [t] * 3
        assert len({(st.global_samples, st.global_tokens, st.padded_samples) for st in steps}) == 1
        assert (sum(len(mb) for st in steps for mb in st.micro_batches)
                == steps[0].global_samples + steps[0].padded_samples)
        assert steps[0].global_tokens > 0 and all(st.micro_batches for st in steps)
    # balanced: ranks may run different numbers of micro-batches; len counts them per rank.
    assert sum(len(s) for s in ss) == sum(len(st.micro_batches) for p in per_rank for st in p)
    assert [len(s) for s in ss] == [sum(len(st.micro_batches) for st in p) for p in per_rank]


def test_identical_plans_across_rank_instances():
    a = [list(s) for s in ranks(4, seed=7)]
    b = [list(s) for s in ranks(4, seed=7)]
    assert a == b
    assert a != [list(s) for s in ranks(4, seed=8)]


def test_set_epoch_changes_order_deterministically():
    s = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=1)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert e0 != e1
    t = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=1)
    t.set_epoch(1)
    assert list(t) == e1
    s.set_epoch(0)
    assert list(s) == e0
    assert list(s) == e0  # a finished epoch replays the same order until set_epoch
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        s.set_epoch(-1)


@pytest.mark.parametrize("cut", [0, 1, 5, 333, 1000])
def test_state_round_trip_mid_epoch(cut):
    s = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0, seed=3)
    s.set_epoch(2)
    full = list(s)
    it = iter(s)  # an iteration that ran to the end: the next one starts the epoch again
    head = [next(it) for _ in range(cut)]
    state = s.state_dict()
    assert head == full[:cut]
    assert json.loads(json.dumps(state)) == state  # plain JSON types, small
    assert len(json.dumps(state)) < 1024
    t = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0, seed=3)
    t.load_state_dict(state)
    assert t.epoch == 2 and len(t) == len(full) - cut
    t.set_epoch(2)  # the usual loop calls set_epoch(epoch) after loading: keeps the position
    assert list(t) == full[cut:]
    assert list(it) == full[cut:]  # the original iterator is unaffected by state_dict()


def test_state_round_trip_steps_and_step_argument():
    s = AdaptiveBatchSampler(MANIFEST, world_size=3, rank=2)
    steps = list(s.steps())
    s.set_epoch(1), s.set_epoch(0)
    gen = s.steps()
    for _ in range(10):
        next(gen)
    state = s.state_dict()
    t = AdaptiveBatchSampler(MANIFEST, world_size=3, rank=2)
    t.load_state_dict(state)
    assert t.step == 10 and list(t.steps()) == steps[10:]
    # state_dict(step=k): the start of step k, whatever was prefetched.
    u = AdaptiveBatchSampler(MANIFEST, world_size=3, rank=2)
    u.load_state_dict(s.state_dict(step=4))
    assert list(u.steps()) == steps[4:]
    with pytest.raises(ValueError, match="step must be in"):
        s.state_dict(step=10**6)


def test_finished_state_yields_nothing_then_next_epoch():
    s = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)
    list(s)
    state = s.state_dict()
    t = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)
    t.load_state_dict(state)
    assert len(t) == 0 and list(t) == []
    t.set_epoch(1)
    s.set_epoch(1)
    assert list(t) == list(s)


def run_steps(samplers, n):
    """Runs n global steps on every rank; returns their micro-batches."""
    out = []
    gens = [s.steps() for s in samplers]
    for _ in range(n):
        for g in gens:
            out.extend(next(g).micro_batches)
    return out


@pytest.mark.parametrize("strategy", ["balanced", "equal_tokens"])
@pytest.mark.parametrize("sizes", [(2, 3), (3, 2), (2, 3, 1), (4, 4)], ids=str)
def test_elastic_resume_loses_and_repeats_nothing(strategy, sizes):
    done = []
    state = None
    padded = 0
    for k, w in enumerate(sizes):
        ss = ranks(w, strategy=strategy, seed=5)
        if state is not None:
            for s in ss:
                s.load_state_dict(state)
        last = k + 1 == len(sizes)
        n = ss[0].num_steps - ss[0].step if last else min(37, ss[0].num_steps - ss[0].step)
        first = ss[0].step
        steps = [list(s.steps())[:n] if last else None for s in ss]
        if last:
            done.extend(mb for st in steps for step in st for mb in step.micro_batches)
            padded += sum(step.padded_samples for step in steps[0])
            assert steps[0][0].step == first
        else:
            done.extend(run_steps(ss, n))
            state = ss[0].state_dict()  # rank 0's state, saved at a step boundary
            assert all(s.state_dict() == state | {"rank": s.rank} for s in ss)
    check_coverage([done], ss[0], padded)


def test_elastic_mid_step_state_re_runs_the_partial_step():
    s = ranks(2)[1]
    full = list(ranks(2)[1].steps())
    n = next(t for t, st in enumerate(full) if len(st.micro_batches) > 1)  # rank 1 runs >1 micro-batch
    it = iter(s)
    for _ in range(sum(len(st.micro_batches) for st in full[:n]) + 1):  # into the middle of step n
        next(it)
    state = s.state_dict()
    assert state["step_offset"] == 1 and s.step == n
    with pytest.raises(ValueError, match="saved mid-step by rank 1"):
        ranks(2)[0].load_state_dict(state)
    same = ranks(2)[1]
    same.load_state_dict(state)  # same rank, same world size: resumes inside the step
    assert list(same) == [mb for st in full[n:] for mb in st.micro_batches][1:]
    # Elastic: steps 0..n-1 ran on both ranks; step n was only partly handed out (its
    # optimizer step never ran), so its samples are planned again for 3 ranks.
    three = ranks(3)
    for t in three:
        t.load_state_dict(state)
    assert three[0].step == n and len({t.num_steps for t in three}) == 1
    done = [mb for r in range(2) for st in list(ranks(2)[r].steps())[:n] for mb in st.micro_batches]
    rest = [list(t.steps()) for t in three]
    done += [mb for steps in rest for st in steps for mb in st.micro_batches]
    check_coverage([done], three[0], sum(st.padded_samples for st in rest[0]))


def test_corrupted_or_mismatched_state_raises_value_error():
    s = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)
    it = iter(s)
    for _ in range(3):
        next(it)
    good = s.state_dict()
    bad_states = {
        "not a dict": "nope",
        "format": {**good, "format": "other"},
        "version": {**good, "version": 99},
        "truncated core": {**good, "core": good["core"][:-7]},
        "core not json": {**good, "core": "{{{"},
        "core version": {**good, "core": good["core"].replace('"version":1', '"version":2')},
        "negative offset": {**good, "step_offset": -1},
        "world size": {**good, "world_size": 5},
        "offset too big": {**good, "step_offset": 10**6},
    }
    for name, st in bad_states.items():
        t = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)
        with pytest.raises(ValueError):
            t.load_state_dict(st)
        assert t.step == 0 and len(t) == len(AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)), name
    with pytest.raises(ValueError, match="fingerprint"):
        AdaptiveBatchSampler([TAICHI], world_size=2, rank=0).load_state_dict(good)
    with pytest.raises(ValueError, match="seed"):
        AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0, seed=1).load_state_dict(good)
    with pytest.raises(ValueError, match="strategy"):
        AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0, strategy="dual").load_state_dict(good)
    with pytest.raises(ValueError, match="fingerprint"):
        AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0, drop_last=True).load_state_dict(good)


class RowIds(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_batch_sampler(num_workers):
    s = AdaptiveBatchSampler(MANIFEST, world_size=4, rank=3)
    expected = list(s)
    loader = DataLoader(RowIds(s.total_rows), batch_sampler=s, num_workers=num_workers)
    assert len(loader) == len(expected)
    assert [b.tolist() for b in loader] == expected


def test_dataloader_with_schedule_and_checkpoint():
    """The DataLoader loop: schedule() gives the step grouping, the loader (with prefetching
    workers) the data; state_dict(step=...) checkpoints regardless of prefetch."""
    s = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)
    expected = list(AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0).steps())
    loader = DataLoader(RowIds(s.total_rows), batch_sampler=s, num_workers=2)
    plan = s.schedule()
    batches = iter(loader)
    seen, state = [], None
    for step in plan:
        got = [next(batches).tolist() for _ in step.micro_batches]
        assert got == step.micro_batches
        seen.append(step)
        if step.step == 20:
            state = s.state_dict(step=step.step + 1)  # after step 20's optimizer step
    assert seen == expected
    t = AdaptiveBatchSampler(MANIFEST, world_size=2, rank=0)
    t.load_state_dict(state)
    assert list(t.schedule()) == expected[21:] == list(t.steps())


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sp_takes_a_group_size_as_an_int_or_a_string():
    """sp=2 is the group size the docs describe, as sp="2" (it was refused: 'got int 2'); a bool
    or a float is not a group size, and a size the world cannot hold names sp."""
    as_int = AdaptiveBatchSampler(TAICHI, world_size=4, rank=0, sp=2)
    as_text = AdaptiveBatchSampler(TAICHI, world_size=4, rank=0, sp="2")
    assert list(as_int) == list(as_text) and len(list(as_int)) > 0
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match="sp must be auto, min, per-sample, off or a group size"):
            AdaptiveBatchSampler(TAICHI, world_size=4, rank=0, sp=bad)
    with pytest.raises(ValueError, match=r"'3' \(sp\)"):
        AdaptiveBatchSampler(TAICHI, world_size=4, rank=0, sp=3)


def test_manifest_forms_give_the_same_plan():
    rows = read_rows(TAICHI)[:400] + read_rows(COCO)[:300]
    as_dicts = [dict(r, fps=(float(r["fps"]) if r["fps"] else None), num_frames=int(r["num_frames"])) for r in rows]
    as_columns = {k: [r[k] for r in rows] for k in ("path", "num_frames", "height", "width", "fps")}
    a = list(AdaptiveBatchSampler(as_dicts, world_size=2, rank=1))
    b = list(AdaptiveBatchSampler(as_columns, world_size=2, rank=1))
    assert a == b and len(a) > 0
    with pytest.raises(ValueError, match="'height'"):
        AdaptiveBatchSampler({"path": ["a"], "num_frames": [1], "width": [3]})
    with pytest.raises(ValueError, match="column 'width' has 1 values"):
        AdaptiveBatchSampler({"path": ["a", "b"], "num_frames": [1, 1], "height": [480, 480], "width": [640]})
    with pytest.raises(TypeError):
        AdaptiveBatchSampler(42)
    with pytest.raises(FileNotFoundError):
        AdaptiveBatchSampler("/nonexistent/manifest.csv")


def test_bad_rows_error_or_skip():
    rows = [
        {"path": "a.mp4", "num_frames": 81, "height": 480, "width": 832, "fps": 16},
        {"path": "b.mp4", "num_frames": "lots", "height": 480, "width": 832, "fps": 16},
        {"path": "c.jpg", "num_frames": 1, "height": 720, "width": 1280},
    ]
    with pytest.raises(ValueError, match=r"row.*:1: field 'num_frames'.*on_bad_row='skip'"):
        AdaptiveBatchSampler(rows)
    s = AdaptiveBatchSampler(rows, on_bad_row="skip")
    assert len(s.bad_rows) == 1 and "num_frames" in s.bad_rows[0]
    assert sorted(i for b in s for i in b) == [0, 2]
    with pytest.raises(ValueError, match="on_bad_row"):
        AdaptiveBatchSampler(rows, on_bad_row="ignore")


def test_arguments_and_defaults():
    s = AdaptiveBatchSampler(MANIFEST)  # no torch.distributed: rank 0 of 1
    assert (s.rank, s.world_size) == (0, 1)
    assert "balanced" in repr(s) and s.budgets["mem_budget_tokens"] > 0
    with pytest.raises(ValueError, match="rank must be in"):
        AdaptiveBatchSampler(MANIFEST, world_size=2, rank=2)
    with pytest.raises(ValueError, match="strategy|unknown"):
        AdaptiveBatchSampler(MANIFEST, strategy="nope")
    with pytest.raises(ValueError):
        AdaptiveBatchSampler(MANIFEST, model="no-such-model")
    # An explicit memory budget: clips above it are an error naming the row, or left out
    # (and listed) with on_oversize='skip'.
    with pytest.raises(ValueError, match=r"taichi_hd.csv:\d+.*on_oversize='skip'"):
        AdaptiveBatchSampler(MANIFEST, mem_budget=40000)
    small = AdaptiveBatchSampler(MANIFEST, mem_budget=40000, strategy="equal_tokens", on_oversize="skip")
    assert small.budgets["mem_budget_tokens"] == 40000
    assert any("memory budget" in reason for _, reason in small.left_out)
    assert set(small.planned_rows()).isdisjoint(row for row, _ in small.left_out)
    assert sorted(i for b in small for i in b) == small.planned_rows()
