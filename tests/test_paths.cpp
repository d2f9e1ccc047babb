// test_paths.h: the paths, from the definitions tests/CMakeLists.txt gives this file alone.
#include "test_paths.h"

namespace adaptiveload::test {

std::string source_dir() { return AL_SOURCE_DIR; }
std::string data_dir() { return AL_DATA_DIR; }
std::string data_file(const std::string& name) { return data_dir() + "/" + name; }
std::string cli_path() { return AL_CLI_PATH; }
std::string bench_plan_path() { return AL_BENCH_PLAN_PATH; }
std::string tests_binary_dir() { return AL_TESTS_BINARY_DIR; }

}  // namespace adaptiveload::test
