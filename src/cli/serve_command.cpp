// `deepinfer serve`: opens an Engine over a model directory and serves the OpenAI / Anthropic compatible HTTP
// API (src/server) until SIGINT / SIGTERM, then drains: new requests get 503, in-flight ones finish, the server
// stops. A second signal exits at once. Flags map 1:1 onto EngineOptions / ServerOptions (serve_options.h).
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/serve_options.h"
#include "deepinfer/engine.h"
#include "server/http_server.h"

namespace deepinfer::cli {

Runner add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI / Anthropic compatible HTTP API");
  add_serve_options(cmd, *args, /*with_address=*/true, /*model_required=*/true);
  return [args]() {
    // Signals go to one waiting thread only: block them before any thread starts.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    const EngineOptions eo = engine_options(*args);
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
