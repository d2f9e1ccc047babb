#pragma once
// Helpers shared by the tests that run the adaptiveload tool as a user would.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace adaptiveload::test {

struct CommandResult {
  int code = -1;    // exit status, -1 when the command could not run or was killed
  std::string out;  // its stdout (append " 2>&1" to the command for stderr too)
};

// Runs `cmd` through the shell and collects its stdout and exit status.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A whole file as bytes ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace adaptiveload::test
