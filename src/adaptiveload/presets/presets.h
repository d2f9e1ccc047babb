#pragma once
// Model, device and bucket-grid presets. Each is a JSON data file (presets/<kind>/<name>.json)
// compiled into the library; a user may also pass a path to a JSON file of the same shape.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace adaptiveload {

struct ModelPreset {
  std::string name;
  int vae_t = 4, vae_h = 8, vae_w = 8;  // VAE strides (frames, height, width)
  int patch_t = 1, patch_h = 2, patch_w = 2;
  int latent_channels = 16;
  int64_t dim = 0, ffn_dim = 0, layers = 0, heads = 0, text_len = 0;
  bool joint_text = false;        // "joint": text tokens join self-attention (MMDiT)
  bool spatial_temporal = false;  // "spatial_temporal": alternate spatial / temporal blocks
  // MMDiT layouts (HunyuanVideo): blocks with separate video and text weights, then blocks
  // with shared ones; layers = their sum. Both 0: `layers` blocks of one kind.
  int64_t dual_stream_layers = 0, single_stream_layers = 0;
  // Per-block adaLN modulation linear: modulation_dim inputs -> modulation_vectors x dim
  // outputs (modulation_dim 0: shared by all blocks, as in Wan).
  int64_t modulation_dim = 0, modulation_vectors = 6;
  std::string default_grid = "wan";  // bucket grid preset used when none is given
  // Parameter count (transformer_params() of the dims unless the file gives "params").
  double params = 0;
  // Pixels per token along height / width: the bucket sizes must be multiples of these.
  int spatial_multiple_h() const { return vae_h * patch_h; }
  int spatial_multiple_w() const { return vae_w * patch_w; }
};

struct DevicePreset {
  std::string name;
  double memory_bytes = 0;
  double peak_flops = 0;     // dense bf16 FLOP/s
  double efficiency = 0.45;  // achieved fraction of peak on large micro-batches
  double allreduce_bus_bytes_per_s = 0;
  double allreduce_latency_s = 0;
  double microbatch_overhead_s = 0;      // fixed cost of one forward+backward launch
  double half_efficiency_tokens = 0;     // tokens per micro-batch at which efficiency halves
  double memory_reserve_fraction = 0.1;  // kept free (allocator fragmentation, workspace)
  // Sequence parallelism: GPUs per node (a group never spans nodes) and the all-to-all
  // bandwidth per GPU within a node (bytes each GPU sends per second) and latency.
  int node_size = 8;
  double alltoall_bytes_per_s = 0;
  double alltoall_latency_s = 0;
};

struct TierSize {
  std::string ratio;  // "16:9"
  int h = 0, w = 0;
};

struct Tier {
  std::string name;  // "480p"
  std::vector<TierSize> sizes;
  int64_t area() const;  // largest area among its sizes; tiers are sorted by it
};

struct BucketGrid {
  std::string name;
  double fps = 16;
  std::vector<int> frames;  // ascending; 1 admits images
  std::vector<Tier> tiers;  // ascending area
  // Open-Sora style per-bucket batch sizes for the `fixed` strategy: tier -> frames -> B.
  // A bucket uses the entry with the largest frame key <= its frame count.
  std::map<std::string, std::map<int, int>> fixed_batch_sizes;
};

// name_or_path: a preset name ("wan2.1-1.3b") or a path to a JSON file. Every numeric field
// is range-checked; an out-of-range one throws InputError naming the field and the range.
ModelPreset load_model(const std::string& name_or_path);
// Weights of the transformer blocks of a model preset (what the memory model counts).
double transformer_params(const ModelPreset& m);
DevicePreset load_device(const std::string& name_or_path);
BucketGrid load_grid(const std::string& name_or_path);
// Reads per-bucket batch sizes ({"<tier>": {"<frames>": B}}) for the `fixed` strategy.
std::map<std::string, std::map<int, int>> load_fixed_batch_sizes(const std::string& path);

// Names of the built-in presets of a kind: "models", "devices", "grids".
std::vector<std::string> preset_names(const std::string& kind);

// Reads a whole file; throws InputError naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace adaptiveload
