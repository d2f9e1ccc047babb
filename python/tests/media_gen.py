"""Tiny media made at test time with ffmpeg (and PIL for images when it is installed), and
their manifest, for the MediaDataset tests and the 300-file acceptance run.

make_set(folder, n_clips, n_images) writes clips of several sizes, aspect ratios, frame rates
(8 to 60, 29.97 = 30000/1001 among them, and variable frame rate), rotation metadata (90,
180, 270), durations and containers, and images of many aspect ratios (jpg, png, webp, bmp);
manifest(folder, paths) writes the manifest the way `adaptiveload scan` does (the scan
itself when the CLI is built, else ffprobe with scan's rules: size after rotation, the
stream's average frame rate, the header's frame count).
"""
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(REPO, "build", "cli", "adaptiveload")
FF = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-nostdin"]

# (height, width) of the coded frames: several aspect ratios, 64-200 px, even sides (yuv420p).
CLIP_SIZES = [(64, 112), (112, 64), (96, 96), (72, 96), (96, 72), (90, 160), (160, 90), (120, 200),
              (200, 120), (100, 180), (128, 128), (144, 192), (66, 118), (98, 130), (180, 100)]
RATES = ["16", "24", "25", "30000/1001", "30", "50", "8", "12", "60", "24000/1001", "15"]
IMAGE_EXT = ["jpg", "png", "webp", "bmp"]


def have_ffmpeg() -> bool:
    return shutil.which("ffmpeg") is not None and shutil.which("ffprobe") is not None


def _run(cmd: Sequence[str]) -> None:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def clip_specs(n: int) -> List[dict]:
    """n clip specs, varied deterministically (every size, rate, rotation and container)."""
    specs = []
    containers = [("mp4", ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]),
                  ("mkv", ["-c:v", "ffv1"]),
                  ("mov", ["-c:v", "mpeg4", "-q:v", "5", "-pix_fmt", "yuv420p"]),
                  ("webm", ["-c:v", "libvpx-vp9", "-b:v", "200k", "-deadline", "realtime", "-cpu-used", "8", "-lag-in-frames", "0"]),
                  ("avi", ["-c:v", "mjpeg", "-q:v", "5", "-pix_fmt", "yuvj420p"])]
    for i in range(n):
        h, w = CLIP_SIZES[i % len(CLIP_SIZES)]
        rate = RATES[(i // 2) % len(RATES)]
        ext, codec = containers[(i // 3) % len(containers)]
        rotation = [0, 0, 90, 0, 180, 270][i % 6] if ext in ("mp4", "mov") else 0
        vfr = ext in ("mp4", "mov") and i % 6 == 1  # phones' VFR clips are mp4 / mov, with a frame count
        seconds = 0.6 + 0.35 * (i % 6)  # 0.6 .. 2.35 s: several frame buckets of the tiny grid
        specs.append(dict(name=f"clip{i:03d}.{ext}", h=h, w=w, rate=rate, codec=codec, rotation=rotation,
                          vfr=vfr, seconds=round(seconds, 2)))
    return specs


def make_clip(folder: str, s: dict) -> str:
    out = os.path.join(folder, s["name"])
    src = f"testsrc2=size={s['w']}x{s['h']}:rate={s['rate']}"
    cmd = FF + ["-f", "lavfi", "-i", src, "-t", str(s["seconds"])]
    if s["vfr"]:
        # Variable frame rate: every third frame held twice as long (irregular timestamps).
        cmd += ["-vf", "setpts='(N+floor(N/3))/(25*TB)'", "-fps_mode", "vfr"]
    cmd += s["codec"]
    if s["rotation"]:
        tmp = out + ".tmp." + s["name"].rsplit(".", 1)[1]
        _run(cmd + [tmp])
        _run(FF + ["-i", tmp, "-c", "copy", "-metadata:s:v:0", f"rotate={s['rotation']}", out])
        os.remove(tmp)
    else:
        _run(cmd + [out])
    return out


def image_specs(n: int) -> List[dict]:
    specs = []
    for i in range(n):
        # Aspect ratios from 1:3 to 3:1 over 64-200 px.
        h = 64 + (i * 37) % 137
        w = 64 + (i * 53 + 17) % 137
        specs.append(dict(name=f"img{i:03d}.{IMAGE_EXT[i % len(IMAGE_EXT)]}", h=h, w=w))
    return specs


def make_image(folder: str, s: dict) -> str:
    out = os.path.join(folder, s["name"])
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        import numpy as np

        y, x = np.mgrid[0:s["h"], 0:s["w"]]
        rgb = np.stack([(x * 255 // max(1, s["w"] - 1)), (y * 255 // max(1, s["h"] - 1)),
                        ((x + y) * 7) % 256], axis=-1).astype("uint8")
        Image.fromarray(rgb).save(out)
        return out
    _run(FF + ["-f", "lavfi", "-i", f"testsrc2=size={s['w']}x{s['h']}", "-frames:v", "1", out])
    return out


def make_set(folder: str, n_clips: int, n_images: int, jobs: int = 2) -> List[str]:
    os.makedirs(folder, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        clips = list(ex.map(lambda s: make_clip(folder, s), clip_specs(n_clips)))
        images = list(ex.map(lambda s: make_image(folder, s), image_specs(n_images)))
    return clips + images


def _probe(path: str) -> Tuple[int, int, int, str]:
    """(num_frames, height, width, fps) as scan writes them, from ffprobe."""
    r = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_streams", "-show_format",
                        "-of", "json", path], capture_output=True, text=True, check=True)
    info = json.loads(r.stdout)
    st = info["streams"][0]
    w, h = int(st["width"]), int(st["height"])
    rot = 0
    for sd in st.get("side_data_list", []):
        if "rotation" in sd:
            rot = int(round(float(sd["rotation"])))
    if "rotate" in st.get("tags", {}):
        rot = int(st["tags"]["rotate"])
    if abs(rot) % 180 == 90:
        w, h = h, w
    fmt = info["format"]["format_name"]
    if any(k in fmt for k in ("image2", "_pipe")):
        return 1, h, w, ""

    def rate(text: str) -> float:
        a, _, b = text.partition("/")
        return float(a) / float(b or 1) if float(b or 1) else 0.0

    fps = rate(st.get("avg_frame_rate", "0/0")) or rate(st.get("r_frame_rate", "0/0"))
    n = int(st.get("nb_frames", 0) or 0)
    if n <= 0:
        dur = float(st.get("duration", info["format"].get("duration", 0)) or 0)
        n = int(round(dur * fps))
    return n, h, w, f"{fps:.6g}"


def manifest(folder: str, paths: Sequence[str], out: Optional[str] = None, use_scan: bool = True) -> str:
    """Writes the manifest of `paths` (relative to `folder`) and returns its path."""
    out = out or os.path.join(folder, "manifest.csv")
    if use_scan and os.access(CLI, os.X_OK):
        r = subprocess.run([CLI, "scan", *paths, "--root", folder, "--out", out, "--quiet", "--jobs", "2"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return out
    rows = ["path,num_frames,height,width,fps"]
    for p in sorted(paths):
        n, h, w, fps = _probe(p)
        rows.append(f"{os.path.relpath(p, folder)},{n},{h},{w},{fps}")
    with open(out, "w") as f:
        f.write("\n".join(rows) + "\n")
    return out
