// `deepinfer make-model`: writes a deterministic random-weight checkpoint in the real on-disk format from
// a config.json (the embedded default model, benchmark models, test fixtures).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "model/random_checkpoint.h"

namespace deepinfer::cli {

Runner add_make_model_command(CLI::App& app) {
  struct Args {
    std::string config, out, tokenizer;
    uint64_t seed = 0;
    int shards = 3;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight checkpoint (real format) from a config.json");
  cmd->add_option("--config", args->config, "config.json to build the checkpoint for")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", args->out, "output directory")->required();
  cmd->add_option("--seed", args->seed, "weights seed");
  cmd->add_option("--shards", args->shards, "number of safetensors shards")->check(CLI::Range(1, 1000));
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json to copy into the model folder")->check(CLI::ExistingFile);
  return [args]() {
    std::ifstream in(args->config);
    std::stringstream text;
    text << in.rdbuf();
    Status st = write_random_checkpoint(text.str(), args->seed, args->out, args->shards);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
    if (!args->tokenizer.empty()) {
      std::error_code ec;
      std::filesystem::copy_file(args->tokenizer, std::filesystem::path(args->out) / "tokenizer.json",
                                 std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) {
        std::fprintf(stderr, "error: copying %s: %s\n", args->tokenizer.c_str(), ec.message().c_str());
        return 1;
      }
    }
    std::printf("wrote %s (seed %llu)\n", args->out.c_str(), (unsigned long long)args->seed);
    return 0;
  };
}

}  // namespace deepinfer::cli
