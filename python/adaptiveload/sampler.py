"""AdaptiveBatchSampler: the planner's per-rank schedule as a torch batch_sampler.

One epoch is a plan (computed by the C++ core, a pure function of manifest, options, seed,
epoch and world size): a list of global steps; in each step every rank runs one or more
micro-batches (lists of manifest row ids). Every rank computes the same plan and takes its
own slice, so no communication is needed. Iterating the sampler yields this rank's
micro-batches in step order; `steps()` yields them grouped by step with the step's global
sample and token counts, which is what a training loop needs to accumulate gradients over
a rank's micro-batches and normalise the loss. See docs/python.md.
"""
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch.utils.data import Sampler

from . import _C
from ._manifest import load_manifest

STATE_FORMAT = "adaptiveload-sampler"
STATE_VERSION = 1
MIN_OBSERVATIONS = 8  # rank-steps observed before the first refit


@dataclass(frozen=True)
class PlannedStep:
    """One global step as seen by this rank."""

    epoch: int
    step: int  # index of the global step within the epoch (0-based, all segments counted)
    micro_batches: List[List[int]]  # this rank's, in order (the remaining ones after a mid-step resume)
    global_samples: int  # samples of the step over all ranks, padded repeats included
    global_tokens: int  # video tokens of those samples (for per-token loss normalisation)
    padded_samples: int  # of global_samples, repeats added by the end-of-epoch policy


def _dist_rank_world() -> (int, int):
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class AdaptiveBatchSampler(Sampler):
    """Yields this rank's micro-batches (lists of manifest row ids) in step order.

    manifest: CSV / JSONL path, list of paths, list of dicts or dict of columns
      (path, num_frames, height, width, fps; empty fps = image).
    model, device, grid: preset names (see presets/); strategy: 'balanced', 'dual',
      'equal_tokens' or 'fixed'.
    world_size, rank: default from torch.distributed when initialised, else 1 and 0.
    drop_last: the end-of-epoch policy: False pads the last step with repeats of early
      samples so every rank has work (flagged in padded_samples), True drops that step.
    mem_budget: token budget per micro-batch (M_mem), None = the largest that fits memory.
    comp_budget: compute budget (M_comp, S^p units), None = automatic.
    on_bad_row: 'error' raises ValueError at the first bad manifest row, 'skip' leaves bad
      rows out (listed in `bad_rows`). on_oversize likewise for samples too big to fit.
    profile: a calibrated cost profile file (cost_model defaults to 'profile' then).
    adapt_every: online adaptation: after this many observed steps (observe_step), refit the
      cost model to the measured per-rank step times and re-plan the rest of the epoch with
      it. Every rank must observe the same times for the same steps (all-gathered; see
      gather_step_time), so every rank applies the same update at the same step.
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
        grid: str = "wan",
        on_bad_row: str = "error",
        checkpointing: bool = True,
        profile: Optional[str] = None,
        cost_model: Optional[str] = None,
        on_oversize: str = "error",
        adapt_every: Optional[int] = None,
    ):
        super().__init__(None)
        dist_rank, dist_world = _dist_rank_world()
        self.world_size = int(dist_world if world_size is None else world_size)
        self.rank = int(dist_rank if rank is None else rank)
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, world_size) = [0, {self.world_size}), got {self.rank}")
        if int(seed) < 0 or int(seed) >= 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        if mem_budget is not None and int(mem_budget) < 1:
            raise ValueError(f"mem_budget must be a positive number of tokens or None (auto), got {mem_budget}")
        if comp_budget is not None and not float(comp_budget) > 0:
            raise ValueError(f"comp_budget must be positive or None (auto), got {comp_budget}")
        if on_oversize not in ("error", "skip"):
            raise ValueError(f"on_oversize must be 'error' or 'skip', got {on_oversize!r}")
        self.strategy = strategy
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self._options = dict(
            model=model,
            device=device,
            grid=grid,
            cost_model=cost_model or ("profile" if profile else "analytic"),
            profile=os.fspath(profile) if profile else "",
            checkpointing=bool(checkpointing),
            seed=self.seed,
            mem_budget_tokens=int(mem_budget or 0),
            comp_budget=float(comp_budget or 0.0),
            end_policy="drop" if drop_last else "pad",
            oversize=on_oversize,
        )
        if adapt_every is not None and int(adapt_every) < 1:
            raise ValueError(f"adapt_every must be a positive number of steps or None, got {adapt_every}")
        self.adapt_every = int(adapt_every) if adapt_every else None
        self._observations: List[tuple] = []  # ([(tokens, batch), ...], seconds) per rank-step
        self._observed_since = 0  # steps observed since the last re-plan
        self.adaptations: List[Dict[str, Any]] = []  # {"step": ..., fit summary} per re-plan
        self._manifest = load_manifest(manifest, on_bad_row)
        self._planners: Dict[int, "_C.Planner"] = {}
        self.epoch = 0
        self._generation = 0  # bumped when the position is reset; stale iterators stop
        self._start_epoch()

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

    def _start_epoch(self) -> None:
        self._budget_world = self.world_size
        self._observations = []
        self._observed_since = 0
        planner = self._planner(self.world_size)
        self._resume(planner, planner.initial_state(self.strategy, self.world_size, self.epoch), 0)

    def _resume(self, planner: "_C.Planner", state_json: str, offset: int, new_cost: str = "") -> None:
        plan, first_step, new_json = planner.resume(state_json, self.world_size, new_cost)
        st = _C.parse_state(new_json)
        self._plan = plan
        self._counts = plan.rank_counts(self.rank)
        self._fingerprint = st["fingerprint"]
        self._segments = [list(s) for s in st["segments"]]
        self._steps_before = sum(s[1] for s in self._segments[:-1])
        self._step = int(first_step)
        self._offset = int(offset)
        self._restart = False  # True once an iteration reached the end: the next one restarts
        self._generation += 1

    # --- epochs and positions -----------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration plans. The same epoch as the current one keeps
        the position (so set_epoch after load_state_dict resumes); another starts it afresh."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if epoch != self.epoch:
            self.epoch = epoch
            self._start_epoch()

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
        if self._restart:
            if len(self._segments) > 1:
                self._start_epoch()
            else:
                self._step, self._offset, self._restart = 0, 0, False
                self._generation += 1
        return self._generation

    # --- online adaptation ----------------------------------------------------------------

    @staticmethod
    def gather_step_time(seconds: float) -> List[float]:
        """This rank's compute seconds of a step -> every rank's, in rank order
        (torch.distributed.all_gather_object when initialised, else [seconds])."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            out = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(out, float(seconds))
            return [float(x) for x in out]
        return [float(seconds)]

    def observe_step(self, step: int, rank_seconds: List[float]) -> Optional[Dict[str, Any]]:
        """Records the measured compute seconds of every rank in global step `step` (the
        same list on every rank). With adapt_every set, once that many steps are recorded
        (and at least MIN_OBSERVATIONS rank-steps) and the position is at the step boundary
        after `step`, refits the cost model (a*S + b*S^2 + c0; overhead and small-batch
        efficiency kept from the planner's model) to every observation of the epoch
        and re-plans the rest of the epoch; returns the fit summary then, else None."""
        t = int(step) - self._steps_before
        if not 0 <= t < self._plan.num_steps:
            raise ValueError(f"observe_step: step {step} is not in the current plan")
        if len(rank_seconds) != self.world_size:
            raise ValueError(f"observe_step: need {self.world_size} rank times, got {len(rank_seconds)}")
        planner = self._planner(self._budget_world)
        for r, secs in enumerate(rank_seconds):
            mbs = [(planner.row_geometry(mb[0])[3], len(mb)) for mb in self._plan.rank_step(t, r)]
            self._observations.append((mbs, float(secs)))
        self._observed_since += 1
        if not self.adapt_every or self._observed_since < self.adapt_every:
            return None
        if len(self._observations) < MIN_OBSERVATIONS:
            return None  # a few rank-steps cannot pin the model down yet
        if self._step != t + 1 or self._offset != 0 or self._step >= self._plan.num_steps:
            return None  # adapt only at the boundary right after the observed step, before the end
        # The overhead and small-batch efficiency stay the planner's: only how cost grows with
        # S (a, b, c0) is refitted, which a few steps of mixed buckets do determine.
        cost, summary = _C.fit_observations(self._observations, planner.cost_overhead_s,
                                            planner.cost_half_efficiency_tokens)
        core = self.state_dict()["core"]
        self._resume(planner, core, 0, cost)
        summary = dict(summary, step=int(step) + 1)
        self.adaptations.append(summary)
        self._observed_since = 0  # the fit keeps every observation of the epoch
        return summary

    def _step_info(self, t: int, micro_batches: List[List[int]]) -> PlannedStep:
        samples, tokens, padded = self._plan.step_info(t)
        return PlannedStep(self.epoch, self._steps_before + t, micro_batches, samples, tokens, padded)

    # iter(sampler) and steps() start (or restart) the iteration when called, not at the
    # first next(), so state_dict() right after them is exact.

    def __iter__(self) -> Iterator[List[int]]:
        return self._micro_batches(self._begin_iteration())

    def _micro_batches(self, gen: int) -> Iterator[List[int]]:
        plan = self._plan
        while self._generation == gen and self._step < plan.num_steps:
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
        if self._generation == gen:
            self._restart = True

    def steps(self) -> Iterator[PlannedStep]:
        """Per global step: this rank's micro-batches plus the step's global sample and token
        counts, for a loop that loads its own data. A step counts as done once it is handed
        out (checkpoint inside the loop body, after the optimizer step). Shares the position
        with iter(sampler): use one or the other."""
        return self._steps(self._begin_iteration())

    def _steps(self, gen: int) -> Iterator[PlannedStep]:
        plan = self._plan
        while self._generation == gen and self._step < plan.num_steps:
            t = self._step
            mbs = plan.rank_step(t, self.rank)[self._offset:]
            self._step, self._offset = t + 1, 0
            if self._step >= plan.num_steps:
                self._restart = True
            yield self._step_info(t, mbs)
        if self._generation == gen:
            self._restart = True

    def schedule(self) -> Iterator[PlannedStep]:
        """The steps the next iteration will yield, as steps() would give them, without moving
        the position: for a DataLoader(batch_sampler=sampler) loop, which pulls micro-batches
        through iter(sampler) (and, with workers, ahead of training). Call it before
        iter(loader); take len(step.micro_batches) batches from the loader per step, and
        checkpoint with state_dict(step=step.step + 1)."""
        if self._restart:
            self._begin_iteration()
        plan, rank, first, offset = self._plan, self.rank, self._step, self._offset
        epoch, before = self.epoch, self._steps_before

        def gen():
            for t in range(first, plan.num_steps):
                mbs = plan.rank_step(t, rank)
                samples, tokens, padded = plan.step_info(t)
                yield PlannedStep(epoch, before + t, mbs[offset:] if t == first else mbs, samples, tokens, padded)

        return gen()

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
            done = int(step) - self._steps_before
            if not 0 <= done <= self._plan.num_steps:
                raise ValueError(
                    f"state_dict(step={step}): step must be in [{self._steps_before}, {self.num_steps}] "
                    "(the steps of the current world size's segment of this epoch)"
                )
            segs[-1][1], offset = done, 0
        else:
            segs[-1][1] = self._step
        core = _C.dump_state(self.strategy, self._fingerprint, self.seed, self.epoch, [tuple(s) for s in segs])
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
        step never ran). Raises ValueError for a corrupted state or one saved for another
        manifest, options, strategy or seed."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not an adaptiveload sampler state (no 'format': {STATE_FORMAT!r})")
        if state.get("version") != STATE_VERSION:
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
        st = _C.parse_state(core)  # ValueError if corrupted
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
        old_epoch = self.epoch
        self.epoch = int(st["epoch"])
        try:
            self._budget_world = int(st["segments"][0][0])
            self._resume(self._planner(st["segments"][0][0]), core, offset)
        except Exception:
            self.epoch = old_epoch
            self._start_epoch()
            raise
        if self._step < self._plan.num_steps:
            count = self._counts[self._step]
        else:
            count = 0
        if offset > count or (offset and offset == count):
            n = offset
            self.epoch = old_epoch
            self._start_epoch()
            raise ValueError(
                f"sampler state: step_offset {n} is not inside the step (rank {self.rank} has {count} "
                "micro-batches in it)"
            )

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
        }

    def sample_geometry(self, row: int) -> tuple:
        """(frames, height, width) of the bucket a manifest row trains at (latents are
        [16, 1 + (frames - 1) / 4, height / 8, width / 8] for Wan's VAE)."""
        return tuple(self._planner(self.world_size).row_geometry(int(row))[:3])

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
