"""The latent cache: samples at their planned buckets through the VAE and the text encoder,
written once (python -m adaptiveload.cache, alone or under torchrun) and read back by row id.

    writer: load_encoders, write_rows, write_index (the job; __main__.py is its command line)
    reader: CacheDataset, collate_stack, collate_pack, CacheEntryError (the training loader)

A cache folder is also a manifest: AdaptiveBatchSampler(cache_dir) and `adaptiveload plan
--manifest cache_dir` plan every cached row at the shape it was cached at (fixed rows), and
musubi-tuner's cache folders are read the same way. See docs/data.md.
"""
from .reader import CacheDataset, CacheEntryError, collate_pack, collate_stack, read_entry
from .writer import (
    CacheReport,
    CacheShapeError,
    Encoders,
    load_encoders,
    load_vae,
    vae_encoder,
    write_index,
    write_rows,
)

__all__ = ["CacheDataset", "CacheEntryError", "collate_pack", "collate_stack", "read_entry", "CacheReport",
           "CacheShapeError", "Encoders", "load_encoders", "load_vae", "vae_encoder", "write_index", "write_rows"]
