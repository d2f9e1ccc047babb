"""What the sampler can tell about its manifest and plan: rows left out or dropped, the
resolved budgets, sync mode, global batch and group sizes, a row's geometry, predicted
rank times, whether a loader keeps up (loader_check), and its repr. A mixin of AdaptiveBatchSampler; it only reads.
"""
import os
import warnings
from typing import Any, Dict, List

from .. import _C, _checks


class _Introspection:
    """Read-only views of the manifest, the planner and the plan."""

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
            "step_fixed_s": p.step_fixed_s(self.world_size),
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

    def latent_shape(self, row: int) -> tuple:
        """(channels, frames, height, width) of the VAE latent of a manifest row at its bucket
        (the model preset's latent channels and VAE strides): what a latent cache must hold."""
        if self.total_rows == 0:
            raise ValueError("latent_shape: the manifest has no rows")
        row = _checks.integer(row, "latent_shape: row", 0, self.total_rows - 1, " (a manifest row id)")
        return tuple(self._planner(self.world_size).latent_shape(row))

    def predicted_rank_times(self) -> List[List[float]]:
        """The planner's predicted compute seconds of every rank in every step of the current
        plan, [steps][world_size] (for comparing the cost model with measurements)."""
        return self._planner(self.world_size).rank_times(self._plan)

    def predicted_micro_batch_times(self) -> List[List[List[float]]]:
        """The planner's price of every micro-batch of the current plan, [steps][world_size]
        [micro-batches] seconds (Planner.micro_batch_seconds, a group's micro-batch on each of its
        ranks); a rank's sum is its predicted_rank_times entry. For pricing the spread of a
        step (the slowest of its ranks' noisy sums), which the sums alone do not give."""
        p, plan, W = self._planner(self.world_size), self._plan, self.world_size
        return [[[p.micro_batch_seconds(mb, g, W) for mb, g in zip(plan.rank_step(t, r), plan.rank_step_groups(t, r))]
                 for r in range(W)] for t in range(plan.num_steps)]

    def loader_check(self, loader_profile: str, loader_workers: int) -> Dict[str, Any]:
        """Whether this rank's DataLoader keeps up with the plan (the same check as `adaptiveload plan
        --loader-profile FILE --loader-workers N`): the loader profile's seconds per sample (from
        `adaptiveload calibrate -- --loader ...` or python/bench/bench_loader.py) priced over every
        rank's share of every step, over `loader_workers` workers per rank, against the rank's
        simulated compute. Returns a dict (keeps_up, max_load_train_ratio, slow_rank_steps,
        rank_steps, worst {step, rank, load_s, train_s}, warning) and, when some rank-step loads
        slower than it trains, warns (UserWarning) with the same sentence."""
        loader_workers = _checks.integer(loader_workers, "loader_check: loader_workers", 1, 4096,
                                         " (DataLoader workers per rank)")
        if not isinstance(loader_profile, (str, os.PathLike)) or not os.path.isfile(loader_profile):
            raise ValueError(f"loader_check: loader_profile {loader_profile!r} is no file (a loader profile: "
                             "adaptiveload calibrate -- --loader ...)")
        out = _C.loader_check(self._planner(self.world_size), self._plan, os.fspath(loader_profile), loader_workers)
        if out["warning"]:
            warnings.warn("AdaptiveBatchSampler: " + out["warning"], UserWarning, stacklevel=2)
        return out

    def __repr__(self) -> str:
        if not hasattr(self, "_plan"):
            return "AdaptiveBatchSampler(<not initialised>)"
        return (
            f"AdaptiveBatchSampler(strategy={self.strategy!r}, rows={self.total_rows}, rank={self.rank}, "
            f"world_size={self.world_size}, epoch={self.epoch}, steps={self.num_steps}, step={self.step})"
        )
