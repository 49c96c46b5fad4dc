// Prometheus text exposition (GET /metrics): engine statistics (requests, tokens, TTFT / TPOT / latency
// histograms, queue depth, cache usage, prefix-cache hit rate, preemptions) plus the server's own HTTP counters.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "deepinfer/types.h"

namespace deepinfer::server {

class ServerMetrics {
 public:
  void count_response(const std::string& route, int status);
  std::map<std::pair<std::string, int>, uint64_t> responses() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> responses_;
};

std::string render_metrics(const EngineStats& stats, const ServerMetrics& server, int64_t in_flight);

}  // namespace deepinfer::server
