"""AdaptiveBatchSampler: the planner's per-rank schedule as a torch batch_sampler.

One epoch is a plan (computed by the C++ core, a pure function of manifest, options, seed,
epoch and world size): a list of global steps; in each step every rank runs one or more
micro-batches (lists of manifest row ids). Every rank computes the same plan and takes its
own slice, so no communication is needed. Iterating the sampler yields this rank's
micro-batches in step order; `steps()` yields them grouped by step with the step's global
sample and token counts, which is what a training loop needs to accumulate gradients over
a rank's micro-batches and normalise the loss. See docs/python.md.
"""
# The package's parts, each with one job: _options (the arguments checked), _ranges (the
# option ranges and names), _cursor (the plan and the position in it, and the iterators),
# _adaptation (online refits), _state (state_dict / load_state_dict), _introspection, _step
# (PlannedStep) and _sampler (the class over them).
from ._adaptation import MIN_FIT_TOKEN_COUNTS, MIN_OBSERVATIONS
from ._ranges import (
    COST_MODELS,
    MAX_COMP_BUDGET,
    MAX_INT64,
    MAX_MEM_BUDGET,
    MAX_SEED,
    MAX_STEP_SECONDS,
    MAX_WORLD_SIZE,
    strategies,
)
from ._sampler import AdaptiveBatchSampler
from ._state import STATE_FORMAT, STATE_VERSION
from ._step import PlannedStep

__all__ = [
    "AdaptiveBatchSampler", "PlannedStep", "STATE_FORMAT", "STATE_VERSION", "MIN_OBSERVATIONS", "MIN_FIT_TOKEN_COUNTS",
    "MAX_WORLD_SIZE", "MAX_SEED", "MAX_INT64", "MAX_MEM_BUDGET", "MAX_COMP_BUDGET", "MAX_STEP_SECONDS", "COST_MODELS",
    "strategies",
]

# Their public home is this module: pickles, reprs and help() name them here.
AdaptiveBatchSampler.__module__ = PlannedStep.__module__ = __name__
