#pragma once
// The manifest: one row per clip or image, columns path,num_frames,height,width,fps
// (fps empty or absent for images) and an optional caption (a column named `caption` or
// `text`, not both). Read from CSV or JSONL; columns are found by header name in any order
// and extra columns are ignored. Row ids are the 0-based index of the
// data row, counted across files in the order they were given.
//
// Storage, for 10^7-row manifests: the manifest keeps each file's text and a path is a
// reference into it (8 bytes: offset and length); paths that are not a plain slice of the
// text (quoted CSV fields, JSON escapes, rows given with add_row) are copied once. A row's
// numbers take 16 bytes and its line is derived from runs of consecutive lines, so a row
// costs 24 bytes beyond the file. Captions are a side store that exists only once a row has
// one (8 bytes a row from then on, a reference like a path's): a manifest without them does
// not grow.
//
// Fixed rows: a latent cache's rows (this project's cache index, or a musubi-tuner cache folder:
// manifest/cache_folder.h) have shapes fixed when they were encoded. Their num_frames, height
// and width are the bucket (F', H', W') in pixels, taken as is by the geometry (no resampling,
// no grid lookup); fps is informational. Kept as runs of row ids: nothing per row.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace adaptiveload {

enum class BadRowPolicy { kError, kSkip };

// How a manifest file is read. kCopy (the default) reads it into memory the manifest owns.
// kMap maps it read-only instead (no copy and no fresh memory: faster for a 10^7-row file),
// which suits a short-lived process such as the CLI: a file rewritten or truncated while the
// manifest lives changes its paths or ends the process (SIGBUS). Pipes and empty files are
// read either way.
enum class FileAccess { kCopy, kMap };

struct ClipInfo {
  int64_t num_frames = 0;
  int32_t height = 0, width = 0;
  double fps = 0;  // 0 for images
};

struct BadRow {
  std::string file;
  int64_t line = 0;  // 1-based line in the file
  std::string field;
  std::string reason;
  std::string message() const;  // "file:line: field 'x': reason"
};

struct ManifestFile {
  std::string path;
  int64_t first_row = 0;  // row id of its first data row
  int64_t rows = 0;       // data rows read from it (good and bad)
};

class Manifest {
 public:
  // Appends the rows of a CSV or JSONL file (chosen by extension, else by content), or of a
  // latent cache folder (manifest/cache_folder.h: fixed rows).
  // Bad rows throw InputError (kError) or are recorded in bad_rows() (kSkip).
  void load(const std::string& path, BadRowPolicy policy, FileAccess access = FileAccess::kCopy);
  void load_text(std::string_view text, const std::string& name, BadRowPolicy policy);

  // Appends one row given as strings (how in-memory tables arrive); empty fps = image.
  // Returns false and records a BadRow under kSkip; throws under kError.
  bool add_row(const std::string& path, const std::string& num_frames, const std::string& height,
               const std::string& width, const std::string& fps, const std::string& source,
               int64_t line, BadRowPolicy policy, const std::string& caption = "");

  // Appends a row found bad by a reader of its own (a cache folder): throws InputError under
  // kError, else records it (file, line, field, reason) and keeps its row id.
  void add_bad_row(const std::string& path, const std::string& source, int64_t line,
                   const std::string& field, const std::string& reason, BadRowPolicy policy);

  // Row ids are 0..total_rows()-1; bad rows keep their ids but are not usable (their clip is
  // ClipInfo{}).
  int64_t total_rows() const { return int64_t(rows_.size()); }
  bool usable(int64_t row) const { return rows_[size_t(row)].frames > 0; }
  // Leaves a row out as a repeat of an earlier path (manifest/duplicates.h): not usable, and
  // not a bad row.
  void skip_duplicate(int64_t row) { rows_[size_t(row)].frames = -1; }
  bool skipped_duplicate(int64_t row) const { return rows_[size_t(row)].frames < 0; }
  ClipInfo clip(int64_t row) const {
    const Row& r = rows_[size_t(row)];
    if (r.frames <= 0) return ClipInfo{};
    return ClipInfo{r.frames, int32_t(r.height_m1) + 1, int32_t(r.width_m1) + 1, r.fps};
  }
  // Marks rows [first, end) as fixed (their clip is their bucket).
  void mark_fixed(int64_t first, int64_t end);
  bool any_fixed() const { return !fixed_runs_.empty(); }
  bool fixed(int64_t row) const;
  const std::vector<std::pair<int64_t, int64_t>>& fixed_runs() const { return fixed_runs_; }
  // Valid while the manifest lives and is not loaded into again.
  std::string_view path(int64_t row) const;
  // The row's caption ("" when it has none); valid as path() is.
  std::string_view caption(int64_t row) const;
  bool has_captions() const { return !caption_ref_.empty(); }
  const std::vector<BadRow>& bad_rows() const { return bad_rows_; }
  const std::vector<ManifestFile>& files() const { return files_; }
  // Where a row came from, for messages: "file:line".
  std::string where(int64_t row) const;
  int64_t line(int64_t row) const;  // 1-based line of the row in its file

  // A file's text, shared between copies of the manifest (read only once loaded).
  struct Text {
    std::shared_ptr<char> hold;
    size_t size = 0;
    std::string_view view() const {
      return hold ? std::string_view(hold.get(), size) : std::string_view();
    }
  };

 private:
  // A usable row's numbers (frames <= 10^7, sides <= 65536, so sides - 1 fit 16 bits); a bad
  // row is all zeros, a skipped duplicate has frames -1.
  struct Row {
    int32_t frames = 0;
    uint16_t height_m1 = 0, width_m1 = 0;
    double fps = 0;
  };
  // Text fields of one row, before validation (views into a text or the caller's strings).
  struct Fields {
    std::string_view path, frames, height, width, fps, caption;
  };
  // Validates `f`: fills `c` and returns true, or sets field and reason.
  static bool parse_fields(const Fields& f, ClipInfo& c, std::string& field, std::string& reason);
  bool add_fields(const Fields& f, const std::string& source, int64_t line, BadRowPolicy policy);
  bool add_plain(const Fields& f, int64_t line);
  void push(std::string_view path, const ClipInfo& c, bool ok, int64_t line,
            std::string_view caption = {});
  // A reference to `s` (a slice of the text being read, or a copy in extra_), as path_ref_'s.
  uint64_t text_ref(std::string_view s);
  std::string_view text_at(uint64_t ref) const;
  void load_owned(Text text, const std::string& name, BadRowPolicy policy);
  void load_csv(std::string_view text, const std::string& name, BadRowPolicy policy);
  void load_jsonl(std::string_view text, const std::string& name, BadRowPolicy policy);
  void load_jsonl_line(std::string_view s, const std::string& name, int64_t line,
                       BadRowPolicy policy);

  std::vector<Row> rows_;
  // Per row: bits 24..63 the path's offset, bits 0..23 its length. Offsets below kExtraBase
  // are into texts_ (text k starts at text_base_[k]), from kExtraBase on into extra_.
  std::vector<uint64_t> path_ref_;
  // Per row, the caption's reference as path_ref_'s (0: none); empty until a row has one.
  std::vector<uint64_t> caption_ref_;
  std::vector<Text> texts_;
  std::vector<uint64_t> text_base_;
  std::string extra_;
  // Runs of rows on consecutive lines: (first row, its line), ascending by row.
  std::vector<std::pair<int64_t, int64_t>> line_runs_;
  std::vector<BadRow> bad_rows_;
  std::vector<ManifestFile> files_;
  std::vector<std::pair<int64_t, int64_t>> fixed_runs_;  // [first, end) row ids, ascending
};

// Splits one CSV record (RFC 4180: quoted fields, "" escapes; lines end in LF, CRLF or a lone CR).
// `pos` advances past the record's line end; quoted fields may span lines (lines counts the
// newlines consumed). Returns false at end of input. Throws InputError on an unterminated quote.
bool next_csv_record(std::string_view text, size_t& pos, std::vector<std::string>& fields,
                     int64_t& lines, const std::string& name);

}  // namespace adaptiveload
