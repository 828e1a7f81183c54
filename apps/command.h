// Subcommand registry: each apps/cmd_*.cpp registers itself with a static Registrar, so adding a
// subcommand is adding a file.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace qt {

struct CommandSpec {
  std::string name;
  std::string help;
  // Adds options to `sub` and returns the function run when the subcommand is chosen.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<CommandSpec>& command_registry();

struct Registrar {
  explicit Registrar(CommandSpec spec) { command_registry().push_back(std::move(spec)); }
};

}  // namespace qt
