"""The sampler's state: the position as a small, versioned dict (torchdata's Stateful
protocol), saved by state_dict() and restored by load_state_dict().

The format: {"format": STATE_FORMAT, "version": STATE_VERSION, "core": the C++ planner's
state JSON, "world_size", "rank", "step_offset"}. A mixin of AdaptiveBatchSampler; a
restored position goes through the cursor's _prepare and _apply.
"""
import numbers
from collections.abc import Mapping
from typing import Any, Dict, Optional

from .. import _C
from ._ranges import MAX_WORLD_SIZE

STATE_FORMAT = "adaptiveload-sampler"
STATE_VERSION = 1


class _State:
    """state_dict and load_state_dict over the versioned state format."""

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
                             self.sync, self._layout, self._speeds)
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
        chosen before the load (set_epoch after the load starts it at once). Raises ValueError
        for a corrupted state or one saved for another manifest, options, strategy or seed."""
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

