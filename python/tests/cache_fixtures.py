"""Tiny, randomly initialised encoders and a synthetic sample source for the latent cache tests
(test_cache.py, and `python -m adaptiveload.cache --source cache_fixtures:SyntheticSource` in
its subprocess runs). Nothing is downloaded: the VAE and the UMT5 encoder are built from small
configs with a fixed seed, the tokenizer is a word-level `tokenizers` model over WORDS."""
import json
import os
import time

import torch

WORDS = ["a", "clip", "of", "the", "cat", "dog", "running", "on", "grass", "row", "image", "sky", "red", "blue"]
TEXT_DIM = 32  # the tiny DiT's text_dim (models.wan_dit CONFIGS["tiny"])
TEXT_LEN = 16

MANIFEST = (
    "path,num_frames,height,width,fps\n"
    "v0.mp4,40,32,64,16\n"  # 17 frames, 32p 16:9
    "v1.mp4,12,64,32,16\n"  # 9 frames, 32p 9:16
    "i2.jpg,1,96,160,\n"  # image, 96p 16:9
    "v3.mp4,10,48,80,16\n"  # 9 frames, 48p 16:9
    "i4.jpg,1,80,80,\n"  # image, 64p 1:1
    "v5.mp4,6,48,64,16\n"  # 5 frames, 48p 4:3
    "i6.jpg,1,32,64,\n"  # image, 32p 16:9
    "v7.mp4,14,48,48,16\n"  # 13 frames, 32p 1:1
    "bad.mp4,3,8,8,16\n"  # too small and short: fits no bucket (not cached)
    "i9.jpg,1,48,80,\n"  # image, 48p 16:9
)


def write_manifest(folder) -> str:
    path = os.path.join(folder, "clips.csv")
    with open(path, "w") as f:
        f.write(MANIFEST)
    return path


def make_models(folder) -> dict:
    """Saves a tiny AutoencoderKLWan (z 16, strides 4x8x8 like Wan's) and a tiny UMT5 encoder +
    word-level tokenizer under `folder`; returns their paths."""
    from diffusers import AutoencoderKLWan
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
    paths = {k: os.path.join(folder, k) for k in ("vae", "text_encoder", "tokenizer")}
    vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    vae.save_pretrained(paths["vae"])
    vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>"] + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(paths["tokenizer"])
    cfg = UMT5Config(vocab_size=len(vocab), d_model=TEXT_DIM, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                     relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1)
    UMT5EncoderModel(cfg).save_pretrained(paths["text_encoder"])
    return paths


class BadMedia(OSError):
    """The synthetic source's bad file."""


class SyntheticSource:
    """Samples at their planned buckets, as adaptiveload.media.MediaDataset gives them: pixels
    [3, F', H', W'] in [-1, 1] drawn from a generator seeded by the row, a caption of WORDS.
    Rows in `bad_rows` raise BadMedia (a bad file). AL_TEST_SOURCE_DELAY (seconds) makes each
    sample that slow, so that a test's kills land mid-job whatever the machine's speed."""

    bad_errors = (BadMedia,)

    def __init__(self, sampler, bad_rows=()):
        self.sampler, self.bad_rows = sampler, set(bad_rows) | set(
            int(r) for r in os.environ.get("AL_TEST_BAD_ROWS", "").split(",") if r)

    def __getitem__(self, row: int) -> dict:
        if row in self.bad_rows:
            raise BadMedia(f"row {row}: v{row}.mp4: cannot decode (synthetic bad file)")
        time.sleep(float(os.environ.get("AL_TEST_SOURCE_DELAY", "0")))
        f, h, w = self.sampler.sample_geometry(row)
        g = torch.Generator().manual_seed(1000 + row)
        pixels = torch.rand((3, f, h, w), generator=g) * 2 - 1
        caption = " ".join(WORDS[(row * 7 + i) % len(WORDS)] for i in range(3 + row % 5))
        return {"row": row, "pixels": pixels, "caption": caption, "shape": (f, h, w)}


def write_reference(sampler, encoders, out: str):
    """An uninterrupted cache of the sampler's planned rows from SyntheticSource, written in this
    process: (folder, the writer's report)."""
    from adaptiveload.cache import write_index, write_rows

    os.makedirs(out)
    rows = list(sampler.planned_rows())
    rep = write_rows(sampler, SyntheticSource(sampler), encoders, out, rows)
    write_index(sampler, out, rows)
    return out, rep


def to_musubi(reference, out):
    """The reference cache rewritten as musubi-tuner writes a Wan cache (cache_io.py's keys,
    image_video_dataset.py's names: the item's original size in the name, latents [C, f, h, w])."""
    from safetensors.torch import save_file

    import adaptiveload.cache

    os.makedirs(out)
    rows = []
    for _i, line in enumerate(open(os.path.join(reference, "index.jsonl"))):
        r = json.loads(line)
        entry = adaptiveload.cache.read_entry(os.path.join(reference, r["path"]), r["source_row"],
                                              (16, 1 + (r["num_frames"] - 1) // 4, r["height"] // 8, r["width"] // 8))
        lat, text = entry["latent"], entry["text"]
        _, f, h, w = lat.shape
        key = f"item{r['source_row']:03d}"
        window = f"_00000-{r['num_frames']:03d}" if r["num_frames"] > 1 else ""
        meta = {"architecture": "wan", "width": str(r["width"] + 8), "height": str(r["height"] + 8),
                "format_version": "1.0.1"}
        name = f"{key}{window}_{r['width'] + 8:04d}x{r['height'] + 8:04d}_wan.safetensors"
        save_file({f"latents_{f}x{h}x{w}_float32": lat}, os.path.join(out, name), metadata=meta)
        save_file({"varlen_t5_float32": text}, os.path.join(out, f"{key}_wan_te.safetensors"), metadata=meta)
        rows.append(r)
    return rows
