#include "adaptiveload/cost/cost_model.h"
#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/option_word.h"

namespace adaptiveload {

std::vector<std::string> cost_model_names() { return {"analytic", "power", "profile"}; }

std::unique_ptr<CostModel> make_cost_model(const std::string& name, const CostContext& ctx,
                                           const std::vector<Bucket>& buckets,
                                           const std::vector<int64_t>& bucket_counts) {
  if (name == "analytic") return std::make_unique<AnalyticCost>(ctx);
  if (name == "power") {
    // The single exponent fitted to the analytic curve over the buckets in use.
    AnalyticCost reference(ctx);
    PowerFit fit = fit_power(reference, buckets, bucket_counts);
    auto m = std::make_unique<PowerCost>(fit.k, fit.p);
    m->overhead_s = reference.overhead_s;
    m->half_efficiency_tokens = reference.half_efficiency_tokens;
    return m;
  }
  if (name == "profile") {
    if (ctx.profile_path.empty())
      throw ConfigError("cost model 'profile' needs a profile file (" +
                        option_word("profile", "FILE") + ")");
    return std::make_unique<ProfileCost>(ctx.profile_path);
  }
  throw ConfigError("unknown cost model '" + name + "'; choose one of: analytic, power, profile");
}

}  // namespace adaptiveload
