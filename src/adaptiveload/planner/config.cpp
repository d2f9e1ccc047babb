#include "adaptiveload/planner/config.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "adaptiveload/plan/layout.h"
#include "adaptiveload/presets/presets.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

std::pair<BatchForm, double> parse_global_batch(const std::string& v) {
  const std::string help = " (" + option_word("global_batch", Spelling::kBoth) +
                           "); use auto, free, steps:N (steps per epoch), samples:N or "
                           "tokens:N (per global step)";
  if (v == "auto") return {BatchForm::kAuto, 0};
  if (v == "free") return {BatchForm::kFree, 0};
  const size_t colon = v.find(':');
  const std::string kind = colon == std::string::npos ? "" : v.substr(0, colon);
  if (kind != "steps" && kind != "samples" && kind != "tokens")
    throw ConfigError("global batch '" + v + "' is not understood" + help);
  const std::string num = v.substr(colon + 1);
  double x = -1;
  // Plain decimal digits (and for tokens a fraction or exponent): no sign, space or hex.
  const bool plain = !num.empty() &&
                     num.find_first_not_of(kind == "tokens" ? "0123456789.eE+" : "0123456789") ==
                         std::string::npos &&
                     num[0] != '+' && num[0] != '.';
  if (plain) {
    try {
      size_t used = 0;
      x = std::stod(num, &used);
      if (used != num.size()) x = -1;
    } catch (...) {
      x = -1;
    }
  }
  if (!(x >= 1 && x <= 1e18) || (kind != "tokens" && x != std::floor(x)))
    throw ConfigError("global batch '" + v + "': " + kind + " must be " +
                      (kind == "tokens" ? "a number" : "a whole number") + " in 1..1e18" + help);
  return {kind == "steps"     ? BatchForm::kSteps
          : kind == "samples" ? BatchForm::kSamples
                              : BatchForm::kTokens,
          x};
}

uint32_t parse_sp_sizes(const std::string& v) {
  uint32_t mask = 1;
  size_t i = 0;
  while (i <= v.size()) {
    const size_t j = std::min(v.find(',', i), v.size());
    const std::string t = v.substr(i, j - i);
    const bool digits =
        !t.empty() && t.size() <= 5 && t.find_first_not_of("0123456789") == std::string::npos;
    const int g = digits ? std::stoi(t) : 0;
    if (!(g >= 1 && g <= kMaxGroup && (g & (g - 1)) == 0))
      throw ConfigError("sequence-parallel size '" + t + "' in '" + v + "' (" +
                        option_word("sp_sizes", Spelling::kBoth) +
                        ") must be a power of two in 1..128, e.g. 1,2,4,8");
    mask |= 1u << __builtin_ctz(unsigned(g));
    i = j + 1;
  }
  return mask;
}

int parse_sp(const std::string& v) {
  if (v == "auto" || v == "min" || v == "off" || v == "per-sample") return 0;
  const bool digits =
      !v.empty() && v.size() <= 5 && v.find_first_not_of("0123456789") == std::string::npos;
  const int g = digits ? std::stoi(v) : 0;
  if (!(g >= 1 && g <= kMaxGroup && (g & (g - 1)) == 0))
    throw ConfigError(
        "sequence parallelism '" + v + "' (" + option_word("sp", Spelling::kBoth) +
        ") must be auto (groups for samples that do not fit one GPU, larger ones "
        "where they shorten the epoch), min (each such sample on the smallest group it fits), "
        "per-sample (groups tried even where every sample fits one GPU), off, or a group size "
        "for every sample (a power of two, e.g. 4)");
  return g;
}

namespace {
// A word option against its choices in the core's table (option_ranges.cpp): "sharding must
// be auto, none or fsdp, not 'x'".
void check_choice(const char* name, const std::string& value) {
  const std::vector<std::string>& ch = option_range(name).choices;
  if (std::find(ch.begin(), ch.end(), value) != ch.end()) return;
  std::string list;
  for (size_t i = 0; i < ch.size(); ++i)
    list += (i == 0 ? "" : i + 1 == ch.size() ? " or " : ", ") + ch[i];
  throw ConfigError(std::string(name) + " must be " + list + ", not '" + value + "'");
}
}  // namespace

PlanOptions resolve_options(PlannerConfig& c) {
  auto bad = [](const std::string& what, const std::string& range, double v) {
    throw ConfigError(what + " is " + fmt("%g", v) + "; it must be " + range);
  };
  if (c.world_size < 1 || c.world_size > kMaxWorldSize)
    bad("world size", "in 1.." + std::to_string(kMaxWorldSize), double(c.world_size));
  if (c.epoch < 0) bad("epoch", ">= 0", double(c.epoch));
  if (c.mem_budget_tokens < 0 || c.mem_budget_tokens > kMaxMemBudgetTokens)
    bad("mem_budget_tokens (M_mem)", "0 (auto) or a token count up to 1e15",
        double(c.mem_budget_tokens));
  if (!(c.comp_budget >= 0 && c.comp_budget <= kMaxCompBudget))
    bad("comp_budget (M_comp)", "0 (auto) or a positive finite number", c.comp_budget);
  if (!(c.p == 0 || (c.p > 0 && c.p <= kMaxP)))
    bad("p (exponent of the compute constraint B x S^p)",
        "0 (auto) or in (0, " + fmt("%g", kMaxP) + "]", c.p);
  if (!(c.step_budget_s >= 0 && c.step_budget_s <= kMaxSampleSeconds))
    bad("step_budget_s", "0 (auto) or a number of seconds up to 1e9", c.step_budget_s);
  if (!(c.collective_overlap >= 0 && c.collective_overlap <= 1))
    bad("collective_overlap", "in [0, 1]", c.collective_overlap);
  PlanOptions o;
  if (c.sync != "auto") {
    SyncMode mode;
    if (!parse_sync(c.sync, mode))
      throw ConfigError("sync must be auto, " + sync_names("", true) + ", not '" + c.sync + "'");
    o.sync = mode;
  }
  std::tie(o.batch, o.batch_value) = parse_global_batch(c.global_batch);
  const uint32_t sizes = parse_sp_sizes(c.sp_sizes);
  o.sp_group = parse_sp(c.sp);
  o.sp = o.sp_group > 0         ? SpPolicy::kFixed
         : c.sp == "min"        ? SpPolicy::kMin
         : c.sp == "per-sample" ? SpPolicy::kPerSample
         : c.sp == "off"        ? SpPolicy::kOff
                                : SpPolicy::kAuto;
  o.sp_sizes = o.sp == SpPolicy::kOff ? 1u : sizes;
  if (o.sp_group > 0) o.sp_sizes |= 1u << __builtin_ctz(unsigned(o.sp_group));
  check_choice("packing", c.packing);
  o.packing = c.packing == "on";
  if (c.grid.empty()) c.grid = load_model(c.model).default_grid;
  check_choice("sharding", c.sharding);
  o.sharding = c.sharding == "none"   ? Sharding::kNone
               : c.sharding == "fsdp" ? Sharding::kFsdp
                                      : Sharding::kAuto;
  return o;
}

std::string sp_policy_text(const PlanOptions& o) {
  switch (o.sp) {
    case SpPolicy::kMin:
      return "min";
    case SpPolicy::kPerSample:
      return "per-sample";
    case SpPolicy::kOff:
      return "off";
    case SpPolicy::kFixed:
      return std::to_string(o.sp_group);
    case SpPolicy::kAuto:
      break;
  }
  return "auto";
}

}  // namespace adaptiveload
