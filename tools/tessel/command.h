// Sub-command registration for the `tessel` CLI: each command lives in its own file and registers itself.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tessel::cli {

/// Adds one sub-command (with its options and callback) to the application.
using CommandSetup = std::function<void(CLI::App& app)>;

struct CommandRegistration {
  std::string name;
  int order;  ///< position in `tessel --help` (pipeline order)
  CommandSetup setup;
};

std::vector<CommandRegistration>& commandRegistry();

struct RegisterCommand {
  RegisterCommand(std::string name, int order, CommandSetup setup) {
    commandRegistry().push_back({std::move(name), order, std::move(setup)});
  }
};

}  // namespace tessel::cli

/// Registers a sub-command: TESSEL_REGISTER_COMMAND(run, 30, [](CLI::App& app) { ... });
#define TESSEL_REGISTER_COMMAND(ident, order, ...) \
  static ::tessel::cli::RegisterCommand tesselCommand_##ident(#ident, order, __VA_ARGS__)
