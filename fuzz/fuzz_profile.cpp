// libFuzzer target: the profile reader (ProfileCost from a file) and the calibration
// measurement reader (read_measurements), on the same bytes. A profile that loads must give
// a finite, non-negative time for every bucket size, since the planner divides and sorts by it.
#include <cmath>

#include "adaptiveload/cost/calibration.h"
#include "adaptiveload/cost/cost_variants.h"
#include "fuzz_common.h"

using namespace adaptiveload;
using namespace adaptiveload::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = write_temp(data, size, ".profile");
  expected([&] {
    ProfileCost c(path);
    for (int64_t s : {1, 2, 1560, 32760, 75600, 1 << 20}) {
      Bucket b;
      b.tokens = s;
      const double t = c.sample_time(b);
      AL_FUZZ_CHECK(!std::isnan(t) && t >= 0,
                    "profile gives time " + std::to_string(t) + " for S=" + std::to_string(s));
    }
    AL_FUZZ_CHECK(std::isfinite(c.overhead_s) && c.overhead_s >= 0, "bad overhead");
    if (c.has_memory()) {
      const MemoryModel& m = c.memory();
      AL_FUZZ_CHECK(m.static_bytes >= 0 && m.m0 >= 0 && m.m1 >= 0, "negative memory coefficients");
    }
  });
  expected([&] {
    for (const Measurement& m : read_measurements(path)) {
      AL_FUZZ_CHECK(m.tokens > 0 && m.batch > 0 && m.time_s > 0,
                    "accepted a non-positive measurement");
    }
  });
  return 0;
}
