// test_paths.h: the paths, from the definitions tests/CMakeLists.txt gives this file alone.
#include "test_paths.h"

namespace adaptiveload::test {

const std::string& source_dir() {
  static const std::string s = AL_SOURCE_DIR;
  return s;
}
const std::string& data_dir() {
  static const std::string s = AL_DATA_DIR;
  return s;
}
std::string data_file(const std::string& name) { return data_dir() + "/" + name; }
const std::string& cli_path() {
  static const std::string s = AL_CLI_PATH;
  return s;
}
const std::string& bench_plan_path() {
  static const std::string s = AL_BENCH_PLAN_PATH;
  return s;
}
const std::string& tests_binary_dir() {
  static const std::string s = AL_TESTS_BINARY_DIR;
  return s;
}

}  // namespace adaptiveload::test
