"""The sampler's sync modes and global batch on the real manifests: micro-sync plans give
every rank the same number of micro-batches in every step (FSDP, ZeRO-2/3 join a collective
in each), the default follows sharding, states of the other mode are refused by name, and
the global batch sets the step count."""
import collections
import os

import pytest

from adaptiveload import AdaptiveBatchSampler
from conftest import DATASETS

MANIFEST = [os.path.join(DATASETS, "taichi_hd.csv"), os.path.join(DATASETS, "coco2017_val_images.csv")]


def ranks(world_size, **kw):
    return [AdaptiveBatchSampler(MANIFEST, world_size=world_size, rank=r, **kw) for r in range(world_size)]


@pytest.mark.parametrize("strategy", ["balanced", "dual", "equal_tokens", "fixed"])
@pytest.mark.parametrize("world_size", [2, 8])
def test_micro_sync_every_rank_same_micro_batch_count_and_every_sample_once(strategy, world_size):
    ss = ranks(world_size, strategy=strategy, sharding="fsdp", sync="micro")
    assert all(s.sync == "micro" for s in ss)
    per_rank = [list(s.steps()) for s in ss]
    assert len({len(p) for p in per_rank}) == 1
    for t, steps in enumerate(zip(*per_rank)):
        counts = {len(st.micro_batches) for st in steps}
        assert len(counts) == 1, f"step {t}: micro-batch counts per rank {[len(st.micro_batches) for st in steps]}"
    trained = collections.Counter(
        i for p in per_rank for st in p for mb, pad in zip(st.micro_batches, st.padded_micro_batches) if not pad
        for i in mb)
    assert set(trained) == set(ss[0].planned_rows()) - set(ss[0].dropped_rows)
    assert max(trained.values()) == 1


def test_sync_follows_sharding_and_can_be_set():
    assert AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="none").sync == "step"
    assert AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="fsdp").sync == "micro"
    assert AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="fsdp", sync="step").sync == "step"
    with pytest.raises(ValueError, match="sync"):
        AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sync="sometimes")
    with pytest.raises(ValueError, match="sharding"):
        AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="zero3")


def test_state_of_the_other_sync_mode_is_refused_by_name():
    micro = AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="fsdp", sync="micro")
    step = AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="fsdp", sync="step")
    it = iter(micro)
    next(it)
    state = micro.state_dict()
    with pytest.raises(ValueError, match="micro-sync plan"):
        step.load_state_dict(state)
    # The same mode resumes where it was.
    again = AdaptiveBatchSampler(MANIFEST, world_size=4, rank=0, sharding="fsdp", sync="micro")
    again.load_state_dict(state)
    assert next(iter(again)) == next(it)


def test_global_batch_sets_the_step_count_for_every_strategy():
    for strategy in ("balanced", "dual", "equal_tokens"):
        s = AdaptiveBatchSampler(MANIFEST, world_size=8, rank=0, strategy=strategy, global_batch="steps:40")
        assert s.num_steps == 40, strategy
        assert s.global_batch.startswith("steps:40")
    auto = [AdaptiveBatchSampler(MANIFEST, world_size=8, rank=0, strategy=n).num_steps
            for n in ("balanced", "dual", "equal_tokens")]
    assert len(set(auto)) == 1, auto  # auto: the step count of equal_tokens for all
    with pytest.raises(ValueError, match="global batch"):
        AdaptiveBatchSampler(MANIFEST, world_size=8, rank=0, global_batch="batches:3")
