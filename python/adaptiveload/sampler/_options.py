"""The sampler's arguments checked and turned into the planner's options.

Every argument of AdaptiveBatchSampler is checked here, in the order the constructor lists
them, before anything is planned: each TypeError / ValueError names the argument. The
allowed ranges and names come from _ranges.
"""
import numbers
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from .. import _checks
from ._ranges import (
    ADAPT_KINDS,
    COST_MODELS,
    GLOBAL_BATCH_FORMS,
    MAX_COMP_BUDGET,
    MAX_INT64,
    MAX_MEM_BUDGET,
    MAX_SEED,
    MAX_SP_SIZE,
    MAX_WORLD_SIZE,
    ON_BAD_ROW,
    ON_DUPLICATE,
    ON_OVERSIZE,
    PACKINGS,
    SHARDINGS,
    SP_POLICIES,
    SYNCS,
    strategies,
    words,
)

WHERE = "AdaptiveBatchSampler: "  # the prefix of the constructor's errors and warnings


@dataclass(frozen=True)
class Options:
    """The checked arguments: what the sampler keeps, and the planner's configuration."""

    world_size: int
    rank: int
    seed: int
    strategy: str
    drop_last: bool
    adapt_every: Optional[int]
    adapt: str
    on_bad_row: str
    on_duplicate: str
    planner: Dict[str, Any]  # _C.PlannerConfig fields (world_size set per planner)


def _whole(v: Any, where: str, lo: int, hi: int, hint: str) -> int:
    """A whole number given as an int or an integral float (4e4), in [lo, hi]."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return _checks.integer(v, where, lo, hi, hint)
    x = _checks.real(v, where, lo, hi, hint=hint)
    if not x.is_integer():
        raise ValueError(f"{where} must be a whole number in [{lo}, {hi}]{hint}, got {v!r}")
    return int(x)


def _dist_rank_world() -> Tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _sp_sizes_text(sp_sizes: Any) -> str:
    """The allowed group sizes as the core reads them ("1,2,4"): a string as given, else a
    non-empty sequence of group sizes."""
    where = WHERE
    if isinstance(sp_sizes, str):
        return sp_sizes
    try:
        sizes = [_checks.integer(g, where + "sp_sizes", 1, MAX_SP_SIZE, " (powers of two)") for g in sp_sizes]
    except TypeError:
        raise TypeError(where + "sp_sizes must be a sequence of group sizes such as (1, 2, 4, 8), not "
                        + type(sp_sizes).__name__) from None
    if not sizes:
        raise ValueError(where + "sp_sizes is empty; give at least (1,)")
    return ",".join(str(g) for g in sizes)


def _devices_text(devices, name: str) -> str:
    """devices= as the core reads it: None -> "" (every rank `device`), "h200:8,h100:8" as is, or a
    list of presets, one a rank. The core checks the names and the count (naming devices=)."""
    if devices is None or isinstance(devices, str):
        return devices or ""
    try:
        return ",".join(_checks.string(d, name, "a device preset name") for d in devices)
    except TypeError:
        raise TypeError(name + " must be a string such as 'h200:8,h100:8' or a list of device presets, not "
                        + type(devices).__name__) from None


def _rank_speeds_text(speeds, name: str) -> str:
    """rank_speeds= as the core reads it: None -> "", {5: 0.7, 12: 0.9} -> "5=0.7,12=0.9", or that
    string as is. The core checks the ranks and factors (naming rank_speeds=)."""
    if speeds is None or isinstance(speeds, str):
        return speeds or ""
    if not isinstance(speeds, dict):
        raise TypeError(name + " must be a dict {rank: speed factor} such as {5: 0.7}, not " + type(speeds).__name__)
    pairs = []
    for r, f in speeds.items():
        rank = _checks.integer(r, name, 0, MAX_WORLD_SIZE - 1, " (a rank)")
        pairs.append(f"{rank}={_checks.real(f, name, 0.0, 100.0, lo_open=True, hint=' (a speed factor)')!r}")
    return ",".join(pairs)


def check_options(*, model, device, strategy, world_size, rank, seed, drop_last, mem_budget, comp_budget, grid,
                  on_bad_row, checkpointing, profile, cost_model, on_oversize, adapt_every, sharding, sync,
                  global_batch, sp, sp_sizes, on_duplicate, packing="off", devices=None, rank_speeds=None,
                  adapt="all") -> Options:
    """AdaptiveBatchSampler's keyword arguments (see its docstring) -> Options, or the
    TypeError / ValueError / FileNotFoundError of the first bad one."""
    where = WHERE
    dist_rank, dist_world = _dist_rank_world()
    world_size = _checks.integer(
        dist_world if world_size is None else world_size, where + "world_size", 1, MAX_WORLD_SIZE,
        " (ranks; the CLI's limit too)")
    rank = _checks.integer(dist_rank if rank is None else rank, where + "rank", 0, world_size - 1,
                           f" (0 <= rank < world_size = {world_size})")
    seed = _checks.integer(seed, where + "seed", 0, MAX_SEED, " (0 <= seed < 2**64)")
    names = strategies()
    strategy = _checks.string(strategy, where + "strategy", f"a strategy name ({', '.join(names)})")
    if strategy == "all":
        raise ValueError(where + "strategy='all' compares strategies in `adaptiveload plan`; a sampler "
                         f"runs one: {words(names)}")
    drop_last = _checks.flag(drop_last, where + "drop_last")
    checkpointing = _checks.flag(checkpointing, where + "checkpointing")
    mem_tokens = 0 if mem_budget is None else _whole(mem_budget, where + "mem_budget", 1, MAX_MEM_BUDGET,
                                                      " (tokens per micro-batch, or None = auto)")
    comp = 0.0 if comp_budget is None else _checks.real(
        comp_budget, where + "comp_budget", 0.0, MAX_COMP_BUDGET, lo_open=True, hint=" (or None = auto)")
    _checks.choice(on_bad_row, where + "on_bad_row", ON_BAD_ROW)
    _checks.choice(on_oversize, where + "on_oversize", ON_OVERSIZE)
    _checks.choice(on_duplicate, where + "on_duplicate", ON_DUPLICATE)
    if isinstance(packing, bool):  # packing=True / False as well as "on" / "off"
        packing = "on" if packing else "off"
    _checks.choice(packing, where + "packing", PACKINGS)
    profile = _checks.optional_file(profile or None, where + "profile")
    if cost_model is not None:
        _checks.choice(cost_model, where + "cost_model", COST_MODELS)
        if cost_model == "profile" and profile is None:
            raise ValueError(where + "cost_model='profile' needs profile=<file from adaptiveload calibrate>")
    _checks.choice(sharding, where + "sharding", SHARDINGS)
    if sync is not None:
        _checks.choice(sync, where + "sync", SYNCS)
    if global_batch is not None:
        global_batch = _checks.string(global_batch, where + "global_batch", words(GLOBAL_BATCH_FORMS))
    if isinstance(sp, int) and not isinstance(sp, bool):  # sp=2 as well as "2": a group size
        sp = str(sp)
    sp = _checks.string(sp, where + "sp", words(SP_POLICIES + ("a group size",)))
    sp_sizes_text = _sp_sizes_text(sp_sizes)
    if adapt_every is not None:
        adapt_every = _checks.integer(adapt_every, where + "adapt_every", 1, MAX_INT64,
                                      " (steps between refits, or None = off)")
    _checks.choice(adapt, where + "adapt", ADAPT_KINDS)
    planner = dict(
        model=_checks.name_or_path(model, where + "model", "model preset"),
        device=_checks.name_or_path(device, where + "device", "device preset"),
        grid="" if grid is None else _checks.name_or_path(grid, where + "grid", "bucket grid preset"),
        cost_model=cost_model or ("profile" if profile else "analytic"),
        profile=profile or "",
        checkpointing=checkpointing,
        seed=seed,
        mem_budget_tokens=mem_tokens,
        comp_budget=comp,
        end_policy="drop" if drop_last else "pad",
        oversize=on_oversize,
        sharding=sharding,
        sync=sync or "auto",
        global_batch=global_batch or "auto",
        sp=sp,
        sp_sizes=sp_sizes_text,
        packing=packing,
        devices=_devices_text(devices, where + "devices"),
        rank_speed=_rank_speeds_text(rank_speeds, where + "rank_speeds"),
    )
    return Options(world_size, rank, seed, strategy, drop_last, adapt_every, adapt, on_bad_row, on_duplicate, planner)
