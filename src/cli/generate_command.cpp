#include "cli/commands.h"
namespace deepinfer::cli {
Runner add_generate_command(CLI::App& app) {
  app.add_subcommand("generate", "not written yet");
  return [] { return 1; };
}
}  // namespace deepinfer::cli
