// Subcommand registry: each apps/cmd_*.cpp registers itself with a static Registrar, so adding a
// subcommand is adding a file.
//
// apps/ compiles as one unity translation unit (CMakeLists.txt): CLI11 is header-only and costs
// seconds of code generation in every file that uses it, once this way. So a file's internals sit
// in a namespace named after it (qt::cmd_convert, …), not an anonymous one, whose names would
// collide with the next file's.
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
