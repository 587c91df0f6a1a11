#pragma once
// The benchmark programs' command lines: CLI11, with `--version` printing convgraph's
// version and bad usage reported as "<program>: error: ..." with exit status 2.
#include <CLI/CLI.hpp>
#include <string>

#include "convgraph/version.hpp"

namespace convgraph::bench {

/// Adds `--version` ("<name> <convgraph::version()>[ <extra>]") and the error format.
inline void setup_cli(CLI::App& app, const std::string& extra = {}) {
  app.set_version_flag("--version", app.get_name() + " " + version() + (extra.empty() ? "" : " " + extra),
                       "print the version and exit");
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return a->get_name() + ": error: " + e.what() + "\nRun with --help for the options.\n";
  });
}

/// Parses the command line: -1 to go on, else the exit status (0 after --help or
/// --version, 2 on bad usage, after printing the error).
inline int parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

}  // namespace convgraph::bench
