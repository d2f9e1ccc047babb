"""Writing a latent cache: each planned row at its bucket through the VAE and its caption through
the text encoder, one safetensors file per row (_format.py), then the index.

    encoders = load_encoders(vae="/models/wan/vae", text_encoder="/models/wan/text_encoder",
                             tokenizer="/models/wan/tokenizer", text_len=512)
    report = write_cache(sampler, source, encoders, "/data/cache", rank=r, world_size=W)

`source[row]` is a sample at its planned shape ({"pixels": [3, F', H', W'] in [-1, 1],
"caption": str}: adaptiveload.media.MediaDataset). Rows are the sampler's planned rows; rank r
of W encodes rows[r::W]. A row whose file is already there and valid is skipped (a rerun after a
kill resumes), and every latent is checked against the shape the planner expects for its bucket.
"""
import os
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch

from . import _format
from .reader import CacheEntryError, read_entry


class CacheShapeError(RuntimeError):
    """A latent of another shape than the planner's for its bucket (the VAE does not match the
    model preset the sampler plans for). Never skipped: it is a configuration error."""


@dataclass
class Encoders:
    """latent(pixels [3, F, H, W]) -> [C, f, h, w]; text(caption) -> [L, D] (real tokens only).
    The cache records how latent normalised its output from the function's `latent_norm`
    attribute (vae_encoder sets it; a function of your own may set one of _format.LATENT_NORMS),
    "unstated" where it has none."""

    latent: Callable[[torch.Tensor], torch.Tensor]
    text: Callable[[str], torch.Tensor]


@dataclass
class CacheReport:
    written: List[int] = field(default_factory=list)  # rows encoded by this rank
    done: List[int] = field(default_factory=list)  # rows found already cached
    skipped: List[Tuple[int, str]] = field(default_factory=list)  # rows left out (on_bad="skip")


def vae_encoder(vae, device, dtype, normalize: bool = True) -> Callable[[torch.Tensor], torch.Tensor]:
    """A diffusers VAE's encode (AutoencoderKLWan, or any with .encode(x).latent_dist): the
    distribution's mode, deterministic, for one sample [3, F, H, W] -> [C, f, h, w], normalised
    as the model trains on it: per channel (z - latents_mean) / latents_std where the VAE's config
    has them (AutoencoderKLWan: as diffusers' Wan pipelines and Wan's own VAE, so musubi-tuner's
    caches, give them), else (z - shift_factor) * scaling_factor where it has a scaling_factor
    (CogVideoX, HunyuanVideo); diffusers' encode alone returns the raw mode. normalize=False keeps
    it raw. The returned function's `latent_norm` is what the cache records (_format)."""
    cfg = getattr(vae, "config", None)
    mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
    scale, shift = getattr(cfg, "scaling_factor", None), getattr(cfg, "shift_factor", None)
    norm = _format.LATENT_NORM_NONE
    mean_t = std_t = None
    if normalize and mean is not None and std is not None:
        mean_t = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1, 1)
        std_t = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1, 1)
        norm = _format.LATENT_NORM_MEAN_STD
    elif normalize and scale is not None:  # z * scale - shift * scale == (z - shift) / (1 / scale)
        mean_t = torch.full((1, 1, 1, 1), float(shift or 0.0))
        std_t = torch.full((1, 1, 1, 1), 1.0 / float(scale))
        norm = _format.LATENT_NORM_SCALE

    @torch.no_grad()
    def encode(pixels: torch.Tensor) -> torch.Tensor:
        out = vae.encode(pixels[None].to(device=device, dtype=dtype))
        dist = out.latent_dist if hasattr(out, "latent_dist") else out[0]
        z = dist.mode()[0].float().cpu()
        if mean_t is None:
            return z
        if mean_t.shape[0] != 1 and z.shape[0] != mean_t.shape[0]:
            raise ValueError(f"the VAE's config has {mean_t.shape[0]} latents_mean / latents_std values for "
                             f"{z.shape[0]} latent channels: a config that does not match its model")
        return (z - mean_t) / std_t

    encode.latent_norm = norm
    return encode


def _text_encoder(tokenizer, encoder, text_len: int, device) -> Callable[[str], torch.Tensor]:
    """UMT5 (Wan's text encoder) or any transformers encoder with last_hidden_state: the
    caption's real tokens (padding cut off, as Wan's pipeline does), [L, D] float32."""

    @torch.no_grad()
    def encode(caption: str) -> torch.Tensor:
        tok = tokenizer([caption], max_length=text_len, padding="max_length", truncation=True,
                        add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        ids, mask = tok.input_ids.to(device), tok.attention_mask.to(device)
        hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        n = max(int(mask[0].sum()), 1)
        return hidden[0, :n].float().cpu()

    return encode


def load_vae(path: str, device: str = "cpu", dtype: torch.dtype = torch.float32, vae_class: str = "AutoencoderKLWan"):
    """A diffusers VAE from a local from_pretrained folder (nothing is downloaded), in eval mode."""
    import diffusers

    if not os.path.isdir(path):
        raise FileNotFoundError(f"vae: no such folder {path!r} (a local from_pretrained folder)")
    cls = getattr(diffusers, vae_class, None)
    if cls is None:
        raise ValueError(f"vae_class: diffusers has no {vae_class!r}")
    return cls.from_pretrained(path, torch_dtype=dtype, local_files_only=True).to(device).eval()


def load_encoders(vae: str, text_encoder: str, tokenizer: Optional[str] = None, text_len: int = 512,
                  device: str = "cpu", dtype: torch.dtype = torch.float32, vae_class: str = "AutoencoderKLWan"
                  ) -> Encoders:
    """Encoders from local folders (from_pretrained layouts; nothing is downloaded): a diffusers
    VAE (`vae_class`, AutoencoderKLWan for Wan) and a transformers UMT5 encoder and tokenizer
    (tokenizer defaults to the text encoder's folder)."""
    import transformers

    for name, path in (("vae", vae), ("text_encoder", text_encoder), ("tokenizer", tokenizer or text_encoder)):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{name}: no such folder {path!r} (a local from_pretrained folder)")
    v = load_vae(vae, device, dtype, vae_class)
    enc = transformers.UMT5EncoderModel.from_pretrained(text_encoder, local_files_only=True).to(device).eval()
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer or text_encoder, local_files_only=True)
    return Encoders(vae_encoder(v, device, dtype), _text_encoder(tok, enc, text_len, device))


def _entry_ok(path: str, row: int, expected: tuple) -> bool:
    """Whether `path` holds a valid entry for `row` (a rerun skips it)."""
    if not os.path.exists(path):
        return False
    try:
        read_entry(path, row, expected)
        return True
    except CacheEntryError:
        return False


def encode_row(sampler, source, encoders: Encoders, row: int) -> Tuple[bytes, tuple, Optional[str]]:
    """One row's file bytes, its bucket and caption; the latent checked against the planner's."""
    shape = tuple(sampler.sample_geometry(row))
    expected = tuple(sampler.latent_shape(row))
    sample = source[row]
    pixels = sample["pixels"]
    if tuple(pixels.shape[1:]) != shape:
        raise CacheShapeError(f"row {row}: the source gave pixels {tuple(pixels.shape)}, the planner's bucket is "
                              f"(3, {shape[0]}, {shape[1]}, {shape[2]})")
    latent = encoders.latent(pixels)
    if tuple(latent.shape) != expected:
        raise CacheShapeError(f"row {row}: the VAE gave a latent {tuple(latent.shape)} for bucket {shape}; the planner "
                              f"expects {expected} (its model preset's latent channels and VAE strides): use the VAE "
                              f"of the model the sampler plans for")
    caption = sample.get("caption")
    text = encoders.text(caption or "")
    norm = getattr(encoders.latent, "latent_norm", _format.LATENT_NORM_UNSTATED)
    if norm not in _format.LATENT_NORMS:
        raise ValueError(f"the latent function's latent_norm is {norm!r}; the cache records one of "
                         f"{', '.join(_format.LATENT_NORMS)} (or leave it unset: 'unstated')")
    return _format.entry_bytes(row, shape, latent, text, caption, norm), shape, caption


def write_rows(sampler, source, encoders: Encoders, out_dir: str, rows: List[int], on_bad: str = "error",
               bad_errors: tuple = (), log: Callable[[str], None] = lambda s: None) -> CacheReport:
    """Encodes `rows` into out_dir, skipping rows already cached. Under on_bad="skip", a row whose
    source raises one of `bad_errors` (bad media) is reported and left out."""
    report = CacheReport()
    _format.remove_stale_tmp(out_dir)
    for row in rows:
        path = os.path.join(out_dir, _format.entry_name(row))
        if _entry_ok(path, row, tuple(sampler.latent_shape(row))):
            report.done.append(row)
            continue
        try:
            data, _, _ = encode_row(sampler, source, encoders, row)
        except bad_errors as e:
            if on_bad != "skip":
                raise
            report.skipped.append((row, str(e)))
            log(f"row {row} skipped: {e}")
            continue
        _format.atomic_write(path, data)
        report.written.append(row)
    return report


def write_index(sampler, out_dir: str, rows: List[int]) -> int:
    """index.jsonl of the rows whose entries are in out_dir (source order); returns their count."""
    entries = []
    for row in rows:
        path = os.path.join(out_dir, _format.entry_name(row))
        if not os.path.exists(path):
            continue
        meta = read_entry(path, row, tuple(sampler.latent_shape(row)), meta_only=True)
        entries.append((row, tuple(sampler.sample_geometry(row)), meta.get("caption")))
    _format.atomic_write(os.path.join(out_dir, _format.INDEX), _format.index_bytes(entries))
    return len(entries)
