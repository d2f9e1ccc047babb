"""Packed (varlen) attention against the bucketed baseline, on the CPU.

Variants (VARIANTS, one function each, the same rows in and out):
  packed    varlen_attention(backend="sdpa") on the whole pack [N, H, d]: the
            adaptiveload::varlen_sdpa_fwd / varlen_sdpa_bwd ops (one fused CPU flash call
            per group of equal-length segments, the backward from the saved logsumexp);
  bucketed  scaled_dot_product_attention per bucket: the samples of each length as one
            [B, H, L, d] batch (a view of [B, L, H, d] rows, as a model's layout gives), autograd's
            own backward; what the same samples cost trained without packing.
Packs: 30 images of 112 tokens; 4 segments of 64 to 1560 tokens; a mixed pack of the kind the
planner makes on the mini grid (8 images of 112, 3 clips of 560, 1 of 1008). Heads 4 x 16 (our
tiny DiT) and 4 x 64. Modes: forward (no_grad) and forward + backward (q, k, v gradients).
Every variant is checked against the first before timing; then warm-up and --reps rounds,
the variants interleaved within each round (noise from a shared machine lands on all), and
the median per variant, with its ratio to bucketed. One JSON line per row at the end.

  OMP_NUM_THREADS=1 PYTHONPATH=python .venv/bin/python python/bench/bench_varlen_attention.py [--reps 9]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from adaptiveload.attention import varlen_attention

PACKS = {
    "30x112": [112] * 30,
    "4x64-1560": [64, 560, 1008, 1560],
    "mini-mixed": [112] * 8 + [560] * 3 + [1008],
}
HEADS = [(4, 16), (4, 64)]  # (heads, head_dim)
MODES = ("fwd", "fwd+bwd")


def cu(lengths):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)


def buckets(lengths):
    """Sample indices by length, in order of first appearance: {L: [i, ...]}."""
    out = {}
    for i, n in enumerate(lengths):
        out.setdefault(n, []).append(i)
    return out


def setup(lengths, heads, dim, seed=0):
    """Inputs shared by every variant: per-sample q, k, v [L, H, d] fp32 and an output gradient."""
    g = torch.Generator().manual_seed(seed)
    qkv = [[torch.randn(n, heads, dim, generator=g) for _ in range(3)] for n in lengths]
    grad = [torch.randn(n, heads, dim, generator=g) for n in lengths]
    return {"lengths": lengths, "qkv": qkv, "grad": grad}


def packed(inp):
    """-> fn(requires_grad) running varlen_attention over the pack; outputs per sample."""
    c = cu(inp["lengths"])
    q, k, v = (torch.cat([s[j] for s in inp["qkv"]]).requires_grad_() for j in range(3))
    grad = torch.cat(inp["grad"])

    def fn(backward):
        out = varlen_attention(q, k, v, c, c, backend="sdpa")
        if backward:
            out.backward(grad)
            q.grad = k.grad = v.grad = None
        return list(out.detach().split(inp["lengths"]))
    return fn


def bucketed(inp):
    """-> fn(requires_grad) running one scaled_dot_product_attention per bucket of equal lengths."""
    groups = buckets(inp["lengths"])
    batches = []
    for _n, idx in groups.items():  # [B, L, H, d] rows, as a model holds them
        q, k, v = (torch.stack([inp["qkv"][i][j] for i in idx]).requires_grad_() for j in range(3))
        batches.append((idx, q, k, v, torch.stack([inp["grad"][i] for i in idx])))

    def fn(backward):
        outs = [None] * len(inp["lengths"])
        for idx, q, k, v, grad in batches:
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            o = o.transpose(1, 2)
            if backward:
                o.backward(grad)
                q.grad = k.grad = v.grad = None
            for j, i in enumerate(idx):
                outs[i] = o[j].detach()
        return outs
    return fn


VARIANTS = {"packed": packed, "bucketed": bucketed}


def run(fn, mode):
    if mode == "fwd":
        with torch.no_grad():
            return fn(False)
    return fn(True)


def bench(variants, args):
    rows = []
    for pack, lengths in PACKS.items():
        for heads, dim in HEADS:
            inp = setup(lengths, heads, dim)
            fns = {name: make(inp) for name, make in variants.items()}
            ref = next(iter(fns.values()))(False)
            for name, fn in fns.items():  # every variant computes the same attention
                for a, b in zip(fn(False), ref):
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} {pack}: {m}")
            for mode in MODES:
                times = {name: [] for name in fns}
                for r in range(args.warmup + args.reps):
                    for name, fn in fns.items():
                        t0 = time.perf_counter()
                        run(fn, mode)
                        if r >= args.warmup:
                            times[name].append((time.perf_counter() - t0) * 1e3)
                med = {name: statistics.median(t) for name, t in times.items()}
                rows.append({"pack": pack, "segments": len(lengths), "tokens": sum(lengths), "heads": heads,
                             "head_dim": dim, "mode": mode, "ms": med})
                print(f"{pack:>11} | {heads} x {dim:<3} | {mode:<7} | "
                      + " | ".join(f"{name} {ms:8.2f} ms ({ms / med['bucketed']:.2f}x)" for name, ms in med.items()),
                      flush=True)
    for row in rows:
        print(json.dumps(row))


def main(variants=VARIANTS):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), fp32, median of {args.reps}; "
          "(x): time / bucketed")
    bench(variants, args)


if __name__ == "__main__":
    main()
