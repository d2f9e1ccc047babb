// adaptiveload: plan video-DiT training batches and compare batching strategies.
//   adaptiveload demo                     built-in mixed image + video set, Wan 2.1 1.3B, 8 x H200
//   adaptiveload plan --manifest FILE     the same comparison for your manifest; --out writes a
//   plan
// Exit codes: 0 success, 1 bad input data (manifest, profile, state), 2 bad arguments or
// configuration (one line on stderr saying what and where).
#include <CLI/CLI.hpp>
#include <iostream>

#include "adaptiveload/util/error.h"
#include "commands.h"

using namespace adaptiveload;
using namespace adaptiveload::cli;

int main(int argc, char** argv) {
  CLI::App app{
      "AdaptiveLoad: compute-balanced batches for video diffusion transformer training.\n"
      "Plans per-rank batches under a memory and a compute budget and simulates how each batching "
      "strategy loads the cluster (imbalance, throughput, memory, bucket diversity)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "adaptiveload 0.1.0");

  // One line per subcommand.
  std::vector<std::shared_ptr<Command>> commands = {
      add_demo_command(app),   add_plan_command(app),      add_scan_command(app),
      add_report_command(app), add_calibrate_command(app),
  };

  Command* chosen = nullptr;
  try {
    app.parse(argc, argv);
    for (auto& c : commands)
      if (c->app->parsed()) chosen = c.get();
    if (chosen) chosen->validate();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string sub;
    for (auto& c : commands)
      if (c->app->parsed()) sub = " " + c->app->get_name();
    std::cerr << "adaptiveload" << sub << ": error: " << e.what() << " (see 'adaptiveload" << sub
              << " --help')\n";
    return 2;
  }
  if (!chosen) return 2;

  try {
    return chosen->run();
  } catch (const ConfigError& e) {
    std::cerr << "adaptiveload " << chosen->app->get_name() << ": error: " << e.what() << "\n";
    return 2;
  } catch (const InputError& e) {
    std::cerr << "adaptiveload " << chosen->app->get_name() << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "adaptiveload " << chosen->app->get_name() << ": error: " << e.what() << "\n";
    return 1;
  }
}
