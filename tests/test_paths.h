#pragma once
// Where the tests find the project's files and tools. Only test_paths.cpp is compiled with their
// absolute paths (tests/CMakeLists.txt), so every other test source compiles to the same object
// in any clone folder and the compiler cache (scripts/test.sh) reuses it.
#include <string>

namespace adaptiveload::test {

std::string source_dir();                        // the repository
std::string data_dir();                          // its data/
std::string data_file(const std::string& name);  // data/<name>
std::string cli_path();                          // the adaptiveload binary; empty where not built
std::string bench_plan_path();                   // bench/bench_plan; empty where not built
std::string tests_binary_dir();                  // the build folder of tests/

}  // namespace adaptiveload::test
