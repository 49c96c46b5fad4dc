#include "cli/commands.h"
namespace deepinfer::cli {
Runner add_bench_command(CLI::App& app) {
  app.add_subcommand("bench", "not written yet");
  return [] { return 1; };
}
}  // namespace deepinfer::cli
