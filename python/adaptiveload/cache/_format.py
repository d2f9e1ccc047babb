"""The cache's on-disk format, shared by the writer and the reader.

A cache folder holds one safetensors file per manifest row, `<row:09d>.safetensors`, with
    "latent"  [C, f, h, w]  the VAE latent of the sample at its bucket (the distribution's mode)
    "text"    [L, D]        the text encoder's output for the caption, its L real tokens only
and metadata {"format", "row", "shape": "F,H,W" (the bucket, pixels), "caption", "latent_norm"
(LATENT_NORM_MEAN_STD: (z - latents_mean) / latents_std per channel, what a Wan DiT trains on;
LATENT_NORM_SCALE: (z - shift_factor) * scaling_factor; LATENT_NORM_NONE: the VAE's mode as it
is, for a VAE with neither; LATENT_NORM_UNSTATED: a caller's own latent function that did not
say)}; and `index.jsonl`, a
manifest of the cached rows (path relative to the folder, num_frames / height / width = the
bucket, source_row, caption) that the core reads as fixed rows (manifest/cache_folder.h): the
sampler plans from the folder and every row trains at the shape it was cached at.

Every file is written whole or not at all (a temporary file, fsync, rename, fsync of the
folder): a killed job leaves no file that reads as valid, and a rerun skips the rows done.
"""
import json
import os
from typing import Dict, Optional

import torch

FORMAT = "adaptiveload-cache-1"
INDEX = "index.jsonl"  # the core's kCacheIndexName
LATENT_KEY = "latent"
LATENT_NORM_MEAN_STD = "latents_mean_std"
LATENT_NORM_SCALE = "scaling_factor"
LATENT_NORM_NONE = "none"
LATENT_NORM_UNSTATED = "unstated"
LATENT_NORMS = (LATENT_NORM_MEAN_STD, LATENT_NORM_SCALE, LATENT_NORM_NONE, LATENT_NORM_UNSTATED)
TEXT_KEY = "text"
# fps of a video row in the index: informational, a fixed row is not resampled (cache_folder.h).
INDEX_VIDEO_FPS = 16


def entry_name(row: int) -> str:
    return f"{row:09d}.safetensors"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_tmp(folder: str) -> int:
    """Removes the temporary files of writers that died (their pid is gone); returns how many."""
    n = 0
    for name in os.listdir(folder):
        head, sep, pid = name.rpartition(".tmp")
        if name.startswith(".") and sep and pid.isdigit() and not _alive(int(pid)):
            os.remove(os.path.join(folder, name))
            n += 1
    return n


def atomic_write(path: str, data: bytes) -> None:
    """Writes `data` to `path` so that the path holds either nothing (or its old content) or all
    of `data`, across a kill at any point: tmp file in the same folder, fsync, rename, fsync."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(folder)


_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def safetensors_bytes(tensors: Dict[str, torch.Tensor], metadata: Dict[str, str]) -> bytes:
    """A safetensors file's bytes with its header's keys in sorted order: the same tensors and
    metadata give the same bytes in every process (safetensors.torch.save orders the metadata
    as its hash map iterates, which differs between processes)."""
    header: Dict = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def entry_bytes(row: int, shape: tuple, latent: torch.Tensor, text: torch.Tensor, caption: Optional[str],
                latent_norm: str) -> bytes:
    """The safetensors bytes of one row (deterministic: same tensors, same bytes); latent_norm:
    how the latent was normalised (LATENT_NORM_*), said by the caller that normalised it."""
    meta = {"format": FORMAT, "row": str(row), "shape": ",".join(str(int(v)) for v in shape),
            "latent_norm": latent_norm}
    if caption is not None:
        meta["caption"] = caption
    return safetensors_bytes({LATENT_KEY: latent, TEXT_KEY: text}, meta)


def index_row(row: int, shape: tuple, caption: Optional[str]) -> Dict:
    f, h, w = (int(v) for v in shape)
    out = {"path": entry_name(row), "num_frames": f, "height": h, "width": w}
    if f > 1:
        out["fps"] = INDEX_VIDEO_FPS
    out["source_row"] = int(row)
    if caption is not None:
        out["caption"] = caption
    return out


def index_bytes(rows) -> bytes:
    """index.jsonl of (row, shape, caption) entries, in the given order."""
    return "".join(json.dumps(index_row(*r), ensure_ascii=False) + "\n" for r in rows).encode()
