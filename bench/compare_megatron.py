"""Packed balanced beside Megatron-LM's schedulers, on the same token counts and global batches.

What it compares (step sync, DDP: ranks accumulate gradients and meet at one all-reduce per
global step), every plan priced by the planner's own cost model through the binding
(`Planner.micro_batch_seconds` / `micro_batch_work`, what the simulator charges a micro-batch):
  - ours: `balanced` packed (`packing="on"`), `balanced` bucketed, `greedy_pack`;
  - Megatron-LM, its scheduling code imported unchanged from `--megatron PATH`:
      hybrid_cp        `BalancedCPScheduler.get_groups_and_subsamples` (dynamic / hybrid
                       context parallel, megatron/core/pipeline_parallel/hybrid_cp_schedule.py),
                       run as `hybrid_context_parallel_forward_backward` runs it: one forward
                       per sub-sample on its CP group, a barrier after every group of the step;
      hybrid_cp packed the same schedule, a rank's one-GPU sub-samples of a group concatenated
                       into varlen packs of at most M_mem tokens (one fixed cost per pack: a
                       generous reading; Megatron's loop runs each sub-sample alone);
      dp_balanced      `DpBalancedScheduler.get_groups_and_subsamples` (sequence packing,
                       megatron/core/datasets/data_schedule.py): packs in the data order up to
                       max_seqlen_per_dp_cp_rank tokens, dealt round-robin to the ranks.
Megatron's max_seqlen_per_dp_cp_rank is tried at each --max-seqlen value (default: the
planner's M_mem and the longest sample, which give every sample CP size 1 as in our plans, and
half the longest, which puts the longest clips on CP 2), and each scheduler's best is kept; CP
groups are priced by the planner's Ulysses model (Megatron's CP is ring attention). Every
global step holds the same number of samples as ours (the epoch's samples, shuffled with
--seed, cut into the planner's step count); --our-steps also gives Megatron our packed plan's
steps themselves.

Files it needs from Megatron-LM (a checkout, or just these, same folders; tested at commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553):
    megatron/core/pipeline_parallel/hybrid_cp_schedule.py
    megatron/core/datasets/data_schedule.py
    megatron/core/datasets/data_schedule_utils.py
Stand-ins (load_megatron), for what those files import but the schedulers never call
on this path: megatron.core.parallel_state, megatron.core.rerun_state_machine.RerunDataIterator,
megatron.core.packed_seq_params.PackedSeqParams,
megatron.core.process_groups_config.ProcessGroupCollection, the package modules megatron,
megatron.core, megatron.core.datasets and megatron.core.pipeline_parallel (their real
__init__ files import the whole of Megatron; here they are empty packages over the real
folders), and the DPxCP process group BalancedCPScheduler asks only .size() of.

Run (from the repository root, with the extension built):
    PYTHONPATH=python python bench/compare_megatron.py --megatron /path/to/Megatron-LM --our-steps \
        -m data/taichi_hd.csv data/coco2017_val_images.csv -w 8 16 --per-rank 4 9 18 36 72
Prints one table per world size and a JSON line per (world size, global batch, scheduler).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import sys
import types
from typing import Dict, List, Sequence, Tuple

MEGATRON_FILES = (
    "megatron/core/pipeline_parallel/hybrid_cp_schedule.py",
    "megatron/core/datasets/data_schedule.py",
    "megatron/core/datasets/data_schedule_utils.py",
)
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
NAME = 38  # width of the scheduler column


class _ProcessGroup:
    """Stand-in for the DPxCP torch.distributed group: BalancedCPScheduler reads only size()."""

    def __init__(self, size: int):
        self._size = size

    def size(self) -> int:
        return self._size


def _stand_in(name: str, path: str = "", **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    if path:
        mod.__path__ = [path]  # a package over the real folder: its files load unchanged
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return mod


def load_megatron(root: str) -> Tuple[type, type]:
    """(BalancedCPScheduler, DpBalancedScheduler) imported unchanged from a Megatron-LM tree."""
    missing = [f for f in MEGATRON_FILES if not os.path.isfile(os.path.join(root, f))]
    if missing:
        raise SystemExit(
            f"--megatron {root!r}: missing {', '.join(missing)}; give a Megatron-LM checkout (github.com/NVIDIA/"
            f"Megatron-LM, tested at {MEGATRON_COMMIT}) or a folder with those files at those paths"
        )
    core = os.path.join(root, "megatron", "core")

    class RerunDataIterator:  # imported by the schedule files, used only by the training loop
        def __init__(self, iterable):
            self.iterable = iterable

    class PackedSeqParams:  # imported by data_schedule.py, used only when building batches
        pass

    class ProcessGroupCollection:  # type of an optional argument the schedulers here never get
        pass

    _stand_in("megatron", os.path.join(root, "megatron"))
    _stand_in("megatron.core", core)
    _stand_in("megatron.core.datasets", os.path.join(core, "datasets"))
    _stand_in("megatron.core.pipeline_parallel", os.path.join(core, "pipeline_parallel"))
    _stand_in("megatron.core.parallel_state")  # queried only inside the training loop
    _stand_in("megatron.core.rerun_state_machine", RerunDataIterator=RerunDataIterator)
    _stand_in("megatron.core.packed_seq_params", PackedSeqParams=PackedSeqParams)
    _stand_in("megatron.core.process_groups_config", ProcessGroupCollection=ProcessGroupCollection)
    sys.modules["megatron"].core = sys.modules["megatron.core"]
    hcp = importlib.import_module("megatron.core.pipeline_parallel.hybrid_cp_schedule")
    ds = importlib.import_module("megatron.core.datasets.data_schedule")
    return hcp.BalancedCPScheduler, ds.DpBalancedScheduler



# --- pricing: the planner's cost model, aggregated as the simulator does in step sync ---------


class Pricer:
    """Seconds and full-efficiency work of micro-batches on `world` ranks (Planner bindings)."""

    def __init__(self, planner, world: int):
        self.p = planner
        self.world = world
        self.allreduce = planner.allreduce_s(world)

    def mb(self, rows: Sequence[int], group: int = 1) -> Tuple[float, float]:
        rows = list(rows)
        return (self.p.micro_batch_seconds(rows, group, self.world), self.p.micro_batch_work(rows, group, self.world))


class Tally:
    """Epoch totals: step times, work, fixed costs and samples, as sim/metrics.cpp sums them."""

    def __init__(self, world: int):
        self.world = world
        self.time = self.compute_max = self.compute_mean = self.useful = self.fixed = 0.0
        self.samples = self.steps = 0
        self.wide = 0  # sub-samples run on a CP group of more than one rank
        self.step_samples: List[int] = []

    def add_step(self, rounds: List[List[float]], useful: float, fixed: float, samples: int, allreduce: float):
        """rounds: per barrier-separated round, every rank's compute seconds in it."""
        mx = sum(max(r) for r in rounds)
        self.compute_max += mx
        self.compute_mean += sum(sum(r) for r in rounds) / self.world
        self.time += mx + allreduce
        self.useful += useful
        self.fixed += fixed
        self.samples += samples
        self.steps += 1
        self.step_samples.append(samples)

    def row(self, name: str) -> Dict:
        mean = self.samples / max(1, self.steps)
        return {
            "scheduler": name,
            "samples_per_s": self.samples / self.time,
            "useful": self.useful / (self.world * self.time),
            "fixed": self.fixed / (self.world * self.time),
            "idle": 1.0 - self.compute_mean / self.compute_max,
            "steps": self.steps,
            "samples": self.samples,
            "batch_dev": max(abs(s - mean) / mean for s in self.step_samples),
            "epoch_s": self.time,
            "cp_gt1_samples": self.wide,
        }


def price_plan(planner, plan, pr: Pricer) -> Tally:
    """One of our plans, micro-batch by micro-batch (the simulator's rule; checked against
    Planner.rank_times below)."""
    t = Tally(pr.world)
    times = planner.rank_times(plan)
    for s in range(plan.num_steps):
        ranks, useful, fixed = [], 0.0, 0.0
        for r in range(pr.world):
            x = 0.0
            pads = plan.rank_step_padded(s, r)
            for mb, pad in zip(plan.rank_step(s, r), pads):
                sec, work = pr.mb(mb)
                x += sec
                fixed += sec - work
                useful += 0.0 if pad else work
            if abs(x - times[s][r]) > 1e-9 * max(1.0, x):
                raise AssertionError(f"{plan.strategy}: step {s} rank {r}: {x} s priced here, "
                                     f"{times[s][r]} s simulated")
            ranks.append(x)
        t.add_step([ranks], useful, fixed, plan.step_info(s)[0], pr.allreduce)
    return t


def cut_packs(rows: List[int], tokens: Dict[int, int], cap: int) -> List[List[int]]:
    """Consecutive rows into packs of at most `cap` tokens (the data order, as THD packing)."""
    packs, cur, n = [], [], 0
    for r in rows:
        if cur and n + tokens[r] > cap:
            packs.append(cur)
            cur, n = [], 0
        cur.append(r)
        n += tokens[r]
    if cur:
        packs.append(cur)
    return packs


def run_hybrid_cp(cls, steps: List[List[int]], tokens: Dict[int, int], max_seqlen: int, pr: Pricer, packed: bool,
                  cap: int = 0) -> Tally:
    """Megatron's BalancedCPScheduler (max_seqlen_per_dp_cp_rank = max_seqlen), step by step;
    `packed`: a rank's CP-1 sub-samples of a group run as varlen packs of at most `cap` tokens
    (0: max_seqlen) instead of one forward each."""
    t = Tally(pr.world)
    mem = cap or max_seqlen
    sched = cls(max_seq_len_per_rank=max_seqlen, dp_cp_group=_ProcessGroup(pr.world))
    for step in steps:
        _, id_groups = sched.get_groups_and_subsamples([(r, tokens[r]) for r in step], None)
        seen, rounds, useful, fixed = set(), [], 0.0, 0.0
        for group in id_groups:  # one barrier-separated group of the step
            cp = {}  # sample -> CP size: the ranks that list it (as _get_new_data_iterator)
            for ids in group:
                for i in ids:
                    cp[i] = cp.get(i, 0) + 1
            t.wide += sum(1 for g in cp.values() if g > 1)
            times = []
            for _rank, ids in enumerate(group):
                wide = [i for i in ids if cp[i] > 1]
                alone = [i for i in ids if cp[i] == 1]
                mbs = [([i], cp[i]) for i in wide]
                mbs += [(p, 1) for p in cut_packs(alone, tokens, mem)] if packed else [([i], 1) for i in alone]
                x = 0.0
                for rows, g in mbs:
                    sec, work = pr.mb(rows, g)
                    x += sec
                    fixed += sec - work
                    useful += work
                times.append(x)
                seen.update(ids)
            rounds.append(times)
        if seen != set(step):
            raise AssertionError(f"hybrid_cp scheduled {len(seen)} of {len(step)} samples of a step")
        t.add_step(rounds, useful, fixed, len(step), pr.allreduce)
    return t


def run_dp_balanced(cls, steps: List[List[int]], tokens: Dict[int, int], mem: int, pr: Pricer) -> Tally:
    """Megatron's DpBalancedScheduler (cp_size 1): each (micro-batch, rank) entry is one pack.
    Raises AssertionError where Megatron's own check refuses a step (too few samples to give
    every rank a pack)."""
    t = Tally(pr.world)
    sched = cls(mem, 1, pr.world, None)
    for step in steps:
        ids = [(r, tokens[r]) for r in step]
        mbs = sched.get_groups_and_subsamples(ids)  # [micro-batch][rank] -> indices into ids
        times, useful, fixed, seen = [0.0] * pr.world, 0.0, 0.0, set()
        for mb in mbs:
            for rank, idx in enumerate(mb):
                rows = [ids[i][0] for i in idx]
                sec, work = pr.mb(rows)
                times[rank] += sec
                fixed += sec - work
                useful += work
                seen.update(rows)
        if seen != set(step):
            raise AssertionError(f"dp_balanced scheduled {len(seen)} of {len(step)} samples of a step")
        t.add_step([times], useful, fixed, len(step), pr.allreduce)
    return t


def plan_steps(plan, world: int, seed: int) -> List[List[int]]:
    """The trained samples of every step of one of our plans, each step's in a shuffled order
    (what a data loader would hand Megatron's scheduler)."""
    rng, out = random.Random(seed), []
    for s in range(plan.num_steps):
        rows = []
        for r in range(world):
            for mb, pad in zip(plan.rank_step(s, r), plan.rank_step_padded(s, r)):
                if not pad:
                    rows.extend(mb)
        rng.shuffle(rows)
        out.append(rows)
    return out


def cut_steps(rows: List[int], k: int, seed: int) -> List[List[int]]:
    """The epoch's rows shuffled and cut into k global steps of equal size (+-1)."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    q, rem = divmod(len(rows), k)
    out, at = [], 0
    for i in range(k):
        n = q + (1 if i < rem else 0)
        out.append(rows[at : at + n])
        at += n
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True, help="Megatron-LM checkout (or a folder with MEGATRON_FILES)")
    ap.add_argument("-m", "--manifest", nargs="+", default=["data/taichi_hd.csv", "data/coco2017_val_images.csv"])
    ap.add_argument("-w", "--world-size", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--per-rank", type=int, nargs="+", default=[4, 9, 18, 36, 72],
                    help="samples per rank-step: the global batch is samples:W*N")
    ap.add_argument("--model", default="wan2.1-1.3b")
    ap.add_argument("--device", default="h200")
    ap.add_argument("--seed", type=int, default=0, help="shuffle of the epoch's samples for Megatron's steps")
    ap.add_argument("--max-seqlen", nargs="+", default=["mem", "longest", "half"],
                    help="Megatron's max_seqlen_per_dp_cp_rank values to try (the best is kept): tokens, or mem "
                         "(our M_mem), longest (the longest sample: CP 1 for all), half (half of it: the "
                         "longest clips on CP 2); hybrid_cp packed's packs stay within M_mem tokens")
    ap.add_argument("--our-steps", action="store_true",
                    help="also give Megatron's schedulers the steps of our packed plan "
                         "(the same samples in every step)")
    args = ap.parse_args(argv)

    hybrid_cls, dpb_cls = load_megatron(args.megatron)
    import adaptiveload  # noqa: F401  (loads torch, then the extension)
    from adaptiveload import _C
    from adaptiveload._manifest import load_manifest

    manifest = load_manifest(args.manifest)

    def planner(world: int, n: int, packing: str):
        cfg = _C.PlannerConfig()
        cfg.model, cfg.device, cfg.world_size = args.model, args.device, world
        cfg.sync, cfg.packing, cfg.global_batch = "step", packing, f"samples:{world * n}"
        return _C.Planner(manifest, cfg)

    lines = []
    for world in args.world_size:
        table = []
        for n in args.per_rank:
            pk, bk = planner(world, n, "on"), planner(world, n, "off")
            pr = Pricer(pk, world)
            rows = list(pk.planned_rows())
            tokens = {r: pk.row_geometry(r)[3] for r in rows}
            mem = int(pk.mem_budget_tokens)
            packed_plan = pk.plan("balanced", world)
            longest = max(tokens.values())
            named = {"mem": mem, "longest": longest, "half": (longest + 1) // 2}
            max_seqlens = sorted({named[v] if v in named else int(v) for v in args.max_seqlen}, reverse=True)
            res = [
                price_plan(pk, packed_plan, pr).row("balanced packed"),
                price_plan(bk, bk.plan("balanced", world), Pricer(bk, world)).row("balanced bucketed"),
                price_plan(pk, pk.plan("greedy_pack", world), pr).row("greedy_pack"),
            ]
            inputs = {
                "": cut_steps(rows, int(pk.target_steps(world)), args.seed),
                " (our steps)": plan_steps(packed_plan, world, args.seed),
            }
            for tag, steps in inputs.items():
                if tag and not args.our_steps:
                    continue
                # Megatron's best over the max_seqlen_per_dp_cp_rank values tried.
                runs = {
                    "megatron hybrid_cp": lambda m: run_hybrid_cp(hybrid_cls, steps, tokens, m, pr, False),
                    "megatron hybrid_cp packed": lambda m: run_hybrid_cp(hybrid_cls, steps, tokens, m, pr, True, mem),
                    "megatron dp_balanced": lambda m: run_dp_balanced(dpb_cls, steps, tokens, m, pr),
                }
                for name, run in runs.items():
                    best, errors = None, []
                    for m in max_seqlens:
                        try:
                            r = run(m).row(name + tag)
                        except AssertionError as e:  # Megatron's own check
                            errors.append(f"max_seqlen {m}: AssertionError: {e}")
                            continue
                        r["max_seqlen"] = m
                        if best is None or r["samples_per_s"] > best["samples_per_s"]:
                            best = r
                    res.append(best or {"scheduler": name + tag, "error": "; ".join(errors)})
            best_m = max(r["samples_per_s"] for r in res if r["scheduler"].startswith("megatron") and "error" not in r)
            for r in res:
                r.update(world=world, per_rank=n, global_batch=world * n)
                if "error" not in r:
                    r["vs_best_megatron"] = r["samples_per_s"] / best_m
                lines.append(json.dumps(r, sort_keys=True))
            table.append((n, res))
        print(f"\nW={world}, step sync, {args.model} on {args.device}, M_mem={mem} tokens, "
              f"Megatron {MEGATRON_COMMIT[:12]}")
        print(f"{'N/rank':>6} | {'scheduler':<{NAME}} | {'samples/s':>9} | {'useful':>6} | {'fixed':>6} | "
              f"{'idle':>6} | {'steps':>5} | {'batch dev':>9} | {'CP>1':>4} | {'max_seqlen':>10} | "
              f"{'vs best Megatron':>16}")
        for n, res in table:
            for r in res:
                if "error" in r:
                    print(f"{n:>6} | {r['scheduler']:<{NAME}} | fails in Megatron's scheduler: {r['error']}")
                    continue
                print(f"{n:>6} | {r['scheduler']:<{NAME}} | {r['samples_per_s']:9.4f} | {100 * r['useful']:5.1f}% | "
                      f"{100 * r['fixed']:5.2f}% | {100 * r['idle']:5.2f}% | {r['steps']:>5} | "
                      f"{100 * r['batch_dev']:8.1f}% | {r['cp_gt1_samples']:>4} | {r.get('max_seqlen', '-'):>10} | "
                      f"{r['vs_best_megatron']:15.3f}x")
    print()
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
