// `deepinfer bench serve`: load on the real HTTP API. With --model it starts `deepinfer serve`'s server in-process
// on an ephemeral loopback port (the serve flags apply); with --url it drives a running server. For each
// --concurrency level, that many client threads send --requests streamed chat completions (deterministic prompts
// from --seed, ignore_eos so every answer has --max-tokens tokens) and the table reports throughput and TTFT /
// TPOT / E2E percentiles. Then a multi-turn workload (conversations sharing a system prompt, each turn resending
// the history with the previous answers) reports the prefix-cache hit rate from usage.cached_tokens and the TTFT
// of later turns against first turns. Failed requests are counted and listed, never averaged in.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_serve.h"
#include "cli/serve_client.h"
#include "cli/serve_options.h"
#include "core/percentile.h"
#include "deepinfer/engine.h"
#include "server/http_server.h"

namespace deepinfer::cli {

namespace {
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  ServeArgs serve;
  std::string url, api_key, json_path;
  std::vector<int> concurrency{1, 4, 16, 32};
  int requests = 16, prompt_tokens = 128, max_tokens = 32;
  int turns = 3, conversations = 4, system_tokens = 256, turn_tokens = 32;
  uint64_t seed = 1;
  double temperature = 0.0;
  bool thinking = false, json_object = false;
  int timeout_s = 600;
};

// Common English words, most of them one token with their leading space in DeepSeek's vocabulary: a prompt of
// N words is about N tokens (the measured prompt_tokens are reported).
constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "is", "for", "that", "with", "on", "as", "was", "by", "at", "from", "this",
    "time", "water", "city", "light", "river", "house", "paper", "music", "system", "number", "world", "market",
    "table", "garden", "window", "story", "model", "engine", "cloud", "stone", "bridge", "field", "signal", "road",
    "small", "large", "early", "green", "quiet", "simple", "open", "clear", "strong", "warm", "fast", "old",
    "makes", "finds", "holds", "turns", "reads", "moves", "keeps", "shows", "brings", "takes", "gives", "leaves"};

std::string words(std::mt19937_64& rng, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
  }
  return out;
}

struct Failure {
  std::string where, error;
};

struct LevelResult {
  int concurrency = 0, n_requests = 0, n_ok = 0;
  double wall_s = 0;
  int64_t output_tokens = 0, prompt_tokens = 0;
  std::vector<double> ttft_s, tpot_s, e2e_s;
  std::vector<Failure> failures;
};

struct TurnRecord {
  int conversation = 0, turn = 0;
  StreamResult r;
};

Json base_body(const BenchArgs& a, const std::string& model, Json messages, uint64_t seed) {
  Json body{{"model", model}, {"messages", std::move(messages)}, {"max_tokens", a.max_tokens}, {"ignore_eos", true},
            {"temperature", a.temperature}, {"seed", seed}};
  body["thinking"] = Json{{"type", a.thinking ? "enabled" : "disabled"}};
  if (a.json_object) body["response_format"] = Json{{"type", "json_object"}};
  return body;
}

// ignore_eos makes every answer max_tokens long, except in JSON mode, where a closed object ends the answer.
int64_t expected_tokens(const BenchArgs& a) { return a.json_object ? 0 : a.max_tokens; }

LevelResult run_level(const BenchArgs& a, const Endpoint& ep, const std::string& model, int concurrency) {
  LevelResult level;
  level.concurrency = concurrency;
  level.n_requests = a.requests;
  std::vector<StreamResult> results(size_t(a.requests));
  std::atomic<int> next{0};
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < a.requests;) {
        std::mt19937_64 rng(a.seed * 1000003u + uint64_t(concurrency) * 7919u + uint64_t(i));
        const std::string prompt = "Request " + std::to_string(concurrency) + "." + std::to_string(i) + ": " + words(rng, a.prompt_tokens);
        Json messages = Json::array({Json{{"role", "user"}, {"content", prompt}}});
        results[size_t(i)] = stream_chat(ep, base_body(a, model, std::move(messages), a.seed + uint64_t(i)), expected_tokens(a), a.timeout_s);
      }
    });
  }
  for (auto& t : clients) t.join();
  level.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 0; i < a.requests; ++i) {
    const StreamResult& r = results[size_t(i)];
    if (!r.ok) {
      level.failures.push_back({"concurrency " + std::to_string(concurrency) + " request " + std::to_string(i), r.error});
      continue;
    }
    level.n_ok += 1;
    level.output_tokens += r.completion_tokens;
    level.prompt_tokens += r.prompt_tokens;
    level.ttft_s.push_back(r.ttft_s);
    level.e2e_s.push_back(r.e2e_s);
    if (r.completion_tokens > 1) level.tpot_s.push_back(r.tpot_s);
  }
  return level;
}

// Conversations run concurrently (one client thread each); turns within one run in order, each resending the
// system prompt, every earlier user message and the assistant's answers.
std::vector<TurnRecord> run_multi_turn(const BenchArgs& a, const Endpoint& ep, const std::string& model, double* wall_s) {
  std::mt19937_64 system_rng(a.seed * 31337u + 1);
  const std::string system_prompt = "You are a benchmark assistant. Context: " + words(system_rng, a.system_tokens);
  std::vector<std::vector<TurnRecord>> per_conversation(size_t(a.conversations));
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < a.conversations; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(a.seed * 7777u + uint64_t(c));
      Json messages = Json::array({Json{{"role", "system"}, {"content", system_prompt}}});
      for (int t = 0; t < a.turns; ++t) {
        messages.push_back(Json{{"role", "user"}, {"content", "Turn " + std::to_string(t + 1) + ": " + words(rng, a.turn_tokens)}});
        TurnRecord rec{c, t, stream_chat(ep, base_body(a, model, messages, a.seed + uint64_t(c * 100 + t)), expected_tokens(a), a.timeout_s)};
        const bool ok = rec.r.ok;
        messages.push_back(Json{{"role", "assistant"}, {"content", rec.r.content}});
        per_conversation[size_t(c)].push_back(std::move(rec));
        if (!ok) break;  // the history is broken; the remaining turns are not sent (counted as not run)
      }
    });
  }
  for (auto& t : clients) t.join();
  *wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<TurnRecord> all;
  for (auto& v : per_conversation) {
    for (auto& r : v) all.push_back(std::move(r));
  }
  return all;
}

Json summary(const std::vector<double>& v) {
  Json j = Json::object();
  for (double p : {50.0, 90.0, 99.0}) j["p" + std::to_string(int(p))] = v.empty() ? Json(nullptr) : Json(percentile(v, p));
  j["mean"] = v.empty() ? Json(nullptr) : Json(std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()));
  return j;
}

double ms(const std::vector<double>& v, double p) { return v.empty() ? NAN : 1e3 * percentile(v, p); }

int run_bench_serve(const BenchArgs& a) {
  signal(SIGPIPE, SIG_IGN);
  if (a.url.empty() == a.serve.engine.model_dir.empty()) {
    std::fprintf(stderr, "error: bench serve needs exactly one of --model DIR (start a server here) and --url http://host:port\n");
    return 1;
  }
  for (int c : a.concurrency) {
    if (c < 1 || c > 1024) {
      std::fprintf(stderr, "error: --concurrency levels must be in 1..1024, got %d\n", c);
      return 1;
    }
  }
  // --model: the real server, in-process, on an ephemeral loopback port.
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  std::thread server_thread;
  Endpoint ep;
  if (!a.serve.engine.model_dir.empty()) {
    auto opened = Engine::open(engine_options(a.serve));
    if (!opened.ok()) {
      std::fprintf(stderr, "error: %s\n", opened.status().message().c_str());
      return 1;
    }
    engine = std::move(opened.value());
    server::ServerOptions so = a.serve.server;
    so.host = "127.0.0.1";
    so.port = 0;
    so.api_key = a.api_key;
    so.max_concurrent = std::max(so.max_concurrent, *std::max_element(a.concurrency.begin(), a.concurrency.end()));
    http = std::make_unique<server::HttpServer>(*engine, so);
    if (Status s = http->bind(); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
    ep.port = http->port();
    server_thread = std::thread([&] { http->run(); });
    std::fprintf(stderr, "bench serve: server on http://127.0.0.1:%d (in-process)\n", ep.port);
  } else {
    std::string error;
    std::optional<Endpoint> parsed = parse_endpoint_url(a.url, &error);
    if (!parsed) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      return 1;
    }
    ep = *parsed;
  }
  ep.api_key = a.api_key;
  auto stop_server = [&] {
    if (!http) return;
    http->stop();
    server_thread.join();
    engine->shutdown(false);
  };
  std::string error;
  const std::optional<std::string> model = first_model_id(ep, &error);
  if (!model) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    stop_server();
    return 1;
  }
  // One untimed request: weights faulted in, code paths warm.
  {
    Json warm = base_body(a, *model, Json::array({Json{{"role", "user"}, {"content", "warm up"}}}), a.seed);
    warm["max_tokens"] = 2;
    const StreamResult r = stream_chat(ep, warm, a.json_object ? 0 : 2, a.timeout_s);
    if (!r.ok) std::fprintf(stderr, "bench serve: warm-up request failed: %s\n", r.error.c_str());
  }
  std::vector<LevelResult> levels;
  for (int c : a.concurrency) {
    std::fprintf(stderr, "bench serve: concurrency %d, %d requests...\n", c, a.requests);
    levels.push_back(run_level(a, ep, *model, c));
  }
  std::vector<TurnRecord> turns;
  double turns_wall_s = 0;
  if (a.turns > 0 && a.conversations > 0) {
    std::fprintf(stderr, "bench serve: multi-turn, %d conversations x %d turns...\n", a.conversations, a.turns);
    turns = run_multi_turn(a, ep, *model, &turns_wall_s);
  }
  stop_server();

  std::vector<Failure> failures;
  std::printf("\nbench serve: model %s, prompts ~%d words, %d output tokens per request (ignore_eos), temperature %g, thinking %s%s\n",
              model->c_str(), a.prompt_tokens, a.max_tokens, a.temperature, a.thinking ? "on" : "off",
              a.json_object ? ", response_format json_object" : "");
  std::printf("%11s %5s %6s %10s %7s %9s %9s %9s %9s %9s %9s %8s %8s\n", "concurrency", "ok", "failed", "out tok/s", "req/s",
              "TTFT p50", "TTFT p90", "TTFT p99", "TPOT p50", "TPOT p90", "TPOT p99", "E2E p50", "E2E p99");
  std::printf("%11s %5s %6s %10s %7s %9s %9s %9s %9s %9s %9s %8s %8s\n", "", "", "", "", "", "ms", "ms", "ms", "ms", "ms", "ms", "s", "s");
  Json json_levels = Json::array();
  for (const LevelResult& l : levels) {
    std::printf("%11d %5d %6d %10.2f %7.3f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f\n", l.concurrency, l.n_ok,
                l.n_requests - l.n_ok, double(l.output_tokens) / l.wall_s, double(l.n_ok) / l.wall_s, ms(l.ttft_s, 50),
                ms(l.ttft_s, 90), ms(l.ttft_s, 99), ms(l.tpot_s, 50), ms(l.tpot_s, 90), ms(l.tpot_s, 99),
                l.e2e_s.empty() ? NAN : percentile(l.e2e_s, 50), l.e2e_s.empty() ? NAN : percentile(l.e2e_s, 99));
    failures.insert(failures.end(), l.failures.begin(), l.failures.end());
    Json jf = Json::array();
    for (const Failure& f : l.failures) jf.push_back(Json{{"request", f.where}, {"error", f.error}});
    json_levels.push_back(Json{{"concurrency", l.concurrency}, {"requests", l.n_requests}, {"ok", l.n_ok},
                               {"failed", l.n_requests - l.n_ok}, {"wall_s", l.wall_s}, {"output_tokens", l.output_tokens},
                               {"prompt_tokens", l.prompt_tokens}, {"output_tokens_per_s", double(l.output_tokens) / l.wall_s},
                               {"requests_per_s", double(l.n_ok) / l.wall_s}, {"ttft_s", l.ttft_s}, {"tpot_s", l.tpot_s},
                               {"e2e_s", l.e2e_s}, {"ttft_summary_s", summary(l.ttft_s)}, {"tpot_summary_s", summary(l.tpot_s)},
                               {"e2e_summary_s", summary(l.e2e_s)}, {"failures", jf}});
  }
  Json json_turns = nullptr;
  if (a.turns > 0 && a.conversations > 0) {
    int64_t prompt = 0, cached = 0, prompt_first = 0, cached_first = 0, prompt_later = 0, cached_later = 0;
    std::vector<double> ttft_first, ttft_later;
    int n_ok = 0;
    Json raw = Json::array();
    for (const TurnRecord& t : turns) {
      raw.push_back(Json{{"conversation", t.conversation}, {"turn", t.turn + 1}, {"ok", t.r.ok}, {"error", t.r.error},
                         {"prompt_tokens", t.r.prompt_tokens}, {"cached_tokens", t.r.cached_tokens}, {"ttft_s", t.r.ttft_s},
                         {"e2e_s", t.r.e2e_s}});
      if (!t.r.ok) {
        failures.push_back({"multi-turn conversation " + std::to_string(t.conversation) + " turn " + std::to_string(t.turn + 1), t.r.error});
        continue;
      }
      n_ok += 1;
      prompt += t.r.prompt_tokens;
      cached += t.r.cached_tokens;
      (t.turn == 0 ? prompt_first : prompt_later) += t.r.prompt_tokens;
      (t.turn == 0 ? cached_first : cached_later) += t.r.cached_tokens;
      (t.turn == 0 ? ttft_first : ttft_later).push_back(t.r.ttft_s);
    }
    const int planned = a.turns * a.conversations;
    auto rate = [](int64_t c, int64_t p) { return p > 0 ? double(c) / double(p) : 0.0; };
    std::printf("\nmulti-turn: %d conversations x %d turns sharing a ~%d-word system prompt, %d-word user turns: %d ok, %d failed or not run\n",
                a.conversations, a.turns, a.system_tokens, a.turn_tokens, n_ok, planned - n_ok);
    std::printf("prefix-cache hit rate: %.1f%% (%lld cached of %lld prompt tokens); first turns %.1f%%, later turns %.1f%%\n",
                100.0 * rate(cached, prompt), (long long)cached, (long long)prompt, 100.0 * rate(cached_first, prompt_first),
                100.0 * rate(cached_later, prompt_later));
    std::printf("TTFT p50 / p90: first turns %.1f / %.1f ms, later turns %.1f / %.1f ms\n", ms(ttft_first, 50), ms(ttft_first, 90),
                ms(ttft_later, 50), ms(ttft_later, 90));
    json_turns = Json{{"conversations", a.conversations}, {"turns", a.turns}, {"planned", planned}, {"ok", n_ok},
                      {"failed_or_not_run", planned - n_ok}, {"wall_s", turns_wall_s}, {"prompt_tokens", prompt},
                      {"cached_tokens", cached}, {"hit_rate", rate(cached, prompt)},
                      {"hit_rate_first_turns", rate(cached_first, prompt_first)},
                      {"hit_rate_later_turns", rate(cached_later, prompt_later)}, {"ttft_first_turns_s", summary(ttft_first)},
                      {"ttft_later_turns_s", summary(ttft_later)}, {"turns_raw", raw}};
  }
  if (!failures.empty()) {
    std::printf("\n%zu failed request(s):\n", failures.size());
    for (size_t i = 0; i < failures.size() && i < 20; ++i) std::printf("  %s: %s\n", failures[i].where.c_str(), failures[i].error.c_str());
  }
  if (!a.json_path.empty()) {
    Json out{{"model", *model},
             {"config", {{"url", a.url}, {"model_dir", a.serve.engine.model_dir}, {"requests", a.requests},
                         {"prompt_words", a.prompt_tokens}, {"max_tokens", a.max_tokens}, {"temperature", a.temperature},
                         {"thinking", a.thinking}, {"json_object", a.json_object}, {"seed", a.seed}, {"concurrency", a.concurrency}}},
             {"levels", json_levels}, {"multi_turn", json_turns}, {"n_failed", failures.size()}};
    std::ofstream f(a.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", a.json_path.c_str());
      return 1;
    }
  }
  return failures.empty() ? 0 : 2;
}

}  // namespace

Runner add_bench_serve_command(CLI::App& bench) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "load test the HTTP server: throughput, TTFT / TPOT / E2E, prefix-cache hits");
  add_serve_options(cmd, a->serve, /*with_address=*/false, /*model_required=*/false);
  cmd->add_option("--url", a->url, "drive a running server (http://host:port) instead of starting one with --model");
  cmd->add_option("--api-key", a->api_key, "the server's API key (Authorization: Bearer)")->envname("DEEPINFER_API_KEY");
  cmd->add_option("--concurrency", a->concurrency, "client threads, one level each")->delimiter(',');
  cmd->add_option("--requests", a->requests, "requests per concurrency level")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "words per prompt (about one token each)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-tokens", a->max_tokens, "output tokens per request (ignore_eos: exactly this many)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", a->temperature, "sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 2.0));
  cmd->add_flag("--thinking", a->thinking, "thinking mode (the default sends thinking disabled)");
  cmd->add_flag("--json-object", a->json_object, "send response_format json_object (constrained decoding; an answer may end early)");
  cmd->add_option("--seed", a->seed, "prompt and sampling seed");
  cmd->add_option("--turns", a->turns, "multi-turn workload: turns per conversation (0 = skip)")->check(CLI::Range(0, 1000));
  cmd->add_option("--conversations", a->conversations, "multi-turn workload: concurrent conversations")->check(CLI::Range(0, 1024));
  cmd->add_option("--system-tokens", a->system_tokens, "multi-turn workload: words in the shared system prompt")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--turn-tokens", a->turn_tokens, "multi-turn workload: words per user turn")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--timeout", a->timeout_s, "seconds a request may take")->check(CLI::Range(1, 86400));
  cmd->add_option("--json", a->json_path, "write the raw figures (every latency) to this file");
  return [a]() { return run_bench_serve(*a); };
}

}  // namespace deepinfer::cli
