"""Decoding samples at their planned shape: the acceptance count and the loader's decode rate.

Makes a set of tiny clips and images with ffmpeg (python/tests/media_gen.py: 15 sizes, 8-60
fps with 29.97 and 23.976, variable frame rate, rotation 90 / 180 / 270, five containers;
images of many aspect ratios), writes its manifest with `adaptiveload scan` (ffprobe with
scan's rules when the CLI is not built), plans it (tiny-dit, the tiny grid) and then

1. decodes every planned row with MediaDataset and counts the rows whose pixels are not
   exactly (3, F', H', W') of their bucket (the acceptance figure: 0 mismatches);
2. times decoding per sample by bucket, ours (torchcodec get_frames_at on the core's frame
   indices) beside a baseline loader that decodes the whole clip and then picks the frames
   (what a dataset written without the planner's rule commonly does), same resize and crop
   (images take the same path in both: their columns differ by noise only);
3. samples/s of each through a DataLoader (batch_sampler = the sampler, collate_media) with
   1 and 2 workers.

  .venv/bin/python python/bench/bench_media_decode.py [--clips 150 --images 150 --dir DIR]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import adaptiveload  # noqa: E402
import media_gen  # noqa: E402
from adaptiveload.media import MediaDataset, collate_media  # noqa: E402


class WholeClipDataset(MediaDataset):
    """Baseline: decodes every frame of the clip, then takes the planned ones."""

    def _decode(self, row, path, frames):
        if self._manifest_frames(row) == 1:
            return super()._decode(row, path, frames)
        from torchcodec.decoders import VideoDecoder

        dec = VideoDecoder(path, seek_mode="exact", dimension_order="NCHW", num_ffmpeg_threads=1)
        allf = dec.get_frames_in_range(0, dec.metadata.num_frames).data
        return allf[list(frames)]


def per_bucket(data, rows, reps):
    times = defaultdict(list)
    for _ in range(reps):
        for r in rows:
            t = time.perf_counter()
            data[r]
            times[data.geometry(r)["bucket"]].append(time.perf_counter() - t)
    return {b: statistics.median(v) for b, v in times.items()}, {b: len(v) // reps for b, v in times.items()}


def loader_rate(data, sampler, workers):
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate_media, num_workers=workers)
    n, t = 0, time.perf_counter()
    for batch in loader:
        n += batch["planned"]
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clips", type=int, default=150)
    ap.add_argument("--images", type=int, default=150)
    ap.add_argument("--dir", default=None, help="where to make the media (default: a temporary folder)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="AdaptiveBatchSampler")  # the plan's mix on a tiny set
    folder = args.dir or tempfile.mkdtemp(prefix="al_media_")
    t0 = time.perf_counter()
    paths = media_gen.make_set(folder, args.clips, args.images)
    gen_s = time.perf_counter() - t0
    manifest = media_gen.manifest(folder, paths)
    scanned = os.access(media_gen.CLI, os.X_OK)
    sampler = adaptiveload.AdaptiveBatchSampler(manifest, model="tiny-dit", device="cpu", grid="tiny", world_size=1,
                                                rank=0, seed=3)
    data = MediaDataset(sampler, root=folder)
    rows = data._planner.planned_rows()
    specs = media_gen.clip_specs(args.clips)
    t0 = time.perf_counter()
    mismatches = []
    for r in rows:
        f, h, w, _ = data._planner.row_geometry(r)
        got = tuple(data[r]["pixels"].shape)
        if got != (3, f, h, w):
            mismatches.append((data.path(r), got, (3, f, h, w)))
    check_s = time.perf_counter() - t0
    print(f"set: {len(paths)} files ({args.clips} clips: {sum(s['vfr'] for s in specs)} variable frame rate, "
          f"{sum(bool(s['rotation']) for s in specs)} rotated, rates {sorted({s['rate'] for s in specs})}; "
          f"{args.images} images), made in {gen_s:.1f} s; manifest by {'scan' if scanned else 'ffprobe'}")
    print(f"planned rows: {len(rows)} of {len(paths)}; left out: {data._planner.left_out}")
    print(f"decoded at the planned shape: {len(rows) - len(mismatches)}; mismatches: {len(mismatches)} "
          f"({check_s:.1f} s)")
    for m in mismatches[:10]:
        print("  mismatch:", m)
    ours, counts = per_bucket(data, rows, args.reps)
    base, _ = per_bucket(WholeClipDataset(sampler, root=folder), rows, args.reps)
    print(f"\n{'bucket':<20}{'samples':>8}{'whole clip ms':>15}{'ours ms':>10}{'speedup':>9}")
    for b in sorted(ours, key=lambda b: (int(b.rsplit('-', 1)[1][:-1]), b)):
        print(f"{b:<20}{counts[b]:>8}{base[b] * 1e3:>15.2f}{ours[b] * 1e3:>10.2f}{base[b] / ours[b]:>8.2f}x")
    rates = {}
    for name, ds in (("whole clip", WholeClipDataset(sampler, root=folder)), ("ours", data)):
        for w in (1, 2):
            rates[(name, w)] = loader_rate(ds, sampler, w)
    print(f"\n{'loader':<12}{'1 worker':>12}{'2 workers':>12}   samples/s")
    for name in ("whole clip", "ours"):
        print(f"{name:<12}{rates[(name, 1)]:>12.1f}{rates[(name, 2)]:>12.1f}")
    print(json.dumps({"files": len(paths), "planned": len(rows), "mismatches": len(mismatches),
                      "decode_ms": {b: round(v * 1e3, 3) for b, v in ours.items()},
                      "whole_clip_ms": {b: round(v * 1e3, 3) for b, v in base.items()},
                      "samples_per_s": {f"{n}/{w}": round(v, 2) for (n, w), v in rates.items()}}))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
