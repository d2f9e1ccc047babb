"""The sampler's position: the plan of the current epoch, the step and micro-batch it is
at, and the iterators that walk it (iter(sampler), steps(), schedule()).

A mixin of AdaptiveBatchSampler. It owns the attributes _planners, epoch, _budget_world,
_plan, _counts, _fingerprint, _layout, _segments, _speeds, _steps_before, _step, _offset, _restart,
_next_epoch, _generation and _moved; the constructor sets the options it reads (rank,
world_size, strategy, _options, _manifest) and the observations _apply resets.
"""
import numbers
import warnings
from typing import Any, Dict, Iterator, List, Optional

from .. import _C
from ._ranges import MAX_INT64
from ._step import PlannedStep


class _Cursor:
    """The plan and the position in it; iter(), steps() and schedule()."""

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
        # and mix) and samples dropped at the epoch's end (drop_last=True; all of them when there
        # are fewer than ranks: an epoch of 0 steps) are said, never silent, as the CLI says
        # them; the warnings module shows each once.
        for text in planner.warnings(plan) + [planner.drop_warning(plan)]:
            if text:
                warnings.warn(f"AdaptiveBatchSampler: {text}", stacklevel=3)
        self._apply(epoch, self.world_size, plan, first_step, st, 0, reason)

    def _prepare(self, planner: "_C.Planner", state_json: str, new_cost: str = "", new_speeds=()) -> tuple:
        """(plan, first_step, parsed state) continuing `state_json`; changes nothing."""
        plan, first_step, new_json = planner.resume(state_json, self.world_size, new_cost, list(new_speeds))
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
            self._speed_ratios = []
        self.epoch = epoch
        self._budget_world = budget_world
        self._plan = plan
        self._counts = plan.rank_counts(self.rank)
        self._fingerprint = st["fingerprint"]
        self._layout = st["layout"]  # how the epoch was laid out (1: a state saved before evened layouts)
        self._segments = [list(s) for s in st["segments"]]
        self._speeds = [list(f) for f in st["speeds"]]  # per segment its learned speed factors
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

    # --- iteration ----------------------------------------------------------------------

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

