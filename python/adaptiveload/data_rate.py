"""How fast the loader is: the seconds one DataLoader worker takes to load a sample, by bucket,
and samples/s by worker count; written as the loader profile that the planner's loader check
reads (`adaptiveload plan --loader-profile FILE --loader-workers N`, the sampler's
loader_check; the core's sim/loader_check.h).

    from adaptiveload.data_rate import measure_buckets, loader_rate, loader_profile
    entries = measure_buckets(dataset, sampler, reps=3)       # MediaDataset or CacheDataset
    rates = {w: loader_rate(dataset, batches, w) for w in (1, 2)}
    json.dump(loader_profile(entries, "media", rates), open("loader.json", "w"))

A profile: {"format": "adaptiveload-loader-1", "source": "media" | "cache", "buckets": [{"frames",
"height", "width", "tokens", "seconds", "samples"}, ...], "fit": {"fixed_s", "per_token_s"},
"samples_per_s": {workers: rate}}. "seconds" is the median over the bucket's rows and
repetitions of one sample's __getitem__ in this process (what one worker spends on it); the fit
prices the buckets the profile did not measure (fixed_s + per_token_s * tokens, least squares,
never negative). `adaptiveload calibrate -- --loader media|cache ...` measures and writes one.
"""
import statistics
import time
import warnings
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

__all__ = ["FORMAT", "measure_buckets", "loader_rate", "fit_rate", "loader_profile"]

FORMAT = "adaptiveload-loader-1"  # the core's kLoaderProfileFormat


def _bucket_rows(sampler, rows: Optional[Iterable[int]], per_bucket: int) -> Dict[Tuple[int, int, int, int], List[int]]:
    """Up to per_bucket planned rows of each bucket, by (frames, height, width, tokens)."""
    planner = sampler._planner(sampler.world_size)
    out: Dict[Tuple[int, int, int, int], List[int]] = defaultdict(list)
    for r in sampler.planned_rows() if rows is None else rows:
        key = tuple(int(v) for v in planner.row_geometry(int(r))[:4])
        if len(out[key]) < per_bucket:
            out[key].append(int(r))
    return dict(sorted(out.items()))


def measure_buckets(dataset, sampler, reps: int = 3, per_bucket: int = 4, rows: Optional[Iterable[int]] = None,
                    warmup: bool = True) -> List[Dict[str, Any]]:
    """Per bucket, the median seconds of dataset[row] over up to per_bucket of its rows and
    `reps` repetitions each, in this process (one worker's time); a first untimed load of each
    row when warmup (the file's first read from disk is not a worker's steady state)."""
    if reps < 1 or per_bucket < 1:
        raise ValueError(f"measure_buckets: reps and per_bucket must be >= 1, got {reps} and {per_bucket}")
    entries = []
    for (f, h, w, tokens), rs in _bucket_rows(sampler, rows, per_bucket).items():
        times = []
        for r in rs:
            if warmup:
                dataset[r]
            for _ in range(reps):
                t0 = time.perf_counter()
                dataset[r]
                times.append(time.perf_counter() - t0)
        entries.append({"frames": f, "height": h, "width": w, "tokens": tokens, "seconds": statistics.median(times),
                        "samples": len(rs)})
    return entries


def loader_rate(dataset, batches: Sequence[Sequence[int]], workers: int, collate=list) -> float:
    """Samples/s of a DataLoader with `workers` workers over the given micro-batches (a
    batch_sampler: the sampler, or a list of row lists), its start-up included."""
    extra = dict(prefetch_factor=2) if workers > 0 else {}
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=workers,
                                         **extra)
    n, t0 = 0, time.perf_counter()
    for batch in loader:
        n += batch["planned"] if isinstance(batch, dict) and "planned" in batch else len(batch)
    return n / max(time.perf_counter() - t0, 1e-12)


def fit_rate(entries: Sequence[Dict[str, Any]]) -> Tuple[float, float]:
    """(fixed_s, per_token_s): seconds ~ fixed_s + per_token_s * tokens over the buckets, least
    squares weighted by their samples, neither negative (a negative slope: the mean, flat)."""
    if not entries:
        return 0.0, 0.0
    wsum = sum(e["samples"] for e in entries)
    mt = sum(e["samples"] * e["tokens"] for e in entries) / wsum
    ms = sum(e["samples"] * e["seconds"] for e in entries) / wsum
    var = sum(e["samples"] * (e["tokens"] - mt) ** 2 for e in entries)
    slope = sum(e["samples"] * (e["tokens"] - mt) * (e["seconds"] - ms) for e in entries) / var if var > 0 else 0.0
    if slope <= 0:
        return ms, 0.0
    fixed = ms - slope * mt
    if fixed < 0:  # through the origin instead
        slope = sum(e["samples"] * e["tokens"] * e["seconds"] for e in entries) / \
            sum(e["samples"] * e["tokens"] ** 2 for e in entries)
        fixed = 0.0
    return fixed, slope


def loader_profile(entries: Sequence[Dict[str, Any]], source: str, samples_per_s: Optional[Dict[int, float]] = None
                   ) -> Dict[str, Any]:
    """The loader profile of measure_buckets' entries (see the module docstring)."""
    if source not in ("media", "cache"):
        raise ValueError(f"loader_profile: source must be 'media' or 'cache', got {source!r}")
    fixed, per_token = fit_rate(entries)
    out = {"format": FORMAT, "source": source, "buckets": [dict(e) for e in entries],
           "fit": {"fixed_s": fixed, "per_token_s": per_token}}
    if samples_per_s:
        out["samples_per_s"] = {str(k): v for k, v in sorted(samples_per_s.items())}
    return out


def loader_dataset(source: str, sampler, path: str, root: Optional[str] = None):
    """(dataset, collate) of the loader to measure: MediaDataset over the sampler's manifest (its
    relative paths under root) or CacheDataset over the cache folder `path`."""
    if source == "media":
        from .media import MediaDataset, collate_media

        return MediaDataset(sampler, root=root), collate_media
    if source == "cache":
        from .cache import CacheDataset

        return CacheDataset(path, sampler), list
    raise ValueError(f"source must be 'media' or 'cache', got {source!r}")


def measure_loader(source: str, path: str, *, root: Optional[str] = None, model: str = "wan2.1-1.3b",
                   grid: Optional[str] = None, device: str = "h200", seed: int = 0, reps: int = 3,
                   per_bucket: int = 4, workers: Sequence[int] = (1, 2), log=print) -> Dict[str, Any]:
    """The loader profile of `path` (a manifest of media, or a cache folder), planned as the
    sampler plans it (model, grid, device preset, seed): measure_buckets, then loader_rate
    over the epoch's micro-batches, `reps` times over (the workers' start-up spread over
    them), with each worker count."""
    from .sampler import AdaptiveBatchSampler

    with warnings.catch_warnings():  # the plan's own warnings (its mix of buckets) are not the loader's
        warnings.filterwarnings("ignore", message="AdaptiveBatchSampler", category=UserWarning)
        sampler = AdaptiveBatchSampler(path, model=model, grid=grid, device=device, seed=seed, world_size=1, rank=0)
    dataset, collate = loader_dataset(source, sampler, path, root)
    entries = measure_buckets(dataset, sampler, reps=reps, per_bucket=per_bucket)
    for e in entries:
        log(f"{e['frames']:4d}x{e['height']}x{e['width']:<5d} {e['tokens']:8d} tokens  {1000 * e['seconds']:9.2f} ms "
            f"a sample ({e['samples']} rows)")
    batches = [list(mb) for mb in sampler] * reps
    rates = {}
    for w in workers:
        rates[int(w)] = loader_rate(dataset, batches, int(w), collate)
        log(f"{w} worker(s): {rates[int(w)]:.1f} samples/s")
    return loader_profile(entries, source, rates)
