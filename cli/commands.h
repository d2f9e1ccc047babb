#pragma once
// Subcommands of the adaptiveload tool. Each lives in its own cmd_<name>.cpp and registers
// itself with one line in main.cpp's table.
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>

namespace adaptiveload::cli {

struct Command {
  CLI::App* app = nullptr;
  // Checks option values after parsing; throws CLI::ValidationError (exit code 2).
  std::function<void()> validate = [] {};
  // Runs the command; returns the exit code. Library errors propagate to main().
  std::function<int()> run;
};

// Each adds its subcommand to `app`; the returned state lives as long as the program.
std::shared_ptr<Command> add_plan_command(CLI::App& app);
std::shared_ptr<Command> add_demo_command(CLI::App& app);
std::shared_ptr<Command> add_scan_command(CLI::App& app);
std::shared_ptr<Command> add_report_command(CLI::App& app);
std::shared_ptr<Command> add_calibrate_command(CLI::App& app);

}  // namespace adaptiveload::cli
