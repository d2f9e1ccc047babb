"""Samples at their planned shape, from media: MediaDataset and collate_media.

A map-style dataset over the sampler's own manifest and planner, so the row ids the sampler
yields are the rows it decodes:

    sampler = AdaptiveBatchSampler("clips.csv", model=..., grid=..., seed=...)
    data = MediaDataset(sampler, root="/data")          # root: what relative paths are under
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=collate_media, num_workers=2)

data[row] is {"row": int, "pixels": float32 [3, F', H', W'] in [-1, 1], "caption": str,
"shape": (F', H', W')}: what diffusers' AutoencoderKLWan.encode takes, batched [B, 3, F, H, W].

Which frames, which resize and which crop come from the core (adaptiveload._C.sample_geometry,
geometry/sample_geometry.h: the planner's temporal and spatial rules), never from Python:
the clip resampled to the grid's fps, F' frames from a window whose start is drawn per
(seed, epoch, row); resized with the aspect kept (antialiased, never upscaled) and
centre-cropped to the bucket. The window moves with the epoch: set_epoch(epoch), or index the
dataset with (row, epoch) pairs (what DataLoader workers need when they outlive an epoch).

Decoding: video with torchcodec's VideoDecoder (exact seek mode: frame indices are counted
from the file, and rotation metadata is applied, so frames come in display orientation, which
is how `adaptiveload scan` writes height and width). Images with Pillow: torchcodec 0.11 (the
release for torch 2.11) has no image decoder, and its VideoDecoder opens a JPEG through
FFmpeg's image2 demuxer but decodes no frame from it ("Requested next frame while there are
no more frames left to decode", FFmpeg 5.1). EXIF orientation is not applied, as `scan` does
not apply it to the size it writes. A 1-frame row that is no image file is decoded as a clip.

Bad media (a missing, empty, truncated or undecodable file, a clip shorter than its row
says, a file whose size is not the row's): on_bad="error" raises BadMediaError naming the
row, the file and what was wrong. on_bad="skip" returns the row's item with "pixels" None and
"error" the reason, and records it in `skipped` (this process's list: a DataLoader worker's
are its own, so collate_media carries each batch's skipped rows to the trainer). A skipped
row is never replaced by another sample nor given a tensor of another shape: the batch says
which planned rows it lacks (collate_media's "skipped" and "planned"), and the trainer keeps
the step's loss normalised by the plan's counts (PlannedStep.samples / tokens, unchanged), so
the skipped sample adds nothing and every other sample keeps the weight the plan gave it.
"""
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from . import _C

__all__ = ["BadMediaError", "MediaDataset", "collate_media"]

# Frames resized at a time: bounds the memory of a long clip at full size.
_RESIZE_CHUNK = 8


class BadMediaError(ValueError):
    """A manifest row whose file cannot give its planned sample: names the row (its id and
    file:line), the file and what was wrong."""

    def __init__(self, row: int, where: str, path: str, reason: str):
        self.row, self.where, self.path, self.reason = row, where, path, reason
        super().__init__(
            f"manifest row {row} ({where}): {path}: {reason} (fix or remove the file or the row, or pass "
            f"on_bad='skip' to leave such rows out and have them reported)")


def _decoder_module():
    try:
        from torchcodec.decoders import VideoDecoder
    except ImportError as e:  # pragma: no cover - the install brings it
        raise ImportError(
            "adaptiveload.media needs torchcodec (requirements/torch-addons.txt; scripts/python_env.sh "
            "installs it) and FFmpeg's shared libraries (scripts/install_deps.sh): " + str(e)) from e
    return VideoDecoder


class MediaDataset(Dataset):
    """Decodes manifest rows at the shape the planner gave them (see the module's docstring).

    sampler: the AdaptiveBatchSampler whose rows this dataset serves (its manifest, grid and
      seed; row ids agree by construction).
    root: the folder relative paths are under (scan's --root); None: the current directory.
    on_bad: 'error' (BadMediaError) or 'skip' (the row reported, see `skipped`).
    epoch: the epoch of the frame window; None: the sampler's current epoch.
    """

    def __init__(self, sampler: Any, *, root: Optional[str] = None, on_bad: str = "error",
                 epoch: Optional[int] = None):
        if on_bad not in ("error", "skip"):
            raise ValueError(f"MediaDataset: on_bad must be 'error' or 'skip', got {on_bad!r}")
        manifest = getattr(sampler, "_manifest", None)
        if manifest is None or not hasattr(sampler, "_planner"):
            raise TypeError(f"MediaDataset: sampler must be an adaptiveload.AdaptiveBatchSampler, not "
                            f"{type(sampler).__name__}")
        if root is not None and not os.path.isdir(root):
            raise ValueError(f"MediaDataset: root {root!r} is not a folder")
        self._manifest = manifest
        self._planner = sampler._planner(sampler.world_size)  # buckets do not depend on the world size
        self.root = root
        self.on_bad = on_bad
        self.epoch = int(sampler.epoch if epoch is None else epoch)
        self.skipped: List[Tuple[int, str, str]] = []  # (row, path, reason) in this process

    def __getstate__(self):
        raise TypeError("MediaDataset holds the core's planner and manifest, which do not pickle: use DataLoader "
                        "workers with the fork start method (Linux's default), not spawn or forkserver")

    def __len__(self) -> int:
        return int(self._manifest.total_rows)

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose frame windows later items take (the sampler's set_epoch's twin)."""
        self.epoch = int(epoch)

    def geometry(self, row: int, epoch: Optional[int] = None) -> Dict[str, Any]:
        """The core's rule for `row`: frames, resize, crop, shape and bucket (_C.sample_geometry)."""
        return _C.sample_geometry(self._planner, self._manifest, int(row), self.epoch if epoch is None else int(epoch))

    def path(self, row: int) -> str:
        p = self._manifest.path(int(row))
        return p if self.root is None or os.path.isabs(p) else os.path.join(self.root, p)

    def __getitem__(self, key: Any) -> Dict[str, Any]:
        row, epoch = (key if isinstance(key, (tuple, list)) else (key, None))
        row = int(row)
        g = self.geometry(row, epoch)
        item = {"row": row, "caption": self._manifest.caption(row), "shape": tuple(g["shape"])}
        path = self.path(row)
        try:
            item["pixels"] = self._load(row, path, g)
        except BadMediaError as e:
            if self.on_bad == "error":
                raise
            self.skipped.append((row, path, e.reason))
            item["pixels"] = None
            item["error"] = e.reason
        return item

    # --- decoding ---------------------------------------------------------------------

    def _bad(self, row: int, path: str, reason: str) -> BadMediaError:
        return BadMediaError(row, self._manifest.where(row), path, reason)

    def _load(self, row: int, path: str, g: Dict[str, Any]) -> torch.Tensor:
        if not os.path.exists(path):
            raise self._bad(row, path, "no such file")
        if not os.path.isfile(path):
            raise self._bad(row, path, "not a regular file")
        if os.path.getsize(path) == 0:
            raise self._bad(row, path, "empty file (0 bytes)")
        frames = self._decode(row, path, g["frames"])  # uint8 [F', 3, h, w]
        pixels = _resize_crop(frames, tuple(g["resize"]), tuple(g["crop"]))
        want = tuple(g["shape"])
        got = (pixels.shape[0], pixels.shape[2], pixels.shape[3])
        if got != want:  # the rules above make this impossible; never hand on another shape
            raise RuntimeError(f"MediaDataset: row {row} decoded to {got}, planned {want}")
        return pixels.permute(1, 0, 2, 3).to(torch.float32).div_(127.5).sub_(1.0).contiguous()

    def _decode(self, row: int, path: str, frames: Sequence[int]) -> torch.Tensor:
        if self._manifest_frames(row) == 1:
            image = _decode_image(path)
            if image is not None:
                if isinstance(image, str):
                    raise self._bad(row, path, image)
                self._check_size(row, path, image.shape[2], image.shape[3])
                return image
            # Not an image file: a 1-frame clip, decoded as the video it is.
        VideoDecoder = _decoder_module()
        try:
            dec = VideoDecoder(path, seek_mode="exact", dimension_order="NCHW", num_ffmpeg_threads=1)
        except Exception as e:  # torchcodec raises RuntimeError / ValueError with FFmpeg's words
            if self._manifest_frames(row) == 1:
                raise self._bad(row, path, "not decodable as an image: no image format Pillow knows, nor media "
                                           f"FFmpeg opens ({_first_line(e)})") from None
            raise self._bad(row, path, f"not decodable as a video ({_first_line(e)})") from None
        md = dec.metadata
        n = md.num_frames
        self._check_size(row, path, md.height, md.width)
        last = max(frames)
        if n is not None and last >= n:
            raise self._bad(row, path, f"shorter than its manifest row says: the file has {n} frames, the row "
                                       f"{self._manifest_frames(row)}, and frame {last} is planned")
        try:
            batch = dec.get_frames_at(list(frames))
        except Exception as e:
            raise self._bad(row, path, f"frames {frames[0]}..{last} cannot be decoded, the file is truncated or "
                                       f"damaged ({_first_line(e)})") from None
        data = batch.data
        if data.shape[0] != len(frames) or data.shape[1] != 3:
            raise self._bad(row, path, f"decoded {tuple(data.shape)} for {len(frames)} frames")
        return data

    def _check_size(self, row: int, path: str, h: int, w: int) -> None:
        want_h, want_w = self._manifest_size(row)
        if (h, w) != (want_h, want_w):
            raise self._bad(row, path, f"the file is {h}x{w} (height x width, after rotation) but the row says "
                                       f"{want_h}x{want_w}: rescan it")

    def _manifest_frames(self, row: int) -> int:
        return int(self._clip(row)[0])

    def _manifest_size(self, row: int) -> Tuple[int, int]:
        c = self._clip(row)
        return int(c[1]), int(c[2])

    def _clip(self, row: int) -> Tuple[int, int, int, float]:
        return tuple(self._manifest.clip(row))


def _decode_image(path: str) -> Any:
    """uint8 [1, 3, h, w] of an image file (Pillow, EXIF orientation not applied: the size
    `scan` reads with FFmpeg), a str saying why it cannot be decoded, or None when the file is
    no image format Pillow knows (then it may be a 1-frame clip)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            rgb = im.convert("RGB")
    except UnidentifiedImageError:
        return None
    except (OSError, ValueError, SyntaxError) as e:  # truncated or damaged image data
        return f"not decodable as an image, the file is truncated or damaged ({_first_line(e)})"
    t = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).view(rgb.height, rgb.width, 3)
    return t.permute(2, 0, 1).unsqueeze(0).contiguous()


def _first_line(e: BaseException) -> str:
    """The exception's first line without torchcodec's source locations ("Class, file.cpp:51, ")."""
    text = str(e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    return re.sub(r"^(?:[\w:]+, )?\S+\.(?:cpp|h):\d+, ", "", line)


def _resize_crop(frames: torch.Tensor, resize: Tuple[int, int], crop: Tuple[int, int, int, int]) -> torch.Tensor:
    """uint8 [F, 3, h, w] -> uint8 [F, 3, H', W']: resized to `resize` (antialiased bilinear,
    a few frames at a time) and cropped to the box (top, left, H', W')."""
    top, left, ch, cw = crop
    if tuple(frames.shape[2:]) == tuple(resize):
        return frames[:, :, top:top + ch, left:left + cw]
    out = []
    for i in range(0, frames.shape[0], _RESIZE_CHUNK):
        part = frames[i:i + _RESIZE_CHUNK].contiguous(memory_format=torch.channels_last)
        r = F.interpolate(part, size=resize, mode="bilinear", antialias=True, align_corners=False)
        out.append(r[:, :, top:top + ch, left:left + cw])
    return torch.cat(out).contiguous()


def collate_media(items: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A micro-batch of MediaDataset items: {"rows", "pixels", "captions", "shapes", "skipped",
    "planned"}.

    pixels: [B, 3, F, H, W] when every decoded sample has one shape (a bucketed micro-batch),
    else a list of [3, F, H, W] (a pack; adaptiveload.packing takes lists). rows / captions /
    shapes are of the decoded samples, in order. skipped: [(row, reason)] of the rows left out
    under on_bad='skip'; planned: the number of rows the sampler gave (decoded + skipped), so
    the trainer normalises by the plan's counts, not by what was decoded."""
    good = [it for it in items if it.get("pixels") is not None]
    out: Dict[str, Any] = {
        "rows": [it["row"] for it in good],
        "captions": [it["caption"] for it in good],
        "shapes": [tuple(it["shape"]) for it in good],
        "skipped": [(it["row"], it.get("error", "")) for it in items if it.get("pixels") is None],
        "planned": len(items),
    }
    pix = [it["pixels"] for it in good]
    if pix and all(p.shape == pix[0].shape for p in pix):
        out["pixels"] = torch.stack(pix)
    else:
        out["pixels"] = pix
    return out
