"""Issue 51 on the Python side: a global batch larger than the whole epoch is a warning from
the sampler (the core's warning, as the CLI prints it), for every form and strategy, packing on
and off; packing with sequence-parallel groups asked for is refused naming the option;
examples/train_dit.py runs a packer once under --packing both; compare.md's paper row has as many
cells as its header and no table prints a negative zero."""
import warnings

import pytest

from adaptiveload import _C
from adaptiveload.sampler import AdaptiveBatchSampler
from adaptiveload.training import compare, train_dit

F = [1, 33, 81, 49, 17, 1, 65, 1]
H = [480, 720, 480, 256, 480, 720, 480, 1024]
W = [832, 1280, 640, 448, 832, 1280, 480, 1024]
ROWS = [dict(path=f"s{i}.mp4", num_frames=F[i % 8], height=H[i % 8], width=W[i % 8],
             fps=None if F[i % 8] == 1 else 16) for i in range(40)]
STRATEGIES = [s["name"] for s in _C.strategies()]


def planned_warnings(**kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = AdaptiveBatchSampler(ROWS, world_size=2, rank=0, seed=1, **kw)
        len(s)  # planned
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("packing", ["off", "on"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("batch", ["samples:1000", "tokens:100000000"])
def test_a_global_batch_larger_than_the_epoch_is_warned(batch, strategy, packing):
    msgs = planned_warnings(strategy=strategy, packing=packing, global_batch=batch)
    over = [m for m in msgs if "larger than the whole epoch" in m]
    assert over, msgs
    assert f"strategy '{strategy}'" in over[0] and f"({batch})" in over[0]


def test_a_global_batch_within_the_epoch_is_not_warned_so():
    msgs = planned_warnings(global_batch="samples:40")
    assert not [m for m in msgs if "larger than the whole epoch" in m], msgs


@pytest.mark.parametrize("sp", ["2", "per-sample"])
def test_packing_with_groups_asked_for_is_refused_naming_the_option(sp):
    # The option's value is named (how the option itself is spelled is the messages' own
    # rendering), not samples that would not fit one GPU.
    with pytest.raises(ValueError, match="asks for sequence-parallel groups") as e:
        len(AdaptiveBatchSampler(ROWS, world_size=4, rank=0, packing="on", sp=sp))
    assert sp in str(e.value) and "they do not fit one GPU" not in str(e.value)


def test_train_dit_runs_a_packer_once_under_packing_both():
    packers = sorted(train_dit.PACKING_STRATEGIES)
    assert packers, "no packer registered"
    runs = train_dit.planned_runs(",".join(["balanced"] + packers), train_dit.PACKINGS["both"], [False, True])
    assert len(runs) == len(set(runs))
    for p in packers:
        assert [r for r in runs if r[0] == p] == [(p, True, False), (p, True, True)]
    both = [("balanced", pk, fu) for pk in (False, True) for fu in (False, True)]
    assert [r for r in runs if r[0] == "balanced"] == both
    # --packing off and on: one run a kernel setting, as before.
    assert train_dit.planned_runs("greedy_pack", train_dit.PACKINGS["off"], [False]) == [("greedy_pack", False, False)]


def row(strategy, packing, imbalance=-1e-17):
    return {"strategy": strategy, "fused_adaln": False, "packing": packing, "imbalance": imbalance,
            "imbalance_predicted": -0.0, "throughput_samples_per_s": 1.0, "throughput_predicted": 1.0,
            "tokens_per_s": 10.0, "peak_memory_gb": None, "peak_memory_utilization": None,
            "speedup_vs_equal_tokens": 1.0, "speedup_vs_equal_tokens_eager": 1.0,
            "speedup_vs_bucketed": None if packing == "off" else 1.1, "speedup_vs_bucketed_predicted": 1.2}


@pytest.mark.parametrize("packed", [False, True])
def test_compare_markdown_rows_have_the_header_cells_and_no_negative_zero(packed):
    rows = [row("balanced", "off")] + ([row("balanced", "on")] if packed else [])
    md = compare.markdown(rows, "meta")
    table = [line for line in md.splitlines() if line.startswith("|")]
    cells = {line.count("|") for line in table}
    assert len(cells) == 1, table
    assert any(line.startswith("| paper") for line in table)
    assert "-0.0%" not in md and "0.0%" in md
    assert compare.percent(-1e-17) == "0.0%" and compare.percent(0.1234) == "12.3%"
