#include "output_files.h"

#include <sys/stat.h>
#include <unistd.h>

namespace adaptiveload::cli {

NamedFile stdout_file() {
  struct stat st;
  if (::fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return {"standard output", ""};
  return {"standard output (redirected to a file)", "/dev/stdout"};
}

void check_outputs(std::vector<NamedFile> outputs, const std::vector<NamedFile>& inputs) {
  outputs.push_back(stdout_file());
  check_distinct_outputs(outputs, inputs);
}

}  // namespace adaptiveload::cli
