// ServingMetrics: the server's Prometheus metrics (names prefixed kvasir_) on a MetricsRegistry.
//
// Per request (recorded once a Generation finishes, for every choice the engine ran):
//   histograms time_to_first_token_seconds, time_per_output_token_seconds,
//   inter_token_latency_seconds, e2e_request_latency_seconds, queue_time_seconds (vLLM's
//   buckets); counters requests_total{finish_reason}, and per model and API key label
//   request_prompt_tokens_total, request_cached_tokens_total, request_generation_tokens_total,
//   cost_usd_total{model,key}.
// From the engine (refreshed when /metrics is scraped): gauges kv_cache_usage_ratio,
//   kv_cache_pressure (1 when usage >= the engine's warning ratio, 0.9 by default),
//   requests_running, requests_waiting; counters prompt_tokens_total, generation_tokens_total,
//   preemptions_total, prefix_cache_queries_total, prefix_cache_hits_total (tokens).
// Per HTTP response: http_responses_total{status}.
#pragma once

#include <string>

#include "kvasir/engine.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/metrics_registry.h"
#include "kvasir/server/usage.h"

namespace kvasir::server {

class ServingMetrics {
 public:
  ServingMetrics();

  // Records a finished generation: timings of every choice the engine ran, and the usage billed.
  void record(const Generation& g, const Usage& usage, double cost_usd, const std::string& model,
              const std::string& key);
  void record_http(int status);
  // Mirrors the engine's counters and gauges, then returns the exposition text.
  std::string expose(const EngineStats& stats, double kv_warn_ratio);

  MetricsRegistry& registry() { return reg_; }

 private:
  MetricsRegistry reg_;
};

}  // namespace kvasir::server
