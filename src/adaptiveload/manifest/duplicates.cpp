#include "adaptiveload/manifest/duplicates.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string_view>
#include <unordered_map>

#include "adaptiveload/util/error.h"
#include "adaptiveload/util/format.h"
#include "adaptiveload/util/option_word.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace adaptiveload {
namespace {

uint32_t path_hash(std::string_view p) { return uint32_t(XXH3_64bits(p.data(), p.size())); }

const ManifestFile* file_of(const Manifest& m, int64_t row) {
  for (const ManifestFile& f : m.files())
    if (row >= f.first_row && row < f.first_row + f.rows) return &f;
  return nullptr;
}

// The duplicate policy `value` in the caller's words ("--on-duplicate=skip",
// "on_duplicate='skip'").
std::string dup(const char* value) { return option_word("on_duplicate", value, Spelling::kEquals); }

}  // namespace

DuplicatePolicy parse_duplicate_policy(const std::string& name) {
  if (name == "warn") return DuplicatePolicy::kWarn;
  if (name == "skip") return DuplicatePolicy::kSkip;
  if (name == "error") return DuplicatePolicy::kError;
  throw ConfigError(
      "on_duplicate must be warn (keep repeated paths, say so), skip (keep the first row of each "
      "path) or error, not '" +
      name + "'");
}

std::vector<DuplicateRow> find_duplicates(const Manifest& m) {
  const int64_t n = m.total_rows();
  // Per row a 32-bit hash of its path (bad rows: none); a hash seen twice marks candidates,
  // which are compared in full. 10^7 rows: 4 bytes a row kept, 8 more while sorting.
  std::vector<uint32_t> by_row(size_t(n), 0), h;
  h.reserve(size_t(n));
  for (int64_t r = 0; r < n; ++r)
    if (m.usable(r)) h.push_back(by_row[size_t(r)] = path_hash(m.path(r)));
  {
    // LSD radix sort, two 16-bit digits.
    std::vector<uint32_t> tmp(h.size());
    for (int shift = 0; shift < 32; shift += 16) {
      std::vector<size_t> count((1 << 16) + 1, 0);
      for (uint32_t x : h) ++count[((x >> shift) & 0xffff) + 1];
      for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
      for (uint32_t x : h) tmp[count[(x >> shift) & 0xffff]++] = x;
      h.swap(tmp);
    }
  }
  std::vector<uint32_t> twice;
  for (size_t i = 1; i < h.size(); ++i)
    if (h[i] == h[i - 1] && (twice.empty() || twice.back() != h[i])) twice.push_back(h[i]);
  std::vector<uint32_t>().swap(h);
  std::vector<DuplicateRow> out;
  if (twice.empty()) return out;
  // A 2^24-bit filter on the hashes seen twice: most rows are passed over with one bit test.
  std::vector<uint64_t> filter(size_t(1) << 18, 0);
  for (uint32_t x : twice) filter[x >> 14] |= uint64_t(1) << ((x >> 8) & 63);
  // Rows whose hash is shared, in row order; the first row of each path wins.
  std::unordered_map<std::string_view, int64_t> first;
  for (int64_t r = 0; r < n; ++r) {
    const uint32_t x = by_row[size_t(r)];
    if (!m.usable(r) || !(filter[x >> 14] >> ((x >> 8) & 63) & 1) ||
        !std::binary_search(twice.begin(), twice.end(), x))
      continue;
    const auto [it, fresh] = first.emplace(m.path(r), r);
    if (!fresh) out.push_back({r, it->second});
  }
  return out;
}

std::vector<DuplicateRow> apply_duplicate_policy(Manifest& m, DuplicatePolicy policy) {
  std::vector<DuplicateRow> d = find_duplicates(m);
  if (d.empty()) return d;
  if (policy == DuplicatePolicy::kError) {
    const DuplicateRow& x = d.front();
    throw InputError(m.where(x.row), "path '" + std::string(m.path(x.row)) + "' repeats row " +
                                         std::to_string(x.first) + " (" + m.where(x.first) + "); " +
                                         thousands(int64_t(d.size())) +
                                         " row(s) repeat an earlier path: remove them, or pass " +
                                         dup("skip") + " (keep the first) or " + dup("warn") +
                                         " (train every row)");
  }
  if (policy == DuplicatePolicy::kSkip)
    for (const DuplicateRow& x : d) m.skip_duplicate(x.row);
  return d;
}

std::string duplicate_report(const Manifest& m, const std::vector<DuplicateRow>& d,
                             DuplicatePolicy policy) {
  if (d.empty()) return "";
  std::string out =
      thousands(int64_t(d.size())) + " row(s) repeat the path of an earlier row" +
      (policy == DuplicatePolicy::kSkip
           ? ": left out (" + dup("skip") + "), the first row of each path kept"
           : ": kept, so those samples train more than once an epoch (" + dup("skip") +
                 " keeps the first of each, " + dup("error") + " refuses them)") +
      "\n";
  // Per (file of the repeat, file of the first): a manifest given twice shows as one line.
  std::map<std::pair<const ManifestFile*, const ManifestFile*>, int64_t> pairs;
  for (const DuplicateRow& x : d) ++pairs[{file_of(m, x.row), file_of(m, x.first)}];
  for (const auto& [files, count] : pairs) {
    const auto [rep, orig] = files;
    if (!rep || !orig) continue;
    const bool whole = rep != orig && count == rep->rows;
    out += "  " + thousands(count) + " in " + rep->path +
           (rep == orig ? "" : " repeat rows of " + orig->path) +
           (whole ? " (every row: is the same manifest given twice?)" : "") + "\n";
  }
  for (size_t i = 0; i < d.size() && i < 5; ++i)
    out += "  row " + std::to_string(d[i].row) + " (" + m.where(d[i].row) + ") repeats row " +
           std::to_string(d[i].first) + " (" + m.where(d[i].first) +
           "): " + std::string(m.path(d[i].row)) + "\n";
  if (d.size() > 5) out += "  ... and " + thousands(int64_t(d.size() - 5)) + " more\n";
  return out;
}

}  // namespace adaptiveload
