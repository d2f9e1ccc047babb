#include "adaptiveload/report/metric_columns.h"

#include "adaptiveload/strategy/strategy.h"
#include "adaptiveload/util/format.h"

namespace adaptiveload {
namespace {

std::string percent(double x) { return fmt("%.1f%%", 100 * x); }

// `plan`'s table writes counts plainly, the report with thousands separators.
std::string count(int64_t n, bool html) { return html ? thousands(n) : std::to_string(n); }

}  // namespace

double speedup_base(const std::vector<Metrics>& metrics) {
  const std::string baseline = baseline_strategy();
  double base = 0;
  for (const Metrics& m : metrics)
    if (m.name == baseline) base = m.dropped > 0 ? -1 : m.throughput_samples_per_s;
  return base;
}

Speedup speedup(const Metrics& m, double base) {
  if (m.dropped > 0 || base < 0) return {"-*", 0};
  if (base > 0)
    return {fmt("%.2fx", m.throughput_samples_per_s / base), m.throughput_samples_per_s / base};
  return {"-", 0};
}

std::string group_text(const Metrics& m) {
  return m.group_min == m.group_max
             ? std::to_string(m.group_max)
             : std::to_string(m.group_min) + "-" + std::to_string(m.group_max);
}

const std::vector<MetricColumn>& metric_columns() {
  using S = const Speedup&;
  static const std::vector<MetricColumn> table = {
      {"imbalance", "imbalance", 10,
       [](const Metrics& m, S, bool) { return percent(m.imbalance); }},
      {"imbalance_step_mean", "max-mean", 11,
       [](const Metrics& m, S, bool) { return percent(m.imbalance_step_mean); }},
      {"imbalance_step_maxmin", "max-min", 11,
       [](const Metrics& m, S, bool) { return percent(m.imbalance_step_maxmin); }},
      {"throughput_samples_per_s", "samples/s", 11,
       [](const Metrics& m, S, bool) { return fmt("%.2f", m.throughput_samples_per_s); }},
      {"throughput_tokens_per_s", "tokens/s", 11,
       [](const Metrics& m, S, bool) { return fmt("%.0f", m.throughput_tokens_per_s); }},
      {"speedup", "speedup", 9, [](const Metrics&, S s, bool) { return s.text; }},
      {"peak_memory_utilization_mean", "mem avg", 9,
       [](const Metrics& m, S, bool) { return percent(m.peak_memory_utilization_mean); }},
      {"peak_memory_utilization_max", "mem max", 9,
       [](const Metrics& m, S, bool) { return percent(m.peak_memory_utilization_max); }},
      {"diversity", "buckets", 8,
       [](const Metrics& m, S, bool) { return fmt("%.1f", m.diversity); }},
      {"steps", "steps", 7, [](const Metrics& m, S, bool html) { return count(m.steps, html); }},
      {"global_batch_samples_mean", "batch", 9,
       [](const Metrics& m, S, bool) { return fmt("%.1f", m.global_batch_samples_mean); }},
      {"micro_batches_per_rank_step", "mb/rank", 8,
       [](const Metrics& m, S, bool) { return fmt("%.2f", m.micro_batches_per_rank_step); }},
      {"fixed_cost_fraction", "fixed", 7,
       [](const Metrics& m, S, bool) { return percent(m.fixed_cost_fraction); }},
      {"useful_fraction", "useful", 7,
       [](const Metrics& m, S, bool) { return percent(m.useful_fraction); }},
      {"global_batch_tokens_max_dev", "tok dev", 8,
       [](const Metrics& m, S, bool) { return percent(m.global_batch_tokens_max_dev); }},
      // `plan`'s table: the share of the epoch; the report: seconds.
      {"collective_s", "sync", 7,
       [](const Metrics& m, S, bool html) {
         return html ? fmt("%.1f", m.collective_s)
                     : fmt("%.1f%%",
                           m.epoch_time_s > 0 ? 100 * m.collective_s / m.epoch_time_s : 0.0);
       },
       true, "sync s"},
      {"epoch_time_s", "epoch s", 0,
       [](const Metrics& m, S, bool) { return fmt("%.0f", m.epoch_time_s); }},
      // data-value: the largest size; the text gives the range.
      {"group_max", "g", 5, [](const Metrics& m, S, bool) { return group_text(m); }},
      {"padded", "padded", 8, [](const Metrics& m, S, bool html) { return count(m.padded, html); }},
      // `plan`'s table marks a strategy that dropped samples with '*' (its footnote).
      {"dropped", "dropped", 8,
       [](const Metrics& m, S, bool html) {
         return count(m.dropped, html) + (html || m.dropped == 0 ? "" : "*");
       }},
  };
  return table;
}

double column_value(const MetricColumn& c, const Metrics& m, const Speedup& s) {
  return std::string(c.key) == "speedup" ? s.value : metric_field(c.key).number(m);
}

}  // namespace adaptiveload
