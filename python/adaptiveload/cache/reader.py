"""Reading a latent cache back: a map-style dataset by row id over this project's cache folders
and musubi-tuner's, and the collate functions of the documented loader.

    sampler = AdaptiveBatchSampler(cache_dir, model=..., packing="off")   # plans from the cache
    dataset = CacheDataset(cache_dir, sampler)                              # the same row ids
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=4, collate_fn=collate_stack,
                        pin_memory=True, persistent_workers=True, prefetch_factor=2)
    for batch in loader: batch["latent"] [B, C, f, h, w], batch["text"] [B, L, D], ...

A sample is {"row", "latent" [C, f, h, w], "text" [L, D], "shape" (F', H', W')}: "latent" and
"text" are what adaptiveload.packing.collate_packed takes. A bad entry (missing or truncated
file, a missing key, a latent of another shape or dtype than the planner's) raises
CacheEntryError naming the row and the file; under on_bad="skip" the sample is {"row", "bad":
reason} instead, and the collates leave it out and list it in "skipped" while "planned" keeps the
micro-batch's planned sample count: normalise the loss by the plan's counts (the sampler's),
never by the rows that arrived, so a skipped row changes no other sample's weight.
"""
import os
from typing import Dict, Optional, Sequence

import torch
from safetensors import SafetensorError, safe_open

from .. import _C
from ..packing import collate_packed
from . import _format

__all__ = ["CacheDataset", "CacheEntryError", "collate_stack", "collate_pack", "read_entry"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class CacheEntryError(ValueError):
    """A cache entry that cannot be used as the planner's sample: names the row and the file."""


def _fail(row: int, path: str, what: str) -> CacheEntryError:
    return CacheEntryError(f"cache row {row} ({path}): {what}; re-run python -m adaptiveload.cache to rewrite it, "
                           f"or pass on_bad='skip'")


def _open(path: str, row: int):
    if not os.path.exists(path):
        raise _fail(row, path, "the file is missing")
    try:
        return safe_open(path, framework="pt")
    except (SafetensorError, OSError, ValueError) as e:
        raise _fail(row, path, f"not a readable safetensors file (truncated or corrupt: {e})") from None


def _check(row: int, path: str, name: str, t: torch.Tensor, shape: Optional[tuple]) -> torch.Tensor:
    if t.dtype not in _DTYPES:
        raise _fail(row, path, f"'{name}' is {t.dtype}, expected a floating dtype ({', '.join(map(str, _DTYPES))})")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise _fail(row, path, f"'{name}' has shape {tuple(t.shape)}, the planner expects {tuple(shape)} for the "
                               f"row's bucket")
    if shape is None and t.dim() != 2:
        raise _fail(row, path, f"'{name}' has shape {tuple(t.shape)}, expected [tokens, dim]")
    return t


def read_entry(path: str, row: int, latent_shape: tuple, meta_only: bool = False):
    """One entry of this project's cache, `row` naming it in errors: {"latent", "text"} checked
    (or, meta_only, its metadata after checking the header's keys and shapes)."""
    with _open(path, row) as f:
        keys = set(f.keys())
        for k in (_format.LATENT_KEY, _format.TEXT_KEY):
            if k not in keys:
                raise _fail(row, path, f"no '{k}' tensor (keys: {sorted(keys)})")
        meta = f.metadata() or {}
        # The file's own manifest row (its name's; the cache's row ids are the index's).
        own = os.path.basename(path).split(".")[0]
        expected = str(int(own)) if own.isdigit() else None
        if meta.get("row") is None or (expected is not None and meta["row"] != expected):
            raise _fail(row, path, f"the file holds manifest row {meta.get('row')!r}'s entry, not its name's")
        if "latent_norm" not in meta:
            # Written before the cache normalised latents: raw VAE modes, which a Wan DiT does not
            # train on. A rerun of the cache job rewrites such files (they read as not valid).
            raise _fail(row, path, "its latent is the VAE's raw mode (written before the cache normalised latents "
                                   "with the VAE's latents_mean / latents_std): rerun python -m adaptiveload.cache "
                                   "on this folder to rewrite it")
        shape = tuple(f.get_slice(_format.LATENT_KEY).get_shape())
        if shape != tuple(latent_shape):
            raise _fail(row, path, f"'latent' has shape {shape}, the planner expects {tuple(latent_shape)} for the "
                                   f"row's bucket")
        if meta_only:
            return meta
        try:
            latent = f.get_tensor(_format.LATENT_KEY)
            text = f.get_tensor(_format.TEXT_KEY)
        except (SafetensorError, OSError, ValueError) as e:
            raise _fail(row, path, f"cannot read its tensors ({e})") from None
    return {"latent": _check(row, path, "latent", latent, latent_shape), "text": _check(row, path, "text", text, None)}


def _musubi_key(keys, row: int, path: str, prefix: str, what: str) -> str:
    found = [k for k in sorted(keys) if k.startswith(prefix)]
    if not found:
        raise _fail(row, path, f"no {what} tensor ({prefix}...; keys: {sorted(keys)})")
    return found[0]


def read_musubi_entry(path: str, row: int, latent_shape: tuple) -> Dict[str, torch.Tensor]:
    """One musubi-tuner Wan item: latents_<f>x<h>x<w>_<dtype> [C, f, h, w] from its latent file
    and varlen_t5_<dtype> [L, D] from its _te file (manifest/cache_folder.h names both)."""
    f, h, w = latent_shape[1:]
    with _open(path, row) as fl:
        key = _musubi_key(fl.keys(), row, path, f"latents_{f}x{h}x{w}_", "latent")
        latent = _check(row, path, key, fl.get_tensor(key), latent_shape)
    te = _C.musubi_text_file(path)
    with _open(te, row) as ft:
        key = _musubi_key(ft.keys(), row, te, "varlen_t5_", "text-encoder output")
        text = _check(row, te, key, ft.get_tensor(key), None)
    return {"latent": latent, "text": text}


class CacheDataset(torch.utils.data.Dataset):
    """Samples of a cache folder by row id (the sampler's ids: give the sampler the same folder).
    Holds plain Python lists only, so DataLoader workers get it cheaply (fork or spawn)."""

    def __init__(self, cache_dir: str, sampler, on_bad: str = "error", dtype: Optional[torch.dtype] = None):
        if on_bad not in ("error", "skip"):
            raise ValueError(f"CacheDataset: on_bad must be 'error' or 'skip', got {on_bad!r}")
        if not os.path.isdir(cache_dir):
            raise FileNotFoundError(f"CacheDataset: cache_dir {cache_dir!r} is not a folder")
        m = _C.Manifest()
        m.load(os.fspath(cache_dir), True)  # bad rows keep their ids; the sampler reports them
        if m.total_rows != sampler.total_rows:
            raise ValueError(f"CacheDataset: cache_dir has {m.total_rows} rows, the sampler's manifest "
                             f"{sampler.total_rows}: give the sampler the same cache folder")
        self.cache_dir, self.on_bad, self.dtype = os.fspath(cache_dir), on_bad, dtype
        self.musubi = not os.path.exists(os.path.join(cache_dir, _format.INDEX))
        planned = set(sampler.planned_rows())
        self.paths = [self._path(m.row_path(r)) for r in range(m.total_rows)]
        # Per row: (bucket (F', H', W'), latent shape), None for rows the sampler does not plan.
        self.shapes = [(tuple(sampler.sample_geometry(r)), tuple(sampler.latent_shape(r))) if r in planned else None
                       for r in range(m.total_rows)]

    def _path(self, p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(self.cache_dir, p)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, row: int) -> Dict:
        if not 0 <= row < len(self.paths) or self.shapes[row] is None:
            raise IndexError(f"CacheDataset: row {row} is not a planned row of {self.cache_dir}")
        shape, latent_shape = self.shapes[row]
        try:
            read = read_musubi_entry if self.musubi else read_entry
            out = read(self.paths[row], row, latent_shape)
        except CacheEntryError as e:
            if self.on_bad == "error":
                raise
            return {"row": row, "bad": str(e), "shape": shape}
        if self.dtype is not None:
            out = {k: v.to(self.dtype) for k, v in out.items()}
        return {"row": row, "shape": shape, **out}


def _split(samples: Sequence[Dict]):
    good = [s for s in samples if "bad" not in s]
    skipped = [(s["row"], s["bad"]) for s in samples if "bad" in s]
    return good, skipped


def collate_stack(samples: Sequence[Dict]) -> Dict:
    """A bucketed micro-batch (one shape): latent [B, C, f, h, w]; text [B, L_max, D] zero-padded
    with text_lens [B]; rows; skipped [(row, reason)]; planned (samples the plan put here)."""
    good, skipped = _split(samples)
    out = {"rows": [s["row"] for s in good], "skipped": skipped, "planned": len(samples)}
    if not good:
        return out
    shapes = {tuple(s["latent"].shape) for s in good}
    if len(shapes) > 1:
        raise ValueError(f"collate_stack: a micro-batch of several shapes {sorted(shapes)}: the sampler plans packs "
                         f"(packing on); use collate_pack")
    texts = [s["text"] for s in good]
    n, d = max(t.shape[0] for t in texts), texts[0].shape[1]
    text = torch.zeros(len(texts), n, d, dtype=texts[0].dtype)
    for i, t in enumerate(texts):
        text[i, : t.shape[0]] = t
    out.update(latent=torch.stack([s["latent"] for s in good]), text=text,
               text_lens=torch.tensor([t.shape[0] for t in texts], dtype=torch.int64))
    return out


def collate_pack(samples: Sequence[Dict], patch=(1, 2, 2)) -> Dict:
    """A packed micro-batch: {"packed": collate_packed(...) (PackedBatch), rows, skipped, planned}."""
    good, skipped = _split(samples)
    out = {"rows": [s["row"] for s in good], "skipped": skipped, "planned": len(samples)}
    if good:
        out["packed"] = collate_packed([{"latent": s["latent"], "text": s["text"]} for s in good], patch)
    return out

