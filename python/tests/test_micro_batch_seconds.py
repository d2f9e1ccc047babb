"""Planner.micro_batch_seconds / micro_batch_work: the simulator's price of any micro-batch of
manifest rows (a bucketed batch, a varlen pack, on a group of g ranks), so a schedule made
elsewhere (bench/compare_megatron.py) is priced by the same cost model as the planner's plans.
The manifest is generated: images and clips of several lengths, no files needed."""
import pytest

from adaptiveload import _C
from adaptiveload._manifest import load_manifest

F = [1, 33, 81, 49, 17, 1, 65, 1]
H = [480, 720, 480, 256, 480, 720, 480, 1024]
W = [832, 1280, 640, 448, 832, 1280, 480, 1024]
ROWS = [dict(path=f"s{i}.mp4", num_frames=F[i % 8], height=H[i % 8], width=W[i % 8],
             fps=None if F[i % 8] == 1 else 16) for i in range(203)]


def planner(packing="on", world=4):
    cfg = _C.PlannerConfig()
    cfg.model, cfg.device, cfg.world_size, cfg.sync, cfg.packing = "wan2.1-1.3b", "h200", world, "step", packing
    return _C.Planner(load_manifest(ROWS), cfg)


@pytest.mark.parametrize("packing", ["on", "off"])
def test_micro_batch_seconds_sum_to_the_simulated_rank_times(packing):
    p = planner(packing)
    plan = p.plan("balanced", 4)
    times = p.rank_times(plan)
    for s in range(plan.num_steps):
        for r in range(4):
            x = sum(p.micro_batch_seconds(mb) for mb in plan.rank_step(s, r))
            assert x == pytest.approx(times[s][r], rel=1e-12)


def test_a_pack_pays_one_overhead_and_the_ramp_on_its_total_tokens():
    p = planner()
    ov, nh = p.cost_overhead_s, p.cost_half_efficiency_tokens
    rows = [0, 1, 2, 5]  # two image shapes, two clips: one pack
    work = p.micro_batch_work(rows)
    assert work == pytest.approx(sum(p.micro_batch_work([r]) for r in rows), rel=1e-12)
    n = sum(p.row_geometry(r)[3] for r in rows)
    assert p.micro_batch_seconds(rows) == pytest.approx(ov + work * (1 + nh / n), rel=1e-12)
    # Each sample alone pays the fixed costs once per sample.
    assert sum(p.micro_batch_seconds([r]) for r in rows) > p.micro_batch_seconds(rows)
    assert p.micro_batch_seconds([]) == 0


def test_groups_split_the_work_and_refuse_sizes_that_do_not_divide_the_world():
    p = planner(world=8)
    one, two = p.micro_batch_seconds([2], 1, 8), p.micro_batch_seconds([2], 2, 8)
    assert one / 2 < two < one  # compute halved, plus all-to-alls and a steeper ramp
    assert p.micro_batch_work([2], 2, 8) < p.micro_batch_seconds([2], 2, 8)
    # 8 ranks on a 12-head model: not a size the planner allows, still priced.
    assert p.micro_batch_seconds([2], 8, 8) > 0
    for g, w in [(3, 8), (16, 8), (0, 8), (4, 6)]:
        with pytest.raises(ValueError, match="group of"):
            p.micro_batch_seconds([2], g, w)
    with pytest.raises(IndexError):
        p.micro_batch_seconds([len(ROWS)])
