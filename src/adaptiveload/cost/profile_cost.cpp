// The profile cost model: seconds per sample from a calibrated profile (profile.h).
#include <algorithm>
#include <memory>

#include "adaptiveload/cost/cost_variants.h"

namespace adaptiveload {

ProfileCost::ProfileCost(std::shared_ptr<const Profile> profile) : profile_(std::move(profile)) {
  overhead_s = profile_->overhead_s;
  half_efficiency_tokens = profile_->half_efficiency_tokens;
  pack_sample_s = profile_->pack_sample_s;
}

ProfileCost::ProfileCost(const std::string& path)
    : ProfileCost(std::make_shared<const Profile>(load_profile(path))) {}

std::unique_ptr<ProfileCost> ProfileCost::from_cost_json(const std::string& text) {
  return std::make_unique<ProfileCost>(
      std::make_shared<const Profile>(profile_from_cost_json(text)));
}

double ProfileCost::sample_time(const Bucket& b) const {
  const double S = double(b.tokens);
  const Profile& p = *profile_;
  const auto& table = p.table;
  if (table.empty()) return p.a * S + p.b * S * S + p.c0;
  if (table.size() == 1) return table[0].second * S / table[0].first;
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(S, 0.0));
  size_t hi = std::clamp<size_t>(size_t(it - table.begin()), 1, table.size() - 1);
  const auto& p0 = table[hi - 1];
  const auto& p1 = table[hi];
  double t = p0.second + (p1.second - p0.second) * (S - p0.first) / (p1.first - p0.first);
  return std::max(t, 1e-12);
}

}  // namespace adaptiveload
