// libFuzzer target: fuzz bytes -> a small manifest (up to 48 clips and images of any size,
// length and frame rate) and a planner configuration (any registered strategy, packing on or
// off, world size 1..1024, seed, epoch, end policy, model, device, memory / compute / step
// budgets). Checks the plan
// contract: every usable sample exactly once (trained or dropped), every rank busy in
// every step (equal step counts), determinism, resume at a step boundary reproducing the
// plan, and an elastic resume losing and repeating nothing (or, where a sample's
// sequence-parallel group cannot be formed on the new world size, a ConfigError).
#include <memory>

#include "fuzz_strategies.h"
#include "plan_check.h"

using namespace adaptiveload;
using namespace adaptiveload::fuzz;

namespace {
const char* const kFps[] = {"16", "24", "25", "29.97", "30", "60", "8", "120"};

bool same_plan(const Plan& a, const Plan& b) {
  if (a.sample_ids != b.sample_ids || a.rank_begin != b.rank_begin || a.dropped != b.dropped ||
      a.mb_group != b.mb_group)
    return false;
  if (a.micro_batches.size() != b.micro_batches.size()) return false;
  for (size_t i = 0; i < a.micro_batches.size(); ++i) {
    const MicroBatch &x = a.micro_batches[i], &y = b.micro_batches[i];
    if (x.begin != y.begin || x.count != y.count || x.bucket != y.bucket || x.padded != y.padded)
      return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  static const std::vector<std::string> kStrategies = fuzzed_strategies();
  const std::string strategy = kStrategies[in.below(uint32_t(kStrategies.size()))];
  PlannerConfig cfg;
  const uint8_t wsel = in.u8();
  cfg.world_size = wsel < 240 ? 1 + wsel % 16 : 1 + int(in.below(1024));
  cfg.seed = in.u32();
  cfg.packing = cfg.seed >> 31 ? "on" : "off";  // packed micro-batches in half the runs
  cfg.epoch = in.below(3);
  const uint8_t flags = in.u8();
  cfg.end_policy = flags & 1 ? EndPolicy::kDrop : EndPolicy::kPad;
  cfg.model = flags & 2 ? "wan2.1-14b" : "wan2.1-1.3b";
  cfg.device = flags & 4 ? "h100" : "h200";
  cfg.checkpointing = !(flags & 8);
  cfg.oversize = flags & 16 ? OversizePolicy::kError : OversizePolicy::kSkip;
  if (flags & 32) cfg.mem_budget_tokens = 1000 + in.below(800000);
  if (flags & 64) cfg.comp_budget = 1e3 * (1 + in.below(1u << 20));
  if (flags & 128) cfg.step_budget_s = 0.001 * (1 + in.below(20000));
  const int rows = 1 + int(in.below(48));
  std::string csv = "path,num_frames,height,width,fps\n";
  for (int i = 0; i < rows; ++i) {
    const uint8_t kind = in.u8();
    const int h = 16 + int(in.below(2200)), w = 16 + int(in.below(2200));
    csv += "r" + std::to_string(i);
    if (kind < 100) {
      csv += ".jpg,1," + std::to_string(h) + "," + std::to_string(w) + ",\n";
    } else {
      csv += ".mp4," + std::to_string(1 + in.below(700)) + "," + std::to_string(h) + "," +
             std::to_string(w) + "," + kFps[kind % 8] + "\n";
    }
  }
  Manifest m;
  m.load_text(csv, "fuzz.csv", BadRowPolicy::kError);  // generated rows are always valid
  std::unique_ptr<Planner> made;
  if (!expected([&] { made = std::make_unique<Planner>(m, cfg); })) return 0;
  const Planner& pl = *made;
  Plan p;
  if (!expected([&] { p = pl.plan(strategy); })) return 0;  // e.g. `fixed` without a table entry
  check_plan(pl, p);
  AL_FUZZ_CHECK(same_plan(p, pl.plan(strategy)), "plan is not deterministic");
  // Resume at a step boundary with the same world size reproduces the plan.
  const int64_t k = p.num_steps() ? int64_t(in.below(uint32_t(p.num_steps()) + 1)) : 0;
  PlanState st = pl.initial_state(strategy);
  st.segments.back().second = k;
  Planner::Resumed r = pl.resume(state_from_json(state_to_json(st)), cfg.world_size);
  AL_FUZZ_CHECK(r.first_step == size_t(k), "resume at the wrong step");
  AL_FUZZ_CHECK(same_plan(r.plan, p), "resumed plan differs from the uninterrupted one");
  // Elastic: another world size after k steps, then a third after some of those.
  // A world size on which a sample's sequence-parallel group no longer fits (e.g. an odd one
  // for a sample that needs 2 GPUs) is refused with a ConfigError naming the bucket.
  const int w2 = 1 + int(in.below(64));
  if (!expected([&] { check_resume_coverage(pl, st, w2); })) return 0;
  Planner::Resumed r2 = pl.resume(st, w2);
  PlanState st2 = r2.state;
  st2.segments.back().second =
      r2.plan.num_steps() ? int64_t(in.below(uint32_t(r2.plan.num_steps()) + 1)) : 0;
  const int w3 = 1 + int(in.below(64));
  expected([&] { check_resume_coverage(pl, st2, w3); });
  return 0;
}
