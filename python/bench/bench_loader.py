"""The loader's rates: decoding media (MediaDataset) and reading a latent cache (CacheDataset),
seconds per sample by bucket and samples/s with 1 and 2 DataLoader workers, side by side.

Makes tiny clips and images with ffmpeg / PIL (python/tests/media_gen.py), their manifest,
and a latent cache of them (python -m adaptiveload.cache's writer with the tiny random
AutoencoderKLWan and UMT5 of the cache tests), plans them (tiny-dit, the tiny grid), then
measures both loaders with adaptiveload.data_rate (the measurement `adaptiveload calibrate --
--loader media|cache` makes): the median of --reps loads of up to --per-bucket rows of each
bucket in this process (one worker's time), and samples/s over the epoch's micro-batches
--reps times over with each worker count, start-up included. Prints a table and one JSON line; --out-media /
--out-cache write the two loader profiles for `adaptiveload plan --loader-profile`.

  .venv/bin/python python/bench/bench_loader.py [--clips 12 --images 8 --reps 3 --dir DIR]
"""
import argparse
import json
import os
import sys
import tempfile
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import adaptiveload  # noqa: E402
import cache_fixtures  # noqa: E402
import media_gen  # noqa: E402
from adaptiveload import data_rate  # noqa: E402
from adaptiveload.cache import load_encoders, write_index, write_rows  # noqa: E402
from adaptiveload.media import MediaDataset  # noqa: E402

OPTS = dict(model="tiny-dit", grid="tiny", device="cpu", seed=0)


def make_cache(folder: str, manifest: str, out: str) -> float:
    """Encodes every planned row of the manifest into a cache at `out`; returns the seconds."""
    m = cache_fixtures.make_models(os.path.join(folder, "models"))
    enc = load_encoders(m["vae"], m["text_encoder"], m["tokenizer"], text_len=cache_fixtures.TEXT_LEN)
    sampler = adaptiveload.AdaptiveBatchSampler(manifest, world_size=1, rank=0, **OPTS)
    rows = list(sampler.planned_rows())
    t0 = time.perf_counter()
    os.makedirs(out, exist_ok=True)
    write_rows(sampler, MediaDataset(sampler, root=folder), enc, out, rows)
    write_index(sampler, out, rows)
    return time.perf_counter() - t0


def measure(source: str, path: str, root, reps: int, per_bucket: int, workers) -> dict:
    return data_rate.measure_loader(source, path, root=root, reps=reps, per_bucket=per_bucket, workers=workers,
                                    log=lambda s: None, **OPTS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=12)
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--per-bucket", type=int, default=4, help="rows timed per bucket")
    ap.add_argument("--dir", help="where to make the media and the cache (default: a temporary folder)")
    ap.add_argument("--out-media", help="write the decode loader profile here")
    ap.add_argument("--out-cache", help="write the cache-read loader profile here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="AdaptiveBatchSampler")  # the plan's mix on a tiny set
    folder = args.dir or tempfile.mkdtemp(prefix="al_loader_")
    t0 = time.perf_counter()
    paths = media_gen.make_set(folder, args.clips, args.images)
    manifest = media_gen.manifest(folder, paths)
    gen_s = time.perf_counter() - t0
    cache = os.path.join(folder, "cache")
    cache_s = make_cache(folder, manifest, cache)
    workers = (1, 2)
    media = measure("media", manifest, folder, args.reps, args.per_bucket, workers)
    read = measure("cache", cache, None, args.reps, args.per_bucket, workers)
    print(f"set: {len(paths)} files ({args.clips} clips, {args.images} images) made in {gen_s:.1f} s; cache of "
          f"{len(os.listdir(cache)) - 1} rows encoded in {cache_s:.1f} s (tiny random VAE, CPU)")
    by_shape = {(e["frames"], e["height"], e["width"]): e for e in read["buckets"]}
    print(f"\n{'bucket (FxHxW)':<16}{'tokens':>8}{'rows':>6}{'decode ms':>11}{'read ms':>9}{'decode/read':>13}")
    for e in media["buckets"]:
        r = by_shape.get((e["frames"], e["height"], e["width"]))
        shape = f"{e['frames']}x{e['height']}x{e['width']}"
        rd = f"{r['seconds'] * 1e3:>9.2f}{e['seconds'] / r['seconds']:>12.1f}x" if r else f"{'-':>9}{'-':>13}"
        print(f"{shape:<16}{e['tokens']:>8}{e['samples']:>6}{e['seconds'] * 1e3:>11.2f}{rd}")
    heads = "".join(f"{f'{w} worker(s)':>14}" for w in workers)
    print(f"\n{'loader':<14}{heads}   samples/s ({args.reps} epochs, start-up included)")
    for name, prof in (("decode", media), ("cache read", read)):
        print(f"{name:<14}" + "".join(f"{prof['samples_per_s'][str(w)]:>14.1f}" for w in workers))
    for name, prof in (("decode", media), ("cache read", read)):
        f = prof["fit"]
        print(f"{name} fit: {f['fixed_s'] * 1e3:.3f} ms + {f['per_token_s'] * 1e6:.3f} us per token a sample")
    for out, prof in ((args.out_media, media), (args.out_cache, read)):
        if out:
            with open(out, "w") as fh:
                json.dump(prof, fh, indent=2)
    print(json.dumps({"files": len(paths), "decode": media, "cache_read": read}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
