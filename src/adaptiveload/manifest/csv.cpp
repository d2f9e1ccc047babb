#include "adaptiveload/manifest/manifest.h"
#include "adaptiveload/util/error.h"

namespace adaptiveload {

bool next_csv_record(std::string_view text, size_t& pos, std::vector<std::string>& fields,
                     int64_t& lines, const std::string& name) {
  fields.clear();
  if (pos >= text.size()) return false;
  std::string field;
  bool quoted = false, was_quoted = false;
  int64_t start_line = lines + 1;
  while (pos < text.size()) {
    char c = text[pos++];
    if (quoted) {
      if (c == '"') {
        if (pos < text.size() && text[pos] == '"') {
          field += '"';
          ++pos;
        } else {
          quoted = false;
        }
      } else {
        // A line break inside quotes: LF, CRLF, or a lone CR (old Mac / spreadsheet exports).
        if (c == '\n' || (c == '\r' && (pos >= text.size() || text[pos] != '\n'))) ++lines;
        field += c;
      }
    } else if (c == '"' && field.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else if (c == '\n') {
      ++lines;
      if (!field.empty() && field.back() == '\r') field.pop_back();
      fields.push_back(std::move(field));
      return true;
    } else if (c == '\r' && (pos >= text.size() || text[pos] != '\n')) {
      // A lone CR ends the record too (CR-only files from old spreadsheet exports).
      ++lines;
      fields.push_back(std::move(field));
      return true;
    } else {
      field += c;
    }
  }
  if (quoted) {
    throw InputError(name + ":" + std::to_string(start_line),
                     "unterminated quoted field (a '\"' is never closed)");
  }
  ++lines;
  if (!field.empty() && field.back() == '\r') field.pop_back();
  fields.push_back(std::move(field));
  return true;
}

}  // namespace adaptiveload
