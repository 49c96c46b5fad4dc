#include "engine/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace deepinfer {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The draw from (id, probability) pairs, in their order.
int32_t draw(Sampler& sampler, const std::vector<std::pair<int32_t, double>>& weighted) {
  double mass = 0;
  for (const auto& w : weighted) mass += w.second;
  double r = sampler.next_uniform() * mass;
  for (const auto& w : weighted) {
    r -= w.second;
    if (r < 0) return w.first;
  }
  return weighted.back().first;
}
}  // namespace

int32_t verify_draft(Sampler& sampler, const float* logits, int64_t vocab, const SamplingParams& params, int32_t draft,
                     bool& accepted) {
  thread_local std::vector<std::pair<int32_t, double>> dist;
  sampler.distribution(logits, vocab, params, dist);
  double p_draft = 0;
  for (const auto& [id, prob] : dist) {
    if (id == draft) p_draft = prob;
  }
  accepted = params.temperature <= 0.0f ? dist[0].first == draft : sampler.next_uniform() < p_draft;
  if (accepted) return draft;
  std::erase_if(dist, [&](const auto& e) { return e.first == draft; });
  return dist.empty() ? draft : draw(sampler, dist);
}

GenerationResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerationOptions& options) {
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size, P = int64_t(prompt.size());
  const bool speculative = options.speculative && c.is_v41() && c.dspark_block_size > 0;
  DI_CHECK_MSG(!options.speculative || speculative, "speculative decoding needs a V4.1 checkpoint with DSpark");
  DI_CHECK_MSG(P > 0, "generate needs a prompt of at least one token");
  GenerationResult result;
  Sampler sampler(options.sampling.seed);
  SequenceState seq = model.new_sequence();
  auto t0 = Clock::now();
  // The forward brings back each draw alone (ForwardChunk::draw_only; a GPU draws it on the device), its uniform
  // taken from the stream as the forward is set up (as sample() takes it, one a draw).
  auto draw_only = [&](ForwardChunk& fc) {
    fc.draw_only = true;
    fc.draw = sampler.forward_draw(options.sampling, V);
  };
  ForwardChunk prefill{&seq, prompt, P};
  prefill.keep_hidden = speculative;
  draw_only(prefill);
  auto out = model.forward(std::span<const ForwardChunk>(&prefill, 1));
  if (speculative) model.dspark_seed(seq, out[0].hidden_first_token, out[0].hidden);  // > 0: an SWA replay's tail
  result.prefill_seconds = seconds_since(t0);
  t0 = Clock::now();
  int32_t next = out[0].drawn;
  // emit() appends a token; false once generation must stop.
  auto emit = [&](int32_t token) {
    result.tokens.push_back(token);
    if (options.stop_at_eos && token == c.eos_token_id) return false;
    return int64_t(result.tokens.size()) < options.max_tokens;
  };
  while (emit(next)) {
    const int64_t pos = seq.n_tokens - 1;  // the last position the model has processed
    if (!speculative) {
      ForwardChunk step{&seq, std::span<const int32_t>(&next, 1), 0};
      draw_only(step);
      out = model.forward(std::span<const ForwardChunk>(&step, 1));
      ++result.n_forwards;
      next = out[0].drawn;
      continue;
    }
    // Draft after pos with `next` as the anchor, then feed [next, d1 .. dm] in one forward.
    const DsparkDraft draft = model.dspark_draft(seq, pos, next);
    const int64_t remaining = options.max_tokens - int64_t(result.tokens.size());
    const int64_t m = std::min<int64_t>({int64_t(draft.tokens.size()) - 2, remaining, kSpecSlots - 1});
    std::vector<int32_t> fed(draft.tokens.begin(), draft.tokens.begin() + 1 + m);
    ForwardChunk verify{&seq, fed, 0};
    verify.all_logits = true;
    verify.keep_hidden = true;
    out = model.forward(std::span<const ForwardChunk>(&verify, 1));
    ++result.n_forwards;
    result.n_drafted += m;
    // Row i of the logits predicts the token after fed[i]; draft token fed[i + 1] is accepted with
    // probability p_i(fed[i + 1]) (greedy: when it is the argmax).
    int64_t k = 0;
    bool stopped = false;
    int32_t after = -1;
    for (; k < m; ++k) {
      const float* row = &out[0].logits[size_t(k * V)];
      const int32_t d = fed[size_t(k + 1)];
      bool accepted = false;
      const int32_t token = verify_draft(sampler, row, V, options.sampling, d, accepted);
      if (!accepted) {
        after = token;
        break;
      }
      ++result.n_accepted;
      if (!emit(d)) {
        stopped = true;
        ++k;
        break;
      }
    }
    if (after < 0 && !stopped) after = sampler.sample(&out[0].logits[size_t(k * V)], V, options.sampling);
    // Keep next and the k accepted drafts; forget the rest; the DSpark rings learn the kept positions.
    model.rollback(seq, pos + 2 + k);
    const int64_t taps_width = int64_t(out[0].hidden.size()) / int64_t(fed.size());
    model.dspark_seed(seq, pos + 1, std::span<const float>(out[0].hidden.data(), size_t((k + 1) * taps_width)));
    if (stopped) break;
    next = after;
  }
  result.decode_seconds = seconds_since(t0);
  return result;
}

}  // namespace deepinfer
