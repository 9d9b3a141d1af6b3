// ServingMetrics: the server's Prometheus metrics (names prefixed kvasir_) on a MetricsRegistry.
//
// Every series about a model carries its name as the `model` label (several models: multi-model
// serving).
// Per request (recorded once a Generation finishes, for every choice the engine ran):
//   histograms time_to_first_token_seconds, time_per_output_token_seconds,
//   inter_token_latency_seconds, e2e_request_latency_seconds, queue_time_seconds (vLLM's
//   buckets) {model}; counters requests_total{model,finish_reason}, and per model and API key
//   label request_prompt_tokens_total, request_cached_tokens_total,
//   request_generation_tokens_total, cost_usd_total{model,key}.
// From each engine (refreshed when /metrics is scraped), {model}: gauges kv_cache_usage_ratio,
//   kv_cache_pressure (1 when usage >= the engine's warning ratio, 0.9 by default),
//   kv_cache_warn_ratio, requests_running, requests_waiting; counters prompt_tokens_total,
//   generation_tokens_total, preemptions_total, prefix_cache_queries_total,
//   prefix_cache_hits_total (tokens), kv_pressure_warnings_total; the kvasir_spec_* and
//   kvasir_grammar_* families; model_info{model,quantization,kv_dtype,sha256} = 1.
// Routing (model_router.h), per route: route_requests_total{route,model,reason} (reason: the
//   rule that decided: key_policy, prompt_length, difficulty, default, fallover),
//   route_fallovers_total{route,from,to}, route_difficulty{route} (histogram of the small
//   model's mean prompt entropy, nats), route_cost_usd_total, route_cost_always_large_usd_total
//   (the same usage at the large model's prices) and route_cost_saved_usd_total (their
//   difference).
// Server-wide: http_responses_total{status}; build_info{version,commit,compiler,isa} = 1.
#pragma once

#include <string>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/metrics_registry.h"
#include "kvasir/server/usage.h"

namespace kvasir::server {

class ServingMetrics {
 public:
  // One engine's state at a scrape.
  struct EngineView {
    std::string model;
    EngineStats stats;
    double kv_warn_ratio = 0.9;
    std::string quantization, kv_dtype, sha256;  // model_info's labels
  };

  ServingMetrics();

  // Records a finished generation: timings of every choice the engine ran, and the usage billed.
  void record(const Generation& g, const Usage& usage, double cost_usd, const std::string& model,
              const std::string& key);
  void record_http(int status);
  // A routed request: the rule that decided (reason), the small model's difficulty score (< 0:
  // not scored), what it cost and what it would have cost on the large model; `fell_over_from`
  // names the model the rules chose when load moved the request to `model` ("" otherwise).
  void record_route(const std::string& route, const std::string& model, const std::string& reason,
                    double difficulty, const std::string& fell_over_from);
  void record_route_cost(const std::string& route, double cost_usd, double always_large_usd);
  // build_info's labels (the isa from the backend description, e.g. "cpu (AVX3_DL, 2 threads)").
  void set_build_info(const std::string& backend);
  // Mirrors every engine's counters and gauges, then returns the exposition text.
  std::string expose(const std::vector<EngineView>& engines);

  MetricsRegistry& registry() { return reg_; }

 private:
  MetricsRegistry reg_;
};

}  // namespace kvasir::server
