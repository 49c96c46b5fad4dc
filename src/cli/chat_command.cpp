// `deepinfer chat`: an interactive conversation on a terminal (or one turn with --prompt), through the
// in-process Engine with DeepSeek's chat encoding; reasoning is shown apart from the answer. Earlier
// turns' reasoning is dropped from the history, as DeepSeek's encoder does.
#include <iostream>

#include "cli/commands.h"
#include "cli/text_stream.h"

namespace deepinfer::cli {

Runner add_chat_command(CLI::App& app) {
  struct Args {
    EngineOptions engine;
    SamplingParams sampling;
    std::string system, prompt;
    bool no_thinking = false, hide_reasoning = false;
  };
  auto args = std::make_shared<Args>();
  args->sampling.max_tokens = 512;
  CLI::App* cmd = app.add_subcommand("chat", "chat with the model (interactive; /exit to leave)");
  cmd->add_option("--model", args->engine.model_dir, "checkpoint directory with tokenizer.json")->required();
  cmd->add_option("--system", args->system, "system prompt");
  cmd->add_option("--prompt", args->prompt, "one user turn instead of an interactive session");
  cmd->add_option("--max-tokens", args->sampling.max_tokens, "tokens per reply")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", args->sampling.temperature)->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", args->sampling.top_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->sampling.seed);
  cmd->add_option("--threads", args->engine.n_threads, "threads (0 = all)");
  add_backend_option(cmd, &args->engine.cuda);
  cmd->add_flag("--mlock", args->engine.lock_weights, "keep the whole checkpoint in RAM (mlock): read at start, never paged out");
  cmd->add_flag("--no-thinking", args->no_thinking, "chat mode instead of thinking mode");
  cmd->add_flag("--hide-reasoning", args->hide_reasoning, "do not print the reasoning");
  return [args]() {
    auto engine = Engine::open(args->engine);
    if (!engine.ok()) {
      std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
      return 1;
    }
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!args->system.empty()) messages.push_back({{"role", "system"}, {"content", args->system}});
    const bool interactive = args->prompt.empty();
    std::string line;
    while (true) {
      if (interactive) {
        std::fputs("> ", stdout);
        std::fflush(stdout);
        if (!std::getline(std::cin, line) || line == "/exit") break;
        if (line.empty()) continue;
      } else {
        line = args->prompt;
      }
      messages.push_back({{"role", "user"}, {"content", line}});
      Request request;
      request.chat = nlohmann::ordered_json{{"messages", messages}, {"thinking_mode", !args->no_thinking}};
      request.sampling = args->sampling;
      StreamedReply reply = stream_request(*engine.value(), request, !args->hide_reasoning);
      if (!reply.ok) return 1;
      messages.push_back({{"role", "assistant"}, {"content", reply.content}});
      std::fprintf(stderr, "[%lld prompt + %lld generated tokens, %.1f tok/s]\n", (long long)reply.usage.prompt_tokens,
                   (long long)reply.usage.completion_tokens, double(reply.usage.completion_tokens) / reply.seconds);
      if (!interactive) break;
    }
    return 0;
  };
}

}  // namespace deepinfer::cli
