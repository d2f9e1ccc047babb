"""Measure the model on this machine's device and fit the planner's cost and memory models.

    python -m adaptiveload.calibrate --config wan2.1-1.3b --layers 8 --device cuda --out profile.json
    adaptiveload calibrate -- --config tiny --device cpu          (the CLI hands over to this)

Runs a short sweep of (bucket shape, batch size): forward + backward of the Wan-style DiT
(adaptiveload.models.wan_dit) on random latents, the median of a few repetitions (or the
fastest, --statistic min), peak memory
from torch.cuda.max_memory_allocated. Batch sizes double until the next one is predicted to
exceed --memory-fraction of the device (and an out-of-memory error, should one happen, ends
that shape's sweep after freeing the cache). The fit (C++ core: seconds per sample
a*S + b*S^2 + c0, micro-batch overhead, small-batch efficiency, memory M_static + B(m0 + m1 S),
and the paper's best single exponent for comparison) is written as a profile that
`adaptiveload plan --profile` and AdaptiveBatchSampler(profile=...) read; the fit error
(median and max relative error of predicted vs measured time) is printed and stored.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

import torch

from . import calibrate_step, co_runners, link

# The fits and their errors (no torch), re-exported: calibrate.fit, calibrate.pack_price, ...
from .calibrate_fit import (  # noqa: F401
    draw_packs,
    fit,
    fit_jitter,
    jitter_sigma,
    log_spread,
    pack_parts,
    pack_price,
    packs_path,
    rel_errors,
    shape_tokens,
    with_packs,
)
from .calibrate_step import point_step  # calibrate.point_step, as before
from .models import wan_dit
from .packing import pack

# (frames, height, width) shapes of the sweep: images, short and long clips, two resolutions.
SHAPES = {
    "wan2.1-1.3b": [(1, 480, 832), (17, 480, 832), (33, 480, 832), (49, 480, 832), (81, 480, 832),
                    (1, 720, 1280), (33, 720, 1280), (81, 720, 1280)],
    "tiny": [(1, 32, 48), (1, 96, 160), (5, 96, 160), (9, 96, 160), (17, 64, 112), (17, 96, 160)],
    # The tiny model on the `mini` grid (the CPU miniature where attention dominates long
    # clips): images to 33-frame clips, landscape and square.
    "mini": [(1, 128, 224), (5, 128, 224), (9, 128, 224), (17, 128, 224), (33, 128, 224), (1, 176, 176),
             (33, 176, 176)],
}
# Shapes a sweep measures but does not fit (--held-out): the fit's errors on them are errors of
# prediction, on frame counts and aspect ratios it never saw.
HELD_OUT = {
    "mini": [(13, 128, 224), (25, 128, 224), (21, 176, 176), (29, 224, 128), (1, 128, 176), (9, 128, 176),
             (17, 176, 128)],
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="adaptiveload calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny", choices=sorted(wan_dit.CONFIGS))
    p.add_argument("--layers", type=int, help="override the number of blocks (the fit scales per layer count)")
    p.add_argument("--model", help="planner model preset recorded in the profile (default: the config's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--device-name", help="device name recorded in the profile (default: detected)")
    p.add_argument("--sweep", choices=sorted(SHAPES), help="the shapes to measure (default: the config's; mini: "
                   "the tiny model on the mini grid)")
    p.add_argument("--held-out", action="store_true", help="also measure the sweep's held-out shapes, not fitted, "
                   "and report the fit's errors on them")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--max-tokens", type=int, help="largest batch x tokens measured (a micro-batch's memory "
                   "budget, e.g. train_dit's --mem-budget); default: no bound but --max-batch")
    p.add_argument("--clock", default="wall", choices=["wall", "thread"], help="CPU timing: wall clock, or this "
                   "thread's CPU time (steadier on a shared machine; use it with --threads 1)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per point")
    p.add_argument("--statistic", default="median", choices=["median", "min"], help="what of the repetitions a "
                   "point keeps: median (what an epoch pays: it runs each micro-batch once, jitter included) or min "
                   "(the fastest: the machine without interference)")
    p.add_argument("--interleave", type=int, default=0, metavar="R",
                   help="after the sweep, time every point (held-out ones too) once a round for R rounds, in a "
                        "new shuffled order each round (a fixed seed), and keep those times instead of the "
                        "back-to-back repetitions: a training epoch switches shapes every micro-batch, and its "
                        "micro-batches vary more, and cost more, than one shape repeated (default 0: off)")
    p.add_argument("--co-runners", type=int, default=0, metavar="N",
                   help="CPU only: N processes train the model beside the measurement (one thread each, the "
                        "sweep's shapes in turn at up to --max-batch and --max-tokens), started before the first "
                        "point and stopped after the last, so the times are those of a host whose other cores "
                        "train too, as torchrun's ranks do on one CPU machine (default 0: measured alone)")
    p.add_argument("--time-inputs", action="store_true",
                   help="time each micro-batch with its inputs drawn (random latents and text on the CPU, moved to "
                        "the device: the data loading of examples/train_dit.py), so the fit prices the data loading "
                        "too; the profile says so (fit.inputs_timed) and train_dit then times each micro-batch's "
                        "inputs with it (default: inputs drawn once a point, outside the timing)")
    p.add_argument("--memory-fraction", type=float, default=0.85, help="stop before this share of device memory")
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--fused", action="store_true", help="use the fused adaLN kernel in the model")
    p.add_argument("--out", "-o", default="profile.json")
    p.add_argument("--measurements-out", help="also write the raw measurements (JSONL); with --packs the packs go "
                   "to a file beside it, NAME.packs.jsonl (lines with parts [[S, B], ...], which the core's "
                   "read_measurements does not take)")
    p.add_argument("--packs", type=int, default=0, help="also measure this many packed micro-batches of mixed "
                   "shapes (drawn with a fixed seed from the sweep's shapes, and the held-out ones with --held-out; "
                   "each within --max-batch samples and --max-tokens) and report the fit's error on them")
    p.add_argument("--fit-packs", action="store_true", help="fit the time model to the points and the packs "
                   "together (fit_observations), with a pack's cost per sample beyond its work (pack_sample_s: the "
                   "packed forward's per-sample RoPE, text, timestep and per-segment attention), and report both "
                   "errors; memory stays the points' fit")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "none"], help="also time the optimizer step "
                   "(AdamW over the model's parameters, then zero_grad), which a training step runs once beside its "
                   "micro-batches; the profile's \"step\" then prices it in every planned step (none: leave it out; "
                   "default: %(default)s)")
    p.add_argument("--allreduce-ranks", type=int, default=0, metavar="N",
                   help="also time the all-reduce between N processes on this host (gloo on cpu; nccl on cuda, "
                        "on cuda:0..N-1), a few KiB and the model's own gradient sync after its largest micro-batch, "
                        "and fit the ring's bus bandwidth and latency into the profile's \"link\", which the "
                        "planner's all-reduce, all-gathers and reduce-scatters then ride in place of the device "
                        "preset's; the optimizer step is then timed on the N ranks at once (default 0: off)")
    p.add_argument("--loader", choices=["media", "cache"], help="measure the data loader instead of the model: "
                   "seconds a DataLoader worker takes to decode (media: --loader-manifest's files, MediaDataset) or "
                   "read (cache: the cache folder --loader-manifest, CacheDataset) a sample, by bucket, and samples/s "
                   "with each --loader-workers count; written to --loader-out, the loader profile of `adaptiveload "
                   "plan --loader-profile FILE --loader-workers N` (--out is not written)")
    p.add_argument("--loader-manifest", help="--loader media: the manifest of the files; cache: the cache folder")
    p.add_argument("--loader-root", help="--loader media: the folder the manifest's relative paths are under")
    p.add_argument("--loader-grid", help="--loader: the bucket grid preset (default: the model's)")
    p.add_argument("--loader-device-preset", default="h200", help="--loader: the planner's device preset (which "
                   "rows fit memory; default: %(default)s)")
    p.add_argument("--loader-workers", default="1,2", help="--loader: worker counts whose samples/s is measured "
                   "(default: %(default)s)")
    p.add_argument("--loader-out", default="loader_profile.json", help="--loader: the loader profile to write "
                   "(default: %(default)s)")
    return p


def calibrate_loader(p: argparse.ArgumentParser, args) -> dict:
    """--loader: measures the loader (adaptiveload.data_rate) and writes its profile."""
    from . import data_rate

    if not args.loader_manifest:
        p.error(f"--loader {args.loader} needs --loader-manifest ("
                + ("the manifest of the media" if args.loader == "media" else "the cache folder") + ")")
    try:
        workers = [int(w) for w in args.loader_workers.split(",")]
    except ValueError:
        workers = []
    if not workers or min(workers) < 0:
        p.error(f"--loader-workers: expected a comma list of worker counts >= 0, got {args.loader_workers!r}")
    if args.reps < 1:
        p.error(f"--reps must be >= 1, got {args.reps}")
    model = args.model or wan_dit.config(args.config, args.layers).preset
    prof = data_rate.measure_loader(args.loader, args.loader_manifest, root=args.loader_root, model=model,
                                    grid=args.loader_grid, device=args.loader_device_preset, reps=args.reps,
                                    workers=workers)
    with open(args.loader_out, "w") as f:
        json.dump(prof, f, indent=2)
        f.write("\n")
    fit = prof["fit"]
    print(f"loader fit: {1000 * fit['fixed_s']:.3f} ms + {1e6 * fit['per_token_s']:.3f} us per token a sample")
    print(f"wrote {args.loader_out} (use: adaptiveload plan --loader-profile {args.loader_out} --loader-workers N)")
    return prof


def parse_args(argv=None):
    return parser().parse_args(argv)


def check_args(p: argparse.ArgumentParser, args) -> torch.device:
    """The device to measure on; exits with a usage error (status 2) naming the option for a
    device this machine does not have or a value out of range, before any work starts."""
    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError):
        p.error(f"--device {args.device!r} is not a device; use cpu or cuda[:N]")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this PyTorch was built without CUDA" if torch.version.cuda is None
                   else "no GPU is visible to this PyTorch (driver, CUDA_VISIBLE_DEVICES)")
            p.error(f"--device {args.device}: CUDA is not available here: {why}; measure with --device cpu, "
                    "or run on the GPU machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            p.error(f"--device {args.device}: this machine has {torch.cuda.device_count()} GPU(s), "
                    f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    elif device.type != "cpu":
        p.error(f"--device {args.device}: only cpu and cuda[:N] are supported")
    if args.held_out and (args.sweep or args.config) not in HELD_OUT:
        p.error(f"--held-out: the {args.sweep or args.config} sweep has no held-out shapes (sweeps with them: "
                f"{', '.join(sorted(HELD_OUT))})")
    if (args.sweep or args.config) not in SHAPES:
        p.error(f"--config {args.config} has no sweep of its own; choose one with --sweep "
                f"({', '.join(sorted(SHAPES))})")
    for name, v in (("--max-batch", args.max_batch), ("--reps", args.reps), ("--layers", args.layers),
                    ("--max-tokens", args.max_tokens), ("--threads", args.threads)):
        if v is not None and v < 1:
            p.error(f"{name} must be >= 1, got {v}")
    if args.interleave is None or not (0 <= args.interleave <= 1000):
        p.error(f"--interleave must be a number of rounds from 0 (off) to 1000, got {args.interleave}")
    if args.co_runners is None or not (0 <= args.co_runners <= 256):
        p.error(f"--co-runners must be a count of processes from 0 (off) to 256, got {args.co_runners}")
    if args.co_runners and device.type != "cpu":
        p.error(f"--co-runners loads the other cores of a CPU host; on {args.device} each rank has a device of "
                "its own: leave it off")
    if why := link.check_ranks(args.allreduce_ranks, device.type, torch.cuda.device_count()):
        p.error(why)
    if args.packs is None or not (0 <= args.packs <= 10000):
        p.error(f"--packs must be a count of packs from 0 to 10000, got {args.packs}")
    if args.fit_packs and args.packs < 1:
        p.error("--fit-packs needs packs to fit: add --packs N (N >= 1)")
    if args.packs and args.max_batch < 2:
        p.error(f"--packs: a pack holds 2 or more samples, but --max-batch is {args.max_batch}")
    if not (0 < args.memory_fraction <= 1):  # False for NaN
        p.error(f"--memory-fraction must be in (0, 1], got {args.memory_fraction}")
    for name, path in (("--out", args.out), ("--measurements-out", args.measurements_out)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
            p.error(f"{name} {path}: cannot write into {folder}")
    return device


def timed(step, model, device, reps: int, clock: str = "wall", warmup: bool = True):
    """Seconds of forward (`step()`, returning the loss) + backward, `reps` times after one
    warm-up (none with warmup False): CUDA events on a GPU, else the wall clock or (clock
    "thread") this thread's CPU time. The peak-memory counter is reset before each repetition."""
    def run():
        step().backward()
        model.zero_grad(set_to_none=True)
    return timed_runs(run, device, reps, clock, warmup)


def timed_runs(run, device, reps: int, clock: str = "wall", warmup: bool = True, prepare=None):
    """Seconds of `run()`, `reps` times after one warm-up (none with warmup False), each after
    an untimed `prepare()` where one is given; clocks and the peak-memory reset as timed()'s."""
    times = []
    first = 1 if warmup else 0  # runs before `first` are the warm-up, not kept
    for i in range(first + reps):
        if prepare is not None:
            prepare()
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        t0 = time.thread_time() if clock == "thread" else time.perf_counter()
        run()
        if device.type == "cuda":
            b.record()
            b.synchronize()
            dt = a.elapsed_time(b) / 1000.0
        else:
            dt = (time.thread_time() if clock == "thread" else time.perf_counter()) - t0
        if i >= first:
            times.append(dt)
    return times


def measure_optimizer(model, c, shape, device, reps: int, clock="wall", statistic="median", batch=1) -> dict:
    """Seconds of one optimizer step as a training step runs it: AdamW over the model's
    parameters (its state made by one untimed step first), then zero_grad(set_to_none=True),
    after an untimed forward + backward of `batch` samples of `shape` (a micro-batch's); `reps`
    repetitions, their median (or the fastest). CUDA events on a GPU, else the wall or thread clock."""
    step = point_step(model, c, shape, batch, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run():
        opt.step()
        opt.zero_grad(set_to_none=True)
    times = timed_runs(run, device, reps, clock, prepare=lambda: step().backward())
    params = sum(p.numel() for p in model.parameters())
    return {"optimizer": "AdamW", "optimizer_s": min(times) if statistic == "min" else statistics.median(times),
            "reps": reps, "parameters": params, "log_spread": log_spread(times)}


def measure(model, c, shape, batch, device, reps, clock="wall", statistic="median", time_inputs=False):
    times = timed(point_step(model, c, shape, batch, device, time_inputs), model, device, reps, clock)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    # The median by default: a training epoch runs each micro-batch once and pays its jitter
    # (on a CPU the median of small micro-batches was 13-25% above the fastest, which priced
    # plans of many small micro-batches too low); min: the machine without interference.
    return {"tokens": shape_tokens(shape), "batch": batch, "shape": list(shape),
            "time_s": min(times) if statistic == "min" else statistics.median(times),
            "peak_bytes": peak, "log_spread": log_spread(times)}


def interleave(model, c, points, device, rounds: int, clock="wall", statistic="median", seed: int = 0,
               time_inputs: bool = False):
    """Times every point (a measure() result) once a round for `rounds` rounds, the points in a
    new order each round (random.Random(seed)), so each runs after other shapes as in a
    training epoch; returns the points with time_s (the statistic of the rounds), log_spread
    (theirs) and interleaved = rounds. The inputs are made before each timing, outside it
    (time_inputs: inside, as point_step's)."""
    rng = random.Random(seed)
    times = [[] for _ in points]
    order = list(range(len(points)))
    for r in range(rounds):
        rng.shuffle(order)
        for i in order:
            pt = points[i]
            step = point_step(model, c, tuple(pt["shape"]), pt["batch"], device, time_inputs)
            times[i] += timed(step, model, device, 1, clock, warmup=False)
        print(f"interleaved round {r + 1}/{rounds}: {len(points)} points", flush=True)
    return [dict(pt, time_s=min(t) if statistic == "min" else statistics.median(t), log_spread=log_spread(t),
                 interleaved=rounds) for pt, t in zip(points, times)]


def is_oom(e: BaseException) -> bool:
    return isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)


def sweep(model, c, shapes, device, max_batch: int, reps: int, max_tokens=None, clock="wall",
          memory_fraction: float = 0.85, label: str = "", statistic: str = "median", time_inputs: bool = False):
    """Measures forward + backward of `model` on each (frames, height, width) shape at batch
    sizes 1, 2, 4, ... up to max_batch (and batch x tokens up to max_tokens), stopping a
    shape's sweep before a batch predicted to exceed memory_fraction of the GPU or at an
    out-of-memory error; prints each point (time_inputs: point_step's). Returns the measurements."""
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    points = []
    for si, shape in enumerate(shapes):
        batch = 1
        prev = None
        tokens = shape_tokens(shape)
        while batch <= max_batch and (max_tokens is None or batch == 1 or batch * tokens <= max_tokens):
            if total and prev and prev["peak_bytes"]:
                # Activations grow linearly in B: extrapolate from the last point.
                static = torch.cuda.memory_allocated()
                predicted = static + (prev["peak_bytes"] - static) * batch / prev["batch"]
                if predicted > memory_fraction * total:
                    print(f"  {shape} B={batch}: skipped, predicted {predicted / 1e9:.1f} GB > "
                          f"{memory_fraction:.0%} of {total / 1e9:.1f} GB", flush=True)
                    break
            try:
                pt = measure(model, c, shape, batch, device, reps, clock, statistic, time_inputs)
            except RuntimeError as e:
                if not is_oom(e):
                    raise
                torch.cuda.empty_cache()
                print(f"  {shape} B={batch}: out of memory, ending this shape's sweep", flush=True)
                break
            points.append(pt)
            mem = f", peak {pt['peak_bytes'] / 1e9:.2f} GB" if pt["peak_bytes"] else ""
            print(f"{label}[{si + 1}/{len(shapes)}] frames {shape[0]:3d} {shape[1]}x{shape[2]} S={pt['tokens']:6d} "
                  f"B={batch}: {pt['time_s'] * 1000:9.2f} ms{mem}", flush=True)
            prev = pt
            batch *= 2
    return points


def measure_pack(model, c, shapes, device, reps, clock="wall", statistic="median", time_inputs=False):
    """Forward + backward of the model's packed path (forward_packed on a PackedBatch) on
    random latents of `shapes`, the flow-matching loss over every token; timed as measure()
    (time_inputs: the latents, noise and text drawn inside each timing, draw_inputs)."""
    latents = [(c.in_channels, 1 + (f - 1) // 4, h // 8, w // 8) for f, h, w in shapes]
    n = len(shapes)
    if not time_inputs:  # drawn once, outside the timing
        x0 = [torch.randn(z, device=device) for z in latents]
        eps = [torch.randn_like(x) for x in x0]
    t = torch.rand(n, device=device)
    noised = lambda x0, eps: [(1 - ti) * x + ti * e for ti, x, e in zip(t.tolist(), x0, eps)]  # noqa: E731
    if not time_inputs:
        xt = noised(x0, eps)
        texts = [torch.randn(c.text_len, c.text_dim, device=device) for _ in shapes]
    fixed = None if time_inputs else (x0, eps, texts, xt)
    amp = device.type == "cuda"
    packed = None

    def step():
        nonlocal packed
        if time_inputs:
            drawn = calibrate_step.draw_inputs(latents + latents + [(c.text_len, c.text_dim)] * n, device)
            x0, eps, texts = drawn[:n], drawn[n:2 * n], drawn[2 * n:]
            xt = noised(x0, eps)
        else:
            x0, eps, texts, xt = fixed
        packed = pack(xt, c.patch, timesteps=t * 1000, text=texts)
        target = pack([e - x for x, e in zip(x0, eps)], c.patch).tokens  # [N, C*pt*ph*pw]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            return (model.forward_packed(packed).float() - target).pow(2).mean()

    times = timed(step, model, device, reps, clock)
    parts = pack_parts(shapes)
    return {"parts": parts, "tokens": int(packed.cu_seqlens[-1]), "samples": len(shapes),
            "time_s": min(times) if statistic == "min" else statistics.median(times),
            "peak_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
            "log_spread": log_spread(times)}


def sweep_packs(model, c, packs, device, reps, clock="wall", statistic="median", time_inputs=False):
    """measure_pack on each pack (a list of shapes); an out-of-memory error skips that pack. Prints each."""
    out = []
    for i, shapes in enumerate(packs):
        try:
            m = measure_pack(model, c, shapes, device, reps, clock, statistic, time_inputs)
        except RuntimeError as e:
            if not is_oom(e):
                raise
            torch.cuda.empty_cache()
            print(f"pack [{i + 1}/{len(packs)}]: out of memory, skipped", flush=True)
            continue
        out.append(m)
        parts = " ".join(f"{S}x{B}" for S, B in m["parts"])
        print(f"pack [{i + 1}/{len(packs)}] {m['samples']} samples N={m['tokens']:6d} ({parts}): "
              f"{m['time_s'] * 1000:9.2f} ms", flush=True)
    return out


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.loader:  # the loader, not the model
        return calibrate_loader(p, args)
    device = check_args(p, args)
    if args.threads:
        torch.set_num_threads(args.threads)
    c = wan_dit.config(args.config, args.layers)
    torch.manual_seed(0)
    model = wan_dit.WanDiT(c, fused_adaln=args.fused, checkpointing=args.checkpointing).to(device)
    name_of_sweep = args.sweep or args.config
    opts = dict(max_batch=args.max_batch, reps=args.reps, max_tokens=args.max_tokens, clock=args.clock,
                statistic=args.statistic, memory_fraction=args.memory_fraction, time_inputs=args.time_inputs)
    pool = SHAPES[name_of_sweep] + (HELD_OUT[name_of_sweep] if args.held_out else [])
    drawn = []
    if args.packs:
        try:
            drawn = draw_packs(pool, args.packs, args.max_batch, args.max_tokens)
        except ValueError as e:
            p.error(f"--packs: {e}")
    with co_runners.co_running(args.co_runners, args.config, args.layers, SHAPES[name_of_sweep], args.max_batch,
                               args.max_tokens, args.fused, args.checkpointing) as co_steps:
        points = sweep(model, c, SHAPES[name_of_sweep], device, **opts)
        held = sweep(model, c, HELD_OUT[name_of_sweep], device, label="held out ", **opts) if args.held_out else []
        if args.interleave:
            both = interleave(model, c, points + held, device, args.interleave, args.clock, args.statistic,
                              time_inputs=args.time_inputs)
            points, held = both[:len(points)], both[len(points):]
        packs = (sweep_packs(model, c, drawn, device, args.reps, args.clock, args.statistic, args.time_inputs)
                 if drawn else [])
        # Last (its steps change the weights), after the largest micro-batch measured, as a step runs it.
        last = max(points, key=lambda q: q["tokens"] * q["batch"],
                   default=dict(shape=SHAPES[name_of_sweep][0], batch=1))
        step = (measure_optimizer(model, c, tuple(last["shape"]), device, max(args.reps, 5), args.clock,
                                  args.statistic, last["batch"]) if args.optimizer != "none" else None)
    measured_link = link.measure_calibrated(args, model, last, device) if args.allreduce_ranks else None
    if args.measurements_out:
        with open(args.measurements_out, "w") as f:
            for pt in points:
                f.write(json.dumps(pt) + "\n")
            for pt in held:
                f.write(json.dumps(dict(pt, held_out=True)) + "\n")
        if packs:  # a file of their own: read_measurements takes one (tokens, batch) per line
            with open(packs_path(args.measurements_out), "w") as f:
                for m in packs:
                    f.write(json.dumps(m) + "\n")
    name = args.device_name or (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    try:
        profile, summary = fit(points, args.model or c.preset, name, held)
    except ValueError as e:  # too few usable measurements (every shape out of memory, say)
        print(f"adaptiveload calibrate: error: cannot fit the {len(points)} measurement(s): {e}", file=sys.stderr)
        return None
    if packs:
        profile, summary = with_packs(profile, summary, points, packs, args.fit_packs, held)
    jitter = fit_jitter(points)
    if jitter or args.co_runners or step or measured_link or args.time_inputs:
        j = json.loads(profile)
        if args.time_inputs:  # train_dit times each micro-batch's inputs with it where this is set
            j["fit"]["inputs_timed"] = True
            summary = dict(summary, inputs_timed=True)
        if step:  # priced once a global step by the planner (ParallelLayout::step_fixed_s)
            j["step"] = step
            summary = dict(summary, step=step)
        if measured_link:  # the planner's collectives ride it; the optimizer as the ranks step it
            summary = link.into_profile(j, summary, measured_link)
            step = j.get("step")
        if jitter:
            j["jitter"] = jitter
            summary = dict(summary, jitter=jitter)
        if args.co_runners:  # what the times were measured beside: co-runners and their steps
            j["fit"]["co_runners"], j["fit"]["co_runner_steps"] = args.co_runners, co_steps
            summary = dict(summary, co_runners=args.co_runners, co_runner_steps=co_steps)
        profile = json.dumps(j, indent=2)
    with open(args.out, "w") as f:
        f.write(profile + "\n")
    print(f"fit of {summary['points']} measurements: seconds per sample = {summary['a']:.4g}*S + "
          f"{summary['b']:.4g}*S^2 + {summary['c0']:.4g}; overhead {summary['overhead_s'] * 1000:.2f} ms; "
          f"efficiency halves at {summary['half_efficiency_tokens']:.0f} tokens")
    print(f"fit error: median {100 * summary['median_rel_error']:.1f}%, max {100 * summary['max_rel_error']:.1f}%; "
          f"best single exponent p = {summary['power_p']:.3f} (error median "
          f"{100 * summary['power_median_rel_error']:.1f}%, max {100 * summary['power_max_rel_error']:.1f}%)")
    if args.time_inputs:
        print("fit with the inputs: each micro-batch timed with its inputs drawn (the data loading), which "
              "train_dit then times with it too")
    if held:
        print(f"held-out error ({summary['held_out_points']} measurements of {len(HELD_OUT[name_of_sweep])} shapes "
              f"not fitted): median {100 * summary['held_out_median_rel_error']:.1f}%, max "
              f"{100 * summary['held_out_max_rel_error']:.1f}%")
    if jitter:
        print(f"jitter ({jitter['points']} measurements): the repetitions' log spread = {jitter['k']:.3g} * T^"
              f"{jitter['q']:.3f} (median {100 * jitter['median_log_spread']:.1f}%, fit error median "
              f"{100 * jitter['median_rel_error']:.0f}%)")
    if packs:
        how = "fitted with the points" if args.fit_packs else "not fitted"
        print(f"pack error ({summary['pack_points']} packs of mixed shapes, {how}): median "
              f"{100 * summary['pack_median_rel_error']:.1f}%, max {100 * summary['pack_max_rel_error']:.1f}%")
        if args.fit_packs:
            print(f"a pack's cost per sample beyond its work: {1000 * summary.get('pack_sample_s', 0.0):.3f} ms "
                  f"(pack error with the points' own fit, before it: median "
                  f"{100 * summary['pack_unfitted_median_rel_error']:.1f}%, max "
                  f"{100 * summary['pack_unfitted_max_rel_error']:.1f}%)")
    if args.co_runners:
        print(f"measured beside {args.co_runners} co-runner(s) training: {', '.join(map(str, co_steps))} steps")
    if step:
        beside = link.beside_text(step)
        print(f"optimizer step ({step['optimizer']}, {step['parameters']:,} parameters, then zero_grad): "
              f"{1000 * step['optimizer_s']:.2f} ms{beside}, {args.statistic} of {step['reps']}; priced once a "
              "global step")
    if measured_link:
        print(link.describe(measured_link))
    print(f"wrote {args.out}")
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
