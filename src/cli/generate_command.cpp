// `deepinfer generate`: prompt token ids in, generated token ids out (greedy or sampled), tokens/s at the end.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "engine/sampler.h"
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

Runner add_generate_command(CLI::App& app) {
  struct Args {
    std::string model, prompt_ids;
    int max_tokens = 32, threads = 0;
    bool exact = false, ignore_eos = false;
    SamplingParams sampling;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "generate tokens from a prompt");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids, e.g. 0,17,42")->required();
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", args->sampling.top_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", args->sampling.top_k)->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--min-p", args->sampling.min_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->sampling.seed);
  cmd->add_option("--threads", args->threads, "threads (0 = all)");
  cmd->add_flag("--exact", args->exact, "reference kernels (exact, slow)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating after the end-of-sequence token");
  return [args]() {
    std::vector<int32_t> prompt;
    std::string error;
    if (!parse_ids(args->prompt_ids, &prompt, &error)) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      return 2;
    }
    auto model = Model::open(args->model, ModelOptions{.exact = args->exact, .n_threads = args->threads});
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    Model& m = *model.value();
    const ModelConfig& c = m.config();
    for (int32_t id : prompt) {
      if (id < 0 || id >= c.vocab_size) {
        std::fprintf(stderr, "error: --prompt-ids: token id %d is outside the vocabulary (0..%d)\n", id, c.vocab_size - 1);
        return 2;
      }
    }
    Sampler sampler(args->sampling.seed);
    SequenceState seq = m.new_sequence();
    const auto t0 = std::chrono::steady_clock::now();
    ForwardChunk prefill;
    prefill.state = &seq;
    prefill.ids = prompt;
    prefill.prompt_len = int64_t(prompt.size());
    auto out = m.forward(std::span<const ForwardChunk>(&prefill, 1));
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<int32_t> generated;
    while (int(generated.size()) < args->max_tokens) {
      const int32_t next = sampler.sample(out[0].logits.data(), c.vocab_size, args->sampling);
      generated.push_back(next);
      std::printf("%s%d", generated.size() > 1 ? "," : "", next);
      std::fflush(stdout);
      if (next == c.eos_token_id && !args->ignore_eos) break;
      if (int(generated.size()) == args->max_tokens) break;
      ForwardChunk step;
      step.state = &seq;
      step.ids = std::span<const int32_t>(&generated.back(), 1);
      out = m.forward(std::span<const ForwardChunk>(&step, 1));
    }
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("\n");
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr, "prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens in %.3f s (%.1f tok/s)\n",
                 prompt.size(), prefill_s, double(prompt.size()) / prefill_s, generated.size(), decode_s,
                 double(generated.size()) / decode_s);
    return 0;
  };
}

}  // namespace deepinfer::cli
