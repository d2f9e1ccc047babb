"""AdaptiveBatchSampler: the planner's per-rank schedule as a torch batch_sampler.

One epoch is a plan (computed by the C++ core, a pure function of manifest, options, seed,
epoch and world size): a list of global steps; in each step every rank runs one or more
micro-batches (lists of manifest row ids). Every rank computes the same plan and takes its
own slice, so no communication is needed. Iterating the sampler yields this rank's
micro-batches in step order; `steps()` yields them grouped by step with the step's global
sample and token counts, which is what a training loop needs to accumulate gradients over
a rank's micro-batches and normalise the loss. See docs/python.md.
"""
import dataclasses
import math
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch.utils.data import Sampler

from . import _C, _checks
from ._manifest import load_manifest

STATE_FORMAT = "adaptiveload-sampler"
STATE_VERSION = 1
MIN_OBSERVATIONS = 8  # rank-steps observed before the first refit
MIN_FIT_TOKEN_COUNTS = 3  # distinct token counts the cost fit needs (a*S + b*S^2 + c0)
# Ranges of the options, as the core and the CLI have them (planner.h, cli/plan_options.cpp).
MAX_WORLD_SIZE = 1 << 20
MAX_SEED = 2**64 - 1
MAX_INT64 = 2**63 - 1  # epochs and steps are int64 in the core
MAX_MEM_BUDGET = 10**15  # tokens
MAX_COMP_BUDGET = 1e300
MAX_STEP_SECONDS = 1e9  # the core's largest cost of one sample
COST_MODELS = ("analytic", "power", "profile")


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


def _whole(v: Any, where: str, lo: int, hi: int, hint: str) -> int:
    """A whole number given as an int or an integral float (4e4), in [lo, hi]."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return _checks.integer(v, where, lo, hi, hint)
    x = _checks.real(v, where, lo, hi, hint=hint)
    if not x.is_integer():
        raise ValueError(f"{where} must be a whole number in [{lo}, {hi}]{hint}, got {v!r}")
    return int(x)


def _dist_rank_world() -> (int, int):
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class AdaptiveBatchSampler(Sampler):
    """Yields this rank's micro-batches (lists of manifest row ids) in step order.

    manifest: CSV / JSONL path, list of paths, list of dicts or dict of columns
      (path, num_frames, height, width, fps; empty fps = image).
    model, device, grid: preset names (see presets/) or JSON files; grid None = the model
      preset's own grid (as the CLI's --grid); strategy: 'balanced', 'dual', 'equal_tokens'
      or 'fixed'.
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
      'off', or a group size for every sample ('4'). Each micro-batch
      of steps() / schedule() comes with its group's ranks (PlannedStep.groups).
    sp_sizes: allowed group sizes (powers of two; used where they divide the world size and
      the model's heads and fit in a node), e.g. (1, 2, 4, 8) or "1,2,4".
    adapt_every: online adaptation: after this many observed steps (observe_step), refit the
      cost model to the measured per-rank step times and re-plan the rest of the epoch with
      it. Every rank must observe the same times for the same steps (all-gathered; see
      gather_step_time), so every rank applies the same update at the same step.
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
    ):
        # Sampler.__init__ takes data_source in torch 1.x and nothing in 2.x; it stores
        # nothing either way, so it is not called.
        # Every argument is checked before anything is planned; each error names it.
        where = "AdaptiveBatchSampler: "
        dist_rank, dist_world = _dist_rank_world()
        self.world_size = _checks.integer(
            dist_world if world_size is None else world_size, where + "world_size", 1, MAX_WORLD_SIZE,
            " (ranks; the CLI's limit too)")
        self.rank = _checks.integer(dist_rank if rank is None else rank, where + "rank", 0, self.world_size - 1,
                                    f" (0 <= rank < world_size = {self.world_size})")
        self.seed = _checks.integer(seed, where + "seed", 0, MAX_SEED, " (0 <= seed < 2**64)")
        self.strategy = _checks.string(strategy, where + "strategy", "a strategy name (balanced, dual, "
                                       "equal_tokens, fixed)")
        if self.strategy == "all":
            raise ValueError(where + "strategy='all' compares strategies in `adaptiveload plan`; a sampler "
                             "runs one: balanced, dual, equal_tokens or fixed")
        self.drop_last = _checks.flag(drop_last, where + "drop_last")
        checkpointing = _checks.flag(checkpointing, where + "checkpointing")
        mem_tokens = 0 if mem_budget is None else _whole(mem_budget, where + "mem_budget", 1, MAX_MEM_BUDGET,
                                                          " (tokens per micro-batch, or None = auto)")
        comp = 0.0 if comp_budget is None else _checks.real(
            comp_budget, where + "comp_budget", 0.0, MAX_COMP_BUDGET, lo_open=True, hint=" (or None = auto)")
        _checks.choice(on_bad_row, where + "on_bad_row", ("error", "skip"))
        _checks.choice(on_oversize, where + "on_oversize", ("error", "skip"))
        _checks.choice(on_duplicate, where + "on_duplicate", ("warn", "skip", "error"))
        profile = _checks.optional_file(profile or None, where + "profile")
        if cost_model is not None:
            _checks.choice(cost_model, where + "cost_model", COST_MODELS)
            if cost_model == "profile" and profile is None:
                raise ValueError(where + "cost_model='profile' needs profile=<file from adaptiveload calibrate>")
        _checks.choice(sharding, where + "sharding", ("auto", "none", "fsdp"))
        if sync is not None:
            _checks.choice(sync, where + "sync", ("auto", "step", "micro"))
        if global_batch is not None:
            global_batch = _checks.string(global_batch, where + "global_batch",
                                          "auto, free, steps:N, samples:N or tokens:N")
        sp = _checks.string(sp, where + "sp", "auto, min, per-sample, off or a group size")
        if isinstance(sp_sizes, str):
            sp_sizes_text = sp_sizes
        else:
            try:
                sizes = [_checks.integer(g, where + "sp_sizes", 1, 128, " (powers of two)") for g in sp_sizes]
            except TypeError:
                raise TypeError(where + "sp_sizes must be a sequence of group sizes such as (1, 2, 4, 8), not "
                                + type(sp_sizes).__name__) from None
            if not sizes:
                raise ValueError(where + "sp_sizes is empty; give at least (1,)")
            sp_sizes_text = ",".join(str(g) for g in sizes)
        if adapt_every is not None:
            adapt_every = _checks.integer(adapt_every, where + "adapt_every", 1, MAX_INT64,
                                          " (steps between refits, or None = off)")
        self._options = dict(
            model=_checks.name_or_path(model, where + "model", "model preset"),
            device=_checks.name_or_path(device, where + "device", "device preset"),
            grid="" if grid is None else _checks.name_or_path(grid, where + "grid", "bucket grid preset"),
            cost_model=cost_model or ("profile" if profile else "analytic"),
            profile=profile or "",
            checkpointing=checkpointing,
            seed=self.seed,
            mem_budget_tokens=mem_tokens,
            comp_budget=comp,
            end_policy="drop" if self.drop_last else "pad",
            oversize=on_oversize,
            sharding=sharding,
            sync=sync or "auto",
            global_batch=global_batch or "auto",
            sp=sp,
            sp_sizes=sp_sizes_text,
        )
        self.adapt_every = adapt_every
        self._observations: List[tuple] = []  # ([(tokens, batch), ...], seconds) per rank-step
        self._observed_steps: set = set()  # global steps of the epoch observed so far
        self._observed_since = 0  # steps observed since the last re-plan
        self.adaptations: List[Dict[str, Any]] = []  # {"step": ..., fit summary} per re-plan
        self._manifest = load_manifest(manifest, on_bad_row)
        # Rows repeating an earlier path train twice an epoch: said (warn), left out (skip) or
        # refused (error, a ValueError naming both rows).
        report = _C.apply_duplicate_policy(self._manifest, on_duplicate)
        if report:
            warnings.warn(where + report.rstrip("\n").replace("--on-duplicate=", "on_duplicate="), stacklevel=2)
        if self._manifest.total_rows == 0 and (isinstance(manifest, Mapping) or manifest in ([], ())):
            raise ValueError(where + "the manifest (an empty list or dict of columns) has no rows: nothing to plan")
        self._planners: Dict[int, "_C.Planner"] = {}
        self.epoch = 0
        self._generation = 0  # bumped when the position is reset; stale iterators stop
        self._moved: Dict[int, tuple] = {}  # generation -> why and where the position moved on
        self._start_epoch(0)

    # --- planning ---------------------------------------------------------------------

    def _planner(self, budget_world_size: int) -> "_C.Planner":
        """The core planner whose budgets were resolved for `budget_world_size` ranks.

        The automatic compute budget is searched by simulating the configured world size, so
        a plan depends on the world size the budgets were resolved for. An epoch keeps the
        budgets of the world size it started with (the state's first segment), also after
        an elastic resume, so the steps already done replay exactly."""
        p = self._planners.get(budget_world_size)
        if p is None:
            cfg = _C.PlannerConfig()
            for k, v in self._options.items():
                setattr(cfg, k, v)
            cfg.world_size = budget_world_size
            p = self._planners[budget_world_size] = _C.Planner(self._manifest, cfg)
        return p

    def _start_epoch(self, epoch: int, reason: str = "") -> None:
        """Positions the sampler at the start of `epoch` (planned for the current world size).
        Plans first and changes the state only once that succeeded."""
        planner = self._planner(self.world_size)
        state = planner.initial_state(self.strategy, self.world_size, epoch)
        plan, first_step, st = self._prepare(planner, state)
        # A target the plan misses (the global batch's step count, balanced's per-step batch
        # and mix) is said, never silent; the warnings module shows each once.
        for text in planner.warnings(plan):
            warnings.warn(f"AdaptiveBatchSampler: {text}", stacklevel=3)
        self._apply(epoch, self.world_size, plan, first_step, st, 0, reason)

    def _prepare(self, planner: "_C.Planner", state_json: str, new_cost: str = "") -> tuple:
        """(plan, first_step, parsed state) continuing `state_json`; changes nothing."""
        plan, first_step, new_json = planner.resume(state_json, self.world_size, new_cost)
        return plan, int(first_step), _C.parse_state(new_json)

    def _apply(self, epoch: int, budget_world: int, plan: "_C.Plan", first_step: int, st: Dict[str, Any],
               offset: int, reason: str) -> None:
        """Makes a prepared plan the current position. `reason` (e.g. "set_epoch(3)") moves the
        position somewhere else: iterations still running then raise at their next step
        instead of ending quietly; "" continues them (a re-plan at the current step)."""
        self._next_epoch = None  # set again by load_state_dict of a finished epoch
        if reason:
            self._invalidate(reason)
            self._observations, self._observed_steps, self._observed_since = [], set(), 0
        self.epoch = epoch
        self._budget_world = budget_world
        self._plan = plan
        self._counts = plan.rank_counts(self.rank)
        self._fingerprint = st["fingerprint"]
        self._segments = [list(s) for s in st["segments"]]
        self._steps_before = sum(s[1] for s in self._segments[:-1])
        self._step = first_step
        self._offset = int(offset)
        self._restart = False  # True once an iteration reached the end: the next one restarts

    def _invalidate(self, reason: str) -> None:
        """Ends the current generation of iterators. Those that still had work raise at their
        next step, naming `reason`: an epoch is never cut short quietly."""
        running = hasattr(self, "_plan") and not self._restart and self._step < self._plan.num_steps
        where = f"at step {self.step} of {self.num_steps}" if hasattr(self, "_plan") else ""
        self._moved[self._generation] = (reason, self.epoch, where, len(self) if running else 0, running)
        self._generation += 1

    def _check_generation(self, gen: int, pending: Optional[bool] = None) -> bool:
        """True while iterators of generation `gen` may continue. False once the position
        moved; raises instead if the iterator still had work: iter() / steps() when the shared
        position was not at the end, schedule() when it had steps left (`pending`)."""
        if self._generation == gen:
            return True
        reason, epoch, where, left, running = self._moved[gen]
        if pending if pending is not None else running:
            what = "a schedule()" if pending is not None else "an iteration"
            lost = f"; {left} micro-batch(es) of rank {self.rank} were not handed out" if left else ""
            raise RuntimeError(
                f"AdaptiveBatchSampler: {reason} was called while {what} over epoch {epoch} was running "
                f"({where}{lost}), so it cannot continue. Call set_epoch() and load_state_dict() between "
                "iterations (before `for ... in sampler`, steps() or schedule()), then iterate again."
            )
        return False

    # --- epochs and positions -----------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration plans. The same epoch as the current one keeps
        the position (so set_epoch after load_state_dict resumes); another starts it afresh.
        Call it between iterations: an iteration still running when the epoch changes raises
        RuntimeError at its next step (its remaining micro-batches would be lost)."""
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
            raise TypeError(f"set_epoch: epoch must be an integer >= 0, got {type(epoch).__name__} {epoch!r}")
        if not 0 <= epoch <= MAX_INT64:
            raise ValueError(f"set_epoch: epoch must be >= 0 and < 2**63 (the core's int64), got {epoch}")
        epoch = int(epoch)
        if epoch != self.epoch:
            self._start_epoch(epoch, f"set_epoch({epoch})")

    @property
    def num_steps(self) -> int:
        """Global steps of the current epoch (the same on every rank; DDP runs in lockstep)."""
        return self._steps_before + self._plan.num_steps

    @property
    def step(self) -> int:
        """Index within the epoch of the next global step to run (num_steps at the end)."""
        return self._steps_before + self._step

    def __len__(self) -> int:
        """Micro-batches this rank yields in the next iteration: the whole epoch, or what is
        left of it after load_state_dict or a partial iteration. Ranks may differ (in
        `balanced` a rank runs several small micro-batches while another runs one long
        clip); every rank runs the same `num_steps`."""
        if self._restart:
            if len(self._segments) > 1:  # an elastic epoch restarts as a fresh plan
                plan = self._planner(self.world_size).plan(self.strategy, self.world_size, self.epoch)
                return sum(plan.rank_counts(self.rank))
            return sum(self._counts)
        return sum(self._counts[self._step:]) - self._offset

    def _begin_iteration(self) -> int:
        if self._restart and self._next_epoch is not None:
            self._start_epoch(self._next_epoch, "a new iteration")
        elif self._restart:
            if len(self._segments) > 1:
                self._start_epoch(self.epoch, "a new iteration")
            else:
                self._invalidate("a new iteration")
                self._step, self._offset, self._restart = 0, 0, False
        return self._generation

    # --- online adaptation ----------------------------------------------------------------

    @staticmethod
    def gather_step_time(seconds: float) -> List[float]:
        """This rank's compute seconds of a step -> every rank's, in rank order
        (torch.distributed.all_gather_object when initialised, else [seconds]). It never
        raises before the collective (a rank that raised would leave the others waiting in
        it): a value that is not a number is sent as NaN, which observe_step then rejects on
        every rank alike, naming this rank."""
        try:
            value = math.nan if isinstance(seconds, bool) else float(seconds)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several values
            value = math.nan
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            out = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(out, value)
            return [float(x) for x in out]
        return [value]

    def observe_step(self, step: int, rank_seconds: List[float]) -> Optional[Dict[str, Any]]:
        """Records the measured compute seconds of every rank in global step `step` (the
        same list on every rank, in rank order; a step that has run, each once). With
        adapt_every set, once that many steps are recorded (and at least MIN_OBSERVATIONS
        rank-steps at MIN_FIT_TOKEN_COUNTS token counts) and the position is at the step
        boundary after `step`, refits the cost model (a*S + b*S^2 + c0; overhead and
        small-batch efficiency kept from the planner's model) to every observation of the
        epoch and re-plans the rest of the epoch; returns the fit summary then, else None.
        A running steps() / iter() loop continues with the re-planned steps.

        Raises TypeError / ValueError (and records nothing) for a step outside the current
        plan, one not yet handed out or already observed, or a time that is not a finite
        number of seconds in (0, 1e9], naming the step and the rank: one bad measurement
        never reaches the fit. A refit the core cannot make is skipped with a RuntimeWarning
        (the measurements are kept for the next one)."""
        where = "observe_step"
        if self._plan.has_groups:
            # The refit models one GPU per micro-batch; a group's rank-step time mixes compute
            # split g ways with all-to-alls, which the fit does not separate yet.
            raise ValueError(f"{where}: online adaptation does not yet model sequence-parallel groups, and this "
                             f"plan has them; use adapt_every=None (or sp='off' where every sample fits one GPU)")
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"{where}: step must be an integer (a global step index), got {type(step).__name__} "
                            f"{step!r}")
        step = int(step)
        first, done = self._steps_before, self.step
        if not first <= step < min(done, self.num_steps):
            if first <= step < self.num_steps:
                why = f"step {step} has not been handed out yet (the next step is {done})"
            else:
                why = f"step {step} is not in the current plan (its steps are {first}..{self.num_steps - 1}"
                why += ", the earlier ones before a re-plan)" if first else ")"
            raise ValueError(f"{where}: {why}; pass a step that ran, after running it")
        if step in self._observed_steps:
            raise ValueError(f"{where}: step {step} was already observed in this epoch; observe each step once")
        where = f"observe_step(step={step})"
        if isinstance(rank_seconds, (str, bytes)) or not hasattr(rank_seconds, "__len__"):
            raise TypeError(f"{where}: rank_seconds must be a list of {self.world_size} numbers (every rank's "
                            f"seconds, see gather_step_time), got {type(rank_seconds).__name__}")
        times = rank_seconds.tolist() if hasattr(rank_seconds, "tolist") else list(rank_seconds)
        if len(times) != self.world_size:
            raise ValueError(f"{where}: rank_seconds must hold one time per rank, {self.world_size}, "
                             f"got {len(times)}")
        secs = [
            _checks.real(v, f"{where}: rank {r}'s compute seconds", 0.0, MAX_STEP_SECONDS, lo_open=True,
                         hint=" (a measured time; an invalid one is rejected rather than fitted)")
            for r, v in enumerate(times)
        ]
        t = step - self._steps_before
        planner = self._planner(self._budget_world)
        new = []
        for r, sec in enumerate(secs):
            mbs = [(planner.row_geometry(mb[0])[3], len(mb)) for mb in self._plan.rank_step(t, r)]
            new.append((mbs, sec))
        observations = self._observations + new
        # Nothing has changed so far; from here the observation counts as recorded.
        self._observations = observations
        self._observed_steps.add(step)
        self._observed_since += 1
        if not self.adapt_every or self._observed_since < self.adapt_every:
            return None
        if len(observations) < MIN_OBSERVATIONS:
            return None  # a few rank-steps cannot pin the model down yet
        if len({S for mbs, _ in observations for S, _ in mbs}) < MIN_FIT_TOKEN_COUNTS:
            return None  # three coefficients need three token counts: wait for more buckets
        if self._step != t + 1 or self._offset != 0 or self._step >= self._plan.num_steps:
            return None  # adapt only at the boundary right after the observed step, before the end
        # The overhead and small-batch efficiency stay the planner's: only how cost grows with
        # S (a, b, c0) is refitted, which a few steps of mixed buckets do determine.
        try:
            cost, summary = _C.fit_observations(observations, planner.cost_overhead_s,
                                                planner.cost_half_efficiency_tokens)
            plan, first_step, st = self._prepare(planner, self.state_dict()["core"], cost)
        except ValueError as e:
            # The measurements are valid and kept; only this refit is skipped, and the next
            # one (after adapt_every more steps) uses them with the new ones.
            self._observed_since = 0
            warnings.warn(f"{where}: online adaptation skipped the refit after step {step} "
                          f"({len(observations)} rank-step observations), the plan is unchanged: {e}",
                          RuntimeWarning, stacklevel=2)
            return None
        self._apply(self.epoch, self._budget_world, plan, first_step, st, 0, "")
        summary = dict(summary, step=step + 1)
        self.adaptations.append(summary)
        self._observed_since = 0  # the fit keeps every observation of the epoch
        return summary

    def _groups(self, plan: "_C.Plan", t: int, rank: int) -> List[tuple]:
        out = []
        for g in plan.rank_step_groups(t, rank):
            first = rank - rank % g
            out.append(tuple(range(first, first + g)))
        return out

    def _step_info(self, t: int, offset: int) -> PlannedStep:
        samples, tokens, padded = self._plan.step_info(t)
        return PlannedStep(self.epoch, self._steps_before + t, self._plan.rank_step(t, self.rank)[offset:], samples,
                           tokens, padded, self._plan.rank_step_padded(t, self.rank)[offset:],
                           self._groups(self._plan, t, self.rank)[offset:])

    # iter(sampler) and steps() start (or restart) the iteration when called, not at the
    # first next(), so state_dict() right after them is exact. They read the current plan at
    # every step, so a re-plan by observe_step continues them; set_epoch / load_state_dict
    # during them make them raise (see _invalidate).

    def __iter__(self) -> Iterator[List[int]]:
        return self._micro_batches(self._begin_iteration())

    def _micro_batches(self, gen: int) -> Iterator[List[int]]:
        while self._check_generation(gen):
            plan = self._plan
            if self._step >= plan.num_steps:
                self._restart = True
                return
            t = self._step
            mbs = plan.rank_step(t, self.rank)
            if self._offset >= len(mbs):
                self._step, self._offset = t + 1, 0
                continue
            mb = mbs[self._offset]
            # The position counts a micro-batch as done once it is handed out.
            self._offset += 1
            if self._offset >= len(mbs):
                self._step, self._offset = t + 1, 0
            if self._step >= plan.num_steps:
                self._restart = True
            yield mb

    def steps(self) -> Iterator[PlannedStep]:
        """Per global step: this rank's micro-batches plus the step's global sample and token
        counts, for a loop that loads its own data. A step counts as done once it is handed
        out (checkpoint inside the loop body, after the optimizer step). Shares the position
        with iter(sampler): use one or the other."""
        return self._steps(self._begin_iteration())

    def _steps(self, gen: int) -> Iterator[PlannedStep]:
        while self._check_generation(gen):
            plan = self._plan
            if self._step >= plan.num_steps:
                self._restart = True
                return
            t, offset = self._step, self._offset
            info = self._step_info(t, offset)
            self._step, self._offset = t + 1, 0
            if self._step >= plan.num_steps:
                self._restart = True
            yield info

    def schedule(self) -> Iterator[PlannedStep]:
        """The steps the next iteration will yield, as steps() would give them, without moving
        the position: for a DataLoader(batch_sampler=sampler) loop, which pulls micro-batches
        through iter(sampler) (and, with workers, ahead of training). Call it before
        iter(loader); take len(step.micro_batches) batches from the loader per step, and
        checkpoint with state_dict(step=step.step + 1). It follows a re-plan by observe_step
        from the step the re-plan starts at, and raises if set_epoch / load_state_dict move
        the position while it still has steps to give."""
        if self._restart:
            self._begin_iteration()
        gen, rank, epoch = self._generation, self.rank, self.epoch
        plan0, before0, first, offset0 = self._plan, self._steps_before, self.step, self._offset

        def steps():
            plan, before = plan0, before0
            g, offset = first, offset0  # the next global step and its first micro-batch
            while self._check_generation(gen, pending=g < before + plan.num_steps):
                if self._plan is not plan and g >= self._steps_before:
                    plan, before = self._plan, self._steps_before  # re-planned from step `before`
                t = g - before
                if t >= plan.num_steps:
                    return
                mbs, flags = plan.rank_step(t, rank), plan.rank_step_padded(t, rank)
                samples, tokens, padded = plan.step_info(t)
                yield PlannedStep(epoch, g, mbs[offset:], samples, tokens, padded, flags[offset:],
                                  self._groups(plan, t, rank)[offset:])
                g, offset = g + 1, 0

        return steps()

    # --- state --------------------------------------------------------------------------

    def state_dict(self, step: Optional[int] = None) -> Dict[str, Any]:
        """The position as a small, versioned dict (torchdata's Stateful protocol).

        "core" is the C++ planner's state JSON (epoch, seed, fingerprint of manifest and
        options, and (world size, steps done) per world size the epoch ran under);
        "step_offset" is how many of this rank's micro-batches of the next step were already
        handed out (0 at a step boundary). `step`: the state at the start of that global
        step of the current epoch instead of the current position (useful when DataLoader
        workers prefetch ahead of training)."""
        segs = [list(s) for s in self._segments]
        offset = self._offset
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, numbers.Integral):
                raise TypeError(f"state_dict: step must be an integer (a global step index) or None, "
                                f"got {type(step).__name__} {step!r}")
            done = int(step) - self._steps_before
            if not 0 <= done <= self._plan.num_steps:
                raise ValueError(
                    f"state_dict(step={step}): step must be in [{self._steps_before}, {self.num_steps}] "
                    "(the steps of the current world size's segment of this epoch)"
                )
            segs[-1][1], offset = done, 0
        else:
            segs[-1][1] = self._step
        core = _C.dump_state(self.strategy, self._fingerprint, self.seed, self.epoch, [tuple(s) for s in segs],
                             self.sync)
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "core": core,
            "world_size": self.world_size,
            "rank": self.rank,
            "step_offset": offset,
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restores a position saved by state_dict(). With the same world size, the next
        iteration yields exactly the remaining micro-batches. With another world size
        (elastic), the samples not yet trained are planned anew for it: none lost, none
        repeated (a step that was only partly handed out is planned again, as its optimizer
        step never ran). A state saved at the end of epoch e leaves nothing to iterate; the
        iteration after that one repeats epoch e, or runs the later epoch set_epoch() had
        chosen before the load (set_epoch after the load starts it at once). Raises ValueError for a corrupted state or one saved for
        another manifest, options, strategy or seed."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not an adaptiveload sampler state (no 'format': {STATE_FORMAT!r})")
        if isinstance(state.get("version"), bool) or state.get("version") != STATE_VERSION:
            raise ValueError(
                f"sampler state version {state.get('version')!r} is not supported (this build reads {STATE_VERSION})"
            )
        core, offset = state.get("core"), state.get("step_offset", 0)
        saved_world, saved_rank = state.get("world_size"), state.get("rank")
        if not isinstance(core, str):
            raise ValueError("sampler state: 'core' must be the planner's state JSON string")
        for name, v in (("step_offset", offset), ("world_size", saved_world), ("rank", saved_rank)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"sampler state: {name!r} must be a non-negative integer, got {v!r}")
        if not 1 <= saved_world <= MAX_WORLD_SIZE or saved_rank >= saved_world:
            raise ValueError(f"sampler state: world_size {saved_world} and rank {saved_rank} must satisfy "
                             f"0 <= rank < world_size <= {MAX_WORLD_SIZE}")
        st = _C.parse_state(core)  # ValueError if corrupted
        if st["sync"] != self.sync:
            raise ValueError(
                f"sampler state was saved for a {st['sync']}-sync plan, this sampler plans for {self.sync} sync "
                "(sync='step': DDP, ZeRO-1; 'micro': FSDP, ZeRO-2/3); use the sync (and sharding) it was saved with"
            )
        if st["strategy"] != self.strategy:
            raise ValueError(
                f"sampler state was saved for strategy {st['strategy']!r}, this sampler runs {self.strategy!r}"
            )
        last_world = st["segments"][-1][0]
        if last_world != saved_world:
            raise ValueError(
                f"sampler state is inconsistent: world_size {saved_world} but the core state says {last_world}"
            )
        if last_world != self.world_size:
            offset = 0  # elastic: the partly handed-out step is planned again
        elif offset and saved_rank != self.rank:
            raise ValueError(
                f"sampler state was saved mid-step by rank {saved_rank} and cannot position rank {self.rank}; "
                "save each rank's own state, or save at a step boundary"
            )
        # Plan the restored position completely before changing anything: a state that
        # fails here leaves the sampler where it was.
        first_world = int(st["segments"][0][0])
        plan, first_step, new_st = self._prepare(self._planner(first_world), core)
        count = plan.rank_counts(self.rank)[first_step] if first_step < plan.num_steps else 0
        if offset > count or (offset and offset == count):
            raise ValueError(
                f"sampler state: step_offset {offset} is not inside the step (rank {self.rank} has {count} "
                "micro-batches in it)"
            )
        # A state that finished an earlier epoch than the one set_epoch() chose: nothing is
        # left to iterate, and the iteration after that runs the chosen epoch. torchdata's
        # StatefulDataLoader restores the state at the first iter(loader) after
        # load_state_dict, i.e. after the loop's set_epoch(next epoch), and primes its
        # prefetch from the restored position before it starts the next epoch.
        finished = first_step >= plan.num_steps and not offset
        later = self.epoch if finished and int(st["epoch"]) < self.epoch else None
        self._apply(int(st["epoch"]), first_world, plan, first_step, new_st, offset, "load_state_dict()")
        self._next_epoch = later

    # --- introspection ------------------------------------------------------------------

    @property
    def bad_rows(self) -> List[str]:
        """Messages of the manifest rows left out (on_bad_row='skip')."""
        return list(self._manifest.bad_rows)

    @property
    def total_rows(self) -> int:
        """Rows of the manifest (row ids are 0..total_rows-1)."""
        return self._manifest.total_rows

    def planned_rows(self) -> List[int]:
        """Row ids every epoch covers exactly once (up to the end-of-epoch policy): usable
        rows that fit a bucket and are not oversize, ascending."""
        return self._planner(self.world_size).planned_rows()

    @property
    def dropped_rows(self) -> List[int]:
        """Rows the current epoch's plan drops at its end (drop_last=True), not trained."""
        return list(self._plan.dropped)

    @property
    def left_out(self) -> List[tuple]:
        """(row, reason) of usable rows the plan leaves out: they fit no bucket, or are
        oversize under on_oversize='skip'. Never silent: listed here."""
        return list(self._planner(self.world_size).left_out)

    @property
    def budgets(self) -> Dict[str, float]:
        """Budgets the planner resolved for this world size (tokens, S^p units, seconds)."""
        p = self._planner(self.world_size)
        return {
            "mem_budget_tokens": p.mem_budget_tokens,
            "comp_budget": p.comp_budget,
            "p": p.p,
            "step_budget_s": p.step_budget_s,
            "allreduce_s": p.allreduce_s(self.world_size),
            "slot_comm_s": p.slot_comm_s(self.world_size),
        }

    def sp_sizes(self) -> List[int]:
        """Sequence-parallel group sizes this sampler's plans may use on its world size (1
        always): pass them to sequence_parallel.new_sp_groups once, on every rank."""
        return list(self._planner(self._budget_world).allowed_groups(self.world_size))

    @property
    def sync(self) -> str:
        """'step' or 'micro': the sync mode the plan is for (every rank runs the same number
        of micro-batches in every step in 'micro')."""
        return self._planner(self.world_size).sync

    @property
    def global_batch(self) -> str:
        """The global batch the plan keeps, as resolved (e.g. 'steps:113 (auto: ...)')."""
        return self._planner(self.world_size).global_batch

    def sample_geometry(self, row: int) -> tuple:
        """(frames, height, width) of the bucket a manifest row trains at (latents are
        [16, 1 + (frames - 1) / 4, height / 8, width / 8] for Wan's VAE)."""
        if self.total_rows == 0:
            raise ValueError("sample_geometry: the manifest has no rows")
        row = _checks.integer(row, "sample_geometry: row", 0, self.total_rows - 1, " (a manifest row id)")
        return tuple(self._planner(self.world_size).row_geometry(row)[:3])

    def predicted_rank_times(self) -> List[List[float]]:
        """The planner's predicted compute seconds of every rank in every step of the current
        plan, [steps][world_size] (for comparing the cost model with measurements)."""
        return self._planner(self.world_size).rank_times(self._plan)

    def __repr__(self) -> str:
        if not hasattr(self, "_plan"):
            return "AdaptiveBatchSampler(<not initialised>)"
        return (
            f"AdaptiveBatchSampler(strategy={self.strategy!r}, rows={self.total_rows}, rank={self.rank}, "
            f"world_size={self.world_size}, epoch={self.epoch}, steps={self.num_steps}, step={self.step})"
        )
