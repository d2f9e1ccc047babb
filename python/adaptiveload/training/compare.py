"""Runs the strategies (by default every one the core registers; --strategies names some) with
the fused adaLN kernel off and on, on the same manifest and model, and writes one table (Markdown and JSON):
measured imbalance, throughput, peak memory and speedup over equal_tokens, the planner's
prediction beside each, and the paper's figures for reference.

  python examples/compare.py --config tiny --world-size 4 --steps 6 --out-dir out/compare
  python examples/compare.py --config wan2.1-1.3b --layers 4 --device cuda --out-dir out/compare
Whole epochs of a fixed subset, repeated, calibrated first (medians and ranges of the measured
figures beside the prediction; the paper's figures in a table of their own):
  python examples/compare.py --model diffusers-wan --config tiny --strategies all --epoch --subset 100 \\
      --repeat 3 --calibrate --threads 1 -m taichi_hd.csv -m coco2017_val_images.csv
Packed balanced beside bucketed balanced (--packing both: each strategy bucketed, then packed,
in every repetition; the packed rows say their speedup over the same strategy bucketed):
  python examples/compare.py --strategies balanced --packing both --fused off --epoch --subset 200 \
      --repeat 3 --threads 1 --clock thread -w 4 -m data/taichi_hd.csv -m data/coco2017_val_images.csv
Every run of a repetition one after the other, or with --interleave a global step each in turn (the
same machine state for every strategy, step by step: the paired ratios then see no drift between runs).
Other options are train_dit.py's (--model wan-dit, our own DiT, is the default).
This module is the comparison; examples/compare.py runs it (as does python -m
adaptiveload.training.compare).
"""
import argparse
import json
import os
import time
from statistics import median
from typing import List, Optional

import torch

from .. import calibrate
from ..models import wan_dit
from . import train_dit
from .distributed import finish_distributed
from .options import PAPER, strategy_names

# The speed probe's micro-batch: (frames, height, width) and batch, a mid-sized shape of the
# CPU miniature's sweep (calibrate.SHAPES["mini"]).
PROBE_SHAPE, PROBE_BATCH = (17, 128, 224), 2


def strategies_of(text: str) -> List[str]:
    """--strategies: 'all' (the default), every strategy in the core's registry in its order;
    else the comma list as given (train_dit's sampler refuses a name the registry lacks)."""
    return strategy_names() if text == "all" else [s.strip() for s in text.split(",")]


def packing_of(r) -> str:
    """A run's packing ("on": its micro-batches trained as packs); runs of an older train_dit: off."""
    return r.get("packing", "off")


def bucketed_speedups(rows, key, predicted_key):
    """Each packed row's samples/s (`key` measured, `predicted_key` the planner's) over the same
    strategy and kernel bucketed in the same table: "speedup_vs_bucketed" and
    "speedup_vs_bucketed_predicted" (None for bucketed rows, or with no bucketed run beside it)."""
    bucketed = {(r["strategy"], r["fused_adaln"]): r for r in rows if r["packing"] == "off"}
    for r in rows:
        b = bucketed.get((r["strategy"], r["fused_adaln"])) if r["packing"] == "on" else None
        r["speedup_vs_bucketed"] = r[key] / b[key] if b and b[key] else None
        r["speedup_vs_bucketed_predicted"] = (r[predicted_key] / b[predicted_key]
                                              if b and b[predicted_key] else None)


def table(results):
    base = {}
    for r in results:
        if r["strategy"] == "equal_tokens" and packing_of(r) == "off":
            base[r["fused_adaln"]] = r["measured"]["throughput_samples_per_s"]
    base_off = base.get(False)
    rows = []
    for r in results:
        m, p = r["measured"], r["predicted"]
        b = base.get(r["fused_adaln"])
        rows.append({
            "strategy": r["strategy"],
            "fused_adaln": r["fused_adaln"],
            "packing": packing_of(r),
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
    bucketed_speedups(rows, "throughput_samples_per_s", "throughput_predicted")
    return rows


def percent(v: float) -> str:
    """v as a percentage with one decimal, never "-0.0%" (a measured idle share of -1e-17)."""
    return f"{round(100 * v, 1) + 0.0:.1f}%"


def packing_columns(rows):
    """(header cells, separator cells, per-row cells) of the packing columns: none when no row is
    packed (the table as without packing), else the packing and the speedup over bucketed."""
    if not any(r["packing"] == "on" for r in rows):
        return "", "", lambda r: ""
    def cell(r):
        if r["speedup_vs_bucketed"] is None:
            return f" {r['packing']} | - |"
        return f" {r['packing']} | {r['speedup_vs_bucketed']:.2f}x / {r['speedup_vs_bucketed_predicted']:.2f}x |"

    return " packing | speedup vs bucketed, same strategy and kernel (measured / predicted) |", "---|---|", cell


def markdown(rows, meta):
    head, sep, cell = packing_columns(rows)
    out = [f"# Strategy comparison: {meta}", "",
           "| strategy | fused adaLN | imbalance (measured / predicted) | samples/s (measured / predicted) | "
           "tokens/s | peak memory | speedup vs equal_tokens (same kernel) | vs equal_tokens eager |" + head,
           "|---|---|---|---|---|---|---|---|" + sep]
    pct = lambda v: "-" if v is None else percent(v)  # noqa: E731
    num = lambda v, f="{:.2f}": "-" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        mem = ("-" if r["peak_memory_gb"] is None
               else f"{r['peak_memory_gb']:.1f} GB ({pct(r['peak_memory_utilization'])})")
        out.append(f"| {r['strategy']} | {'on' if r['fused_adaln'] else 'off'} | {pct(r['imbalance'])} / "
                   f"{pct(r['imbalance_predicted'])} | {num(r['throughput_samples_per_s'])} / "
                   f"{num(r['throughput_predicted'])} | {num(r['tokens_per_s'], '{:.0f}')} | {mem} | "
                   f"{num(r['speedup_vs_equal_tokens'], '{:.2f}x')} | "
                   f"{num(r['speedup_vs_equal_tokens_eager'], '{:.2f}x')} |" + cell(r))
    P = PAPER
    out.append(f"| paper (Wan 2.1, reported) | yes | {pct(P['imbalance_equal_tokens'])} -> {pct(P['imbalance_dual'])} "
               f"| +{pct(P['throughput_gain'])} | - | VRAM efficiency +{pct(P['vram_efficiency_gain'])} | "
               f"{1 + P['throughput_gain']:.2f}x | - |" + " - |" * head.count("|"))  # as many cells as the header
    return "\n".join(out) + "\n"


def calibrate_profile(targs, path: str, max_batch: Optional[int], reps: int) -> dict:
    """Measures train_dit's model (--model, --config, --layers, --device, --checkpointing;
    fused kernel on) over adaptiveload.calibrate's sweep for the run's grid (or its config's),
    timed with the clock the runs use (--clock), at batch sizes up to the run's memory budget
    (at most max_batch; default 64 where the budget is set, else 4), and writes the core's fit
    to `path`: the profile every run of this comparison then plans with. Where the sweep has
    held-out shapes they are measured too, not fitted, and the fit's errors on them reported."""
    a = train_dit.parse_args(targs)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    c = wan_dit.config(a.config, a.layers)
    torch.manual_seed(a.seed)
    model = train_dit.build_model(a.model, c, True, a.checkpointing).to(device)
    sweep = a.grid if a.grid in calibrate.SHAPES else a.config
    budget = train_dit.mem_budget_of(a)
    opts = dict(max_batch=max_batch or (64 if budget else 4), reps=reps, max_tokens=budget, clock=a.clock)
    points = calibrate.sweep(model, c, calibrate.SHAPES[sweep], device, **opts)
    held = calibrate.sweep(model, c, calibrate.HELD_OUT[sweep], device, label="held out ", **opts) \
        if sweep in calibrate.HELD_OUT else []
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    profile, summary = calibrate.fit(points, c.preset, name, held)
    with open(path, "w") as f:
        f.write(profile + "\n")
    held_text = (f"; on {summary['held_out_points']} held-out points (shapes not fitted) median "
                 f"{100 * summary['held_out_median_rel_error']:.1f}%, "
                 f"max {100 * summary['held_out_max_rel_error']:.1f}%"
                 if held else "")
    print(f"calibrated {a.model} ({a.config}, {c.layers} layers, sweep {sweep}) on {name}: {len(points)} points, fit "
          f"error median {100 * summary['median_rel_error']:.1f}%, max {100 * summary['max_rel_error']:.1f}%"
          f"{held_text}; wrote {path}", flush=True)
    return summary


def summarize(repeats):
    """repeats: one list of train_dit results per repetition -> one row per (strategy, kernel)
    with the measured figures' median, min and max over the repetitions and the prediction
    (the same plan and profile in every repetition, so one value)."""
    rows = []
    for i, r0 in enumerate(repeats[0]):
        runs = [rep[i] for rep in repeats]
        assert all((r["strategy"], r["fused_adaln"], packing_of(r)) == (r0["strategy"], r0["fused_adaln"],
                                                                           packing_of(r0)) for r in runs)
        idle = [r["measured"]["imbalance"] for r in runs]
        sps = [r["measured"]["throughput_samples_per_s"] for r in runs]
        waited = [r["measured"]["idle_measured"] for r in runs if "idle_measured" in r["measured"]]
        rows.append({
            "strategy": r0["strategy"], "fused_adaln": r0["fused_adaln"], "packing": packing_of(r0),
            "packs": r0.get("packs"), "repeats": len(runs),
            "steps": r0["measured"]["steps"], "samples": r0["measured"]["samples"], "plan_steps": r0["plan_steps"],
            "imbalance_median": median(idle), "imbalance_min": min(idle), "imbalance_max": max(idle),
            "imbalance_runs": idle, "imbalance_predicted": r0["predicted"]["imbalance"],
            "samples_per_s_median": median(sps), "samples_per_s_min": min(sps), "samples_per_s_max": max(sps),
            "samples_per_s_runs": sps, "samples_per_s_predicted": r0["predicted"]["throughput_samples_per_s"],
            "time_s_median": median([r["measured"]["time_s"] for r in runs]),
            "idle_measured_runs": waited or None,
            # The prediction with the profile's jitter (train_dit.jitter_prediction), None without it.
            "imbalance_predicted_jitter": r0["predicted"].get("with_jitter", {}).get("imbalance"),
            "samples_per_s_predicted_jitter": r0["predicted"].get("with_jitter", {}).get("throughput_samples_per_s"),
            "time_split_runs": time_splits(runs),
        })
    base = {r["fused_adaln"]: r["samples_per_s_median"] for r in rows
            if r["strategy"] == "equal_tokens" and r["packing"] == "off"}
    for r in rows:
        b = base.get(r["fused_adaln"])
        r["speedup_vs_equal_tokens"] = r["samples_per_s_median"] / b if b else None
    bucketed_speedups(rows, "samples_per_s_median", "samples_per_s_predicted")
    paired_ratios(rows)
    return rows


def speed_probe(targs, seconds: float = 1.0) -> Optional[float]:
    """The machine's speed now against the profile the runs are planned with: one fixed
    micro-batch of the runs' model (PROBE_SHAPE x PROBE_BATCH, our wan-dit at the runs' config,
    threads and clock) run for about `seconds` after one warm-up, its median seconds over the
    profile's price of it. 1.0: the machine runs as when it was calibrated; 1.2: 20% slower, on
    everything the epoch computes alike. None without a profile, or for another model."""
    a = train_dit.parse_args(targs)
    if not a.profile or a.model != "wan-dit":
        return None
    with open(a.profile) as f:
        cost = json.load(f)["cost"]
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    c = wan_dit.config(a.config, a.layers)
    model = wan_dit.WanDiT(c).to(device)
    # With its inputs drawn inside the timing where the runs draw theirs so (train_dit --time-inputs).
    step = calibrate.point_step(model, c, PROBE_SHAPE, PROBE_BATCH, device, train_dit.inputs_timed_of(a))
    times = calibrate.timed(step, model, device, 1, a.clock)
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        times += calibrate.timed(step, model, device, 1, a.clock, warmup=False)
    price = calibrate.pack_price(cost, [[calibrate.shape_tokens(PROBE_SHAPE), PROBE_BATCH]])
    return median(times) / price


def time_split(r):
    """Where one run's measured epoch went beside its prediction (the same steps): the epoch's
    seconds measured over predicted (predicted samples/s over measured); the compute of every
    rank and step over its price; the steps' slowest ranks over their priced slowest; and the
    seconds per step outside the ranks' compute (the gradient sync and the optimizer step,
    measured) beside the modelled sync, and their share of the measured epoch. None for a result
    without per-step times."""
    if not (r.get("rank_times") and r.get("predicted_rank_times") and "time_s" in r["predicted"]):
        return None
    T, P = r["rank_times"], r["predicted_rank_times"]
    steps = max(len(T), 1)
    t_max, p_max = sum(map(max, T)), sum(map(max, P))
    m_time, p_time = r["measured"]["time_s"], r["predicted"]["time_s"]
    ratio = lambda x, y: x / y if y > 0 else None  # noqa: E731
    return {"epoch_over_predicted": ratio(m_time, p_time),
            "compute_over_price": ratio(sum(map(sum, T)), sum(map(sum, P))),
            "step_max_over_price": ratio(t_max, p_max),
            "outside_compute_s_per_step": (m_time - t_max) / steps,
            "outside_compute_predicted_s_per_step": (p_time - p_max) / steps,
            "outside_compute_share": ratio(m_time - t_max, m_time)}


def time_splits(runs):
    """time_split of every run, or None when one has no per-step times."""
    split = [time_split(r) for r in runs]
    return None if None in split else split


def time_split_table(rows):
    """Markdown lines: time_split's medians over the repetitions, one row per run setting."""
    split = [r for r in rows if r.get("time_split_runs")]
    if not split:
        return []

    def med(r, k):
        xs = [x[k] for x in r["time_split_runs"] if x[k] is not None]
        return median(xs) if xs else float("nan")
    out = ["", "Where the measured epoch went beside the prediction, median over the repetitions: the epoch's "
           "seconds measured over predicted (= predicted samples/s over measured); the compute of every rank and "
           "step over its price; the steps' slowest ranks over their priced slowest; the seconds per step outside "
           "the ranks' compute (gradient sync and optimizer step), measured beside modelled, and their share of "
           "the measured epoch.", "",
           "| strategy | fused adaLN | packing | epoch measured / predicted | compute / price | slowest rank / "
           "price | outside compute per step, measured | modelled | share of the epoch |",
           "|---|---|---|---|---|---|---|---|---|"]
    probed = [r for r in split if r.get("probe_runs")]
    if probed:
        # The probe (speed_probe): the same for every row of a repetition.
        p = probed[0]["probe_runs"]
        out[1] += (f" The probe micro-batch ({PROBE_BATCH} x {PROBE_SHAPE}, timed before and after every repetition) "
                   f"ran at {' / '.join(f'{x:.3f}' for x in p)} of its price (median {median(p):.3f}): the machine's "
                   "speed against the profile's, which the compute over its price follows where the model holds "
                   "(last column, repetition by repetition).")
        out[3] += " compute / price by repetition |"
        out[4] += "---|"
    for r in split:
        by_rep = " / ".join(f"{x['compute_over_price']:.3f}" for x in r["time_split_runs"]
                            if x["compute_over_price"] is not None)
        out.append(f"| {r['strategy']} | {'on' if r['fused_adaln'] else 'off'} | {r['packing']} | "
                   f"{med(r, 'epoch_over_predicted'):.3f} | {med(r, 'compute_over_price'):.3f} | "
                   f"{med(r, 'step_max_over_price'):.3f} | {1000 * med(r, 'outside_compute_s_per_step'):.2f} ms | "
                   f"{1000 * med(r, 'outside_compute_predicted_s_per_step'):.2f} ms | "
                   f"{percent(med(r, 'outside_compute_share'))} |" + (f" {by_rep} |" if probed else ""))
    return out


def paired_ratios(rows):
    """Per repetition, balanced's measured samples/s over each other strategy's (same kernel and
    packing, the same samples and the same machine state: they ran in the same repetition, one
    after the other, or with --interleave a step each in turn): "balanced_over_runs", and the
    planner's ratio "balanced_over_predicted" (None for balanced itself, or with no balanced row
    beside it)."""
    bal = {(r["fused_adaln"], r["packing"]): r for r in rows if r["strategy"] == "balanced"}
    for r in rows:
        b = bal.get((r["fused_adaln"], r["packing"])) if r["strategy"] != "balanced" else None
        r["balanced_over_runs"] = [x / y for x, y in zip(b["samples_per_s_runs"], r["samples_per_s_runs"])] \
            if b else None
        r["balanced_over_predicted"] = b["samples_per_s_predicted"] / r["samples_per_s_predicted"] if b else None


def paired_table(rows):
    """Markdown lines: balanced over each strategy, repetition by repetition (empty when no row
    has a balanced row beside it)."""
    paired = [r for r in rows if r.get("balanced_over_runs")]
    if not paired:
        return []
    out = ["", "Paired, repetition by repetition: balanced's measured samples/s over the strategy's in the same "
           "repetition (same samples, same kernel and packing), and the planner's ratio.", "",
           "| balanced over | fused adaLN | packing | per repetition | median | balanced faster in | predicted |",
           "|---|---|---|---|---|---|---|"]
    for r in paired:
        runs = r["balanced_over_runs"]
        wins = sum(x > 1 for x in runs)
        out.append(f"| {r['strategy']} | {'on' if r['fused_adaln'] else 'off'} | {r['packing']} | "
                   f"{' / '.join(f'{x:.3f}' for x in runs)} | {median(runs):.3f} | {wins} of {len(runs)} | "
                   f"{r['balanced_over_predicted']:.3f} |")
    return out


def markdown_repeated(rows, meta):
    pct = percent
    head, sep, cell = packing_columns(rows)
    out = [f"# Whole epochs, measured: {meta}", "",
           "Measured: the compute time of every emulated rank in every step (clock as above: CUDA events, "
           "wall clock, or the thread's CPU time), median [min - max] over the repetitions. Predicted: the "
           "planner's cost model (the profile it planned with) for the same plan, the same in every "
           "repetition.", "",
           "| strategy | fused adaLN | steps | idle fraction measured, median [min - max] | idle fraction "
           "predicted | samples/s measured, median [min - max] | samples/s predicted | speedup vs "
           "equal_tokens (measured median, same kernel) |" + head,
           "|---|---|---|---|---|---|---|---|" + sep]
    # With the profile's jitter the predicted cells add the prediction that prices it.
    jit = lambda r, k, f: "" if r.get(k) is None else f" ({f(r[k])} with jitter)"  # noqa: E731
    for r in rows:
        sp = "-" if r["speedup_vs_equal_tokens"] is None else f"{r['speedup_vs_equal_tokens']:.2f}x"
        out.append(f"| {r['strategy']} | {'on' if r['fused_adaln'] else 'off'} | {r['steps']} | "
                   f"{pct(r['imbalance_median'])} [{pct(r['imbalance_min'])} - {pct(r['imbalance_max'])}] | "
                   f"{pct(r['imbalance_predicted'])}{jit(r, 'imbalance_predicted_jitter', pct)} | "
                   f"{r['samples_per_s_median']:.2f} [{r['samples_per_s_min']:.2f} - {r['samples_per_s_max']:.2f}] | "
                   f"{r['samples_per_s_predicted']:.2f}"
                   f"{jit(r, 'samples_per_s_predicted_jitter', lambda v: f'{v:.2f}')} | "
                   f"{sp} |" + cell(r))
    waited = [r for r in rows if r.get("idle_measured_runs")]
    if waited:
        out += ["", "Idle measured at the ranks (torchrun: each rank's wait at a barrier for the step's slowest, "
                "over its compute and wait), beside the idle inferred from the compute times above.", "",
                "| strategy | fused adaLN | packing | idle at the barrier, median [min - max] | inferred, median |",
                "|---|---|---|---|---|"]
        for r in waited:
            w = r["idle_measured_runs"]
            out.append(f"| {r['strategy']} | {'on' if r['fused_adaln'] else 'off'} | {r['packing']} | "
                       f"{pct(median(w))} [{pct(min(w))} - {pct(max(w))}] | {pct(r['imbalance_median'])} |")
    out += paired_table(rows)
    out += time_split_table(rows)
    P = PAPER
    out += ["", "Reported by the paper (Wan 2.1 on GPUs; not measured here):", "",
            "| figure | reported |", "|---|---|",
            f"| imbalance, equal token length | {pct(P['imbalance_equal_tokens'])} |",
            f"| imbalance, dual constraint | {pct(P['imbalance_dual'])} |",
            f"| training throughput gain | +{pct(P['throughput_gain'])} |",
            f"| peak VRAM utilization efficiency gain | +{pct(P['vram_efficiency_gain'])} |"]
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """compare's own options; the rest of its command line goes to train_dit."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", default="out/compare")
    p.add_argument("--strategies", default="all", help=f"a comma list of registered strategies, or all "
                   f"({','.join(strategy_names())}); default: %(default)s")
    p.add_argument("--repeat", type=int, default=1, help="run every strategy x kernel setting N times "
                   "(interleaved) and report the median and range of the measured figures")
    p.add_argument("--discard", type=int, default=0, metavar="N", help="run N repetitions first and report "
                   "none of them: a process's first epochs can run slower than its later ones (allocator, "
                   "caches; 1.13-1.22x on the CPU miniature on one machine, not on another), which would fall on "
                   "the first repetition's first runs (default: %(default)s)")
    p.add_argument("--calibrate", action="store_true", help="measure the model on this device first and plan "
                   "every run with the fitted profile (written to OUT_DIR/profile.json); replaces --profile")
    p.add_argument("--fused", default="both", choices=["off", "on", "both"], help="fused adaLN kernel settings "
                   "to run (default: %(default)s)")
    p.add_argument("--calibrate-max-batch", type=int, help="largest batch calibration measures (default: 64 "
                   "where the run's memory budget bounds batch x tokens, as for --config tiny, else 4)")
    p.add_argument("--calibrate-reps", type=int, default=3)
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True, help="with --repeat and a "
                   "--profile: time one fixed micro-batch before and after every repetition against the profile's "
                   "price of it (the machine's speed then, beside the compute over its price; about 2 s a "
                   "repetition; default: on)")
    return p


def main(argv=None, exit_process: bool = False):
    """The comparison; returns its rows (rank 0) or None. exit_process: as train_dit.main's."""
    p = parser()
    args, rest = p.parse_known_args(argv)
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    if not 0 <= args.discard <= 100:
        p.error(f"--discard must be a number of repetitions from 0 to 100, got {args.discard}")
    if args.calibrate and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        p.error("--calibrate measures in one process: calibrate first (python -m adaptiveload.calibrate, or this "
                "script without torchrun), then pass --profile under torchrun")
    strategies = strategies_of(args.strategies)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.perf_counter()
    calibration = None
    if args.calibrate:
        profile = os.path.join(args.out_dir, "profile.json")
        calibration = calibrate_profile(rest, profile, args.calibrate_max_batch, args.calibrate_reps)
        rest = rest + ["--profile", profile]
    targs = rest + ["--strategy", ",".join(strategies), "--fused", args.fused]
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:  # one process group for every repetition (train_dit.main keeps a caller's)
        train_dit.init_distributed(train_dit.parse_args(targs).device)
    for i in range(args.discard):
        if rank0:
            print(f"== discarded repetition {i + 1}/{args.discard} ({time.perf_counter() - t0:.0f} s)", flush=True)
        train_dit.main(targs)
    repeats, probes = [], []
    for i in range(args.repeat):
        if args.repeat > 1 and rank0:
            print(f"== repetition {i + 1}/{args.repeat} ({time.perf_counter() - t0:.0f} s)", flush=True)
        # The machine's speed against the profile, before and after (every rank probes at once, as it trains).
        before = speed_probe(targs) if args.probe and args.repeat > 1 else None
        repeats.append(train_dit.main(targs))
        after = speed_probe(targs) if before is not None else None
        probes.append(None if before is None or after is None else (before + after) / 2)
    elapsed = time.perf_counter() - t0
    if not rank0:
        return finish(distributed, exit_process, None)
    results = repeats[0]
    r0 = results[0]
    span = (f"whole epochs of {r0['measured']['samples']} samples" if "--epoch" in targs
            else f"{r0['measured']['steps']} steps each")
    meta = (f"{r0['model']} {r0['config']} ({r0['layers']} layers), {r0['world_size']} ranks {r0['mode']}, "
            f"{r0['device']} ({r0['clock']} clock), {span}"
            + (", each rank's micro-batches spread over the step" if r0.get("rank_order") == "interleaved" else "")
            + (", the runs interleaved a step each in turn" if "--interleave" in targs else ""))
    out = {"meta": meta, "paper": PAPER, "elapsed_s": elapsed, "calibration": calibration,
           "argv": targs}
    if args.repeat > 1:
        rows = summarize(repeats)
        for r in rows:
            r["probe_runs"] = None if None in probes else probes
        discarded = f" after {args.discard} discarded" if args.discard else ""
        meta += f", {args.repeat} repetitions{discarded}, {elapsed:.0f} s in all"
        md = markdown_repeated(rows, meta)
        out.update(meta=meta, rows=rows, runs=results, repeats=repeats)
    else:
        rows = table(results)
        md = markdown(rows, meta)
        out.update(rows=rows, runs=results)
    with open(os.path.join(args.out_dir, "compare.json"), "w") as f:
        json.dump(out, f, indent=2)
    with open(os.path.join(args.out_dir, "compare.md"), "w") as f:
        f.write(md)
    print(md)
    print(f"compare: {elapsed:.0f} s", flush=True)
    return finish(distributed, exit_process, rows)


def finish(distributed: bool, exit_process: bool, result):
    """Under torchrun: every rank done, then the process group this script made goes (or, as
    the script's entry, the process ends: train_dit.main's exit_process)."""
    if distributed:
        finish_distributed(True, exit_process)
    return result


if __name__ == "__main__":
    main(exit_process=True)
