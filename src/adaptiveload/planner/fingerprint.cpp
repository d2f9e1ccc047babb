// The planner's fingerprint: what a saved sampler state must match to resume (the manifest's
// rows, the presets and options, and the budgets as resolved).
#include <cstring>

#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/hash.h"

namespace adaptiveload {

uint64_t Planner::compute_fingerprint(const Manifest* manifest) const {
  Hasher h;
  if (manifest) {
    // Per row: path, 0, num_frames (i64), height, width (i32), fps (f64), usable (u8). The bytes
    // are staged and hashed in 64 KiB blocks: the same stream (and digest) as hashing each field,
    // without a hasher call per field of 10^7 rows.
    std::vector<char> block(size_t(1) << 16);
    size_t used = 0;
    auto put = [&](const void* p, size_t n) {
      if (used + n > block.size()) {
        h.bytes(block.data(), used), used = 0;
        if (n > block.size()) return h.bytes(p, n);
      }
      std::memcpy(block.data() + used, p, n), used += n;
    };
    for (int64_t row = 0; row < manifest->total_rows(); ++row) {
      const std::string_view p = manifest->path(row);
      const ClipInfo c = manifest->clip(row);
      const uint8_t zero = 0, usable = uint8_t(manifest->usable(row));
      put(p.data(), p.size());
      put(&zero, 1), put(&c.num_frames, 8), put(&c.height, 4), put(&c.width, 4), put(&c.fps, 8),
          put(&usable, 1);
    }
    h.bytes(block.data(), used);
    // Fixed rows (a cache's) plan at their own shape; without any the fingerprint stays as it was.
    if (manifest->any_fixed()) {
      h.str("fixed");
      for (const auto& [first, end] : manifest->fixed_runs()) h.pod(first), h.pod(end);
    }
  } else {
    h.bytes(bucketing_.sample_bucket.data(), bucketing_.sample_bucket.size() * sizeof(uint16_t));
    for (const Bucket& b : bucketing_.buckets)
      h.pod(b.frames), h.pod(b.height), h.pod(b.width), h.pod(b.tokens);
  }
  h.str(model_.name), h.str(device_.name), h.str(grid_.name), h.str(cfg_.cost_model),
      h.str(cfg_.profile);
  h.pod(uint8_t(sharded_)), h.pod(uint8_t(cfg_.checkpointing)), h.pod(uint8_t(cfg_.end_policy)),
      h.pod(uint8_t(cfg_.oversize));
  h.pod(cfg_.mem_budget_tokens), h.pod(cfg_.comp_budget), h.pod(cfg_.p), h.pod(cfg_.step_budget_s);
  h.str(cfg_.fixed_config);
  // Resolved budgets too: a state from a planner that resolved them differently (another
  // world size under FSDP, another search result) must not replay silently.
  h.pod(base_.mem_budget_tokens), h.pod(base_.comp_budget), h.pod(base_.p),
      h.pod(base_.step_budget_s);
  h.pod(memory_.static_bytes);
  h.pod(uint8_t(sync_)), h.pod(cfg_.collective_overlap), h.pod(uint8_t(cfg_.reshard_after_forward));
  h.pod(uint8_t(base_.batch_kind)), h.pod(base_.batch_target);
  if (!base_.bucket_group.empty() || opt_.sp == SpPolicy::kFixed ||
      opt_.sp == SpPolicy::kPerSample) {
    // Sequence parallelism changes plans; without it the fingerprint stays as it was.
    h.str(sp_policy_text(opt_)), h.pod(opt_.sp_sizes), h.pod(device_.node_size);
    h.bytes(base_.bucket_group.data(), base_.bucket_group.size());
  }
  if (opt_.packing) h.str("packing");
  if (!ranks_.empty()) {  // unequal ranks plan differently; alike ranks keep the fingerprint
    h.str("ranks");
    for (size_t r = 0; r < ranks_.device.size(); ++r)
      h.str(ranks_.device[r].name), h.pod(ranks_.speed[r]);
  }  // packed plans differ; without packing it stays as it was
  // A profile's optimizer step and measured link price every step; without them it stays as it was.
  if (const double s = step_fixed_s(); s > 0) h.str("step"), h.pod(s);
  // So does a profile's cost per sample of a pack (a fit on packs) where plans pack.
  if (const double s = cost_->pack_sample_s; s > 0 && opt_.packing) h.str("pack_sample"), h.pod(s);
  if (const Profile* prof = priced_profile(); prof && prof->has_link())
    h.str("link"), h.pod(prof->link_bus_bytes_per_s), h.pod(prof->link_latency_s),
        h.pod(prof->link_gradient_bytes);
  return h.digest();
}

}  // namespace adaptiveload
