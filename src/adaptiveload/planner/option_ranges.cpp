#include "adaptiveload/planner/option_ranges.h"

#include <atomic>
#include <stdexcept>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/plan/layout.h"

namespace adaptiveload {
namespace {

using K = OptionRange::Kind;
constexpr bool kAuto = true, kOpen = true;

OptionRange integer(const char* name, const char* option, uint64_t lo, uint64_t hi,
                    bool zero_is_auto = false) {
  OptionRange r{name, option, K::kInteger};
  r.int_lo = lo, r.int_hi = hi, r.zero_is_auto = zero_is_auto;
  return r;
}

OptionRange real(const char* name, const char* option, double lo, double hi, bool lo_open,
                 bool zero_is_auto) {
  OptionRange r{name, option, K::kReal};
  r.lo = lo, r.hi = hi, r.lo_open = lo_open, r.zero_is_auto = zero_is_auto;
  return r;
}

// --sync: auto, then every mode's name (plan/layout.h).
std::vector<std::string> sync_choices() {
  std::vector<std::string> out = {"auto"};
  for (const SyncModeName& m : kSyncModes) out.push_back(m.name);
  return out;
}

OptionRange choice(const char* name, const char* option, std::vector<std::string> choices) {
  OptionRange r{name, option, K::kChoice};
  r.choices = std::move(choices);
  return r;
}

// The same, named otherwise in Python: the sampler's argument `python`, and where that is a
// bool, the Python literal of each choice.
OptionRange choice(const char* name, const char* option, std::vector<std::string> choices,
                   const char* python, std::vector<std::string> python_values) {
  OptionRange r = choice(name, option, std::move(choices));
  r.python = python, r.python_values = std::move(python_values);
  return r;
}

OptionRange text(const char* name, const char* option) {
  return OptionRange{name, option, K::kText};
}

OptionRange named(OptionRange r, const char* python, const char* short_option = "") {
  r.python = python, r.short_option = short_option;
  return r;
}

std::atomic<FrontEnd> g_front_end{FrontEnd::kCli};

// The Python literal of `value` (the CLI's word) for option `r`.
std::string python_value(const OptionRange& r, const std::string& value) {
  for (size_t i = 0; i < r.python_values.size() && i < r.choices.size(); ++i)
    if (r.choices[i] == value) return r.python_values[i];
  if (value == "auto" && r.zero_is_auto) return "None";
  if (r.kind == K::kInteger || r.kind == K::kReal) return value;
  bool placeholder = !value.empty();
  for (char c : value) placeholder = placeholder && c >= 'A' && c <= 'Z';
  if (placeholder) {
    std::string lower = value;
    for (char& c : lower) c = char(c - 'A' + 'a');
    return "<" + lower + ">";
  }
  return "'" + value + "'";
}

}  // namespace

const std::vector<OptionRange>& option_ranges() {
  // named(): the sampler's argument; options without one are the planner's only (the CLI's,
  // and _C.PlannerConfig's in Python).
  static const std::vector<OptionRange> table = {
      named(integer("world_size", "--world-size", 1, uint64_t(kMaxWorldSize)), "world_size", "-w"),
      named(integer("seed", "--seed", 0, kMaxSeed), "seed"),
      integer("epoch", "--epoch", 0, uint64_t(kMaxEpoch)),
      named(integer("mem_budget_tokens", "--mem-budget", 1, uint64_t(kMaxMemBudgetTokens), kAuto),
            "mem_budget"),
      named(real("comp_budget", "--comp-budget", 0, kMaxCompBudget, kOpen, kAuto), "comp_budget"),
      real("p", "--p", 0, kMaxP, kOpen, kAuto),
      real("step_budget_s", "--step-budget", 0, kMaxSampleSeconds, kOpen, kAuto),
      named(choice("cost_model", "--cost-model", cost_model_names()), "cost_model"),
      choice("checkpointing", "--checkpointing", {"on", "off"}, "checkpointing", {"True", "False"}),
      named(choice("sharding", "--sharding", {"auto", "none", "fsdp"}), "sharding"),
      named(choice("sync", "--sync", sync_choices()), "sync"),
      real("collective_overlap", "--overlap", 0, 1, !kOpen, !kAuto),
      choice("reshard_after_forward", "--reshard-after-forward", {"on", "off"}, "",
             {"True", "False"}),
      // Each allowed sequence-parallel group size (a power of two).
      named(integer("sp_sizes", "--sp-sizes", 1, uint64_t(kMaxGroup)), "sp_sizes"),
      choice("end_policy", "--end-policy", {"pad", "drop"}, "drop_last", {"False", "True"}),
      named(choice("on_bad_row", "--on-bad-row", {"error", "skip"}), "on_bad_row"),
      named(choice("on_duplicate", "--on-duplicate", {"warn", "skip", "error"}), "on_duplicate"),
      named(choice("on_oversize", "--on-oversize", {"error", "skip"}), "on_oversize"),
      named(choice("packing", "--packing", {"off", "on"}), "packing"),
      // Options without a range: a preset or file, or a form the core parses (config.cpp).
      named(text("grid", "--grid"), "grid"),
      named(text("global_batch", "--global-batch"), "global_batch"),
      named(text("sp", "--sp"), "sp"),
      named(text("profile", "--profile"), "profile"),
      named(text("devices", "--devices"), "devices"),
      named(text("rank_speed", "--rank-speed"), "rank_speeds"),
      text("fixed_config", "--fixed-config"),
  };
  return table;
}

const OptionRange& option_range(const std::string& name) {
  for (const OptionRange& r : option_ranges())
    if (name == r.name) return r;
  throw std::out_of_range("no option range '" + name + "'");
}

void set_front_end(FrontEnd f) { g_front_end.store(f); }
FrontEnd front_end() { return g_front_end.load(); }

std::string option_word(const std::string& name, Spelling s) {
  const OptionRange& r = option_range(name);
  if (front_end() == FrontEnd::kPython)
    return *r.python ? std::string(r.python) : "PlannerConfig." + std::string(r.name);
  if (s == Spelling::kShort && *r.short_option) return r.short_option;
  if (s == Spelling::kBoth) return std::string(r.option) + " / " + r.name;
  return r.option;
}

std::string option_word(const std::string& name, const std::string& value, Spelling s) {
  if (front_end() == FrontEnd::kPython)
    return option_word(name) + "=" + python_value(option_range(name), value);
  return option_word(name, s) + (s == Spelling::kEquals ? "=" : " ") + value;
}

}  // namespace adaptiveload
