// libFuzzer target: Manifest::load_text on CSV text, policies kError and kSkip.
#include "manifest_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  adaptiveload::fuzz::check_manifest_text(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.csv");
  return 0;
}
