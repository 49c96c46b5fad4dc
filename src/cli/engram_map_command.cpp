// `deepinfer engram-map`: derives a V4.1 model's Engram token map and hash multipliers from its
// tokenizer.json (spec §7.6 steps 1-5) and writes them in the side-file format
// (engram_token_map.safetensors), so a model folder can carry the precomputed table.
#include <cstdio>

#include "cli/commands.h"
#include "format/tokenizer.h"
#include "model/config.h"
#include "model/engram.h"

namespace deepinfer::cli {

Runner add_engram_map_command(CLI::App& app) {
  struct Args {
    std::string model, tokenizer, out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("engram-map", "write a V4.1 model's Engram token map (engram_token_map.safetensors) from its tokenizer.json");
  cmd->add_option("--model", args->model, "model folder (its config.json)")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the model folder's)");
  cmd->add_option("--out", args->out, "output .safetensors path")->required();
  return [args]() {
    const auto fail = [](const std::string& message) {
      std::fprintf(stderr, "error: %s\n", message.c_str());
      return 1;
    };
    auto config = load_model_config(args->model);
    if (!config.ok()) return fail(config.status().message());
    if (config->engram_layers.empty()) return fail(args->model + "/config.json: this model has no Engram layers (engram_layer_ids)");
    const std::string tokenizer_path = args->tokenizer.empty() ? args->model + "/tokenizer.json" : args->tokenizer;
    auto tokenizer = Tokenizer::load(tokenizer_path);
    if (!tokenizer.ok()) return fail(tokenizer.status().message());
    auto hashing = derive_engram_hashing(config.value(), tokenizer.value(), tokenizer_path);
    if (!hashing.ok()) return fail(hashing.status().message());
    if (Status s = write_engram_side_file(config.value(), hashing.value(), args->out); !s.ok()) return fail(s.message());
    std::printf("%s: %d token ids -> %d compressed ids (pad %d), %zu Engram layers\n", args->out.c_str(), tokenizer->vocab_size(),
                config->engram_compressed_vocab_size, hashing->pad, config->engram_layers.size());
    return 0;
  };
}

}  // namespace deepinfer::cli
