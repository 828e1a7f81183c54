// quanttool: one binary, one subcommand per apps/cmd_*.cpp.
// Exit codes: 0 ok, 2 bad input (UserError or a flag CLI11 rejects), 1 a bug.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "apps/command.h"
#include "formats/error.h"
#include "libquant/parallel.h"

namespace qt {
std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> r;
  return r;
}
}  // namespace qt

// libgomp reads its wait policy when it is loaded, before main runs. Its default spins for a
// while at every barrier; on a shared 2-core machine a descheduled partner turns that spinning into
// a 3x slowdown of eval-ppl (measured: 108 vs 339 tokens/s). So, unless the user chose a policy,
// re-run ourselves once with OMP_WAIT_POLICY=passive.
static void choose_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // only returns on failure: carry on with the default policy
}

int main(int argc, char** argv) {
  choose_omp_wait_policy(argv);
  qt::apply_default_threads();  // --threads, where a command has it, replaces it
  // A file-size limit (ulimit -f) reached while writing must be an ordinary write error (EFBIG:
  // one line, exit 2, the temporary output removed), not a kill by SIGXFSZ that leaves it behind.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"quanttool: quantize language models and measure what it costs"};
  app.require_subcommand(1);
  std::map<std::string, std::function<int()>> runs;
  auto& reg = qt::command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& spec : reg) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.help);
    runs[spec.name] = spec.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const qt::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return 1;
}
