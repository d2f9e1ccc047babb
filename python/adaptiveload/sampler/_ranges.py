"""The option ranges and names the sampler checks its arguments against, read from the core:
the bounds and choices from _C.option_ranges() (src/adaptiveload/planner/option_ranges.h, the
table the Planner's checks and the CLI read too), the strategy names from the registry
(_C.strategies()). Every other module of the package takes them from here, and the error
texts that list them are generated from them.
"""
from .. import _C

_RANGES = _C.option_ranges()

MAX_WORLD_SIZE = _RANGES["world_size"]["max"]
MAX_SEED = _RANGES["seed"]["max"]
MAX_INT64 = _RANGES["epoch"]["max"]  # epochs and steps are int64 in the core
MAX_MEM_BUDGET = _RANGES["mem_budget_tokens"]["max"]  # tokens
MAX_COMP_BUDGET = _RANGES["comp_budget"]["max"]
MAX_STEP_SECONDS = _RANGES["step_budget_s"]["max"]  # the core's largest cost of one sample
MAX_SP_SIZE = _RANGES["sp_sizes"]["max"]  # the largest sequence-parallel group size

COST_MODELS = tuple(_RANGES["cost_model"]["choices"])
SHARDINGS = tuple(_RANGES["sharding"]["choices"])
SYNCS = tuple(_RANGES["sync"]["choices"])
ON_BAD_ROW = tuple(_RANGES["on_bad_row"]["choices"])
ON_OVERSIZE = tuple(_RANGES["on_oversize"]["choices"])
ON_DUPLICATE = tuple(_RANGES["on_duplicate"]["choices"])
PACKINGS = tuple(_RANGES["packing"]["choices"])
# The words of --global-batch and --sp, which the core parses as text (planner/config.cpp);
# besides these, --sp takes a group size.
GLOBAL_BATCH_FORMS = ("auto", "free", "steps:N", "samples:N", "tokens:N")
SP_POLICIES = ("auto", "min", "per-sample", "off")
# What online adaptation (adapt_every) refits: the cost model, the ranks' speed factors, or both.
# A sampler-only option (the planner takes its results, not the word).
ADAPT_KINDS = ("all", "cost", "speeds")


def strategies() -> tuple:
    """The registered strategies' names, sorted: read from the registry at each call, so a
    strategy registered in the core is one the sampler accepts."""
    return tuple(sorted(s["name"] for s in _C.strategies()))


def words(names) -> str:
    """('a', 'b', 'c') -> 'a, b or c': a list of names as the error texts give it."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
