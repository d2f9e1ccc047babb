"""The all-reduce between ranks on this host, measured (calibrate --allreduce-ranks N).

The planner prices a step's gradient all-reduce (and, in micro sync, a slot's all-gathers and
reduce-scatter) as a ring: 2 (W-1)/W * bytes / bus + 2 (W-1) * latency, with the bus bandwidth
and latency of the device preset. A preset's numbers are a GPU cluster's; on a CPU host gloo's
loopback all-reduce is about 15x slower than the cpu preset says (docs/evaluation.md). This
module starts N processes (gloo on cpu, nccl on cuda with one GPU each), times all_reduce of
float32 tensors of a few KiB and the model's own gradient sync, and fits the ring's bus and latency
to the times, which the profile's "link" then gives the planner in place of the preset's."""
import os
import queue
import statistics
import tempfile
import time

from .calibrate_step import point_step
from .models import wan_dit

#: How long the ranks may take to start and finish (import torch, join the group, measure).
TIMEOUT_S = 600.0
#: The largest bus bandwidth a fit gives, bytes/s (10 TB/s: beyond any link measured).
MAX_BUS = 1e13


def ring_seconds(nbytes: float, ranks: int, bus_bytes_per_s: float, latency_s: float) -> float:
    """The ring all-reduce's seconds, as the core prices it (ring_allreduce_seconds)."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * nbytes / bus_bytes_per_s + 2.0 * (ranks - 1) * latency_s


def message_sizes(gradient_bytes: int) -> list:
    """The small messages timed as bare tensors, for the latency: 4 KiB and 64 KiB, those below
    the gradients' bytes (ascending; 4 bytes when both are above)."""
    return sorted({s for s in (4096, 65536) if s < gradient_bytes}) or [4]


def gradient_sync(model, dist):
    """The explicit gradient all-reduce of a training step (train_dit under torchrun, and the
    link's measurement of it): the gradients flattened into one float32 buffer, summed over
    the ranks of `dist` (torch.distributed), copied back."""
    import torch
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    off = 0
    for g in grads:
        g.copy_(flat[off:off + g.numel()].view_as(g))
        off += g.numel()


def _rank(rank: int, ranks: int, init_file: str, backend: str, sizes, reps: int, spec, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=ranks)
    try:
        device = torch.device("cuda", rank) if cuda else torch.device("cpu")
        sync = lambda: torch.cuda.synchronize() if cuda else None  # noqa: E731
        times = []
        for nbytes in sizes:
            x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
            for _ in range(5):  # warm-up: the first calls set up the connections
                dist.all_reduce(x)
            ts = []
            for _ in range(reps):
                dist.barrier()  # every rank starts together, as after a step's barrier
                sync()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                sync()
                ts.append(time.perf_counter() - t0)
            times.append(ts)
        # The model's own gradients, in a training step's place: after a backward.
        c = wan_dit.config(spec["config"], spec["layers"])
        torch.manual_seed(0)
        model = wan_dit.WanDiT(c, fused_adaln=spec["fused"], checkpointing=spec["checkpointing"]).to(device)
        step = point_step(model, c, tuple(spec["shape"]), spec["batch"], device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ts, os_ = [], []
        for k in range(reps + 5):
            step().backward()
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            gradient_sync(model, dist)
            sync()
            t1 = time.perf_counter()
            # The optimizer step, every rank at once, as the ranks of this host run it.
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            if k >= 5:  # the first five warm up
                ts.append(t1 - t0)
                os_.append(time.perf_counter() - t1)
        times += [ts, os_]
        out.put((rank, times))
    finally:
        dist.destroy_process_group()


def fit_ring(points, ranks: int) -> dict:
    """Bus bytes/s and latency of the ring model from (bytes, seconds) points, the gradients'
    point last: the latency from the quickest of the small messages (a few KiB: the time is
    nearly all latency, and the quickest the least disturbed), the bandwidth from the rest of
    the gradients' time, so that the price of the gradient all-reduce, the collective a step
    pays, is the measured one. The errors are the ring's on every point."""
    if ranks < 2:
        raise ValueError(f"a ring all-reduce needs 2 or more ranks, got {ranks}")
    if len(points) < 2 or not all(t > 0 for _, t in points):
        raise ValueError(f"needs 2 or more timed message sizes, each with a positive time; got {points}")
    (x0, t0), (xg, tg) = min(points[:-1], key=lambda p: p[1]), points[-1]
    # t = 2 (N-1) latency + 2 (N-1)/N bytes / bus; the small message's bandwidth term is taken
    # at the gradients' bandwidth, solved together: t0 = a + b x0, tg = a + b xg.
    b = (tg - t0) / (xg - x0) if xg > x0 else 0.0
    # At most MAX_BUS (the gradients no slower than a few KiB: the bandwidth beyond measuring,
    # nearly all latency), within what the planner reads (a profile's bytes are at most 1e15).
    b = max(b, 2.0 * (ranks - 1) / ranks / MAX_BUS)
    a = tg - b * xg
    if a < 0:  # the small message quicker per byte than the gradients: bandwidth alone, no latency
        a, b = 0.0, tg / xg
    bus = 2.0 * (ranks - 1) / ranks / b
    latency = a / (2.0 * (ranks - 1))
    errors = [abs(ring_seconds(x, ranks, bus, latency) - t) / t for x, t in points]
    return {"allreduce_bus_bytes_per_s": bus, "allreduce_latency_s": latency,
            "median_rel_error": statistics.median(errors), "max_rel_error": max(errors)}


def measure(ranks: int, gradient_bytes: int, device_type: str, reps: int, statistic: str, model: dict) -> dict:
    """Times the all-reduce between `ranks` processes (gloo on cpu, nccl on cuda: one GPU a
    rank), `reps` times each (a step's time: the slowest rank's of each repetition): bare
    tensors of message_sizes(gradient_bytes) (their quickest repetition), then the gradients of
    `model` ({"config", "layers", "fused", "checkpointing", "shape", "batch"}, `gradient_bytes`
    of them) synced after a backward of `batch` samples of `shape` (gradient_sync, as a training
    step runs it after its micro-batches; calibrate passes its largest micro-batch measured:
    after a small backward the sync and the optimizer ran 1.5-2x quicker than in training on the
    2-core VM), and AdamW on every rank at once (both the median or the fastest over the
    repetitions, per `statistic`). Returns the profile's "link": the fitted bus and latency, the
    points, the fit's errors and optimizer_s. Raises RuntimeError naming the rank that failed
    (its own traceback is on stderr)."""
    import multiprocessing as mp
    if ranks < 2:
        raise ValueError(f"an all-reduce needs 2 or more ranks, got {ranks}")
    backend = "nccl" if device_type == "cuda" else "gloo"
    sizes = message_sizes(gradient_bytes)
    ctx = mp.get_context("spawn")  # no fork of a process that has torch's threads
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="adaptiveload-link-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [ctx.Process(target=_rank, args=(r, ranks, init_file, backend, sizes, reps, model, out), daemon=True,
                             name=f"all-reduce rank {r}") for r in range(ranks)]
        for proc in procs:
            proc.start()
        got = {}
        deadline = time.monotonic() + TIMEOUT_S
        done = False
        try:
            while len(got) < ranks:
                try:  # results first: a rank that delivered and then failed to tear down still counts
                    rank, times = out.get(timeout=1.0)
                    got[rank] = times
                    continue
                except queue.Empty:
                    pass
                failed = [r for r, proc in enumerate(procs) if r not in got and proc.exitcode not in (None, 0)]
                if failed:
                    raise RuntimeError(f"{procs[failed[0]].name} exited with status {procs[failed[0]].exitcode} "
                                       "while timing the all-reduce (its traceback is above)")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the all-reduce ranks did not finish within {TIMEOUT_S:.0f} s")
            done = True
        finally:
            if not done:  # the others wait in a collective for the one that failed: stop them all now
                for proc in procs:
                    proc.kill()
            for proc in procs:
                proc.join(timeout=30 if done else 5)
                if proc.is_alive():
                    proc.kill()
    pick = min if statistic == "min" else statistics.median
    step_of = lambda i, f=pick: f([max(got[r][i][k] for r in range(ranks)) for k in range(reps)])  # noqa: E731
    # The small messages give only the latency: their quickest repetition, the least disturbed
    # (their medians moved 0.25-1.7 ms between minutes on the 2-core VM); the gradients' the statistic.
    points = [[nbytes, step_of(i, min)] for i, nbytes in enumerate(sizes)] + [[gradient_bytes, step_of(len(sizes))]]
    fit = fit_ring(points, ranks)
    return {"backend": backend, "ranks": ranks, **{k: fit[k] for k in ("allreduce_bus_bytes_per_s",
                                                                        "allreduce_latency_s")},
            "gradient_bytes": gradient_bytes, "points": points, "gradient_sync": "model", "reps": reps,
            "statistic": statistic, "median_rel_error": fit["median_rel_error"], "max_rel_error": fit["max_rel_error"],
            "optimizer_s": step_of(len(sizes) + 1)}  # AdamW then zero_grad on every rank at once


def measure_calibrated(args, model, last: dict, device) -> dict:
    """calibrate --allreduce-ranks: the link between args.allreduce_ranks ranks, each with
    calibrate's model, its gradient sync and optimizer step timed after a backward of `last`
    (the largest point calibrate measured: a training step's micro-batch). On cuda the parent's
    copy of the model leaves the GPU first, so that rank 0 has cuda:0 to itself."""
    gradient_bytes = 4 * sum(q.numel() for q in model.parameters())
    if device.type == "cuda":
        import torch
        model.cpu()
        torch.cuda.empty_cache()
    spec = dict(config=args.config, layers=args.layers, fused=args.fused, checkpointing=args.checkpointing,
                shape=tuple(last["shape"]), batch=last["batch"])
    return measure(args.allreduce_ranks, gradient_bytes, device.type, max(args.reps, 20), args.statistic, spec)


def into_profile(profile: dict, summary: dict, link: dict) -> dict:
    """Puts a measured link into a profile (its "link"; the "step", when the profile has one,
    priced at the optimizer as the link's ranks stepped it at once, the lone time kept beside it
    as optimizer_alone_s) and returns the summary with both."""
    profile["link"] = link
    summary = dict(summary, link=link)
    if "step" in profile and "optimizer_s" in link:
        step = profile["step"]
        profile["step"] = dict(step, optimizer_alone_s=step["optimizer_s"], beside_ranks=link["ranks"],
                               optimizer_s=link["optimizer_s"])
        summary = dict(summary, step=profile["step"])
    return summary


def beside_text(step: dict) -> str:
    """How calibrate's optimizer line says the step was timed beside the ranks ("" alone)."""
    if "beside_ranks" not in step:
        return ""
    return f" on {step['beside_ranks']} ranks at once ({1000 * step['optimizer_alone_s']:.2f} ms alone)"


def describe(link: dict) -> str:
    """One line for calibrate's report."""
    gradient_bytes = link["gradient_bytes"]
    grad = ring_seconds(gradient_bytes, link["ranks"], link["allreduce_bus_bytes_per_s"], link["allreduce_latency_s"])
    measured = {x: t for x, t in link["points"]}.get(gradient_bytes)
    how = "the model's gradient sync after a backward"
    return (f"all-reduce ({link['backend']}, {link['ranks']} ranks on this host): bus "
            f"{link['allreduce_bus_bytes_per_s'] / 1e9:.3g} GB/s, latency {1e6 * link['allreduce_latency_s']:.0f} us "
            f"(fit error median {100 * link['median_rel_error']:.1f}%, max {100 * link['max_rel_error']:.1f}%); "
            f"the {gradient_bytes / 1e6:.2f} MB of gradients priced {1000 * grad:.2f} ms"
            + (f" (measured {1000 * measured:.2f} ms, {how})" if measured else "")
            + "; the planner's all-reduce, all-gathers and reduce-scatters ride it in place of the device "
            "preset's link")


def check_ranks(ranks: int, device_type: str, gpus: int) -> str:
    """Why `ranks` cannot be measured here, or "" when it can."""
    if ranks == 0:
        return ""
    if not (2 <= ranks <= 256):
        return f"--allreduce-ranks must be 0 (off) or a count of processes from 2 to 256, got {ranks}"
    if device_type == "cuda" and ranks > gpus:
        return (f"--allreduce-ranks {ranks}: nccl needs a GPU a rank and this machine has {gpus}; use at most "
                f"{gpus}, or 0")
    return ""

