// The engine and server flags of `deepinfer serve`, shared with `deepinfer bench serve --model` (which starts the
// same server in-process): one definition, so the benchmark runs the server a user would run. Flags map 1:1 onto
// EngineOptions / ServerOptions; engine_options() derives the byte budgets and enums from the flag values.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "deepinfer/types.h"
#include "server/http_server.h"

namespace deepinfer::cli {

struct ServeArgs {
  EngineOptions engine;
  server::ServerOptions server;
  int64_t cache_budget_mb = 2048, prefix_cache_mb = 512;
  std::string prefill_layout = "prompt";
  bool no_thinking = false;
};

// `with_address`: --host / --port / --api-key / --served-model-name too (serve; bench serve binds loopback itself).
// `model_required`: --model must be given (serve; bench serve takes --model or --url).
void add_serve_options(CLI::App* cmd, ServeArgs& args, bool with_address, bool model_required);

EngineOptions engine_options(const ServeArgs& args);

}  // namespace deepinfer::cli
