"""The fits of adaptiveload.calibrate and their errors: pure functions of the measurements
(dicts of tokens, batch, time_s, peak_bytes, log_spread; a pack's parts [[S, B], ...]), on the
C++ core's fit and prices, without torch, so a reader can refit or check a profile from its
measurements alone (`adaptiveload calibrate --measurements`)."""
import json
import math
import random
import statistics
from collections.abc import Mapping

from . import _C, _checks


def fit(points, model: str, device_name: str, held_out=()):
    """(profile JSON, summary) of the core's fit to measurements [{tokens, batch, time_s,
    peak_bytes}]: seconds per sample a*S + b*S^2 + c0, micro-batch overhead, small-batch
    efficiency, memory M_static + B(m0 + m1 S) when peak_bytes are given. `held_out`
    measurements are not fitted; the summary's held_out_median_rel_error and
    held_out_max_rel_error are the fit's errors on them. Raises TypeError / ValueError naming
    the point and field of a malformed measurement."""
    return _C.fit_profile(_checked(points, "measurement"), model, device_name,
                          _checked(held_out, "held-out measurement"))


def _checked(points, what: str):
    checked = []
    for i, pt in enumerate(points):
        where = f"calibrate.fit: {what} {i}"
        if not isinstance(pt, Mapping):
            raise TypeError(f"{where} must be a dict with tokens, batch, time_s (and peak_bytes), got "
                            f"{type(pt).__name__}")
        missing = [k for k in ("tokens", "batch", "time_s") if k not in pt]
        if missing:
            raise ValueError(f"{where} has no {', '.join(missing)}")
        peak = pt.get("peak_bytes")
        checked.append({
            "tokens": _checks.integer(pt["tokens"], f"{where}: tokens", 1, 2**62),
            "batch": _checks.integer(pt["batch"], f"{where}: batch", 1, 2**62),
            "time_s": _checks.real(pt["time_s"], f"{where}: time_s", 0.0, 1e9, lo_open=True),
            "peak_bytes": None if peak is None else _checks.real(peak, f"{where}: peak_bytes", 0.0, 1e18),
        })
    return checked


def log_spread(times) -> float:
    """The repetitions' spread: the standard deviation of log(seconds) (0 with fewer than two)."""
    if len(times) < 2 or min(times) <= 0:
        return 0.0
    return statistics.stdev(math.log(t) for t in times)


def fit_jitter(measurements):
    """How much a micro-batch's seconds vary from run to run, against its seconds T: the
    repetitions' log spread sigma(T) = k * T^q, least squares in log-log over the measurements
    with a spread (small micro-batches vary more on a CPU). None with fewer than 3 of them.
    examples/train_dit.py prices an epoch with it (each micro-batch's time its price times
    exp(sigma Z), a step waiting for the slowest of its ranks' sums)."""
    xy = [(math.log(m["time_s"]), math.log(m["log_spread"])) for m in measurements
          if m.get("log_spread", 0) > 0 and m["time_s"] > 0]
    if len(xy) < 3:
        return None
    mx, my = statistics.fmean(x for x, _ in xy), statistics.fmean(y for _, y in xy)
    sxx = sum((x - mx) ** 2 for x, _ in xy)
    q = sum((x - mx) * (y - my) for x, y in xy) / sxx if sxx > 0 else 0.0
    k = math.exp(my - q * mx)
    err = [abs(k * math.exp(q * x) - math.exp(y)) / math.exp(y) for x, y in xy]
    return {"k": k, "q": q, "points": len(xy), "median_log_spread": statistics.median(math.exp(y) for _, y in xy),
            "median_rel_error": statistics.median(err)}


def jitter_sigma(jitter, seconds: float) -> float:
    """sigma(T) of a fit_jitter result at T = seconds (capped at 1; 0 for T <= 0)."""
    return min(1.0, jitter["k"] * seconds ** jitter["q"]) if seconds > 0 else 0.0


def shape_tokens(shape) -> int:
    """Tokens of a (frames, height, width) shape: latent frames 1 + (F - 1) / 4, patches of 16 x 16 pixels."""
    return (1 + (shape[0] - 1) // 4) * (shape[1] // 16) * (shape[2] // 16)


def draw_packs(shapes, count: int, max_batch: int, max_tokens=None, seed: int = 0):
    """`count` packs, each a list of 2..max_batch (frames, height, width) shapes drawn from
    `shapes` (a pure function of its arguments: random.Random(seed)), of at most max_tokens
    tokens in all. Raises ValueError when no two shapes fit in max_tokens."""
    pool = [s for s in shapes if max_tokens is None or shape_tokens(s) <= max_tokens]
    smallest = sorted(shape_tokens(s) for s in pool)[:2]
    if len(smallest) < 2 or (max_tokens is not None and sum(smallest) > max_tokens):
        raise ValueError(f"no two of the shapes fit in {max_tokens} tokens (smallest: {smallest}); raise --max-tokens")
    rng = random.Random(seed)
    packs = []
    while len(packs) < count:
        want = rng.randint(2, max_batch)
        pack, total = [], 0
        for _ in range(8 * want):  # draws that do not fit are skipped; a few tries, then stop
            if len(pack) == want:
                break
            s = rng.choice(pool)
            if max_tokens is None or total + shape_tokens(s) <= max_tokens:
                pack.append(s)
                total += shape_tokens(s)
        if len(pack) >= 2 and len({shape_tokens(s) for s in pack}) >= 2:  # a pack mixes shapes
            packs.append(pack)
    return packs


def pack_parts(shapes):
    """[[S, B], ...] of a pack's shapes, by tokens ascending: the ObservedMicroBatch parts."""
    counts = {}
    for s in shapes:
        counts[shape_tokens(s)] = counts.get(shape_tokens(s), 0) + 1
    return [[S, B] for S, B in sorted(counts.items())]


def pack_price(cost: Mapping, parts) -> float:
    """The time model's seconds for one micro-batch of parts [[S, B], ...] (one part: a point):
    overhead + sum_i B_i t(S_i) (1 + N_half / N) (+ n pack_sample_s for a pack of n samples),
    t(S) = a S + b S^2 + c0, N = sum_i B_i S_i, as the core prices it (_C.observation_time)."""
    return _C.observation_time(cost, [[tuple(p) for p in parts]])


def rel_errors(cost: Mapping, measurements):
    """(median, max) relative error of pack_price against time_s over measurements with parts
    (a point is one part [[tokens, batch]])."""
    e = [abs(pack_price(cost, m.get("parts") or [[m["tokens"], m["batch"]]]) - m["time_s"]) / m["time_s"]
         for m in measurements]
    return (statistics.median(e), max(e)) if e else (0.0, 0.0)


def packs_path(measurements_out: str) -> str:
    base = measurements_out[:-len(".jsonl")] if measurements_out.endswith(".jsonl") else measurements_out
    return base + ".packs.jsonl"


def with_packs(profile: str, summary: dict, points, packs, fit_packs: bool, held=()):
    """The profile and summary with the fit's errors on `packs` (fit.pack_points,
    pack_median_rel_error, pack_max_rel_error) and the packs themselves (a "packs" list, each
    with its predicted_s, so a reader can recompute). With fit_packs the cost is refitted to
    points and packs together (fit_observations, which then fits a pack's cost per sample,
    pack_sample_s, too) and the points' errors are this fit's; the packs' errors under the
    points' own fit stay in fit.pack_unfitted_median_rel_error and _max_rel_error."""
    j = json.loads(profile)
    if fit_packs:
        um, ux = rel_errors(j["cost"], packs)
        j["fit"]["pack_unfitted_median_rel_error"], j["fit"]["pack_unfitted_max_rel_error"] = um, ux
        summary = dict(summary, pack_unfitted_median_rel_error=um, pack_unfitted_max_rel_error=ux)
        obs = [([(pt["tokens"], pt["batch"])], pt["time_s"]) for pt in points]
        obs += [([[tuple(q) for q in m["parts"]]], m["time_s"]) for m in packs]
        cost_json, _ = _C.fit_observations(obs)
        j["cost"] = json.loads(cost_json)
        med, mx = rel_errors(j["cost"], points)
        j["fit"]["median_rel_error"], j["fit"]["max_rel_error"] = med, mx
        j["fit"]["fitted_packs"] = True
        summary = dict(summary, **j["cost"], median_rel_error=med, max_rel_error=mx)
        if held:
            hm, hx = rel_errors(j["cost"], held)
            summary["held_out_median_rel_error"], summary["held_out_max_rel_error"] = hm, hx
            j["fit"]["held_out_median_rel_error"], j["fit"]["held_out_max_rel_error"] = hm, hx
    med, mx = rel_errors(j["cost"], packs)
    j["fit"]["pack_points"], j["fit"]["pack_median_rel_error"], j["fit"]["pack_max_rel_error"] = len(packs), med, mx
    j["packs"] = [dict(m, predicted_s=pack_price(j["cost"], m["parts"])) for m in packs]
    summary = dict(summary, pack_points=len(packs), pack_median_rel_error=med, pack_max_rel_error=mx)
    return json.dumps(j, indent=2), summary
