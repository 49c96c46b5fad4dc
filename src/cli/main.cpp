// deepinfer: command-line entry point. Subcommands live in their own files (see commands.h).
#include <cstdio>
#include <map>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"deepinfer: DeepSeek-V4 family inference engine"};
  app.require_subcommand(1);
  std::map<std::string, deepinfer::cli::Runner> runners;
  runners["logits"] = deepinfer::cli::add_logits_command(app);
  runners["generate"] = deepinfer::cli::add_generate_command(app);
  runners["bench"] = deepinfer::cli::add_bench_command(app);
  runners["make-model"] = deepinfer::cli::add_make_model_command(app);
  runners["serve"] = deepinfer::cli::add_serve_command(app);
  runners["chat"] = deepinfer::cli::add_chat_command(app);
  runners["tokenize"] = deepinfer::cli::add_tokenize_command(app);
  runners["engram-map"] = deepinfer::cli::add_engram_map_command(app);
  CLI11_PARSE(app, argc, argv);
  for (auto* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  return 1;
}
