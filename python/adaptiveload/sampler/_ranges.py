"""The option ranges and names the sampler checks its arguments against, in one place.

They repeat the core's and the CLI's (planner.h, cli/plan_options.cpp); each is one
assignment here, so reading it from the extension (_C) instead is a one-line change. Every
other module of the package takes them from here, and the error texts that list them are
generated from them.
"""

MAX_WORLD_SIZE = 1 << 20
MAX_SEED = 2**64 - 1
MAX_INT64 = 2**63 - 1  # epochs and steps are int64 in the core
MAX_MEM_BUDGET = 10**15  # tokens
MAX_COMP_BUDGET = 1e300
MAX_STEP_SECONDS = 1e9  # the core's largest cost of one sample
MAX_SP_SIZE = 128  # the largest sequence-parallel group size

STRATEGIES = ("balanced", "dual", "equal_tokens", "fixed")
COST_MODELS = ("analytic", "power", "profile")
SHARDINGS = ("auto", "none", "fsdp")
SYNCS = ("auto", "step", "micro")
ON_BAD_ROW = ("error", "skip")
ON_OVERSIZE = ("error", "skip")
ON_DUPLICATE = ("warn", "skip", "error")
# The words of --global-batch and --sp; besides these, --sp takes a group size.
GLOBAL_BATCH_FORMS = ("auto", "free", "steps:N", "samples:N", "tokens:N")
SP_POLICIES = ("auto", "min", "per-sample", "off")


def words(names) -> str:
    """('a', 'b', 'c') -> 'a, b or c': a list of names as the error texts give it."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
