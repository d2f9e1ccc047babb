"""What a training run measures and how it is compared with the plan: the device timer, the
wait at a step's barrier, DESIGN.md's metrics of per-(step, rank) times (the planner's
simulator's formulas), the prediction with the profile's jitter, and the order in which
emulated ranks run their micro-batches (--rank-order interleaved)."""
import json
import math
import random
import time
from typing import Dict, List, Optional

import torch

from ..calibrate_fit import jitter_sigma


class Timer:
    """Times a region on the device: CUDA events on GPU; on CPU perf_counter (clock "wall") or
    the calling thread's CPU time (clock "thread": with --threads 1 torch computes forward and
    backward on this thread, so time other processes take from a shared machine is left out)."""

    def __init__(self, device: torch.device, clock: str = "wall"):
        self.cuda = device.type == "cuda"
        self.now = time.thread_time if clock == "thread" else time.perf_counter

    def __enter__(self):
        if self.cuda:
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = self.now()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.b.record()
        else:
            self.seconds = self.now() - self.t0

    def elapsed(self) -> float:
        if self.cuda:
            self.b.synchronize()
            return self.a.elapsed_time(self.b) / 1000.0
        return self.seconds


def sync_wait() -> float:
    """Under torchrun with the explicit all-reduce: the wall seconds this rank waits at a
    barrier for the step's slowest rank to finish its micro-batches (after the device has
    finished them), measured apart from the all-reduce that follows, so the all-reduce and
    optimizer time (the step's sync seconds) holds no wait and the idle fraction is measured
    at the ranks, not inferred from their compute times."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.distributed.barrier()
    return time.perf_counter() - t0


def metrics(times: List[List[float]], samples: int, tokens: int, extra_s: List[float]) -> Dict[str, float]:
    """DESIGN.md's metrics from per-(step, rank) compute times T[t][r] (the same formulas as
    the planner's simulator): idle fraction, per-step variants, throughput."""
    sum_mean = sum_max = step_mean = step_maxmin = total = 0.0
    for T, extra in zip(times, extra_s):
        mx, mn, mean = max(T), min(T), sum(T) / len(T)
        sum_mean += mean
        sum_max += mx
        if mx > 0:
            step_mean += (mx - mean) / mx
            step_maxmin += (mx - mn) / mx
        total += mx + extra
    n = max(len(times), 1)
    return {
        "imbalance": 1 - sum_mean / sum_max if sum_max > 0 else 0.0,
        "imbalance_step_mean": step_mean / n,
        "imbalance_step_maxmin": step_maxmin / n,
        "throughput_samples_per_s": samples / total if total > 0 else 0.0,
        "throughput_tokens_per_s": tokens / total if total > 0 else 0.0,
        "time_s": total,
        "steps": len(times),
        "samples": samples,
    }


def profile_jitter(path: Optional[str]) -> Optional[dict]:
    """The profile's "jitter" (calibrate.fit_jitter: how much a micro-batch's seconds vary
    between runs, against its seconds), or None (no profile, or one calibrated without it)."""
    if not path:
        return None
    with open(path) as f:
        return json.load(f).get("jitter")


def profile_inputs_timed(path: Optional[str]) -> bool:
    """Whether the profile was calibrated with each micro-batch's inputs drawn inside its timing
    (calibrate --time-inputs: fit.inputs_timed): then each micro-batch here is timed with its
    inputs too, so measured and priced seconds hold the same work (this miniature's data loading)."""
    if not path:
        return False
    with open(path) as f:
        return bool(json.load(f).get("fit", {}).get("inputs_timed", False))


def jitter_prediction(mb_times, jitter: dict, samples: int, tokens: int, extra_s: List[float],
                      draws: int = 200, seed: int = 0) -> Dict[str, float]:
    """metrics() of the epoch the cost model prices when every micro-batch's seconds vary as
    calibration measured them: each micro-batch (mb_times[t][r][i], its price) takes
    price * exp(sigma(price) Z), Z standard normal (the median stays the price), so a step waits
    for the slowest of its ranks' noisy sums, which pricing each micro-batch at one value does
    not see. The mean of `draws` such epochs (a fixed seed: the same figures every run)."""
    rng = random.Random(seed)
    sig = [[[jitter_sigma(jitter, x) for x in rank] for rank in step] for step in mb_times]
    out = {"imbalance": 0.0, "throughput_samples_per_s": 0.0, "throughput_tokens_per_s": 0.0, "time_s": 0.0}
    for _ in range(draws):
        times = [[sum(x * math.exp(s * rng.gauss(0.0, 1.0)) for x, s in zip(rank, srank))
                  for rank, srank in zip(step, sstep)] for step, sstep in zip(mb_times, sig)]
        m = metrics(times, samples, tokens, extra_s)
        for k in out:
            out[k] += m[k] / draws
    return dict(out, steps=len(mb_times), samples=samples, draws=draws)


def interleaved_order(prices: List[List[float]]) -> List[tuple]:
    """The order in which emulated ranks run their micro-batches with --rank-order interleaved:
    (rank position, micro-batch index) pairs. prices[k] is rank k's micro-batches' prices in
    plan order; each micro-batch is placed at the midpoint of its span in its rank's share of
    the step ((price before it + half its own) over the rank's total), and all run in that
    order, so every rank's work spreads over the step's whole time as on ranks that run at once,
    and a drift of the machine's speed within the step falls on every rank alike. A rank's own
    micro-batches keep their order; ties go to the lower rank."""
    keyed = []
    for k, row in enumerate(prices):
        total = sum(row)
        before = 0.0
        for i, x in enumerate(row):
            mid = (before + x / 2) / total if total > 0 else (i + 0.5) / len(row)
            keyed.append((mid, k, i))
            before += x
    keyed.sort()
    return [(k, i) for _, k, i in keyed]


def say_result(r: dict, args, dist_rank: int) -> None:
    """Rank 0 prints a run's line: measured and predicted idle and samples/s."""
    if dist_rank != 0:
        return
    m, p = r["measured"], r["predicted"]
    pk = f" packing={r['packing']:3s}" if args.packing != "off" or r["packing"] == "on" else ""
    print(f"{r['strategy']:13s}{pk} fused={'on ' if r['fused_adaln'] else 'off'} "
          f"imbalance {100 * m['imbalance']:5.1f}% "
          f"(predicted {100 * p['imbalance']:5.1f}%)  {m['throughput_samples_per_s']:8.2f} samples/s "
          f"(predicted {p['throughput_samples_per_s']:8.2f})  steps {m['steps']}"
          + (f"  with jitter: imbalance {100 * p['with_jitter']['imbalance']:5.1f}% "
             f"{p['with_jitter']['throughput_samples_per_s']:8.2f} samples/s" if "with_jitter" in p else "")
          + (f"  idle at the barrier {100 * m['idle_measured']:5.1f}% (busy outside the timed compute "
             f"{100 * m['outside_compute']:4.1f}%)" if "idle_measured" in m else "")
          + ("  waited for data (s): " + " ".join(f"r{i} {w:.3f}" for i, w in enumerate(m["data_wait_s"]))
             if "data_wait_s" in m else ""),
          flush=True)
