"""Ranks that really run at different speeds, measured on the CPU (issue 53 item 4;
docs/evaluation.md, "Unequal ranks on the CPU"). Run by scripts/cpu_eval_ranks.sh:

    torchrun --standalone --nproc-per-node 2 scripts/cpu_eval_ranks.py --reps 3 --subset 100 --out out/cpu_eval_ranks

Two gloo ranks, each pinned to its own core with one torch thread; rank 1 shares its core with a
busy co-runner (a child process it starts and ends), so it really runs at about half speed. Each
micro-batch is real CPU work (a fixed matmul repeated in proportion to the planner's predicted
seconds for it), so the planner's cost model is exact up to a scale and what is measured is how
each plan deals with the slow rank. Whole epochs, the modes interleaved in every repetition:
  equal    equal_tokens: the bucket loader, equal work per rank
  uniform  balanced, planned for alike ranks
  stated   balanced with rank_speeds={1: f}, f measured on both ranks before the runs
  learned  balanced for alike ranks, learning the speeds online (adapt='speeds', adapt_every)
Per step each rank's compute seconds are all-gathered (the step's sync point): idle of a rank =
sum over steps of (slowest rank's seconds - its own) over the sum of the slowest's; samples/s =
the epoch's samples over its wall seconds. Prints a table of medians and ranges; --out writes
runs.json. An evaluation, not a test (the machine's load makes the figures noisy).
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from adaptiveload import AdaptiveBatchSampler

MODES = ("equal", "uniform", "stated", "learned")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFESTS = ("taichi_hd.csv", "coco2017_val_images.csv")


def rows(subset):
    """The first `subset` rows of each shipped manifest, as the sampler's list of dicts."""
    out = []
    for name in MANIFESTS:
        with open(os.path.join(REPO, "data", name), newline="") as f:
            for i, row in enumerate(csv.DictReader(f)):
                if i >= subset:
                    break
                out.append({k: row[k] for k in ("path", "num_frames", "height", "width", "fps")})
    return out


def idle_per_rank(times):
    """[step][rank] compute seconds -> per rank its idle share: sum(max - own) / sum(max)."""
    total = sum(max(row) for row in times)
    return [sum(max(row) - row[r] for row in times) / total for r in range(len(times[0]))] if total else []


def spread(values):
    """'median [min, max]'."""
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def table(runs):
    """The markdown table of the runs {mode: [{'idle': [...], 'samples_per_s': x, 'steps': n}, ...]}."""
    lines = ["| mode | runs | steps | idle rank 0 | idle rank 1 | idle (mean of ranks) | samples/s | re-plans |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        rs = runs.get(mode, [])
        if not rs:
            continue
        lines.append(f"| {mode} | {len(rs)} | {rs[0]['steps']} | {spread([r['idle'][0] for r in rs])} | "
                     f"{spread([r['idle'][1] for r in rs])} | {spread([statistics.mean(r['idle']) for r in rs])} | "
                     f"{spread([r['samples_per_s'] for r in rs])} | "
                     f"{statistics.median(len(r.get('adaptations', [])) for r in rs):g} |")
    return "\n".join(lines)


class Work:
    """A micro-batch's CPU work: a [n, n] matmul repeated `units(seconds)` times."""

    def __init__(self, n=96):
        self.a = torch.randn(n, n)
        self.b = torch.randn(n, n)
        self.per_unit = self.time(200) / 200

    def time(self, units):
        t0 = time.perf_counter()
        for _ in range(units):
            torch.mm(self.a, self.b)
        return time.perf_counter() - t0

    def run(self, units):
        for _ in range(units):
            torch.mm(self.a, self.b)


def pin(core):
    if hasattr(os, "sched_setaffinity") and core < os.cpu_count():
        os.sched_setaffinity(0, {core})


def start_co_runner(core):
    """A busy loop on `core`, beside this rank: it really runs slower."""
    code = f"import os\nif hasattr(os, 'sched_setaffinity'): os.sched_setaffinity(0, {{{core}}})\nwhile True: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def epoch(mode, manifest, args, rank, world, stated, scale, work):
    kw = dict(world_size=world, rank=rank, seed=args.seed, model=args.model, device=args.device)
    if mode == "equal":
        s = AdaptiveBatchSampler(manifest, strategy="equal_tokens", **kw)
    elif mode == "stated":
        s = AdaptiveBatchSampler(manifest, rank_speeds=stated, **kw)
    elif mode == "learned":
        s = AdaptiveBatchSampler(manifest, adapt_every=args.adapt_every, adapt="speeds", **kw)
    else:
        s = AdaptiveBatchSampler(manifest, **kw)
    planner = s._planner(s._budget_world)
    times, samples = [], 0
    dist.barrier()
    t0 = time.perf_counter()
    for st in s.steps():
        c0 = time.perf_counter()
        for mb in st.micro_batches:
            work.run(max(1, round(planner.micro_batch_seconds(mb) * scale / work.per_unit)))
        secs = s.gather_step_time(time.perf_counter() - c0)  # every rank's; the step's sync point
        times.append(secs)
        samples += st.global_samples
        if mode == "learned":
            s.observe_step(st.step, secs)
    wall = time.perf_counter() - t0
    # Every rank learned the same factors at the same steps from the same gathered times.
    mine = json.dumps(s.adaptations, sort_keys=True, default=str)
    if len(set(dist_gather(mine))) != 1:
        raise RuntimeError(f"{mode}: the ranks' adaptations differ (their plans would too): {mine}")
    return {"idle": idle_per_rank(times), "samples_per_s": samples / wall, "steps": len(times),
            "adaptations": [{k: a[k] for k in ("step", "ranks")} for a in s.adaptations if "ranks" in a]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions of every mode")
    p.add_argument("--subset", type=int, default=100, help="rows of each shipped manifest")
    p.add_argument("--epoch-seconds", type=float, default=4.0, help="a fast rank's compute in a uniform epoch")
    p.add_argument("--adapt-every", type=int, default=2)
    p.add_argument("--model", default="wan2.1-1.3b")
    p.add_argument("--device", default="h200")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-co-runner", action="store_true", help="alike ranks (the machine's own noise)")
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pin(rank % (os.cpu_count() or 1))
    manifest = rows(args.subset)
    work = Work()
    work.per_unit = dist_gather(work.per_unit)[0]  # the same units for the same micro-batch on every rank
    # The work's scale: a uniform epoch's predicted seconds of one rank -> --epoch-seconds.
    ref = AdaptiveBatchSampler(manifest, world_size=world, rank=0, seed=args.seed, model=args.model,
                               device=args.device)
    planner = ref._planner(ref._budget_world)
    predicted = sum(planner.micro_batch_seconds(mb) for t in range(ref.num_steps) for r in range(world)
                    for mb in ref._plan.rank_step(t, r)) / world
    scale = args.epoch_seconds / predicted
    co = start_co_runner(rank % (os.cpu_count() or 1)) if rank == 1 and not args.no_co_runner else None
    try:
        time.sleep(0.5)
        # The stated speed: every rank times the same work (about a second, the median of 3), now
        # that the co-runner runs, as a user would measure a slow GPU before stating it.
        units = max(1, round(1.0 / work.per_unit))
        unit = dist_gather(statistics.median(work.time(units) for _ in range(3)))
        stated = {r: round(unit[0] / unit[r], 2) for r in range(1, world)}
        runs = {m: [] for m in MODES}
        for rep in range(args.reps):
            for mode in MODES:
                runs[mode].append(epoch(mode, manifest, args, rank, world, stated, scale, work))
                if rank == 0:
                    r = runs[mode][-1]
                    print(f"rep {rep} {mode}: idle {[round(x, 3) for x in r['idle']]}, "
                          f"{r['samples_per_s']:.2f} samples/s, {r['steps']} steps, learned {r['adaptations']}",
                          flush=True)
    finally:
        if co is not None:
            co.kill()
            co.wait()
    if rank == 0:
        print(f"\n{world} ranks, rank 1 beside a co-runner: {'no' if args.no_co_runner else 'yes'}; measured speeds "
              f"(same work timed on each rank): {stated}; {len(manifest)} samples an epoch\n")
        print(table(runs))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "runs.json"), "w") as f:
                json.dump({"stated": stated, "runs": runs, "args": vars(args)}, f, indent=1)
    dist.destroy_process_group()


def dist_gather(x):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, x)
    return out


if __name__ == "__main__":
    main()
