"""Processes that train beside a measurement (calibrate --co-runners): on one CPU host,
torchrun's ranks compute at the same time and may share the caches, the memory bandwidth and,
on a VM, the physical cores; where they do, a profile measured alone prices their micro-batches
too low (docs/evaluation.md measured both kinds of host). Each co-runner trains the model
(forward + backward, one thread) on the sweep's shapes in turn until told to stop, and counts
its steps so the caller can show they ran."""
import contextlib
import multiprocessing as mp
import time

from .calibrate_fit import shape_tokens
from .calibrate_step import point_step
from .models import wan_dit

#: How long a co-runner may take to start (import torch, build the model, run one step).
START_TIMEOUT_S = 300.0


def _train(config: str, layers, shapes, batches, fused: bool, checkpointing: bool, ready, stop, steps):
    import torch
    torch.set_num_threads(1)
    c = wan_dit.config(config, layers)
    torch.manual_seed(1)
    model = wan_dit.WanDiT(c, fused_adaln=fused, checkpointing=checkpointing)
    device = torch.device("cpu")
    i = 0
    while not stop.is_set():
        shape, batch = shapes[i % len(shapes)], batches[i % len(shapes)]
        point_step(model, c, shape, batch, device)().backward()
        model.zero_grad(set_to_none=True)
        i += 1
        with steps.get_lock():
            steps.value = i
        ready.set()


@contextlib.contextmanager
def co_running(n: int, config: str, layers, shapes, max_batch: int, max_tokens, fused=False,
               checkpointing=False):
    """Runs the body with n co-runners training (none for n = 0); yields a list that, once the
    body is done, holds each co-runner's step count. Waits until every co-runner has finished a
    step before the body starts; raises RuntimeError naming the co-runner that failed to start
    or exited early (its own traceback is on stderr)."""
    counts = []
    if n <= 0:
        yield counts
        return
    batches = [max(1, min(max_batch, max_tokens // shape_tokens(s))) if max_tokens else max_batch for s in shapes]
    ctx = mp.get_context("spawn")  # no fork of a process that has torch's threads
    stop = ctx.Event()
    procs = []
    try:
        for k in range(n):
            ready, steps = ctx.Event(), ctx.Value("q", 0)
            proc = ctx.Process(target=_train, args=(config, layers, list(shapes), batches, fused, checkpointing,
                                                    ready, stop, steps), daemon=True, name=f"co-runner {k}")
            proc.start()
            procs.append((proc, ready, steps))
        deadline = time.monotonic() + START_TIMEOUT_S
        for proc, ready, _ in procs:
            while not ready.wait(1.0):
                if not proc.is_alive():
                    raise RuntimeError(f"calibrate --co-runners: {proc.name} exited with status {proc.exitcode} "
                                       "before its first step (its error is above)")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"calibrate --co-runners: {proc.name} did not finish a step within "
                                       f"{START_TIMEOUT_S:.0f} s")
        print(f"co-runners: {n} training beside the measurement", flush=True)
        yield counts
        for proc, _, steps in procs:
            if not proc.is_alive():
                raise RuntimeError(f"calibrate --co-runners: {proc.name} exited with status {proc.exitcode} "
                                   "during the measurement: the times were not all taken under load")
            counts.append(int(steps.value))
    finally:
        stop.set()
        for proc, _, _ in procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join()
