"""AdaptiveBatchSampler: the constructor, over the package's parts.

The options are checked in _options; the position and its iterators are _cursor's, the
online adaptation _adaptation's, the state format _state's, the introspection
_introspection's (mixins sharing the instance's attributes).
"""
import warnings
from collections.abc import Mapping
from typing import Any, Dict, List, Optional

from torch.utils.data import Sampler

from .. import _C
from .._manifest import load_manifest
from ._adaptation import _Adaptation
from ._cursor import _Cursor
from ._introspection import _Introspection
from ._options import WHERE, check_options
from ._state import _State


class AdaptiveBatchSampler(_Cursor, _Adaptation, _State, _Introspection, Sampler):
    """Yields this rank's micro-batches (lists of manifest row ids) in step order.

    manifest: CSV / JSONL path, list of paths, list of dicts or dict of columns
      (path, num_frames, height, width, fps; empty fps = image).
    model, device, grid: preset names (see presets/) or JSON files; grid None = the model
      preset's own grid (as the CLI's --grid); strategy: the name of a strategy in the core's
      registry (adaptiveload.sampler.strategies() lists them; 'balanced' by default).
    world_size, rank: default from torch.distributed when initialised, else 1 and 0;
      1 <= world_size <= 2**20 (the CLI's limit), 0 <= rank < world_size.
    seed: 0 <= seed < 2**64 (the CLI's --seed range).
    drop_last: the end-of-epoch policy: False pads the last step with repeats of early
      samples so every rank has work (flagged in padded_samples), True drops that step.
    drop_last, checkpointing: True / False, 1 / 0, or the CLI's words on/off, true/false,
      yes/no (any case); anything else raises.
    mem_budget: token budget per micro-batch (M_mem, a whole number up to 1e15), None = the
      largest that fits memory.
    comp_budget: compute budget (M_comp, S^p units, finite and > 0), None = automatic.
    on_bad_row: 'error' raises ValueError at the first bad manifest row, 'skip' leaves bad
      rows out (listed in `bad_rows`). on_oversize likewise for samples too big to fit.
    on_duplicate: rows whose path repeats an earlier row's (a clip listed twice, a manifest
      given twice): 'warn' (default) keeps them and warns, 'skip' keeps the first row of each
      path, 'error' raises ValueError naming both rows.
    profile: a calibrated cost profile file (cost_model defaults to 'profile' then).
    sharding: model state per GPU, as the CLI's --sharding: 'none' (DDP), 'fsdp' (sharded over
      the ranks), or 'auto' (fsdp when the unsharded state would take over half the memory).
    sync: how the training engine synchronises, as the CLI's --sync: 'step' (DDP, ZeRO-1: one
      gradient all-reduce per step; ranks may run different numbers of micro-batches),
      'micro' (FSDP, FSDP2, HSDP, ZeRO-2/3: collectives in every micro-batch, so every rank
      runs the same number of micro-batches in every step), or None: micro when the model
      state is sharded, else step. `sampler.sync` says which one the plan is for; a state
      saved for the other mode is refused. 'auto' is None.
    global_batch: the global batch every step keeps, as the CLI's --global-batch: None or
      'auto' (the step count of a bucket loader with the same memory budget), 'steps:N',
      'samples:N', 'tokens:N' (per global step), or 'free' (balanced picks its step count).
    sp: sequence parallelism, as the CLI's --sp: 'auto' (a sample that does not fit one GPU
      runs on a group of ranks: the smallest it fits, or larger where that shortens the
      epoch), 'min' (the smallest), 'per-sample' (groups tried even when every sample fits),
      'off', or a group size for every sample (4 or '4'). Each micro-batch
      of steps() / schedule() comes with its group's ranks (PlannedStep.groups).
    sp_sizes: allowed group sizes (powers of two; used where they divide the world size and
      the model's heads and fit in a node), e.g. (1, 2, 4, 8) or "1,2,4".
    packing: 'on' (or True) lets balanced put samples of any shapes in one micro-batch, a pack
      within the memory budget's tokens that the model trains as one varlen sequence
      (adaptiveload.packing.pack, varlen_attention); 'off' (default) plans micro-batches of one
      bucket. As the CLI's --packing.
    devices, rank_speeds: ranks that are not alike (docs/planner.md, "Unequal ranks"), as the
      CLI's --devices and --rank-speed: a device preset per rank ('h200:8,h100:8' in rank order,
      or a list) and known speed factors ({5: 0.7}); balanced deals each rank its share by
      speed, every micro-batch within its own device's memory. None: every rank `device`.
    adapt_every: online adaptation: after this many observed steps (observe_step), refit the
      cost model to the measured per-rank step times and re-plan the rest of the epoch with
      it. Every rank must observe the same times for the same steps (all-gathered; see
      gather_step_time), so every rank applies the same update at the same step.
    adapt: what the refit learns: 'all' (default), 'cost' (the cost model only) or 'speeds' (a
      speed factor per rank only: stragglers, docs/planner.md "Stragglers found online"). Speed
      factors move only when a rank is slower or faster than the others over several steps; each
      change is listed in `adaptations` (its step and {rank: factor}) and saved in state_dict().
    Every argument is checked before anything is planned: TypeError / ValueError naming it.
    """

    def __init__(
        self,
        manifest: Any,
        *,
        model: str = "wan2.1-1.3b",
        device: str = "h200",
        strategy: str = "balanced",
        world_size: Optional[int] = None,
        rank: Optional[int] = None,
        seed: int = 0,
        drop_last: bool = False,
        mem_budget: Optional[int] = None,
        comp_budget: Optional[float] = None,
        grid: Optional[str] = None,
        on_bad_row: str = "error",
        checkpointing: bool = True,
        profile: Optional[str] = None,
        cost_model: Optional[str] = None,
        on_oversize: str = "error",
        adapt_every: Optional[int] = None,
        sharding: str = "auto",
        sync: Optional[str] = None,
        global_batch: Optional[str] = None,
        sp: str = "auto",
        sp_sizes: Any = (1, 2, 4, 8),
        on_duplicate: str = "warn",
        packing: Any = "off",
        devices: Any = None,
        rank_speeds: Any = None,
        adapt: str = "all",
    ):
        # Sampler.__init__ takes data_source in torch 1.x and nothing in 2.x; it stores
        # nothing either way, so it is not called.
        # Every argument is checked before anything is planned; each error names it.
        o = check_options(
            model=model, device=device, strategy=strategy, world_size=world_size, rank=rank, seed=seed,
            drop_last=drop_last, mem_budget=mem_budget, comp_budget=comp_budget, grid=grid, on_bad_row=on_bad_row,
            checkpointing=checkpointing, profile=profile, cost_model=cost_model, on_oversize=on_oversize,
            adapt_every=adapt_every, sharding=sharding, sync=sync, global_batch=global_batch, sp=sp,
            sp_sizes=sp_sizes, on_duplicate=on_duplicate, packing=packing, devices=devices,
            rank_speeds=rank_speeds, adapt=adapt)
        self.world_size, self.rank, self.seed = o.world_size, o.rank, o.seed
        self.strategy, self.drop_last = o.strategy, o.drop_last
        self._options = o.planner
        self.adapt_every, self.adapt = o.adapt_every, o.adapt
        # ([(tokens, batch) or a pack's [(tokens, batch), ...], ...], seconds) per rank-step
        self._observations: List[tuple] = []
        self._observed_steps: set = set()  # global steps of the epoch observed so far
        self._observed_since = 0  # steps observed since the last re-plan
        self._speed_ratios: List[List[float]] = []  # per observed step, per rank: measured / predicted
        self.adaptations: List[Dict[str, Any]] = []  # {"step": ..., fit summary} per re-plan
        self._manifest = load_manifest(manifest, o.on_bad_row)
        # Rows repeating an earlier path train twice an epoch: said (warn), left out (skip) or
        # refused (error, a ValueError naming both rows); in Python's words (on_duplicate='skip').
        report = _C.apply_duplicate_policy(self._manifest, o.on_duplicate)
        if report:
            warnings.warn(WHERE + report.rstrip("\n"), stacklevel=2)
        if self._manifest.total_rows == 0 and (isinstance(manifest, Mapping) or manifest in ([], ())):
            raise ValueError(WHERE + "the manifest (an empty list or dict of columns) has no rows: nothing to plan")
        self._planners: Dict[int, "_C.Planner"] = {}
        self.epoch = 0
        self._generation = 0  # bumped when the position is reset; stale iterators stop
        self._moved: Dict[int, tuple] = {}  # generation -> why and where the position moved on
        self._start_epoch(0)
