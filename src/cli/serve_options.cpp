#include "cli/serve_options.h"

#include "cli/commands.h"

namespace deepinfer::cli {

void add_serve_options(CLI::App* cmd, ServeArgs& a, bool with_address, bool model_required) {
  CLI::Option* model = cmd->add_option("--model", a.engine.model_dir, "checkpoint directory (with tokenizer.json for text APIs)");
  if (model_required) model->required();
  if (with_address) {
    cmd->add_option("--host", a.server.host, "address to bind (default 127.0.0.1)");
    cmd->add_option("--port", a.server.port, "port (0: any free port; the chosen one is printed)")->check(CLI::Range(0, 65535));
    cmd->add_option("--api-key", a.server.api_key, "require this key (Authorization: Bearer or x-api-key)")->envname("DEEPINFER_API_KEY");
    cmd->add_option("--served-model-name", a.server.served_model_name, "model id reported by /v1/models");
  }
  cmd->add_option("--threads", a.engine.n_threads, "compute threads (0 = all)");
  cmd->add_flag("--exact", a.engine.exact, "reference kernels (exact, slow)");
  add_backend_option(cmd, &a.engine.cuda);
  cmd->add_flag("--mlock", a.engine.lock_weights, "keep the whole checkpoint in RAM (mlock): read at start, never paged out");
  cmd->add_flag("--draws-on-host", a.engine.draws_on_host,
                "draw every token on the host from its logits brought back (the engine's own draws, for checking a GPU's: the same tokens, slower)");
  cmd->add_flag("--swa-replay", a.engine.swa_bounded_replay, "V4.1: SWA bounded replay in prefill (spec 7.10): the decoder layers run only on the last window + DSpark-block tokens (faster, approximate; off = exact)");
  cmd->add_option("--max-batch-tokens", a.engine.max_batch_tokens, "tokens per forward step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-running", a.engine.max_running, "sequences per forward step")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-waiting", a.engine.max_waiting, "queued requests before 429")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--cache-budget-mb", a.cache_budget_mb, "cache state budget (MiB): the KV page pool plus running sequences' fixed state")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--kv-page-bytes", a.engine.kv_page_bytes, "KV pool page size (bytes, at least one packed row)")->check(CLI::Range(int64_t(64), int64_t(1) << 26));
  cmd->add_option("--prefix-cache-mb", a.prefix_cache_mb, "prefix-cache snapshots (MiB, 0 = off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--prefix-snapshot-interval", a.engine.prefix_snapshot_interval, "tokens between prefix snapshots")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prefill-layout", a.prefill_layout, "prompt (model.py's layout) or position (every prefix reusable)")
      ->check(CLI::IsMember({"prompt", "position"}));
  cmd->add_option("--max-context", a.engine.max_context_tokens, "context length (0 = the model's)")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--default-max-tokens", a.engine.default_max_tokens, "when a request does not say")->check(CLI::Range(1, 1 << 24));
  cmd->add_flag("--no-thinking", a.no_thinking, "chat requests default to non-thinking mode");
  cmd->add_option("--max-body-bytes", a.server.max_body_bytes, "largest request body")->check(CLI::Range(int64_t(1024), int64_t(1) << 32));
  cmd->add_option("--max-concurrent", a.server.max_concurrent, "generation requests in flight before 429")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-tokens-limit", a.server.max_tokens_limit, "the most max_tokens a request may ask")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--request-timeout", a.server.request_timeout_s, "seconds per generation request (0 = none)")->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--responses-store", a.server.responses_store_count,
                  "responses kept in memory for previous_response_id (least recently used out; 0 = none)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--read-timeout", a.server.read_timeout_s, "seconds a client may idle while sending")->check(CLI::Range(1, 3600));
}

EngineOptions engine_options(const ServeArgs& a) {
  EngineOptions eo = a.engine;
  eo.cache_budget_bytes = a.cache_budget_mb << 20;
  eo.prefix_cache_bytes = a.prefix_cache_mb << 20;
  eo.prefill_layout = a.prefill_layout == "position" ? PrefillLayout::kPosition : PrefillLayout::kPrompt;
  eo.default_thinking = !a.no_thinking;
  return eo;
}

}  // namespace deepinfer::cli
