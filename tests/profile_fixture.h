#pragma once
// Shared helpers of the tests of a calibrated profile's optional fields ("step", "link"): one
// profile written with a field, the planner configured with it, and the error reading it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "adaptiveload/cost/cost_variants.h"
#include "adaptiveload/planner/planner.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload::test {

// A fitted profile in the test's temporary folder, with "field": value when value is not empty.
inline std::string write_profile(const std::string& name, const std::string& field,
                                 const std::string& value) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << R"({"format":"adaptiveload-profile","version":1,
    "cost":{"a":2e-6,"b":4e-10,"c0":1e-3,"overhead_s":0.01,"half_efficiency_tokens":256})"
                      << (value.empty() ? "" : ",\"" + field + "\":" + value) << "}";
  return path;
}

inline PlannerConfig profile_config(const std::string& profile, const char* sync, int world_size) {
  PlannerConfig cfg;
  cfg.cost_model = "profile";
  cfg.profile = profile;
  cfg.world_size = world_size;
  cfg.sync = sync;
  return cfg;
}

// The message reading the profile throws ("" when it reads).
inline std::string profile_error(const std::string& profile) {
  try {
    ProfileCost c(profile);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace adaptiveload::test
