// Engine (include/deepinfer/engine.h): one thread owns the Model, every resident SequenceState and the prefix
// cache; callers talk to it through an inbox (submit) and per-request channels (poll / cancel). Each step: take
// new requests, end cancelled and expired ones, look waiting prompts up in the prefix cache, ask the pure
// scheduler for a plan, preempt / admit / reject as it says, evict prefix-cache snapshots until the KV page pool
// has the pages the step may take, run one batched forward, then sample, detokenize, parse and publish one event
// per request. Every sequence's rows and every snapshot's live in one PagePool sized from the cache budget.
// The step loop does not log, block on I/O, or throw.
#include "deepinfer/engine.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>

#include "engine/cache_footprint.h"
#include "engine/json_mask.h"
#include "engine/json_schema_mask.h"
#include "engine/page_sharing.h"
#include "engine/request_prep.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace deepinfer {

const char* end_reason_name(EndReason reason) {
  switch (reason) {
    case EndReason::kStop: return "stop";
    case EndReason::kLength: return "length";
    case EndReason::kStopSequence: return "stop_sequence";
    case EndReason::kToolCalls: return "tool_calls";
    case EndReason::kCancelled: return "cancelled";
    case EndReason::kDeadline: return "deadline";
    case EndReason::kError: return "error";
  }
  return "unknown";
}

void Histogram::observe(double seconds) {
  for (size_t i = 0; i < kBoundsSeconds.size(); ++i) {
    if (seconds <= kBoundsSeconds[i]) counts[i] += 1;
  }
  count += 1;
  sum += seconds;
}

struct Engine::Impl {
  using Clock = std::chrono::steady_clock;

  EngineOptions options;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ModelInfo info;
  PrepareContext prep;
  SchedulerConfig sched_config;
  std::shared_ptr<PagePool> pool;  // every resident sequence's and snapshot's rows
  std::unique_ptr<PrefixCache> prefix_cache;
  int64_t decode_class = 0;

  // Shared with callers.
  std::mutex inbox_mu;
  std::condition_variable inbox_cv;
  std::deque<std::unique_ptr<Sequence>> inbox;
  bool stopping = false;
  bool drain = false;
  std::atomic<bool> accepting{true};
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> n_queued{0};  // waiting sequences, as of the last inbox drain or step
  std::mutex channels_mu;
  std::unordered_map<RequestId, std::shared_ptr<RequestChannel>> channels;
  mutable std::mutex stats_mu;
  EngineStats stats;
  std::thread thread;
  std::mutex shutdown_mu;

  // Engine thread only.
  std::vector<std::unique_ptr<Sequence>> running;  // admission order
  std::deque<std::unique_ptr<Sequence>> waiting;
  SchedulerInput sched_input;
  SharedPageCounter shared_pages;
  std::vector<ForwardChunk> chunks;
  std::vector<Sequence*> chunk_seqs;
  std::vector<size_t> shaped;  // the chunks whose draw has penalties or a JSON mask to make (TokenDraw::edits, ::allowed)
  std::vector<std::pair<Sequence*, int64_t>> planned;
  std::vector<char> drop_running, drop_waiting;  // per step: 1 rejected, 2 preempted, 3 admitted
  std::unique_ptr<JsonTokenTable> json_table;  // built at open when there is a tokenizer
  int32_t think_end_id = -1;                   // </think>: a thinking answer's JSON constraint starts after it
  EngineStats local;  // counters accumulated by the engine thread, published every step

  Result<std::unique_ptr<Sequence>> make_sequence(Request request);
  Result<std::vector<RequestId>> queue(std::vector<std::unique_ptr<Sequence>> seqs);
  void run();
  void step();
  void finish(Sequence& seq, EndReason reason, const std::string& error = "");
  void publish(Sequence& seq);
  // A step's next tokens come in two parts: draw_next (the forward's draw taken over, or with draws_on_host the
  // penalties, the JSON mask, the draw and its log-probability from the logits) for every sequence at once on the
  // model backend's threads, as each has its own sampler stream, JSON state and logits row (at batch 256 one thread
  // drew ~0.3 s a step with temperature alone); then commit_next in order.
  struct DrawScratch {  // a thread's
    PenaltyScratch penalty;
    std::vector<float> raw_logits;
    std::vector<uint8_t> json_allowed;                        // [vocab] the JSON mask
    JsonPrefixValidator json;                                 // scratch for the JSON mask
    std::optional<JsonSchemaPrefixValidator> json_schema;     // scratch for the JSON Schema mask
  };
  struct Drawn {
    int32_t id = -1;
    bool json_complete_eos = false;  // the JSON answer is complete and the draw ends it
    TokenLogprob logprob;
  };
  Drawn draw_next(Sequence& seq, ChunkOutput& output, DrawScratch& scratch) const;
  // Every draw but with EngineOptions::draws_on_host: the forward then brings back the drawn id alone
  // (ForwardChunk::draw_only), drawn on the device by a GPU backend (a top-k or nucleus draw from candidates found
  // there), the penalties and a JSON answer's mask applied there too (TokenDraw::edits, ::allowed), with its
  // log-probabilities (TokenDraw::logprobs).
  bool draws_on_forward() const { return !options.draws_on_host; }
  // A JSON answer's next-token mask (allowed: a byte an id), from the sequence's validator: only tokens that keep the
  // answer a valid prefix.
  void json_answer_mask(const Sequence& s, DrawScratch& scratch, std::vector<uint8_t>& allowed) const;
  // A response_format sequence's mask this step: its answer's once the answer runs, else (thinking: the answer is
  // still to come, so the reasoning may not end here) every token but the end of text.
  void json_step_mask(const Sequence& s, DrawScratch& scratch, std::vector<uint8_t>& allowed) const;
  void commit_next(Sequence& seq, Drawn drawn);
  void snapshot(const Sequence& seq);
  int64_t prompt_layout_class(int64_t n_prompt) const {
    if (options.prefill_layout == PrefillLayout::kPosition || model->config().is_v41()) return decode_class;
    return std::min<int64_t>(n_prompt, decode_class);  // V4: the window part has min(P, window) slots
  }
  void publish_stats();
};

namespace {
int64_t read_max_position(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "config.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return 0;
  const nlohmann::json* cfg = &j;
  if (j.contains("text_config") && j["text_config"].is_object()) cfg = &j["text_config"];
  if (cfg->contains("max_position_embeddings") && (*cfg)["max_position_embeddings"].is_number_integer()) {
    return (*cfg)["max_position_embeddings"].get<int64_t>();
  }
  return 0;
}
}  // namespace

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options) {
  if (options.max_batch_tokens < 1) return Status::error("max_batch_tokens must be >= 1");
  if (options.max_running < 1) return Status::error("max_running must be >= 1");
  if (options.cache_budget_bytes <= 0) return Status::error("cache_budget_bytes must be > 0");
  if (options.kv_page_bytes <= 0) return Status::error("kv_page_bytes must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  auto model = Model::open(options.model_dir, ModelOptions{.exact = options.exact, .swa_bounded_replay = options.swa_bounded_replay,
                                                                  .n_threads = options.n_threads, .cuda = options.cuda,
                                                                  .lock_weights = options.lock_weights});
  if (!model.ok()) return model.status();
  impl->model = std::move(model.value());
  const ModelConfig& c = impl->model->config();
  const std::filesystem::path tokenizer_path = std::filesystem::path(options.model_dir) / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_path)) {
    auto tokenizer = Tokenizer::load(tokenizer_path.string());
    if (!tokenizer.ok()) return tokenizer.status();
    impl->tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer.value()));
  }
  if (impl->tokenizer) {
    impl->json_table = std::make_unique<JsonTokenTable>(build_json_token_table(*impl->tokenizer, c.vocab_size));
    impl->think_end_id = impl->tokenizer->token_to_id("</think>").value_or(-1);
  }
  int64_t max_context = read_max_position(options.model_dir);
  if (max_context <= 0) max_context = 1 << 20;
  if (options.max_context_tokens > 0) max_context = std::min(max_context, options.max_context_tokens);
  ModelInfo& info = impl->info;
  info.name = std::filesystem::path(options.model_dir).lexically_normal().filename().string();
  if (info.name.empty()) info.name = std::filesystem::path(options.model_dir).lexically_normal().parent_path().filename().string();
  info.max_context_tokens = max_context;
  info.vocab_size = c.vocab_size;
  info.has_tokenizer = impl->tokenizer != nullptr;
  info.is_v41 = c.is_v41();

  const KvFormats formats = kv_formats_of(c);
  const int64_t largest_row = std::max(formats.compressed.row_bytes, formats.index_key.row_bytes);
  if (options.kv_page_bytes < largest_row) {
    return Status::error("kv_page_bytes " + std::to_string(options.kv_page_bytes) + " is smaller than one packed cache row (" +
                         std::to_string(largest_row) + " bytes)");
  }
  const int64_t budget_pages = std::min(options.cache_budget_bytes / options.kv_page_bytes, PagePool::kUnlimited);
  impl->pool = std::make_shared<PagePool>(options.kv_page_bytes, budget_pages);
  const CacheFootprint footprint =
      cache_footprint_of(c, impl->model->new_sequence(impl->pool).fixed_bytes(), options.kv_page_bytes);
  PrepareContext& prep = impl->prep;
  prep.tokenizer = impl->tokenizer.get();
  prep.vocab_size = c.vocab_size;
  prep.eos_token_id = c.eos_token_id;
  prep.bos_token_id = c.bos_token_id;
  prep.chat_version = c.is_v41() ? ChatModelVersion::kV41 : ChatModelVersion::kV4;
  prep.default_thinking = options.default_thinking;
  prep.max_context_tokens = max_context;
  prep.default_max_tokens = std::max(1, options.default_max_tokens);
  prep.footprint = footprint;
  prep.cache_budget_bytes = options.cache_budget_bytes;

  SchedulerConfig& sc = impl->sched_config;
  sc.max_batch_tokens = options.max_batch_tokens;
  sc.max_running = options.max_running;
  sc.budget_pages = budget_pages;
  sc.footprint = footprint;
  if (options.prefix_cache_bytes > 0) {
    impl->prefix_cache = std::make_unique<PrefixCache>(options.prefix_cache_bytes);
    sc.snapshot_interval = std::max<int64_t>(0, options.prefix_snapshot_interval);
    sc.snapshot_before_last_prompt_token = true;
  }
  impl->decode_class = c.window_size;
  impl->stats.cache_budget_bytes = options.cache_budget_bytes;
  impl->local.cache_budget_bytes = options.cache_budget_bytes;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(false); }

// A validated request as the engine thread will hold it; counts the rejection when the request is invalid.
Result<std::unique_ptr<Sequence>> Engine::Impl::make_sequence(Request request) {
  Result<PreparedRequest> prepared = prepare_request(std::move(request), prep);
  if (!prepared.ok()) {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.n_requests_rejected += 1;
    return prepared.status();
  }
  auto seq = std::make_unique<Sequence>();
  PreparedRequest& p = prepared.value();
  seq->id = next_id.fetch_add(1);
  seq->channel = std::make_shared<RequestChannel>();
  seq->tokens = std::move(p.prompt);
  seq->n_prompt = int64_t(seq->tokens.size());
  seq->tokens.reserve(size_t(seq->n_prompt + p.max_new_tokens));
  seq->sampling = std::move(p.sampling);
  seq->sampler = Sampler(seq->sampling.seed);
  seq->max_new_tokens = p.max_new_tokens;
  seq->shared_prefix_tokens = prefix_cache ? p.shared_prefix_tokens : 0;
  if (p.json_object && json_table) {
    seq->json = std::make_unique<JsonPrefixValidator>();
    seq->json->feed(p.json_prefix);  // checked by prepare_request
    seq->json_active = !p.json_after_think;
  }
  if (p.json_schema && json_table) {
    seq->json_schema = std::make_unique<JsonSchemaPrefixValidator>(p.json_schema);
    seq->json_schema->feed(p.json_prefix);  // checked by prepare_request
    seq->json_active = !p.json_after_think;
  }
  if (p.parser && tokenizer) seq->text = std::make_unique<TextOutput>(*tokenizer, std::move(*p.parser));
  seq->deadline = p.deadline;
  seq->submitted_at = Clock::now();
  seq->layout = LayoutClass{prompt_layout_class(seq->n_prompt), seq->n_prompt, decode_class};
  return seq;
}

// Queues the sequences under one lock, so the engine thread takes them in one step; all or none.
Result<std::vector<RequestId>> Engine::Impl::queue(std::vector<std::unique_ptr<Sequence>> seqs) {
  std::vector<RequestId> ids;
  {
    std::lock_guard<std::mutex> lock(inbox_mu);
    if (stopping) return Status::error("the engine is shutting down");
    if (int64_t(inbox.size()) + n_queued.load() + int64_t(seqs.size()) > options.max_waiting) {
      return Status::error("too many queued requests (" + std::to_string(options.max_waiting) + "); retry later");
    }
    std::lock_guard<std::mutex> channels_lock(channels_mu);
    for (std::unique_ptr<Sequence>& seq : seqs) {
      ids.push_back(seq->id);
      channels.emplace(seq->id, seq->channel);
      inbox.push_back(std::move(seq));
    }
  }
  inbox_cv.notify_one();
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.n_requests_submitted += ids.size();
  }
  return ids;
}

Result<RequestId> Engine::submit(Request request) {
  if (!impl_->accepting.load()) return Status::error("the engine is shutting down");
  Result<std::unique_ptr<Sequence>> seq = impl_->make_sequence(std::move(request));
  if (!seq.ok()) return seq.status();
  std::vector<std::unique_ptr<Sequence>> one;
  one.push_back(std::move(seq.value()));
  Result<std::vector<RequestId>> ids = impl_->queue(std::move(one));
  if (!ids.ok()) return ids.status();
  return ids.value()[0];
}

Result<std::vector<RequestId>> Engine::submit_all(std::vector<Request> requests) {
  if (!impl_->accepting.load()) return Status::error("the engine is shutting down");
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < requests.size(); ++i) {
    Result<std::unique_ptr<Sequence>> seq = impl_->make_sequence(std::move(requests[i]));
    if (!seq.ok()) return Status::error("request " + std::to_string(i) + ": " + seq.status().message());
    seqs.push_back(std::move(seq.value()));
  }
  return impl_->queue(std::move(seqs));
}

bool Engine::poll(RequestId id, std::vector<Event>& out, std::chrono::milliseconds wait) {
  std::shared_ptr<RequestChannel> channel;
  {
    std::lock_guard<std::mutex> lock(impl_->channels_mu);
    auto it = impl_->channels.find(id);
    if (it == impl_->channels.end()) return false;
    channel = it->second;
  }
  bool done = false;
  {
    std::unique_lock<std::mutex> lock(channel->mu);
    channel->cv.wait_for(lock, wait, [&] { return !channel->pending.empty(); });
    for (Event& e : channel->pending) {
      done = done || e.finished;
      out.push_back(std::move(e));
    }
    channel->pending.clear();
  }
  if (done) {
    std::lock_guard<std::mutex> lock(impl_->channels_mu);
    impl_->channels.erase(id);
  }
  return !done;
}

void Engine::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(impl_->channels_mu);
  auto it = impl_->channels.find(id);
  if (it != impl_->channels.end()) it->second->cancel.store(true);
  impl_->inbox_cv.notify_one();
}

void Engine::release(RequestId id) {
  std::lock_guard<std::mutex> lock(impl_->channels_mu);
  auto it = impl_->channels.find(id);
  if (it == impl_->channels.end()) return;
  it->second->cancel.store(true);
  impl_->channels.erase(it);
  impl_->inbox_cv.notify_one();
}

void Engine::shutdown(bool drain) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> shutdown_lock(im.shutdown_mu);
  im.accepting.store(false);
  {
    std::lock_guard<std::mutex> lock(im.inbox_mu);
    if (!im.stopping) {
      im.stopping = true;
      im.drain = drain;
    } else if (!drain) {
      im.drain = false;  // a second, harder shutdown stops draining
    }
  }
  im.inbox_cv.notify_one();
  if (im.thread.joinable()) im.thread.join();
}

bool Engine::accepting() const { return impl_->accepting.load(); }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->stats;
}

const ModelInfo& Engine::model_info() const { return impl_->info; }

std::string Engine::token_text(int32_t id) const {
  if (!impl_->tokenizer || id < 0) return "";
  return impl_->tokenizer->decode(std::span<const int32_t>(&id, 1));
}

int64_t Engine::count_tokens(const std::string& text) const {
  if (!impl_->tokenizer) return -1;
  return int64_t(impl_->tokenizer->encode(text, AddedTokenMatching::kNone).size());
}

// ---- engine thread ----

void Engine::Impl::run() {
  while (true) {
    bool stop = false, drain_now = false;
    {
      std::unique_lock<std::mutex> lock(inbox_mu);
      if (running.empty() && waiting.empty()) {
        inbox_cv.wait(lock, [&] { return !inbox.empty() || stopping; });
      }
      while (!inbox.empty()) {
        waiting.push_back(std::move(inbox.front()));
        inbox.pop_front();
      }
      n_queued.store(int64_t(waiting.size()));  // under the lock: queue() counts them while this step runs
      stop = stopping;
      drain_now = drain;
    }
    // Cancelled and expired requests end before anything else is planned.
    const Clock::time_point now = Clock::now();
    auto should_end = [&](Sequence& s, EndReason& why) {
      if ((stop && !drain_now) || s.channel->cancel.load()) {
        why = EndReason::kCancelled;
        return true;
      }
      if (now >= s.deadline) {
        why = EndReason::kDeadline;
        return true;
      }
      return false;
    };
    EndReason why = EndReason::kCancelled;
    for (size_t i = 0; i < waiting.size();) {
      if (should_end(*waiting[i], why)) {
        finish(*waiting[i], why);
        waiting.erase(waiting.begin() + long(i));
      } else {
        ++i;
      }
    }
    for (size_t i = 0; i < running.size();) {
      if (should_end(*running[i], why)) {
        finish(*running[i], why);
        running.erase(running.begin() + long(i));
      } else {
        ++i;
      }
    }
    if (!running.empty() || !waiting.empty()) step();
    publish_stats();
    if (stop && running.empty() && waiting.empty()) {
      std::lock_guard<std::mutex> lock(inbox_mu);
      if (inbox.empty()) break;
    }
  }
}

void Engine::Impl::step() {
  constexpr uint64_t kWaitingBit = uint64_t(1) << 63;
  // Prefix-cache lookups for the waiting sequences that may be admitted now (a match is valid for this step).
  sched_input.running.clear();
  sched_input.waiting.clear();
  shared_pages.begin_step();
  for (size_t i = 0; i < running.size(); ++i) {  // oldest first: a shared page is charged to the oldest holder
    const Sequence& s = *running[i];
    sched_input.running.push_back({uint64_t(i), s.n_computed, s.n_prompt, int64_t(s.tokens.size()), s.shared_prefix_tokens,
                                   shared_pages.see(*s.state)});
  }
  const size_t n_candidates = std::min(waiting.size(), size_t(std::max(0, options.max_running - int(running.size()))));
  for (size_t i = 0; i < waiting.size(); ++i) {
    Sequence& s = *waiting[i];
    s.match = {};
    if (prefix_cache && i < n_candidates) {
      // At least one token must run to produce logits: look up at most n_known - 1 tokens.
      s.match = prefix_cache->lookup(s.tokens, int64_t(s.tokens.size()) - 1, s.layout);
    }
    sched_input.waiting.push_back({kWaitingBit | uint64_t(i), s.match.n_tokens, s.n_prompt, int64_t(s.tokens.size()), s.shared_prefix_tokens,
                                   s.match.state ? shared_pages.count(*s.match.state) : 0});
  }
  const SchedulePlan plan = schedule(sched_input, sched_config);

  // Rejections, then preemptions (their state is dropped; they go back to the front of the queue).
  drop_running.assign(running.size(), 0);
  drop_waiting.assign(waiting.size(), 0);
  for (uint64_t key : plan.rejected) {
    Sequence& s = (key & kWaitingBit) ? *waiting[size_t(key & ~kWaitingBit)] : *running[size_t(key)];
    finish(s, EndReason::kError, "the request does not fit the engine's cache budget");
    ((key & kWaitingBit) ? drop_waiting[size_t(key & ~kWaitingBit)] : drop_running[size_t(key)]) = 1;
  }
  for (uint64_t key : plan.preempted) {
    Sequence& s = *running[size_t(key)];
    s.state.reset();
    s.n_computed = 0;
    drop_running[size_t(key)] = 2;
    local.n_preemptions += 1;
  }
  // Admissions (in plan order) become the newest running sequences.
  chunks.clear();
  chunk_seqs.clear();
  shaped.clear();
  planned.clear();
  bool queues_change = !plan.rejected.empty() || !plan.preempted.empty();
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* s = nullptr;
    if (c.key & kWaitingBit) {
      const size_t wi = size_t(c.key & ~kWaitingBit);
      s = waiting[wi].get();
      // A hit shares the snapshot's pages (no rows are copied); a miss starts empty in the engine's pool.
      s->state = std::make_unique<SequenceState>(s->match.n_tokens > 0 ? *s->match.state : model->new_sequence(pool));
      s->n_computed = s->match.n_tokens;
      if (!s->admitted_once) {
        s->admitted_once = true;
        s->n_cached = s->match.n_tokens;
        local.prefix_cache_queries += prefix_cache ? 1 : 0;
        local.prefix_cache_hits += s->match.n_tokens > 0 ? 1 : 0;
        local.prefix_cache_hit_tokens += uint64_t(s->match.n_tokens);
        local.prompt_tokens += uint64_t(s->n_prompt);
      }
      drop_waiting[wi] = 3;
      queues_change = true;
    } else {
      s = running[size_t(c.key)].get();
    }
    DI_CHECK(s->state && s->state->n_tokens == s->n_computed);
    planned.emplace_back(s, c.n_tokens);
  }
  if (queues_change) {  // survivors keep their order, preempted go to the waiting front, admitted run last
    std::vector<std::unique_ptr<Sequence>> next_running;
    std::deque<std::unique_ptr<Sequence>> next_waiting;
    for (size_t i = 0; i < running.size(); ++i) {
      if (drop_running[i] == 0) next_running.push_back(std::move(running[i]));
      else if (drop_running[i] == 2) next_waiting.push_back(std::move(running[i]));  // oldest first
    }
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (drop_waiting[i] == 3) next_running.push_back(std::move(waiting[i]));  // admitted, in queue order
    }
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (drop_waiting[i] == 0) next_waiting.push_back(std::move(waiting[i]));
    }
    running = std::move(next_running);
    waiting = std::move(next_waiting);
  }
  if (planned.empty()) return;

  // The pages this forward may take (new pages and copies of shared tail pages), next to the running sequences'
  // fixed state (charged in pages, outside the pool): snapshots are evicted until both fit the budget. The plan
  // keeps what resident sequences hold within it, so evicting snapshots (no match pointer is needed any more:
  // admitted states are copies) always makes room; the prefix cache gives way before any running sequence.
  int64_t step_pages = int64_t(running.size()) * sched_config.footprint.fixed_pages();
  for (auto& [s, n] : planned) step_pages += s->state->pages_to_grow(n);
  while (prefix_cache && pool->n_free() < step_pages && prefix_cache->evict_lru()) local.prefix_cache_evictions += 1;

  for (auto& [s, n] : planned) {
    ForwardChunk fc;
    fc.state = s->state.get();
    fc.ids = std::span<const int32_t>(s->tokens.data() + s->n_computed, size_t(n));
    const bool is_prompt = s->n_computed < s->n_prompt;
    DI_CHECK(!is_prompt || s->n_computed + n <= s->n_prompt);
    fc.prompt_len = is_prompt && options.prefill_layout == PrefillLayout::kPrompt ? s->n_prompt : 0;
    // A chunk that draws nothing (a prompt's chunk before its last) needs no logits either (and draws greedily, taking
    // nothing from the sampler's stream). One that draws takes its uniform from the stream now, as sample() would.
    const bool draws = s->n_computed + n == int64_t(s->tokens.size());
    fc.draw_only = !draws || draws_on_forward();
    if (draws && fc.draw_only) {
      fc.draw = s->sampler.forward_draw(s->sampling, model->config().vocab_size);
      if (s->sampling.logprobs) fc.draw.logprobs = s->sampling.top_logprobs;
      if (has_penalties(s->sampling) || s->json || s->json_schema) shaped.push_back(chunks.size());
    }
    chunks.push_back(fc);
    chunk_seqs.push_back(s);
  }
  // The drawing chunks' penalties as logit edits and JSON answers' masks (TokenDraw::edits, ::allowed), each from its
  // sequence's prompt, output and JSON state, on the backend's threads (a long prompt's repetition penalty walks all
  // of it, a mask the whole vocabulary).
  if (!shaped.empty()) {
    model->backend().for_rows(int64_t(shaped.size()), [&](int64_t i0, int64_t i1) {
      thread_local DrawScratch scratch;  // (counts and masks over the vocabulary, kept from step to step)
      for (int64_t i = i0; i < i1; ++i) {
        const size_t c = shaped[size_t(i)];
        Sequence& s = *chunk_seqs[c];
        TokenDraw& draw = chunks[c].draw;
        if (has_penalties(s.sampling)) {
          const std::span<const int32_t> prompt(s.tokens.data(), size_t(s.n_prompt));
          const std::span<const int32_t> generated(s.tokens.data() + s.n_prompt, size_t(s.n_generated()));
          penalty_edits(model->config().vocab_size, s.sampling, prompt, generated, scratch.penalty, s.penalty_edits);
          draw.edits = s.penalty_edits;
        }
        if (s.json || s.json_schema) {
          json_step_mask(s, scratch, s.json_allowed);
          draw.allowed = s.json_allowed;
        }
      }
    });
  }
  std::vector<ChunkOutput> outputs = model->forward(chunks);
  local.n_steps += 1;

  std::vector<size_t> drawing;  // the chunks whose sequence draws its next token now
  for (size_t i = 0; i < chunk_seqs.size(); ++i) {
    Sequence& s = *chunk_seqs[i];
    s.n_computed += int64_t(chunks[i].ids.size());
    DI_CHECK(s.state->n_tokens == s.n_computed);
    if (s.n_computed == int64_t(s.tokens.size())) drawing.push_back(i);
  }
  const Clock::time_point drawn_at = Clock::now();  // (a first token's time: before its draw, as it was)
  std::vector<Drawn> drawn(drawing.size());
  model->backend().for_rows(int64_t(drawing.size()), [&](int64_t k0, int64_t k1) {
    thread_local DrawScratch scratch;  // each thread's own
    for (int64_t k = k0; k < k1; ++k) {
      const size_t i = drawing[size_t(k)];
      drawn[size_t(k)] = draw_next(*chunk_seqs[i], outputs[i], scratch);
    }
  });
  bool any_finished = false;
  for (size_t i = 0, k = 0; i < chunk_seqs.size(); ++i) {  // in chunk order, as before: snapshot, token, events
    Sequence& s = *chunk_seqs[i];
    if (prefix_cache && s.n_computed <= s.n_prompt && s.n_computed > 0) {
      const bool at_boundary = (sched_config.snapshot_interval > 0 && s.n_computed % sched_config.snapshot_interval == 0) ||
                               s.n_computed == s.n_prompt - 1 || s.n_computed == s.n_prompt ||
                               s.n_computed == s.shared_prefix_tokens;
      if (at_boundary) snapshot(s);
    }
    if (k < drawing.size() && drawing[k] == i) {
      if (s.n_generated() == 0) s.first_token_at = drawn_at;
      commit_next(s, std::move(drawn[k++]));
      any_finished = any_finished || s.done;
    }
    publish(s);
  }
  if (any_finished) {
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [&](const std::unique_ptr<Sequence>& s) { return s->done; }),
                  running.end());
  }
}

void Engine::Impl::snapshot(const Sequence& seq) {
  if (!prefix_cache) return;
  prefix_cache->insert(std::span<const int32_t>(seq.tokens.data(), size_t(seq.n_computed)), seq.layout, *seq.state);
}

Engine::Impl::Drawn Engine::Impl::draw_next(Sequence& s, ChunkOutput& output, DrawScratch& scratch) const {
  Drawn drawn;
  const bool constrained = (s.json || s.json_schema) && s.json_active;
  if (output.logits.empty()) {  // draw_only: the forward drew it (with the mask made as the step was planned)
    DI_CHECK(draws_on_forward() && output.drawn >= 0);
    drawn.id = output.drawn;
    if (s.sampling.logprobs) drawn.logprob = std::move(output.logprob);
    if (constrained) {
      DI_CHECK(s.json_allowed[size_t(drawn.id)]);
      drawn.json_complete_eos = drawn.id == model->config().eos_token_id;  // allowed only where the document may end
    }
    return drawn;
  }
  const int64_t vocab = model->config().vocab_size;
  float* row = output.logits.data();
  const std::span<const int32_t> prompt(s.tokens.data(), size_t(s.n_prompt));
  const std::span<const int32_t> generated(s.tokens.data() + s.n_prompt, size_t(s.n_generated()));
  const float* raw = row;  // logprobs are over the model's logits, before penalties and temperature
  if (s.sampling.logprobs && (has_penalties(s.sampling) || s.json || s.json_schema)) {  // (a thinking one's mask too)
    scratch.raw_logits.assign(row, row + vocab);
    raw = scratch.raw_logits.data();
  }
  apply_penalties(row, vocab, s.sampling, prompt, generated, scratch.penalty);
  if (s.json || s.json_schema) {  // only tokens that keep the answer a valid prefix (greedy and sampled alike)
    json_step_mask(s, scratch, scratch.json_allowed);
    apply_mask(row, vocab, scratch.json_allowed);
  }
  drawn.id = s.sampler.sample(row, vocab, s.sampling);
  if (constrained) {
    DI_CHECK(scratch.json_allowed[size_t(drawn.id)]);
    drawn.json_complete_eos = drawn.id == model->config().eos_token_id;  // allowed only where the document may end
  }
  if (s.sampling.logprobs) token_logprobs(raw, vocab, drawn.id, s.sampling.top_logprobs, drawn.logprob);
  return drawn;
}

void Engine::Impl::json_answer_mask(const Sequence& s, DrawScratch& scratch, std::vector<uint8_t>& allowed) const {
  const int32_t eos = model->config().eos_token_id;
  if (s.json) {
    json_token_mask(*json_table, *s.json, eos, allowed, scratch.json);
  } else {
    if (!scratch.json_schema) scratch.json_schema.emplace(*s.json_schema);  // once; later masks copy into it
    json_schema_token_mask(*json_table, *s.json_schema, eos, allowed, *scratch.json_schema);
  }
}

void Engine::Impl::json_step_mask(const Sequence& s, DrawScratch& scratch, std::vector<uint8_t>& allowed) const {
  if (s.json_active) {
    json_answer_mask(s, scratch, allowed);
    return;
  }
  const int64_t vocab = model->config().vocab_size;
  const int32_t eos = model->config().eos_token_id;
  allowed.assign(size_t(vocab), 1);
  if (eos >= 0 && eos < vocab) allowed[size_t(eos)] = 0;
}

void Engine::Impl::commit_next(Sequence& s, Drawn drawn) {
  const int32_t id = drawn.id;
  const bool json_complete_eos = drawn.json_complete_eos;
  const bool constrained = (s.json || s.json_schema) && s.json_active;
  if (constrained) {
    if (!json_complete_eos) DI_CHECK(s.json ? s.json->feed(json_table->token(id)) : s.json_schema->feed(json_table->token(id)));
  } else if ((s.json || s.json_schema) && id == think_end_id) {
    s.json_active = true;  // the reasoning ended: the answer starts now
  }
  s.tokens.push_back(id);
  s.event.token_ids.push_back(id);
  if (s.sampling.logprobs) s.event.logprobs.push_back(std::move(drawn.logprob));
  local.generation_tokens += 1;

  const int32_t eos = model->config().eos_token_id;
  const bool is_stop_token = json_complete_eos || (id == eos && !s.sampling.ignore_eos) ||
                             std::find(s.sampling.stop_token_ids.begin(), s.sampling.stop_token_ids.end(), id) !=
                                 s.sampling.stop_token_ids.end();
  if (is_stop_token) {
    const EndReason reason = s.text ? s.text->finish(StreamEnd::kEos, s.event.deltas) : EndReason::kStop;
    finish(s, reason);
    return;
  }
  if (s.text && s.text->push(id, s.event.deltas)) {
    s.event.stop_sequence = s.text->stop_sequence();
    finish(s, EndReason::kStopSequence);
    return;
  }
  if (s.n_generated() >= s.max_new_tokens) {
    const EndReason reason = s.text ? s.text->finish(StreamEnd::kLength, s.event.deltas) : EndReason::kLength;
    finish(s, reason == EndReason::kStop ? EndReason::kLength : reason);
  }
}

void Engine::Impl::finish(Sequence& s, EndReason reason, const std::string& error) {
  if (s.text && (reason == EndReason::kCancelled || reason == EndReason::kDeadline || reason == EndReason::kError)) {
    s.text->finish(StreamEnd::kUnknown, s.event.deltas);  // flush what was held back
  }
  if (prefix_cache && s.state && s.n_computed > 0 && reason != EndReason::kError) snapshot(s);
  s.state.reset();
  s.event.finished = true;
  s.event.end_reason = reason;
  s.event.error = error;
  const Clock::time_point now = Clock::now();
  local.n_requests_finished += 1;
  if (reason == EndReason::kCancelled) local.n_requests_cancelled += 1;
  if (s.n_generated() > 0) {
    local.ttft.observe(std::chrono::duration<double>(s.first_token_at - s.submitted_at).count());
    if (s.n_generated() > 1) {
      local.tpot.observe(std::chrono::duration<double>(now - s.first_token_at).count() / double(s.n_generated() - 1));
    }
  }
  local.e2e.observe(std::chrono::duration<double>(now - s.submitted_at).count());
  publish(s);
}

void Engine::Impl::publish(Sequence& s) {
  Event& e = s.event;
  if (s.done || (!e.finished && e.token_ids.empty() && e.deltas.empty())) return;
  s.done = e.finished;
  e.usage.prompt_tokens = s.n_prompt;
  e.usage.completion_tokens = s.n_generated();
  e.usage.cached_tokens = s.n_cached;
  {
    std::lock_guard<std::mutex> lock(s.channel->mu);
    s.channel->pending.push_back(std::move(e));
  }
  s.channel->cv.notify_all();
  e = Event{};
}

void Engine::Impl::publish_stats() {
  n_queued.store(int64_t(waiting.size()));
  const PagePoolStats pages = pool->stats();
  int64_t bytes = pages.n_used * pages.page_bytes;  // shared pages once
  for (const auto& s : running) bytes += s->state ? s->state->fixed_bytes() : 0;
  std::lock_guard<std::mutex> lock(stats_mu);
  const uint64_t submitted = stats.n_requests_submitted, rejected = stats.n_requests_rejected;
  stats = local;
  stats.n_requests_submitted = submitted;
  stats.n_requests_rejected = rejected;
  stats.n_waiting = int64_t(waiting.size());
  stats.n_running = int64_t(running.size());
  stats.cache_bytes_used = bytes;
  stats.kv_page_bytes = pages.page_bytes;
  stats.kv_pages_total = pages.n_total;
  stats.kv_pages_used = pages.n_used;
  stats.kv_pages_shared = pages.n_shared;
  stats.prefix_cache_bytes_used = prefix_cache ? prefix_cache->bytes_used() : 0;
  stats.n_prefix_snapshots = prefix_cache ? prefix_cache->n_entries() : 0;
}

}  // namespace deepinfer
