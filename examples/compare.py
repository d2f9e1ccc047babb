#!/usr/bin/env python3
"""Runs equal_tokens, dual and balanced with the fused adaLN kernel off and on, on the same
manifest and model, and writes one table (Markdown and JSON): measured imbalance, throughput,
peak memory and speedup over equal_tokens, the planner's prediction beside each, and the
paper's figures as a reference row.

  python examples/compare.py --config tiny --world-size 4 --steps 6 --out-dir out/compare
  python examples/compare.py --config wan2.1-1.3b --layers 4 --device cuda --out-dir out/compare
Other options are train_dit.py's.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_dit  # noqa: E402

STRATEGIES = ["equal_tokens", "dual", "balanced"]


def table(results):
    base = {}
    for r in results:
        if r["strategy"] == "equal_tokens":
            base[r["fused_adaln"]] = r["measured"]["throughput_samples_per_s"]
    base_off = base.get(False)
    rows = []
    for r in results:
        m, p = r["measured"], r["predicted"]
        b = base.get(r["fused_adaln"])
        rows.append({
            "strategy": r["strategy"],
            "fused_adaln": r["fused_adaln"],
            "imbalance": m["imbalance"],
            "imbalance_predicted": p["imbalance"],
            "throughput_samples_per_s": m["throughput_samples_per_s"],
            "throughput_predicted": p["throughput_samples_per_s"],
            "tokens_per_s": m["throughput_tokens_per_s"],
            "peak_memory_gb": m.get("peak_memory_bytes", float("nan")) / 1e9 if "peak_memory_bytes" in m else None,
            "peak_memory_utilization": m.get("peak_memory_utilization"),
            "speedup_vs_equal_tokens": m["throughput_samples_per_s"] / b if b else None,
            "speedup_vs_equal_tokens_eager": m["throughput_samples_per_s"] / base_off if base_off else None,
        })
    return rows


def markdown(rows, meta):
    out = [f"# Strategy comparison: {meta}", "",
           "| strategy | fused adaLN | imbalance (measured / predicted) | samples/s (measured / predicted) | "
           "tokens/s | peak memory | speedup vs equal_tokens (same kernel) | vs equal_tokens eager |",
           "|---|---|---|---|---|---|---|---|"]
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    num = lambda v, f="{:.2f}": "-" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        mem = "-" if r["peak_memory_gb"] is None else f"{r['peak_memory_gb']:.1f} GB ({pct(r['peak_memory_utilization'])})"
        out.append(f"| {r['strategy']} | {'on' if r['fused_adaln'] else 'off'} | {pct(r['imbalance'])} / "
                   f"{pct(r['imbalance_predicted'])} | {num(r['throughput_samples_per_s'])} / "
                   f"{num(r['throughput_predicted'])} | {num(r['tokens_per_s'], '{:.0f}')} | {mem} | "
                   f"{num(r['speedup_vs_equal_tokens'], '{:.2f}x')} | {num(r['speedup_vs_equal_tokens_eager'], '{:.2f}x')} |")
    P = train_dit.PAPER
    out.append(f"| paper (Wan 2.1, reported) | yes | {pct(P['imbalance_equal_tokens'])} -> {pct(P['imbalance_dual'])} "
               f"| +{pct(P['throughput_gain'])} | - | VRAM efficiency +{pct(P['vram_efficiency_gain'])} | "
               f"{1 + P['throughput_gain']:.2f}x | - |")
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default="out/compare")
    args, rest = p.parse_known_args(argv)
    targs = rest + ["--strategy", ",".join(STRATEGIES), "--fused", "both"]
    results = train_dit.main(targs)
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    os.makedirs(args.out_dir, exist_ok=True)
    rows = table(results)
    r0 = results[0]
    meta = (f"{r0['config']} ({r0['layers']} layers), {r0['world_size']} ranks {r0['mode']}, {r0['device']}, "
            f"{r0['measured']['steps']} steps each")
    with open(os.path.join(args.out_dir, "compare.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "runs": results, "paper": train_dit.PAPER}, f, indent=2)
    md = markdown(rows, meta)
    with open(os.path.join(args.out_dir, "compare.md"), "w") as f:
        f.write(md)
    print(md)
    return rows


if __name__ == "__main__":
    main()
