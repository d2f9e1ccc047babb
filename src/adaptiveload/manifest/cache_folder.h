#pragma once
// Latent cache folders as manifests. Every row of a cache is fixed (Manifest::fixed): its shape
// was chosen when it was encoded, and the planner takes it as the row's bucket.
//
// Two layouts are read:
// - this project's cache (python -m adaptiveload.cache): the folder holds index.jsonl, a
//   manifest whose rows give each cached sample's bucket (num_frames, height, width in pixels)
//   and its safetensors file (a path relative to the folder);
// - musubi-tuner's cache folders (github.com/kohya-ss/musubi-tuner, dataset/cache_io.py and
//   image_video_dataset.py): per item `<key>_<W>x<H>_<arch>.safetensors` (images) or
//   `<key>_<start>-<frames>_<W>x<H>_<arch>.safetensors` (video windows; <start> 5 digits, an
//   optional third part is a section index), W x H the item's size before bucketing, so the
//   bucket's height and width come from the latent's shape in the file's header (key
//   `latents_<f>x<h>x<w>_<dtype>`, tensor [C, f, h, w]) times the VAE's spatial stride; the
//   text encoder's output is in `<key>_<arch>_te.safetensors` (for a video window, <key> is
//   the name before the window). Rows are the latent files in byte order of their names.
#include <cstdint>
#include <string>
#include <string_view>

#include "adaptiveload/manifest/manifest.h"

namespace adaptiveload {

inline constexpr const char* kCacheIndexName = "index.jsonl";

bool is_directory(const std::string& path);

// Appends the rows of a cache folder (either layout) to `m`, all fixed. A musubi-tuner item
// whose header is unreadable, whose latent key is missing or disagrees with its name, or whose
// text-encoder file is missing is a bad row (InputError under kError).
void load_cache_folder(Manifest& m, const std::string& dir, BadRowPolicy policy);

// A musubi-tuner latent file name, parsed (no file is read).
struct MusubiName {
  std::string item_key;                  // the text encoder file's key: <key>_<arch>_te.safetensors
  int64_t frame_start = -1, frames = 0;  // a video window; frames 0 for an image item
  int64_t width = 0, height = 0;         // the item's size before bucketing, pixels
  std::string arch;                      // "wan", ...
};
// False when `file` (a base name) is not `..._<W>x<H>_<arch>.safetensors` or is a `_te` file.
bool parse_musubi_name(std::string_view file, MusubiName& out);

// The latent of a musubi-tuner file: from its safetensors header, the first key
// `latents_<f>x<h>x<w>_<dtype>` (not latents_image_ / latents_control_). Throws InputError
// naming the file when the header is unreadable or holds no such key.
struct MusubiLatent {
  std::string key, dtype;
  int64_t channels = 0, frames = 0, height = 0, width = 0;  // latent [C, f, h, w]
};
MusubiLatent read_musubi_latent(const std::string& path);

// VAE strides (frames, height, width) of a musubi-tuner architecture suffix; false if unknown.
bool musubi_vae_strides(const std::string& arch, int& t, int& h, int& w);

}  // namespace adaptiveload
