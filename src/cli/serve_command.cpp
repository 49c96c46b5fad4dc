// `deepinfer serve`: opens an Engine over a model directory and serves the OpenAI / Anthropic compatible HTTP
// API (src/server) until SIGINT / SIGTERM, then drains: new requests get 503, in-flight ones finish, the server
// stops. A second signal exits at once. Flags map 1:1 onto EngineOptions / ServerOptions.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "deepinfer/engine.h"
#include "server/http_server.h"

namespace deepinfer::cli {

Runner add_serve_command(CLI::App& app) {
  struct Args {
    EngineOptions engine;
    server::ServerOptions server;
    int64_t cache_budget_mb = 2048, prefix_cache_mb = 512;
    std::string prefill_layout = "prompt";
    bool no_thinking = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI / Anthropic compatible HTTP API");
  cmd->add_option("--model", args->engine.model_dir, "checkpoint directory (with tokenizer.json for text APIs)")->required();
  cmd->add_option("--host", args->server.host, "address to bind (default 127.0.0.1)");
  cmd->add_option("--port", args->server.port, "port (0: any free port; the chosen one is printed)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", args->server.api_key, "require this key (Authorization: Bearer or x-api-key)")->envname("DEEPINFER_API_KEY");
  cmd->add_option("--served-model-name", args->server.served_model_name, "model id reported by /v1/models");
  cmd->add_option("--threads", args->engine.n_threads, "compute threads (0 = all)");
  cmd->add_flag("--exact", args->engine.exact, "reference kernels (exact, slow)");
  cmd->add_option("--max-batch-tokens", args->engine.max_batch_tokens, "tokens per forward step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-running", args->engine.max_running, "sequences per forward step")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-waiting", args->engine.max_waiting, "queued requests before 429")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--cache-budget-mb", args->cache_budget_mb, "cache state budget of running sequences (MiB)")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--prefix-cache-mb", args->prefix_cache_mb, "prefix-cache snapshots (MiB, 0 = off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--prefix-snapshot-interval", args->engine.prefix_snapshot_interval, "tokens between prefix snapshots")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prefill-layout", args->prefill_layout, "prompt (model.py's layout) or position (every prefix reusable)")
      ->check(CLI::IsMember({"prompt", "position"}));
  cmd->add_option("--max-context", args->engine.max_context_tokens, "context length (0 = the model's)")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--default-max-tokens", args->engine.default_max_tokens, "when a request does not say")->check(CLI::Range(1, 1 << 24));
  cmd->add_flag("--no-thinking", args->no_thinking, "chat requests default to non-thinking mode");
  cmd->add_option("--max-body-bytes", args->server.max_body_bytes, "largest request body")->check(CLI::Range(int64_t(1024), int64_t(1) << 32));
  cmd->add_option("--max-concurrent", args->server.max_concurrent, "generation requests in flight before 429")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-tokens-limit", args->server.max_tokens_limit, "the most max_tokens a request may ask")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--request-timeout", args->server.request_timeout_s, "seconds per generation request (0 = none)")->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--read-timeout", args->server.read_timeout_s, "seconds a client may idle while sending")->check(CLI::Range(1, 3600));
  return [args]() {
    // Signals go to one waiting thread only: block them before any thread starts.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    EngineOptions& eo = args->engine;
    eo.cache_budget_bytes = args->cache_budget_mb << 20;
    eo.prefix_cache_bytes = args->prefix_cache_mb << 20;
    eo.prefill_layout = args->prefill_layout == "position" ? PrefillLayout::kPosition : PrefillLayout::kPrompt;
    eo.default_thinking = !args->no_thinking;
    auto engine = Engine::open(eo);
    if (!engine.ok()) {
      std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
      return 1;
    }
    Engine& e = *engine.value();
    if (!e.model_info().has_tokenizer) {
      std::fprintf(stderr, "warning: %s has no tokenizer.json: only token-id completions will work\n", eo.model_dir.c_str());
    }
    server::HttpServer http(e, args->server);
    if (Status s = http.bind(); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
    std::fprintf(stderr, "deepinfer serve: model %s on http://%s:%d%s\n", e.model_info().name.c_str(), args->server.host.c_str(),
                 http.port(), args->server.api_key.empty() ? "" : " (API key required)");
    std::printf("listening on %s:%d\n", args->server.host.c_str(), http.port());
    std::fflush(stdout);
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      std::fprintf(stderr, "deepinfer serve: signal %d: draining (again to exit now)\n", sig);
      std::thread second([&] {
        int again = 0;
        sigwait(&signals, &again);
        std::fprintf(stderr, "deepinfer serve: second signal: exiting\n");
        std::_Exit(130);
      });
      second.detach();
      http.begin_drain();
      e.shutdown(true);  // every accepted request finishes
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (http.in_flight() > 0 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // responses still being written
      }
      http.stop();
    });
    http.run();
    waiter.join();
    std::fprintf(stderr, "deepinfer serve: stopped\n");
    return 0;
  };
}

}  // namespace deepinfer::cli
