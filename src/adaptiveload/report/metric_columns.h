#pragma once
// The columns of a strategy comparison, one list for `plan`'s table (cli/plan_report.cpp)
// and the report's summary table (report/html_report.cpp). Each column names the metric
// field it shows (sim/metrics.h, metric_fields(): the key of `plan --json` and the report's
// data-key) and says how each of the two tables writes it; `speedup` is the one column that
// is not a field (it needs the baseline's row, speedup_base()).
#include <string>
#include <vector>

#include "adaptiveload/sim/metrics.h"

namespace adaptiveload {

// The speedup column's reference: the samples/s of the strategy the registry marks kBaseline
// (equal_tokens), -1 when the baseline dropped samples (no speedup is comparable), 0 when
// the comparison has no baseline row.
double speedup_base(const std::vector<Metrics>& metrics);

// A strategy's speedup over the base: "-*" when it or the baseline dropped samples (a
// strategy that trained fewer samples cannot rank higher), "-" without a baseline, else
// "1.23x"; value 0 where the text is not a ratio.
struct Speedup {
  std::string text;
  double value = 0;
};
Speedup speedup(const Metrics& m, double base);

struct MetricColumn {
  const char* key;   // a metric field's key, or "speedup"
  const char* head;  // heading in both tables, unless html_head is set
  int cli_width;     // right-aligned width in `plan`'s table; 0: not in that table
  // Cell text; `html` asks for the report's form (thousands separators, seconds).
  std::string (*text)(const Metrics& m, const Speedup& s, bool html);
  bool in_html = true;
  const char* html_head = nullptr;
  const char* heading(bool html) const { return html && html_head ? html_head : head; }
};

// Left to right; the strategy's name comes first in both tables.
const std::vector<MetricColumn>& metric_columns();

// The column's exact value for the report's data-value: the field's value, or the speedup.
double column_value(const MetricColumn& c, const Metrics& m, const Speedup& s);

// "1" or "1-4": the sequence-parallel group sizes a plan used (the g column).
std::string group_text(const Metrics& m);

}  // namespace adaptiveload
