"""PyTorch eager adaLN vs adaptiveload.fused_adaln on CPU (or CUDA with --device cuda).

Default shape: Wan 2.1 1.3B at 480p, one sample of 32,760 tokens x dim 1536 in bf16, with
per-sample modulation [1, 1536] in fp32 (as Wan keeps it). Eager is the textbook path:
F.layer_norm, then * (1 + scale), then + shift (type promotion makes its output fp32, as in
Wan's blocks); the fused op writes x's dtype. Modes: forward, and forward + backward
(gradients of x, shift and scale). Warm-up, then the median of --reps runs of each, side
by side with the speedup, for each dtype (default bf16 and fp32); the peak memory of each
(implementation, mode) is measured in a fresh interpreter process as the growth of its peak
resident set over the inputs (VmHWM after resetting it; the CPU allocator has no peak counter in torch 1.13; on CUDA,
torch.cuda.max_memory_allocated). One JSON line per dtype at the end.

  .venv/bin/python python/bench/bench_adaln_torch.py [--tokens 32760 --dim 1536 --reps 7]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import adaptiveload

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def eager_adaln(x, shift, scale, eps):
    return F.layer_norm(x, (x.shape[-1],), eps=eps) * (1 + scale) + shift


def fused_adaln(x, shift, scale, eps):
    return adaptiveload.fused_adaln(x, shift, scale, eps=eps)


def setup(args):
    """Inputs shared by every implementation and mode: x [N, D], shift/scale [1, D], dy."""
    g = torch.Generator().manual_seed(0)
    dt = DTYPES[args.dtype]
    x = torch.randn(args.tokens, args.dim, generator=g).to(dt).to(args.device)
    shift = (0.1 * torch.randn(1, args.dim, generator=g)).to(args.device)
    scale = (0.1 * torch.randn(1, args.dim, generator=g)).to(args.device)
    dy = torch.randn(args.tokens, args.dim, generator=g).to(dt).to(args.device)
    return x, shift, scale, dy


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, args):
    for _ in range(args.warmup):
        fn()
    times = []
    for _ in range(args.reps):
        sync(args.device)
        t0 = time.perf_counter()
        fn()
        sync(args.device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_mode(impl, mode, inputs, args):
    x, shift, scale, dy = inputs
    if mode == "fwd":
        def fn():
            with torch.no_grad():
                impl(x, shift, scale, args.eps)
    else:
        xs, sh, sc = (t.detach().clone().requires_grad_() for t in (x, shift, scale))

        def fn():
            y = impl(xs, sh, sc, args.eps)
            y.backward(dy.to(y.dtype))
            xs.grad = sh.grad = sc.grad = None
    return time_ms(fn, args)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss():
    """Resets the kernel's resident high-water mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure_peak(args):
    """Child process: run one (impl, mode) once and print the peak memory it added, bytes."""
    inputs = setup(args)
    impl = {"eager": eager_adaln, "fused": fused_adaln}[args.measure_impl]
    x, shift, scale, dy = inputs
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        reset_peak_rss()
        base = rss_bytes()
    if args.measure_mode == "fwd":
        with torch.no_grad():
            impl(x, shift, scale, args.eps)
    else:
        xs, sh, sc = (t.detach().clone().requires_grad_() for t in (x, shift, scale))
        if args.device != "cuda":
            reset_peak_rss()
            base = rss_bytes()
        y = impl(xs, sh, sc, args.eps)
        y.backward(dy.to(y.dtype))
    if args.device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = peak_rss_bytes() - base
    print(peak)


def peak_mb(impl, mode, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--tokens", str(args.tokens), "--dim", str(args.dim),
           "--dtype", args.dtype, "--device", args.device, "--measure-impl", impl, "--measure-mode", mode]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=True).stdout
    return int(out.split()[-1]) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32760)
    ap.add_argument("--dim", type=int, default=1536)
    ap.add_argument("--dtype", default="bf16,fp32", help="comma list of " + ", ".join(sorted(DTYPES)))
    ap.add_argument("--measure-impl", help=argparse.SUPPRESS)
    ap.add_argument("--measure-mode", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if args.measure_impl:
        return measure_peak(args)
    for dtype in args.dtype.split(","):
        if dtype not in DTYPES:
            ap.error(f"--dtype: unknown dtype {dtype!r}")
        args.dtype = dtype
        bench_dtype(args)


def bench_dtype(args):
    inputs = setup(args)
    x = inputs[0]
    # Sanity: both compute the same function (to bf16 rounding) before anything is timed.
    with torch.no_grad():
        a = eager_adaln(*inputs[:3], args.eps).float()
        b = fused_adaln(*inputs[:3], args.eps).float()
    max_err = (a - b).abs().max().item()
    assert max_err < 0.1, f"fused and eager disagree by {max_err}"

    elem_bytes = x.element_size()
    print(f"adaLN {args.tokens} x {args.dim} {args.dtype}, modulation [1, {args.dim}] fp32, device {args.device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); median of {args.reps}")
    print(f"{'mode':<8} | {'eager ms':>9} | {'fused ms':>9} | {'speedup':>7} | {'fused GB/s':>10} | "
          f"{'eager peak MB':>13} | {'fused peak MB':>13}")
    result = {"bench": "adaln_torch", "tokens": args.tokens, "dim": args.dim, "dtype": args.dtype,
              "device": args.device, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "reps": args.reps, "max_abs_diff": max_err}
    for mode, bytes_per_elem in (("fwd", 2 * elem_bytes), ("fwd+bwd", 5 * elem_bytes)):
        t_eager = run_mode(eager_adaln, mode, inputs, args)
        t_fused = run_mode(fused_adaln, mode, inputs, args)
        gbs = bytes_per_elem * x.numel() / (t_fused * 1e-3) / 1e9
        m_eager, m_fused = peak_mb("eager", mode, args), peak_mb("fused", mode, args)
        print(f"{mode:<8} | {t_eager:9.2f} | {t_fused:9.2f} | {t_eager / t_fused:6.2f}x | {gbs:10.1f} | "
              f"{m_eager:13.1f} | {m_fused:13.1f}")
        key = mode.replace("+", "_")
        result[f"{key}_eager_ms"] = round(t_eager, 3)
        result[f"{key}_fused_ms"] = round(t_fused, 3)
        result[f"{key}_speedup"] = round(t_eager / t_fused, 3)
        result[f"{key}_eager_peak_mb"] = round(m_eager, 1)
        result[f"{key}_fused_peak_mb"] = round(m_fused, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
