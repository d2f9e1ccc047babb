"""python -m adaptiveload.cache: encode a manifest's samples into a latent cache.

    python -m adaptiveload.cache --manifest clips.csv --model wan2.1-1.3b \\
        --vae /models/Wan2.1-T2V-1.3B-Diffusers/vae \\
        --text-encoder /models/Wan2.1-T2V-1.3B-Diffusers/text_encoder \\
        --tokenizer /models/Wan2.1-T2V-1.3B-Diffusers/tokenizer --out /data/cache
    torchrun --nproc-per-node 8 -m adaptiveload.cache ...   # each rank its share of the rows

Each planned row is decoded at its bucket (adaptiveload.media.MediaDataset, or --source), encoded
and written to <out>/<row>.safetensors; then rank 0 writes <out>/index.jsonl. A rerun skips the
rows done. Train from the cache by giving the folder as the manifest (AdaptiveBatchSampler,
adaptiveload plan --manifest <out>) with CacheDataset (adaptiveload.cache.reader).
"""
import argparse
import importlib
import json
import os
import sys

import torch

from ..sampler import AdaptiveBatchSampler
from . import writer


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m adaptiveload.cache", description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", "-m", action="append", required=True, help="manifest file(s), as the sampler's")
    p.add_argument("--model", default="wan2.1-1.3b", help="model preset (its VAE strides give the latent shapes)")
    p.add_argument("--grid", help="bucket grid preset (default: the model's)")
    p.add_argument("--device-preset", default="h200", help="the sampler's device preset (which rows fit)")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed (the window start of each clip)")
    p.add_argument("--vae", required=True, help="local folder of a diffusers VAE (from_pretrained)")
    p.add_argument("--vae-class", default="AutoencoderKLWan", help="its diffusers class")
    p.add_argument("--text-encoder", required=True, help="local folder of a transformers UMT5 encoder")
    p.add_argument("--tokenizer", help="local folder of its tokenizer (default: --text-encoder)")
    p.add_argument("--text-len", type=int, default=512, help="tokens the caption is cut to (Wan: 512)")
    p.add_argument("--out", required=True, help="the cache folder (created)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="the VAE's dtype")
    p.add_argument("--on-bad", default="error", choices=["error", "skip"], help="bad media: stop, or report the "
                   "row and leave it out of the cache")
    p.add_argument("--root", help="folder the manifest's relative paths are under (the source's root=)")
    p.add_argument("--source", default="adaptiveload.media:MediaDataset", help="MODULE:FACTORY, called with the "
                   "sampler, giving a map-style dataset of samples at their buckets ({'pixels', 'caption'})")
    return p.parse_args(argv)


def _dist():
    """(rank, world_size), joining the process group when run under torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo")
    if torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _source(spec: str, sampler, root):
    """(the sample source, the exceptions that mean bad media): the factory's module's
    BadMediaError (adaptiveload.media's), else the source's bad_errors, else OSError and
    ValueError."""
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--source: expected MODULE:FACTORY, got {spec!r}")
    mod = importlib.import_module(module)
    source = getattr(mod, name)(sampler, **({"root": root} if root else {}))
    bad = getattr(source, "bad_errors", None) or getattr(mod, "BadMediaError", None) or (OSError, ValueError)
    return source, bad if isinstance(bad, tuple) else (bad,)


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world = _dist()
    sampler = AdaptiveBatchSampler(args.manifest if len(args.manifest) > 1 else args.manifest[0], model=args.model,
                                   grid=args.grid, device=args.device_preset, seed=args.seed, world_size=world, rank=0)
    source, bad = _source(args.source, sampler, args.root)
    encoders = writer.load_encoders(args.vae, args.text_encoder, args.tokenizer, args.text_len, args.device,
                                    getattr(torch, args.dtype), args.vae_class)
    os.makedirs(args.out, exist_ok=True)
    rows = list(sampler.planned_rows())
    report = writer.write_rows(sampler, source, encoders, args.out, rows[rank::world], args.on_bad, bad,
                               log=lambda s: print(f"rank {rank}: {s}", file=sys.stderr))
    skipped = [report.skipped]
    if world > 1:  # a collective: past it, every rank has written its rows
        skipped = [None] * world
        torch.distributed.all_gather_object(skipped, report.skipped)
    if rank == 0:
        n = writer.write_index(sampler, args.out, rows)
        left = sorted(s for part in skipped for s in part)
        print(json.dumps({"rows": len(rows), "indexed": n, "skipped": left}))
    print(json.dumps({"rank": rank, "written": len(report.written), "already_done": len(report.done),
                      "skipped": len(report.skipped)}), file=sys.stderr)
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
