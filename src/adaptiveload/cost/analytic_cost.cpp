#include <algorithm>
#include <cmath>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/cost/cost_variants.h"

namespace adaptiveload {

double analytic_sample_flops(const ModelPreset& m, const Bucket& b, bool checkpointing) {
  const double D = double(m.dim), F = double(m.ffn_dim), L = double(m.text_len);
  const double lin_mult = checkpointing ? 4.0 : 3.0;   // fwd + 2x bwd (+ recompute)
  const double attn_mult = checkpointing ? 4.5 : 3.5;  // flash attention recomputes in bwd
  double linear = 0, attention = 0;
  if (m.joint_text) {
    // MMDiT: text tokens join every projection, the attention and the feed-forward.
    const double T = double(b.tokens) + L;
    linear = 8 * T * D * D + 4 * T * D * F;
    attention = 4 * T * T * D;
  } else {
    const double S = double(b.tokens);
    linear = 8 * S * D * D + 4 * S * D * D + 4 * L * D * D + 4 * S * L * D + 4 * S * D * F;
    if (m.spatial_temporal) {
      // Alternate blocks attend within a frame (grid_h*grid_w keys) or along time (grid_f keys).
      attention = 4 * S * D * 0.5 * double(b.grid_h * b.grid_w + b.grid_f);
    } else {
      attention = 4 * S * S * D;
    }
  }
  return double(m.layers) * (lin_mult * linear + attn_mult * attention);
}

MemoryModel analytic_memory_model(const ModelPreset& m, bool checkpointing, int shards) {
  const double D = double(m.dim), F = double(m.ffn_dim), L = double(m.text_len),
               layers = double(m.layers);
  MemoryModel mm;
  // Mixed-precision AdamW without sharding: bf16 weights (2) + fp32 grads (4) + fp32 master
  // weights and two moments (12) -> 18 bytes/param; plus ~3 GB of CUDA context and workspace.
  mm.static_bytes = shards > 1
                        ? m.params * 18.0 / shards + 2 * 2.0 * m.params / double(m.layers) + 3e9
                        : m.params * 18.0 + 3e9;
  // Activations saved for backward per token and layer, bf16 with flash attention
  // (Korthikanti et al. 2022, generalised to an FFN of width F and a cross-attention).
  const double per_layer = 30 * D + 4 * F;
  mm.m1 = checkpointing ? layers * 2 * D + per_layer : layers * per_layer;
  // Text keys/values of the cross-attention (or text tokens of a joint attention) per sample.
  mm.m0 = m.joint_text
              ? (checkpointing ? layers * 2 * D * L + per_layer * L : layers * per_layer * L)
              : layers * 4 * L * D;
  return mm;
}

int64_t MemoryModel::max_batch(int64_t tokens, double usable_bytes) const {
  double per = m0 + m1 * double(tokens);
  double room = usable_bytes - static_bytes;
  if (!(room >= per)) return 0;
  // Capped: a profile may give (almost) zero bytes per sample, and a micro-batch holds at
  // most 2^31 samples anyway; the cap also keeps the conversion to int64 in range.
  const double b = std::floor(room / std::max(per, 1e-300));
  return b >= double(kMaxMicroBatch) ? kMaxMicroBatch : int64_t(b);
}

AnalyticCost::AnalyticCost(const CostContext& ctx)
    : model_(ctx.model),
      checkpointing_(ctx.checkpointing),
      flops_per_s_(ctx.device.peak_flops * ctx.device.efficiency) {
  overhead_s = ctx.device.microbatch_overhead_s;
  half_efficiency_tokens = ctx.device.half_efficiency_tokens;
}

double AnalyticCost::sample_time(const Bucket& b) const {
  return analytic_sample_flops(model_, b, checkpointing_) / flops_per_s_;
}

}  // namespace adaptiveload
