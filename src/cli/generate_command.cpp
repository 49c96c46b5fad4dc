// `deepinfer generate`: prompt token ids in, generated token ids out (greedy or sampled), tokens/s at the end.
#include <cstdio>
#include <sstream>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/text_stream.h"
#include "engine/generation.h"
#include "model/model.h"

namespace deepinfer::cli {

namespace {
bool parse_ids(const std::string& text, std::vector<int32_t>* ids, std::string* error) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      ids->push_back(int32_t(v));
    } catch (const std::exception&) {
      *error = "--prompt-ids: '" + item + "' is not an integer token id";
      return false;
    }
  }
  if (ids->empty()) *error = "--prompt-ids: no token ids given";
  return !ids->empty();
}
}  // namespace

// The text path: the in-process Engine renders the chat (or takes the raw text), tokenizes, streams text.
template <typename Args>
int run_text_prompt(const Args& args) {
  EngineOptions options;
  options.model_dir = args.model;
  options.exact = args.exact;
  options.n_threads = args.threads;
  options.cuda = args.cuda;
  options.swa_bounded_replay = args.swa_replay;
  options.lock_weights = args.mlock;
  auto engine = Engine::open(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
    return 1;
  }
  Request request;
  if (args.raw) {
    request.prompt_text = args.prompt;
  } else {
    request.chat = nlohmann::ordered_json{{"messages", {{{"role", "user"}, {"content", args.prompt}}}},
                                          {"thinking_mode", !args.no_thinking}};
  }
  request.sampling.temperature = args.sampling.temperature;
  request.sampling.top_p = args.sampling.top_p;
  request.sampling.top_k = args.sampling.top_k;
  request.sampling.min_p = args.sampling.min_p;
  request.sampling.seed = args.sampling.seed;
  request.sampling.max_tokens = args.max_tokens;
  request.sampling.ignore_eos = args.ignore_eos;
  StreamedReply reply = stream_request(*engine.value(), std::move(request), true);
  if (!reply.ok) return 1;
  std::fprintf(stderr, "%lld prompt + %lld generated tokens in %.3f s (%.1f tok/s)\n", (long long)reply.usage.prompt_tokens,
               (long long)reply.usage.completion_tokens, reply.seconds, double(reply.usage.completion_tokens) / reply.seconds);
  return 0;
}

Runner add_generate_command(CLI::App& app) {
  struct Args {
    std::string model, prompt_ids, prompt;
    int max_tokens = 32, threads = 0;
    bool exact = false, ignore_eos = false, speculative = false, raw = false, no_thinking = false, swa_replay = false;
    bool mlock = false, cuda = false;
    SamplingParams sampling;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "generate tokens from a prompt");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  auto* ids_opt = cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids, e.g. 0,17,42");
  auto* text_opt = cmd->add_option("--prompt", args->prompt, "a user message, rendered with DeepSeek's chat encoding (needs tokenizer.json)");
  ids_opt->excludes(text_opt);
  cmd->add_flag("--raw", args->raw, "with --prompt: plain completion of the text, no chat template");
  cmd->add_flag("--no-thinking", args->no_thinking, "with --prompt: chat mode instead of thinking mode");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", args->sampling.top_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", args->sampling.top_k)->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--min-p", args->sampling.min_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->sampling.seed);
  cmd->add_option("--threads", args->threads, "threads (0 = all)");
  cmd->add_flag("--exact", args->exact, "reference kernels (exact, slow)");
  add_backend_option(cmd, &args->cuda);
  cmd->add_flag("--mlock", args->mlock, "keep the whole checkpoint in RAM (mlock): read at start, never paged out");
  cmd->add_flag("--speculative", args->speculative, "V4.1: DSpark speculative decoding (same tokens as without, when greedy)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after the end-of-sequence token");
  cmd->add_flag("--swa-replay", args->swa_replay, "V4.1: SWA bounded replay in prefill (spec 7.10): the decoder layers run only on the last window + DSpark-block tokens (faster, approximate; off = exact)");
  return [args]() {
    if (!args->prompt.empty()) return run_text_prompt(*args);
    if (args->prompt_ids.empty()) {
      std::fprintf(stderr, "error: give --prompt-ids or --prompt\n");
      return 2;
    }
    std::vector<int32_t> prompt;
    std::string error;
    if (!parse_ids(args->prompt_ids, &prompt, &error)) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      return 2;
    }
    auto model = Model::open(args->model, ModelOptions{.exact = args->exact, .swa_bounded_replay = args->swa_replay,
                                                       .n_threads = args->threads, .cuda = args->cuda, .show_progress = isatty(STDERR_FILENO) != 0,
                                                       .lock_weights = args->mlock});
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    Model& m = *model.value();
    const ModelConfig& c = m.config();
    if (Status st = m.validate_tokens(prompt); !st.ok()) {
      std::fprintf(stderr, "error: --prompt-ids: %s\n", st.message().c_str());
      return 2;
    }
    GenerationOptions options;
    options.max_tokens = args->max_tokens;
    options.sampling = args->sampling;
    options.stop_at_eos = !args->ignore_eos;
    options.speculative = args->speculative;
    if (args->speculative && !c.is_v41()) {
      std::fprintf(stderr, "error: --speculative needs a V4.1 checkpoint with DSpark (%s is deepseek_v4)\n", args->model.c_str());
      return 2;
    }
    GenerationResult r = generate(m, prompt, options);
    for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? "," : "", r.tokens[i]);
    std::printf("\n");
    std::fprintf(stderr, "prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens in %.3f s (%.1f tok/s)\n",
                 prompt.size(), r.prefill_seconds, double(prompt.size()) / r.prefill_seconds, r.tokens.size(), r.decode_seconds,
                 double(r.tokens.size()) / r.decode_seconds);
    if (args->speculative) {
      std::fprintf(stderr, "speculative: %lld forwards, %.2f tokens per forward, %lld of %lld drafts accepted\n",
                   (long long)r.n_forwards, r.tokens_per_forward(), (long long)r.n_accepted, (long long)r.n_drafted);
    }
    return 0;
  };
}

}  // namespace deepinfer::cli
