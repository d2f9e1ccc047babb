"""PlannedStep: one global step of the plan as one rank sees it (what steps() and
schedule() yield)."""
import dataclasses
from dataclasses import dataclass
from typing import List


@dataclass(frozen=True)
class PlannedStep:
    """One global step as seen by this rank."""

    epoch: int
    step: int  # index of the global step within the epoch (0-based, all segments counted)
    micro_batches: List[List[int]]  # this rank's, in order (the remaining ones after a mid-step resume)
    # Over all ranks, padded repeats excluded: what a trainer that skips the padded micro-batches
    # normalises its loss by (one that trains them too divides by global_samples + padded_samples).
    global_samples: int  # trained samples of the step
    global_tokens: int  # video tokens of those samples (for per-token loss normalisation)
    padded_samples: int  # repeats the end-of-epoch policy added to the step, beside global_samples
    # Per micro-batch of micro_batches: True when it is such a repeat (a trainer may skip or
    # down-weight it; the step's other ranks still run theirs, so skip its loss, not the step).
    padded_micro_batches: List[bool] = dataclasses.field(default_factory=list)
    # Per micro-batch of micro_batches: the global ranks of its sequence-parallel group, an
    # aligned block of consecutive ranks holding this one ((rank,) when it runs alone). Every
    # rank of the group lists the same micro-batch (same ids) at the same point; this rank's
    # position in the group is ranks.index(rank). Create the groups once with
    # sequence_parallel.new_sp_groups(world_size, sampler.sp_sizes()).
    groups: List[tuple] = dataclasses.field(default_factory=list)
