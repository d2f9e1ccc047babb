"""Online adaptation: the measured step times of every rank (gather_step_time), recorded by
observe_step, refit the cost model and the ranks' speed factors (stragglers) and re-plan the
rest of the epoch.

A mixin of AdaptiveBatchSampler. It owns _observations, _observed_steps, _observed_since,
_speed_ratios and adaptations (set by the constructor, reset by _Cursor._apply when the
position moves); re-plans go through the cursor's _prepare and _apply. The learned factors live
in the plan state's current segment (self._speeds[-1]), so state_dict saves them.
"""
import json
import math
import numbers
import warnings
from typing import Any, Dict, List, Optional

import torch

from .. import _C, _checks
from ._ranges import MAX_STEP_SECONDS

MIN_OBSERVATIONS = 8  # rank-steps observed before the first refit
MIN_FIT_TOKEN_COUNTS = 3  # distinct token counts the cost fit needs (a*S + b*S^2 + c0)
MIN_SPEED_WINDOW = 3  # steps a speed factor is estimated over at least (a median: one spike moves nothing)


def _token_counts(observations) -> set:
    """The distinct token counts S of observations ([micro-batch, ...], seconds), where a
    micro-batch is (tokens, batch) or, packed, a list of (tokens, batch) parts."""
    out = set()
    for mbs, _, _ in observations:
        for mb in mbs:
            out.update([mb[0]] if isinstance(mb, tuple) else [S for S, _ in mb])
    return out


class _Adaptation:
    """observe_step and gather_step_time: refits of the cost model from measured step times."""

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
        boundary after `step`, refits the cost model (a*S + b*S^2 + c0; overhead, small-batch
        efficiency and a pack's cost per sample kept from the planner's model) to every
        observation of the epoch and re-plans the rest of the epoch; returns the fit summary
        then, else None.
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
        new, ratios = self._rank_step_observations(planner, t, secs)
        observations = self._observations + new
        # Nothing has changed so far; from here the observation counts as recorded.
        self._observations = observations
        self._observed_steps.add(step)
        self._observed_since += 1
        self._speed_ratios.append(ratios)
        if not self.adapt_every or self._observed_since < self.adapt_every:
            return None
        if self._step != t + 1 or self._offset != 0 or self._step >= self._plan.num_steps:
            return None  # adapt only at the boundary right after the observed step, before the end
        return self._refit(planner, where, step)

    @property
    def learned_speeds(self) -> List[float]:
        """The speed factor online adaptation learned for each rank (adapt='all' or 'speeds'),
        multiplying its configured speed (devices=, rank_speeds=); all 1.0 until a rank is found
        slower (or faster) than the others over several steps."""
        return list(self._speeds[-1]) if self._speeds[-1] else [1.0] * self.world_size

    def _rank_step_observations(self, planner, t: int, secs: List[float]) -> tuple:
        """Step t's rank-steps as observations (micro-batch shapes, seconds, rank) for the cost fit,
        and per rank measured over predicted seconds (its configured speed's; NaN without work) for
        the speed factors. Predicted by the current segment's refitted cost where there is one."""
        fitted = self._segments[-1][2] if len(self._segments[-1]) > 2 else ""
        cost = json.loads(fitted) if fitted else None
        configured = planner.configured_speeds(self.world_size)
        new, ratios = [], []
        for r, sec in enumerate(secs):
            rows = self._plan.rank_step(t, r)
            mbs = []  # per micro-batch (tokens, batch), or a pack's [(tokens, batch), ...]
            for mb in rows:
                shape = planner.micro_batch_shape(mb)
                mbs.append(shape[0] if len(shape) == 1 else shape)
            new.append((mbs, sec, r))
            if cost is not None:
                predicted = _C.observation_time(cost, mbs) if mbs else 0.0
            else:
                predicted = sum(planner.micro_batch_seconds(mb) for mb in rows)
            ratios.append(sec * configured[r] / predicted if predicted > 0 else math.nan)
        return new, ratios

    def _learn(self) -> Optional[List[float]]:
        """The new speed factors when the window of observed steps moves one (cost/speed_learning.h),
        else None. Every rank computes them alike from the same gathered times."""
        if self.adapt == "cost" or self.world_size < 2:
            return None
        window = self._speed_ratios[-max(MIN_SPEED_WINDOW, self.adapt_every):]
        current = self.learned_speeds
        learned = _C.learn_rank_speeds(window, current)
        return learned if learned != current else None

    def _fit_cost(self, planner, learned: List[float]) -> tuple:
        """(cost_json, summary) of the cost fit to the epoch's observations, or (None, {}) when it
        is not asked for or they cannot pin the model down yet. Each observation's seconds are
        scaled by its rank's speed (configured x `learned`), so the fit is the reference device's."""
        observations = self._observations
        if self.adapt == "speeds" or len(observations) < MIN_OBSERVATIONS:
            return None, {}  # a few rank-steps cannot pin the model down yet
        if len(_token_counts(observations)) < MIN_FIT_TOKEN_COUNTS:
            return None, {}  # three coefficients need three token counts: wait for more buckets
        speed = [c * f for c, f in zip(planner.configured_speeds(self.world_size), learned)]
        # The overhead, small-batch efficiency and a pack's cost per sample stay the planner's:
        # only how cost grows with S (a, b, c0) is refitted, which a few steps of mixed buckets
        # do determine.
        return _C.fit_observations([(mbs, sec * speed[r]) for mbs, sec, r in observations],
                                   planner.cost_overhead_s, planner.cost_half_efficiency_tokens,
                                   planner.cost_pack_sample_s)

    def _refit(self, planner, where: str, step: int) -> Optional[Dict[str, Any]]:
        """At the boundary after `step`: learns the speed factors, fits the cost, and re-plans the
        rest of the epoch when either changed; the summary, or None."""
        before = self.learned_speeds
        speeds = self._learn()
        try:
            cost, summary = self._fit_cost(planner, speeds or before)
            if cost is None and speeds is None:
                return None
            plan, first_step, st = self._prepare(planner, self.state_dict()["core"], cost or "", speeds or ())
        except ValueError as e:
            # The measurements are valid and kept; only this refit is skipped, and the next
            # one (after adapt_every more steps) uses them with the new ones.
            self._observed_since = 0
            warnings.warn(f"{where}: online adaptation skipped the refit after step {step} "
                          f"({len(self._observations)} rank-step observations), the plan is unchanged: {e}",
                          RuntimeWarning, stacklevel=3)
            return None
        self._apply(self.epoch, self._budget_world, plan, first_step, st, 0, "")
        summary = dict(summary, step=step + 1)
        if speeds is not None:  # which ranks, how fast (1: as configured), from which step
            summary.update(ranks={r: f for r, (f, b) in enumerate(zip(speeds, before)) if f != b}, speeds=speeds)
        self.adaptations.append(summary)
        self._observed_since = 0  # the fit keeps every observation of the epoch
        return summary

