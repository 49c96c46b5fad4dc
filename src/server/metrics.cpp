#include "server/metrics.h"

#include <cstdio>

namespace deepinfer::server {

void ServerMetrics::count_response(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  responses_[{route, status}] += 1;
}

std::map<std::pair<std::string, int>, uint64_t> ServerMetrics::responses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return responses_;
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char line[64];
  std::snprintf(line, sizeof(line), "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line + "\n";
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
  char line[512];
  for (size_t i = 0; i < Histogram::kBoundsSeconds.size(); ++i) {
    std::snprintf(line, sizeof(line), "%s_bucket{le=\"%g\"} %llu\n", name, Histogram::kBoundsSeconds[i],
                  static_cast<unsigned long long>(h.counts[i]));
    out += line;
  }
  std::snprintf(line, sizeof(line), "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name,
                static_cast<unsigned long long>(h.count), name, h.sum, name, static_cast<unsigned long long>(h.count));
  out += line;
}

}  // namespace

std::string render_metrics(const EngineStats& s, const ServerMetrics& server, int64_t in_flight) {
  std::string out;
  metric(out, "deepinfer_requests_submitted_total", "counter", "Requests accepted by the engine.", double(s.n_requests_submitted));
  metric(out, "deepinfer_requests_finished_total", "counter", "Requests that ended (any reason).", double(s.n_requests_finished));
  metric(out, "deepinfer_requests_rejected_total", "counter", "Requests the engine refused at submit.", double(s.n_requests_rejected));
  metric(out, "deepinfer_requests_cancelled_total", "counter", "Requests cancelled (client gone, shutdown).", double(s.n_requests_cancelled));
  metric(out, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", double(s.prompt_tokens));
  metric(out, "deepinfer_generation_tokens_total", "counter", "Generated tokens.", double(s.generation_tokens));
  metric(out, "deepinfer_requests_waiting", "gauge", "Requests queued for admission (queue depth).", double(s.n_waiting));
  metric(out, "deepinfer_requests_running", "gauge", "Requests with resident cache state.", double(s.n_running));
  metric(out, "deepinfer_http_requests_in_flight", "gauge", "Generation HTTP requests being served.", double(in_flight));
  metric(out, "deepinfer_cache_bytes_used", "gauge", "Cache state bytes: KV pool pages in use (shared pages once) plus running requests' fixed state.", double(s.cache_bytes_used));
  metric(out, "deepinfer_cache_budget_bytes", "gauge", "Cache state budget.", double(s.cache_budget_bytes));
  metric(out, "deepinfer_kv_cache_usage_ratio", "gauge", "Cache state bytes used over the budget.",
         s.cache_budget_bytes > 0 ? double(s.cache_bytes_used) / double(s.cache_budget_bytes) : 0.0);
  metric(out, "deepinfer_prefix_cache_queries_total", "counter", "Prompts looked up in the prefix cache.", double(s.prefix_cache_queries));
  metric(out, "deepinfer_prefix_cache_hits_total", "counter", "Prompts that reused a cached prefix.", double(s.prefix_cache_hits));
  metric(out, "deepinfer_prefix_cache_hit_tokens_total", "counter", "Prompt tokens reused from the prefix cache.", double(s.prefix_cache_hit_tokens));
  metric(out, "deepinfer_prefix_cache_hit_rate", "gauge", "Prefix-cache hit tokens over prompt tokens.",
         s.prompt_tokens > 0 ? double(s.prefix_cache_hit_tokens) / double(s.prompt_tokens) : 0.0);
  metric(out, "deepinfer_kv_page_bytes", "gauge", "Bytes per KV pool page.", double(s.kv_page_bytes));
  metric(out, "deepinfer_kv_pages_total", "gauge", "KV pool capacity in pages.", double(s.kv_pages_total));
  metric(out, "deepinfer_kv_pages_used", "gauge", "KV pool pages in use (running requests and prefix-cache snapshots).", double(s.kv_pages_used));
  metric(out, "deepinfer_kv_pages_shared", "gauge", "KV pool pages held by more than one sequence or snapshot.", double(s.kv_pages_shared));
  metric(out, "deepinfer_prefix_cache_bytes", "gauge", "Bytes of prefix-cache snapshots outside the KV pool (fixed-size rings).", double(s.prefix_cache_bytes_used));
  metric(out, "deepinfer_prefix_cache_evictions_total", "counter", "Snapshots evicted to free KV pages for running requests.", double(s.prefix_cache_evictions));
  metric(out, "deepinfer_prefix_cache_snapshots", "gauge", "Prefix-cache snapshots held.", double(s.n_prefix_snapshots));
  metric(out, "deepinfer_preemptions_total", "counter", "Sequences preempted (recomputed later).", double(s.n_preemptions));
  metric(out, "deepinfer_engine_steps_total", "counter", "Batched forward steps.", double(s.n_steps));
  histogram(out, "deepinfer_time_to_first_token_seconds", "Submit to first generated token.", s.ttft);
  histogram(out, "deepinfer_time_per_output_token_seconds", "Mean time per output token after the first.", s.tpot);
  histogram(out, "deepinfer_e2e_request_latency_seconds", "Submit to finish.", s.e2e);
  out += "# HELP deepinfer_http_responses_total HTTP responses by route and status.\n# TYPE deepinfer_http_responses_total counter\n";
  for (const auto& [key, count] : server.responses()) {
    out += "deepinfer_http_responses_total{route=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  return out;
}

}  // namespace deepinfer::server
