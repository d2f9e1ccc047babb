#pragma once
// The manifest parser's contract, checked on any input (CSV or JSONL by `name`):
// - only InputError escapes, under either policy;
// - every row is either usable (fields within the documented limits) or listed as bad;
// - when kError accepts the text, kSkip reads the same rows and finds none bad;
// - when kSkip succeeds, kError fails exactly when some row was bad.
#include <cmath>
#include <string_view>

#include "adaptiveload/manifest/manifest.h"
#include "fuzz_common.h"

namespace adaptiveload::fuzz {

inline void check_manifest_text(std::string_view text, const std::string& name) {
  Manifest strict, lenient;
  const bool strict_ok = expected([&] { strict.load_text(text, name, BadRowPolicy::kError); });
  const bool lenient_ok = expected([&] { lenient.load_text(text, name, BadRowPolicy::kSkip); });
  if (strict_ok) {
    AL_FUZZ_CHECK(lenient_ok, "kSkip failed where kError succeeded");
    AL_FUZZ_CHECK(strict.bad_rows().empty(), "kError recorded bad rows");
  }
  if (!lenient_ok) return;
  int64_t usable = 0;
  for (int64_t r = 0; r < lenient.total_rows(); ++r) {
    (void)lenient.where(r);
    if (!lenient.usable(r)) continue;
    ++usable;
    const ClipInfo& c = lenient.clip(r);
    AL_FUZZ_CHECK(!lenient.path(r).empty(), "usable row with an empty path");
    AL_FUZZ_CHECK(c.num_frames >= 1 && c.num_frames <= 10'000'000, "num_frames out of limits");
    AL_FUZZ_CHECK(c.height >= 1 && c.height <= 65'536 && c.width >= 1 && c.width <= 65'536,
                  "size out of limits");
    AL_FUZZ_CHECK(std::isfinite(c.fps) && c.fps >= 0 && c.fps <= 1000, "fps out of limits");
    AL_FUZZ_CHECK(c.num_frames == 1 || c.fps > 0, "a video without fps");
  }
  AL_FUZZ_CHECK(usable + int64_t(lenient.bad_rows().size()) == lenient.total_rows(),
                "rows neither usable nor bad");
  for (const BadRow& b : lenient.bad_rows()) (void)b.message();
  AL_FUZZ_CHECK(strict_ok == lenient.bad_rows().empty(),
                "kError and kSkip disagree on whether a row is bad");
  if (strict_ok) {
    AL_FUZZ_CHECK(strict.total_rows() == lenient.total_rows(),
                  "kError and kSkip read different row counts");
    for (int64_t r = 0; r < strict.total_rows(); ++r) {
      AL_FUZZ_CHECK(strict.path(r) == lenient.path(r), "paths differ between policies");
      AL_FUZZ_CHECK(strict.clip(r).num_frames == lenient.clip(r).num_frames,
                    "frames differ between policies");
    }
  }
}

}  // namespace adaptiveload::fuzz
