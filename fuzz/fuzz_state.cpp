// libFuzzer target: the sampler-state deserialiser (state_from_json) and Planner::resume on a
// small fixed manifest with the parsed state: as given (fingerprint / seed usually wrong ->
// InputError), and with fingerprint and seed set to the planner's so that the segments and
// step counts reach the replay; then nothing may be lost or repeated.
#include <memory>
#include <nlohmann/json.hpp>

#include "adaptiveload/plan/state.h"
#include "plan_check.h"
#include "small_manifest.h"

using namespace adaptiveload;
using namespace adaptiveload::fuzz;

namespace {
const Planner& planner() {
  static std::unique_ptr<Planner> pl = [] {
    Manifest m;
    m.load_text(kSmallManifestCsv, "small.csv", BadRowPolicy::kError);
    PlannerConfig cfg;
    cfg.world_size = 4;
    cfg.seed = 7;
    return std::make_unique<Planner>(m, cfg);
  }();
  return *pl;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  PlanState st;
  if (!expected([&] { st = state_from_json(text); })) return 0;
  // Only a state of this format and version is accepted (not one whose fields convert to it).
  const auto j = nlohmann::json::parse(text);
  AL_FUZZ_CHECK(j.at("format") == "adaptiveload-state" && j.at("version") == 1,
                "accepted another format or version");
  // A parsed state round-trips exactly.
  PlanState back = state_from_json(state_to_json(st));
  AL_FUZZ_CHECK(back.strategy == st.strategy && back.fingerprint == st.fingerprint &&
                    back.seed == st.seed && back.epoch == st.epoch &&
                    back.segments == st.segments && back.segment_costs == st.segment_costs &&
                    back.layout == st.layout && back.sync == st.sync,
                "state does not round-trip");
  // World sizes up to 2^20 are valid; planning a million ranks per segment is a load test
  // (bench_plan), not a parser test, so keep the replay small here.
  int64_t ranks = 0;
  for (auto [w, steps] : st.segments) ranks += w;
  if (ranks > 2048 || st.epoch > 1'000'000) return 0;
  const Planner& pl = planner();
  const int w_last = st.segments.back().first;
  expected([&] { pl.resume(st, w_last); });
  PlanState fixed = st;
  fixed.fingerprint = pl.fingerprint();
  fixed.seed = pl.config().seed;
  for (int w : {w_last, 1 + w_last % 5}) {
    expected([&] { check_resume_coverage(pl, fixed, w); });
  }
  return 0;
}
