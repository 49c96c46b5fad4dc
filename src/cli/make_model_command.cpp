#include "cli/commands.h"
namespace deepinfer::cli {
Runner add_make_model_command(CLI::App& app) {
  app.add_subcommand("make-model", "not written yet");
  return [] { return 1; };
}
}  // namespace deepinfer::cli
