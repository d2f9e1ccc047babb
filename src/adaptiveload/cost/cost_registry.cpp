#include <algorithm>

#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {
namespace {

std::unique_ptr<CostModel> make_analytic(const CostContext& ctx, const std::vector<Bucket>&,
                                         const std::vector<int64_t>&) {
  return std::make_unique<AnalyticCost>(ctx);
}

// The single exponent fitted to the analytic curve over the buckets in use.
std::unique_ptr<CostModel> make_power(const CostContext& ctx, const std::vector<Bucket>& buckets,
                                      const std::vector<int64_t>& bucket_counts) {
  AnalyticCost reference(ctx);
  PowerFit fit = fit_power(reference, buckets, bucket_counts);
  auto m = std::make_unique<PowerCost>(fit.k, fit.p);
  m->overhead_s = reference.overhead_s;
  m->half_efficiency_tokens = reference.half_efficiency_tokens;
  return m;
}

std::unique_ptr<CostModel> make_profile(const CostContext& ctx, const std::vector<Bucket>&,
                                        const std::vector<int64_t>&) {
  if (!ctx.profile)
    throw ConfigError("cost model 'profile' needs a profile file (" +
                      option_word("profile", "FILE") + ")");
  return std::make_unique<ProfileCost>(ctx.profile);
}

// The built-in models, one line each: name, summary, factory, uses_profile.
const std::vector<CostModelEntry>& builtins() {
  static const std::vector<CostModelEntry> table = {
      {"analytic", "FLOPs of the model preset over the device's peak and efficiency",
       make_analytic},
      {"power", "the paper's single exponent k * S^p, fitted to the analytic curve", make_power},
      {"profile", "a calibrated profile (a*S + b*S^2 + c0, or a measured table)", make_profile,
       true},
  };
  return table;
}

std::vector<CostModelEntry>& registry() {
  static std::vector<CostModelEntry> table = builtins();
  return table;
}

std::string joined_names() {
  std::string out;
  for (const CostModelEntry& e : cost_models())
    out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

}  // namespace

const std::vector<CostModelEntry>& cost_models() { return registry(); }

const CostModelEntry& find_cost_model(const std::string& name) {
  for (const CostModelEntry& e : cost_models())
    if (name == e.name) return e;
  throw ConfigError("unknown cost model '" + name + "'; choose one of: " + joined_names());
}

void register_cost_model(const CostModelEntry& entry) {
  if (!entry.name || !*entry.name || !entry.make)
    throw ConfigError("a cost model needs a name and a factory");
  for (const CostModelEntry& e : cost_models())
    if (std::string(e.name) == entry.name)
      throw ConfigError("cost model '" + std::string(entry.name) + "' is already registered");
  registry().push_back(entry);
}

bool unregister_cost_model(const std::string& name) {
  auto& t = registry();
  for (size_t i = builtins().size(); i < t.size(); ++i)
    if (name == t[i].name) {
      t.erase(t.begin() + long(i));
      return true;
    }
  return false;
}

std::vector<std::string> cost_model_names() {
  std::vector<std::string> out;
  for (const CostModelEntry& e : cost_models()) out.push_back(e.name);
  return out;
}

std::unique_ptr<CostModel> make_cost_model(const std::string& name, const CostContext& ctx,
                                           const std::vector<Bucket>& buckets,
                                           const std::vector<int64_t>& bucket_counts) {
  return find_cost_model(name).make(ctx, buckets, bucket_counts);
}

}  // namespace adaptiveload
