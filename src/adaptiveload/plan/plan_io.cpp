#include "adaptiveload/plan/plan_io.h"

#include <charconv>
#include <string>

namespace adaptiveload {

void write_plan_jsonl(const Plan& plan, std::ostream& out, size_t first) {
  std::string line;
  char buf[24];
  auto num = [&](uint64_t v) {
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
    line.append(buf, p);
  };
  const int W = plan.world_size;
  for (size_t t = first; t < plan.num_steps(); ++t) {
    const StepInfo& s = plan.steps[t];
    line.clear();
    line += "{\"step\":", num(t);
    line += ",\"samples\":", num(s.samples);
    line += ",\"tokens\":", num(s.tokens);
    line += ",\"padded\":", num(s.padded);
    line += ",\"sync\":\"", line += sync_name(plan.sync), line += '"';
    if (plan.packed) line += ",\"packed\":true";
    line += ",\"ranks\":[";
    for (int r = 0; r < W; ++r) {
      if (r) line += ',';
      line += '[';
      auto [b, e] = plan.rank_range(t, r);
      for (uint64_t m = b; m < e; ++m) {
        if (m != b) line += ',';
        line += '[';
        const MicroBatch& mb = plan.micro_batches[m];
        for (uint32_t k = 0; k < mb.count; ++k) {
          if (k) line += ',';
          num(plan.sample_ids[mb.begin + k]);
        }
        line += ']';
      }
      line += ']';
    }
    line += "],\"padded_mbs\":[";
    // (rank, index in that rank's list) of each micro-batch that repeats earlier samples.
    bool any = false;
    for (int r = 0; r < W; ++r) {
      auto [b, e] = plan.rank_range(t, r);
      for (uint64_t m = b; m < e; ++m) {
        if (!plan.micro_batches[m].padded) continue;
        if (any) line += ',';
        any = true;
        line += '[', num(uint64_t(r)), line += ',', num(m - b), line += ']';
      }
    }
    line += ']';
    if (!plan.mb_group.empty()) {
      // Sequence-parallel groups of the step: each group of g > 1 ranks and the indices, in
      // each of its ranks' lists, of the micro-batches it runs together.
      line += ",\"groups\":[";
      bool first_group = true;
      for (int r = 0; r < W; ++r) {
        auto [b, e] = plan.rank_range(t, r);
        // A group is listed once, at its first rank, with its run of consecutive indices.
        for (uint64_t m = b; m < e;) {
          const int g = plan.group(m);
          uint64_t n = m;
          while (n < e && plan.group(n) == g) ++n;
          if (g > 1 && r % g == 0) {
            if (!first_group) line += ',';
            first_group = false;
            line += "{\"ranks\":[";
            for (int k = 0; k < g; ++k) {
              if (k) line += ',';
              num(uint64_t(r + k));
            }
            line += "],\"mbs\":[";
            for (uint64_t i = m; i < n; ++i) {
              if (i != m) line += ',';
              num(i - b);
            }
            line += "]}";
          }
          m = n;
        }
      }
      line += ']';
    }
    line += "}\n";
    out << line;
  }
}

}  // namespace adaptiveload
