#pragma once
// Rows that repeat an earlier row's path (the same clip listed twice, or a manifest given
// twice): found, reported, and by the user's choice kept, left out or refused. A repeat is
// never silent: it would train that sample twice an epoch.
#include <cstdint>
#include <string>
#include <vector>

#include "adaptiveload/manifest/manifest.h"

namespace adaptiveload {

// warn (default): keep every row and say so; skip: keep the first row of each path; error:
// refuse the manifest. (Listing a data set twice on purpose, to weight it, is a warning.)
enum class DuplicatePolicy { kWarn, kSkip, kError };
DuplicatePolicy parse_duplicate_policy(const std::string& name);  // "warn" | "skip" | "error"

struct DuplicateRow {
  int64_t row;    // the repeat
  int64_t first;  // the earliest usable row with the same path
};

// Usable rows whose path equals an earlier usable row's, ascending by row. 12 bytes a row of
// scratch at most (hashes, each match then compared in full).
std::vector<DuplicateRow> find_duplicates(const Manifest& m);

// find_duplicates, then the policy: kError throws InputError naming the first repeat (file
// and line of both rows), kSkip marks every repeat not usable (Manifest::skip_duplicate).
// Returns the repeats found.
std::vector<DuplicateRow> apply_duplicate_policy(Manifest& m, DuplicatePolicy policy);

// Lines for the user: how many, per pair of files, and the first few rows ("" when none).
std::string duplicate_report(const Manifest& m, const std::vector<DuplicateRow>& d,
                             DuplicatePolicy policy);

}  // namespace adaptiveload
