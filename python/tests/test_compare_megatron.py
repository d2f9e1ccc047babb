"""bench/compare_megatron.py without Megatron-LM: it refuses a folder without Megatron's files,
naming them; its steps and packs keep every sample; a schedule is priced by the planner's cost
model (our own plans exactly as Planner.rank_times, a CP group's sample by its group size,
barrier-separated groups one after another). A stand-in scheduler plays Megatron's."""
import importlib.util
import os

import pytest

from adaptiveload import _C
from adaptiveload._manifest import load_manifest
from conftest import REPO

spec = importlib.util.spec_from_file_location("compare_megatron", os.path.join(REPO, "bench", "compare_megatron.py"))
cm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cm)

F = [1, 33, 81, 49, 17, 1, 65, 1]
H = [480, 720, 480, 256, 480, 720, 480, 1024]
W = [832, 1280, 640, 448, 832, 1280, 480, 1024]
ROWS = [dict(path=f"s{i}.mp4", num_frames=F[i % 8], height=H[i % 8], width=W[i % 8],
             fps=None if F[i % 8] == 1 else 16) for i in range(97)]


def planner(world=4, packing="on"):
    cfg = _C.PlannerConfig()
    cfg.model, cfg.device, cfg.world_size, cfg.sync, cfg.packing = "wan2.1-1.3b", "h200", world, "step", packing
    cfg.global_batch = f"samples:{world * 3}"
    return _C.Planner(load_manifest(ROWS), cfg)


def test_refuses_a_folder_without_megatrons_files_naming_them(tmp_path):
    with pytest.raises(SystemExit, match="hybrid_cp_schedule.py.*data_schedule.py"):
        cm.load_megatron(str(tmp_path))


def test_steps_and_packs_keep_every_sample():
    rows = list(range(101))
    steps = cm.cut_steps(rows, 7, seed=3)
    assert sorted(r for s in steps for r in s) == rows
    assert {len(s) for s in steps} <= {14, 15}
    tokens = {r: 1000 + 37 * r for r in rows}
    packs = cm.cut_packs(rows, tokens, 9000)
    assert [r for p in packs for r in p] == rows
    assert all(sum(tokens[r] for r in p) <= 9000 or len(p) == 1 for p in packs)


@pytest.mark.parametrize("packing", ["on", "off"])
def test_our_plans_are_priced_as_the_simulator_prices_them(packing):
    p = planner(packing=packing)
    plan = p.plan("balanced", 4)
    t = cm.price_plan(p, plan, cm.Pricer(p, 4))  # asserts rank by rank against rank_times
    times = p.rank_times(plan)
    assert t.time == pytest.approx(sum(max(x) for x in times) + plan.num_steps * p.allreduce_s(4), rel=1e-12)
    assert t.samples == sum(plan.step_info(s)[0] for s in range(plan.num_steps))


class TwoGroups:
    """Stand-in for BalancedCPScheduler: the first sample on ranks 0-1 (CP 2), the others one
    each on ranks 2-3, then a second barrier-separated group with the rest on rank 0."""

    def __init__(self, max_seq_len_per_rank, dp_cp_group):
        assert dp_cp_group.size() == 4

    def get_groups_and_subsamples(self, sample_id_seqlens, config):
        ids = [i for i, _ in sample_id_seqlens]
        first = [[ids[0]], [ids[0]], [ids[1]], [ids[2]]]
        return None, [first, [ids[3:], [], [], []]]


def test_hybrid_cp_groups_are_priced_by_cp_size_and_barriers():
    p = planner()
    pr = cm.Pricer(p, 4)
    rows = list(p.planned_rows())[:6]
    tokens = {r: p.row_geometry(r)[3] for r in rows}
    t = cm.run_hybrid_cp(TwoGroups, [rows], tokens, int(p.mem_budget_tokens), pr, packed=False)
    s = p.micro_batch_seconds
    g1 = max(s([rows[0]], 2, 4), s([rows[1]]), s([rows[2]]))
    g2 = sum(s([r]) for r in rows[3:])
    assert t.time == pytest.approx(g1 + g2 + p.allreduce_s(4), rel=1e-12)
    assert t.wide == 1 and t.samples == 6
    packed = cm.run_hybrid_cp(TwoGroups, [rows], tokens, int(p.mem_budget_tokens), pr, packed=True)
    assert packed.time == pytest.approx(g1 + s(rows[3:]) + p.allreduce_s(4), rel=1e-12)
