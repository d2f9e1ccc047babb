#pragma once
// The manifest: one row per clip or image, columns path,num_frames,height,width,fps
// (fps empty or absent for images). Read from CSV or JSONL; columns are found by header
// name in any order and extra columns are ignored. Row ids are the 0-based index of the
// data row, counted across files in the order they were given.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace adaptiveload {

enum class BadRowPolicy { kError, kSkip };

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
  // Appends the rows of a CSV or JSONL file (chosen by extension, else by content).
  // Bad rows throw InputError (kError) or are recorded in bad_rows() (kSkip).
  void load(const std::string& path, BadRowPolicy policy);
  void load_text(std::string_view text, const std::string& name, BadRowPolicy policy);

  // Appends one row given as strings (how in-memory tables arrive); empty fps = image.
  // Returns false and records a BadRow under kSkip; throws under kError.
  bool add_row(const std::string& path, const std::string& num_frames, const std::string& height,
               const std::string& width, const std::string& fps, const std::string& source,
               int64_t line, BadRowPolicy policy);

  // Row ids are 0..total_rows()-1; bad rows keep their ids but are not usable.
  int64_t total_rows() const { return int64_t(usable_.size()); }
  bool usable(int64_t row) const { return usable_[size_t(row)] != 0; }
  const ClipInfo& clip(int64_t row) const { return clips_[size_t(row)]; }
  std::string_view path(int64_t row) const;
  const std::vector<BadRow>& bad_rows() const { return bad_rows_; }
  const std::vector<ManifestFile>& files() const { return files_; }
  // Where a row came from, for messages: "file:line".
  std::string where(int64_t row) const;

 private:
  void push(std::string_view path, const ClipInfo& c, bool ok, int64_t line);
  void load_csv(std::string_view text, const std::string& name, BadRowPolicy policy);
  void load_jsonl(std::string_view text, const std::string& name, BadRowPolicy policy);

  std::vector<ClipInfo> clips_;
  std::vector<uint8_t> usable_;
  std::vector<int64_t> lines_;
  std::string path_pool_;
  std::vector<uint64_t> path_end_;  // path i is path_pool_[end(i-1), end(i))
  std::vector<BadRow> bad_rows_;
  std::vector<ManifestFile> files_;
};

// Splits one CSV record (RFC 4180: quoted fields, "" escapes; lines end in LF, CRLF or a lone CR).
// `pos` advances past the record's line end; quoted fields may span lines (lines counts the
// newlines consumed). Returns false at end of input. Throws InputError on an unterminated quote.
bool next_csv_record(std::string_view text, size_t& pos, std::vector<std::string>& fields,
                     int64_t& lines, const std::string& name);

}  // namespace adaptiveload
