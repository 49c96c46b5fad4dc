// `deepinfer tokenize`: text to token ids with the model folder's tokenizer.json (special tokens written in
// the text are recognised, as HF encode does); --ids prints only the ids, else one token per line.
#include <cstdio>

#include "cli/commands.h"
#include "format/tokenizer.h"

namespace deepinfer::cli {

Runner add_tokenize_command(CLI::App& app) {
  struct Args {
    std::string model, text;
    bool ids_only = false, no_special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "text to token ids with the model's tokenizer.json");
  cmd->add_option("--model", args->model, "model folder (or a tokenizer.json path)")->required();
  cmd->add_option("--text", args->text, "text to tokenize")->required();
  cmd->add_flag("--ids", args->ids_only, "print only the comma-separated ids");
  cmd->add_flag("--no-special", args->no_special, "treat special-token spellings as plain text");
  return [args]() {
    auto tokenizer = Tokenizer::load(args->model);
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "error: %s\n", tokenizer.status().message().c_str());
      return 1;
    }
    const auto ids = tokenizer->encode(args->text, !args->no_special);
    if (args->ids_only) {
      for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
      std::printf("\n");
      return 0;
    }
    for (int32_t id : ids) std::printf("%8d  %s\n", id, printable_token_bytes(tokenizer->token_bytes(id)).c_str());
    std::printf("%zu tokens\n", ids.size());
    return 0;
  };
}

}  // namespace deepinfer::cli
