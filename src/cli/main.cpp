// deepinfer: command-line entry point. Subcommands live in their own files (see commands.h).
#include <malloc.h>

#include <cstdio>
#include <limits>
#include <map>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Large blocks from the heap, kept there when freed: a prefill's activations are hundreds of MB per layer
  // (V4-Flash q at 4096 tokens: 512 MB), and glibc's default maps every block above 32 MB afresh and unmaps it
  // on free, so each layer faulted in new zeroed pages (perf: clear_page took 14% of a 4096-token prefill).
  // Alternating 2048-token prefills (after the warm-up one): 85.5, 85.1 -> 88.8, 87.6 tokens/s. The cost: the
  // process keeps up to 2 GB of freed heap for the next request.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // up to 2 GB stays for the next layer
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
