"""Ulysses sequence parallelism (adaptiveload.sequence_parallel and WanDiT's sp= path).

In process: the split, the group of one (identity, no communication) against the plain model,
the heads check. Two processes (torch.multiprocessing, gloo): the all-to-all, gather and loss
reduction forward and backward against the dense tensors, and the model with g=2. Four
processes under torchrun (gloo, CPU): one epoch with groups of 1, 2 and 4 on a hand-made
schedule (sp_worker.py) and one on the planner's schedule (sp_plan_worker.py).
Tolerances fp32: rtol 1e-5, atol 1e-6 (measured errors are in docs/python.md). Timeouts only
turn a hang into a failure."""
import collections
import json
import os
import time

import pytest
import torch
import torch.distributed as dist

from adaptiveload import sequence_parallel as spl
from adaptiveload.models import wan_dit
from conftest import DATASETS, HERE, run_guarded, torchrun

RTOL, ATOL = 1e-5, 1e-6
HANG_TIMEOUT_S = 240


@pytest.mark.parametrize("n,g", [(0, 1), (1, 4), (7, 2), (12, 4), (198, 4), (5, 3)])
def test_split_covers_the_sequence_in_order(n, g):
    sizes = spl.split_sizes(n, g)
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    bounds = [spl.SPContext(None, tuple(range(g)), p).bounds(n) for p in range(g)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def test_group_of_one_is_the_identity_without_communication(monkeypatch):
    def no_comm(*a, **k):
        raise AssertionError("a group of one communicated")

    for name in ("all_to_all_single", "all_gather", "all_reduce", "broadcast"):
        monkeypatch.setattr(dist, name, no_comm)
    sp = spl.local_context()
    x = torch.randn(2, 5, 4, 3, requires_grad=True)
    assert spl.seq_to_heads(x, sp, 5) is x and spl.heads_to_seq(x, sp) is x
    assert spl.unshard(x, sp, 5) is x and spl.all_reduce_sum(x, sp) is x and spl.shard(x, sp).shape == x.shape

    c = wan_dit.config("tiny")
    torch.manual_seed(0)
    model = wan_dit.WanDiT(c)
    x0, ctx = torch.randn(1, 16, 3, 6, 10), torch.randn(1, c.text_len, c.text_dim)
    t = torch.tensor([300.0])
    with torch.no_grad():
        out = wan_dit.unpatchify(model(x0, t, ctx, sp=sp), c.patch, x0.shape[1:])
        torch.testing.assert_close(out, model(x0, t, ctx), rtol=RTOL, atol=ATOL)
    grads = []
    for s in (sp, None):
        model.zero_grad(set_to_none=True)
        loss = wan_dit.flow_matching_loss(model, x0, ctx, torch.Generator().manual_seed(1), sp=s).mean()
        loss.backward()
        spl.reduce_gradients(model.parameters(), sp)
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=RTOL, atol=ATOL)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def test_heads_not_divisible_by_the_group_is_refused():
    c = wan_dit.config("tiny")  # 4 heads
    model = wan_dit.WanDiT(c)
    sp = spl.SPContext(None, (0, 1, 2), 0)  # refused before any communication
    with pytest.raises(ValueError, match=r"group of 3 ranks \[0, 1, 2\].*heads=4, not divisible by 3"):
        model(torch.randn(1, 16, 1, 4, 4), torch.tensor([1.0]), torch.randn(1, c.text_len, c.text_dim), sp=sp)
    with pytest.raises(ValueError, match=r"heads=5, not divisible by 3"):
        spl.seq_to_heads(torch.randn(1, 2, 5, 8), sp, 6)


def test_pair_exchange_and_model_against_dense(tmp_path):
    import torch.multiprocessing as mp

    import sp_worker

    ctx = mp.start_processes(sp_worker.pair_main, args=(str(tmp_path / "store"), str(tmp_path), RTOL, ATOL),
                             nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + HANG_TIMEOUT_S
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"two-process sequence-parallel check still running after {HANG_TIMEOUT_S} s: a hang")
    worst = [json.loads((tmp_path / f"pair{r}.json").read_text()) for r in (0, 1)]
    assert all(w["grad_tol_ratio"] <= 1 for w in worst), worst


def run_torchrun(cmd, env):
    """Runs a 4-process torchrun to its end; a hang kills torchrun and its workers
    (conftest.run_guarded) and fails the test."""
    env["SP_RTOL"], env["SP_ATOL"] = str(RTOL), str(ATOL)
    rc, log, _ = run_guarded(cmd, env, HANG_TIMEOUT_S, "torchrun with 4 ranks")
    assert rc == 0, log[-4000:]


def test_torchrun_epoch_with_groups_of_1_2_4(tmp_path):
    out = tmp_path / "result.json"
    cmd, env = torchrun(4, tmp_path / "logs", [HERE])
    cmd += [os.path.join(HERE, "sp_worker.py"), str(out),
            os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]
    run_torchrun(cmd, env)
    result = json.loads(out.read_text())
    records = [e for r in result["ranks"] for e in r["records"]]
    steps = result["steps"]

    # Every rank busy at every step, in the group the schedule gives it.
    assert sorted((e["step"], e["rank"]) for e in records) == [(s, r) for s in range(len(steps)) for r in range(4)]
    for e in records:
        size = steps[e["step"]][0]
        start = e["rank"] - e["rank"] % size
        assert e["size"] == size and e["ranks"] == list(range(start, start + size))
        assert e["position"] == e["rank"] % size
        assert e["id"] == steps[e["step"]][1][e["rank"] // size]

    # Every sample trained exactly once, by its whole group, which saw the whole sequence.
    by_id = collections.defaultdict(list)
    for e in records:
        by_id[e["id"]].append(e)
    assert sorted(by_id) == sorted(result["samples"]) and len(by_id) == 14
    for sid, es in by_id.items():
        assert len({e["step"] for e in es}) == 1, sid
        assert sorted(e["rank"] for e in es) == es[0]["ranks"], sid
        shards = sorted(tuple(e["shard"]) for e in es)
        assert shards[0][0] == 0 and shards[-1][1] == es[0]["tokens"], sid
        assert all(a[1] == b[0] for a, b in zip(shards, shards[1:])), sid
        assert len({e["loss"] for e in es}) == 1, sid  # the group's ranks hold one total
    assert {s for s, _ in steps} == {1, 2, 4}
    assert any(e["tokens"] % e["size"] for e in records if e["size"] > 1)  # an uneven split was trained

    # Loss and gradients equal the non-parallel computation; the epoch equals its replay.
    for e in records:
        assert abs(e["loss"] - e["ref_loss"]) <= ATOL + RTOL * abs(e["ref_loss"]), e
        assert e["grad_tol_ratio"] <= 1, e
    assert result["weights_spread"] == 0.0  # every rank applied the same all-reduced update
    assert result["weights_moved"] > 1e-3
    assert result["replay_rel_err"] <= RTOL, result  # max |w - w_replay| / max |w_replay|


# A device whose memory holds ~131 tokens of one tiny-DiT sample per GPU (3 GB runtime + the
# model state + 360,000 bytes; activations 8,192 + 2,688 bytes a token): on the tiny grid,
# images (60 tokens) fit one GPU, 96p 4:3 clips (240) need 2, 96p 16:9 clips (300) need 4.
TINY_STATE_BYTES = 98_304 * 18 + 3e9


def small_gpu(path):
    path.write_text(json.dumps({"name": "small-gpu", "memory_gb": (TINY_STATE_BYTES + 360_000) / 1e9,
                                "peak_tflops": 0.1, "efficiency": 0.3, "allreduce_bus_gbps": 5,
                                "microbatch_overhead_ms": 2, "half_efficiency_tokens": 256,
                                "memory_reserve_fraction": 0, "node_size": 8, "alltoall_gbps": 5}))
    return str(path)


def mixed_manifest(path):
    """Real rows: 6 Taichi-HD 480x640 clips, 4 of 720x1280, 12 COCO images."""
    import csv
    rows, want = [], {(480, 640): 6, (720, 1280): 4}
    with open(os.path.join(DATASETS, "taichi_hd.csv"), newline="") as f:
        for r in csv.DictReader(f):
            key = (int(r["height"]), int(r["width"]))
            if want.get(key, 0) > 0:
                want[key] -= 1
                rows.append(r)
    with open(os.path.join(DATASETS, "coco2017_val_images.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if len(rows) < 22 and int(r["width"]) >= int(r["height"]) * 16 // 10:
                rows.append(r)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "num_frames", "height", "width", "fps"])
        w.writeheader()
        w.writerows(rows)
    return str(path), len(rows)


def test_groups_on_ranks_that_are_not_alike(tmp_path):
    """rank_speeds= with sequence-parallel groups (docs/planner.md, "Unequal ranks"; planned
    since they are dealt by speed, SpGroups.UnequalRanksAreDealtBySpeed): each group's ranks
    list its micro-batches alike and every row is trained once, in both sync modes."""
    from adaptiveload.sampler import AdaptiveBatchSampler
    manifest, n = mixed_manifest(tmp_path / "m.csv")
    device = small_gpu(tmp_path / "gpu.json")
    for sync in ("step", "micro"):
        kw = dict(model="tiny-dit", device=device, world_size=4, sharding="none", sync=sync, sp="min")
        steps = [list(AdaptiveBatchSampler(manifest, rank=r, rank_speeds={3: 0.5}, **kw).steps())
                 for r in range(4)]
        assert {len(x) for x in steps} == {len(steps[0])}
        check_every_row_once(steps, n)


def check_every_row_once(steps, n):
    seen = collections.Counter()
    for r in range(4):
        for st in steps[r]:
            for mb, ranks, padded in zip(st.micro_batches, st.groups, st.padded_micro_batches):
                assert r in ranks
                for other in ranks:
                    assert mb in steps[other][st.step].micro_batches
                if ranks[0] == r and not padded:
                    seen.update(mb)
    assert sorted(seen) == list(range(n)) and set(seen.values()) == {1}


def test_sampler_gives_each_micro_batch_its_group(tmp_path):
    from adaptiveload.sampler import AdaptiveBatchSampler
    manifest, n = mixed_manifest(tmp_path / "m.csv")
    device = small_gpu(tmp_path / "gpu.json")
    # sp="min": each clip on the smallest group it fits (auto's search prefers one group of 4
    # for all on so few samples), so the epoch mixes 1, 2 and 4.
    per_rank = [AdaptiveBatchSampler(manifest, model="tiny-dit", device=device, world_size=4, rank=r,
                                     sharding="none", sync="step", sp="min") for r in range(4)]
    assert per_rank[0].sp_sizes() == [1, 2, 4]
    seen, sizes = collections.Counter(), set()
    steps = [list(s.steps()) for s in per_rank]
    assert len({len(x) for x in steps}) == 1
    for r in range(4):
        for st in steps[r]:
            assert len(st.groups) == len(st.micro_batches)
            prev = 4
            for mb, ranks, padded in zip(st.micro_batches, st.groups, st.padded_micro_batches):
                g = len(ranks)
                assert ranks == tuple(range(r - r % g, r - r % g + g)) and r in ranks
                assert g <= prev  # largest group first: the group's ranks reach it together
                prev = g
                sizes.add(g)
                if ranks[0] == r and not padded:
                    seen.update(mb)
            # Every rank of a group lists the same micro-batches.
            for mb, ranks in zip(st.micro_batches, st.groups):
                for other in ranks:
                    o = steps[other][st.step]
                    assert o.step == st.step and mb in o.micro_batches and ranks in o.groups
    assert sizes == {1, 2, 4}
    assert sorted(seen) == list(range(n)) and set(seen.values()) == {1}
    # Off: the clips do not fit one GPU and the sampler says which and what to do.
    with pytest.raises(Exception, match="sp='auto'"):
        AdaptiveBatchSampler(manifest, model="tiny-dit", device=device, world_size=4, rank=0, sharding="none",
                             sp="off")


def test_elastic_resume_with_groups_loses_nothing(tmp_path):
    """Two steps on 4 ranks, then the rest on 8: the groups are chosen again for 8 ranks and
    every planned row is trained exactly once over the two segments."""
    from adaptiveload.sampler import AdaptiveBatchSampler
    manifest, n = mixed_manifest(tmp_path / "m.csv")
    device = small_gpu(tmp_path / "gpu.json")

    def sampler(world, rank):
        return AdaptiveBatchSampler(manifest, model="tiny-dit", device=device, world_size=world, rank=rank,
                                    sharding="none", sync="step", sp="min")

    def leaders_rows(st, rank):
        return [row for mb, ranks, pad in zip(st.micro_batches, st.groups, st.padded_micro_batches)
                if ranks[0] == rank and not pad for row in mb]

    trained = collections.Counter()
    first = [sampler(4, r) for r in range(4)]
    for r, s in enumerate(first):
        it = s.steps()
        for _ in range(2):
            trained.update(leaders_rows(next(it), r))
    state = first[0].state_dict()
    sizes = set()
    for r in range(8):
        s = sampler(8, r)
        s.load_state_dict(state)
        for st in s.steps():
            trained.update(leaders_rows(st, r))
            sizes.update(len(g) for g in st.groups)
    assert 4 in sizes  # the 300-token clips still run on groups of 4 on 8 ranks
    assert sorted(trained) == list(range(n)) and set(trained.values()) == {1}


def test_torchrun_planned_epoch_with_groups_of_1_2_4(tmp_path):
    manifest, n = mixed_manifest(tmp_path / "m.csv")
    device = small_gpu(tmp_path / "gpu.json")
    out = tmp_path / "result.json"
    cmd, env = torchrun(4, tmp_path / "logs", [HERE])
    cmd += [os.path.join(HERE, "sp_plan_worker.py"), str(out), device, manifest]
    run_torchrun(cmd, env)
    result = json.loads(out.read_text())
    records = [e for r in result["ranks"] for e in r["records"]]
    assert {len(e["ranks"]) for e in records} == {1, 2, 4}
    # Every planned row trained exactly once, by its whole group, whose shards cover it.
    by_mb = collections.defaultdict(list)
    for e in records:
        by_mb[(e["step"], e["ranks"][0], tuple(e["rows"]))].append(e)
    trained = collections.Counter()
    for (step, _first, rows), es in by_mb.items():
        assert sorted(e["rank"] for e in es) == es[0]["ranks"], (step, rows)
        assert sorted(e["position"] for e in es) == list(range(len(es)))
        for k, tokens in enumerate(es[0]["tokens"]):
            shards = sorted(tuple(e["shards"][k]) for e in es)
            assert shards[0][0] == 0 and shards[-1][1] == tokens
            assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
        assert len({e["loss"] for e in es}) == 1  # the group's ranks hold one total
        if not es[0]["padded"]:
            trained.update(rows)
    assert sorted(trained) == sorted(result["planned_rows"]) == list(range(n))
    assert set(trained.values()) == {1}
    # Loss and gradients equal the non-parallel computation; the epoch equals its replay.
    for e in records:
        assert abs(e["loss"] - e["ref_loss"]) <= ATOL + RTOL * abs(e["ref_loss"]), e
        assert e["grad_tol_ratio"] <= 1, e
    assert result["weights_spread"] == 0.0
    assert result["replay_rel_err"] <= RTOL, result
    worst = max(e["grad_tol_ratio"] for e in records)
    print(f"planned SP epoch: {len(by_mb)} micro-batches, groups {sorted({len(e['ranks']) for e in records})}, "
          f"worst gradient error {worst:.3g} of tolerance, replay rel err {result['replay_rel_err']:.3g}")
