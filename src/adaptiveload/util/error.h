#pragma once
// Errors the library reports to its callers. Every message says what was wrong, where, and
// what to do; the CLI prints it as one line and exits with a non-zero status.
#include <cmath>
#include <stdexcept>
#include <string>

namespace adaptiveload {

// Bad user input: a manifest row, a preset file, a state file. `where` is "file:line" or a
// field name; it is kept separately so callers can count or group errors.
class InputError : public std::runtime_error {
 public:
  InputError(std::string where, const std::string& what)
      : std::runtime_error(where.empty() ? what : where + ": " + what), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// A request that cannot be satisfied as configured (budgets too small, unknown names).
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The output check of every budget, cost and metric: no NaN or infinity leaves the core. A
// failure means an input passed its range check yet the arithmetic still overflowed, so the
// message names the value and asks for the inputs that produced it.
inline void check_finite(double v, const std::string& what) {
  if (!std::isfinite(v))
    throw ConfigError(
        what + " is not finite (" + (std::isnan(v) ? "NaN" : "infinity") +
        "); an input is out of a usable range: check the model, device and profile files and the "
        "budget options");
}

}  // namespace adaptiveload
