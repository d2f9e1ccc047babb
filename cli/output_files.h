#pragma once
// The files a subcommand writes, checked against each other and against what it reads before
// anything is written (adaptiveload/util/same_file.h): an output never overwrites an input.
#include <string>
#include <vector>

#include "adaptiveload/util/same_file.h"

namespace adaptiveload::cli {

// Standard output as an output file, where the shell redirected it to a regular file (then
// `plan -m m.csv --json > m.csv` has already emptied the manifest: better said than planned);
// an empty path otherwise.
NamedFile stdout_file();

// check_distinct_outputs with standard output added to `outputs`.
void check_outputs(std::vector<NamedFile> outputs, const std::vector<NamedFile>& inputs);

}  // namespace adaptiveload::cli
