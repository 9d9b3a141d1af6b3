// /metrics after traffic: every metric name is exposed in Prometheus text format, tokens and cost
// accumulate per model and key exactly as the responses' usage says, and a repeated prompt is
// served from the prefix cache and billed at the cached price.
#include <gtest/gtest.h>

#include <sstream>

#include "server_test_util.h"

namespace kvasir::server::testing {
namespace {

class ServerMetrics : public SharedServerTest<ServerMetrics> {};

const std::vector<std::string> kModelKey{"stories260K", "none"};

TEST_F(ServerMetrics, EveryNameAfterTraffic) {
  ASSERT_EQ(
      post(port(), "/v1/completions",
           Json{{"prompt", "Once"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}})
          .status,
      200);
  StreamResult s =
      post_stream(port(), "/v1/chat/completions",
                  Json{{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})},
                       {"max_tokens", 8},
                       {"stream", true}});
  ASSERT_TRUE(s.done);
  HttpResult m = get(port(), "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  for (const char* name :
       {"kvasir_time_to_first_token_seconds_bucket",
        "kvasir_time_per_output_token_seconds_bucket",
        "kvasir_inter_token_latency_seconds_bucket",
        "kvasir_e2e_request_latency_seconds_bucket",
        "kvasir_queue_time_seconds_bucket",
        "kvasir_kv_cache_usage_ratio{model=\"stories260K\"} ",
        "kvasir_kv_cache_pressure{model=\"stories260K\"} ",
        "kvasir_requests_running{model=\"stories260K\"} ",
        "kvasir_requests_waiting{model=\"stories260K\"} ",
        "kvasir_prompt_tokens_total{model=\"stories260K\"} ",
        "kvasir_generation_tokens_total{model=\"stories260K\"} ",
        "kvasir_preemptions_total{model=\"stories260K\"} ",
        "kvasir_prefix_cache_queries_total{model=\"stories260K\"} ",
        "kvasir_prefix_cache_hits_total{model=\"stories260K\"} ",
        "kvasir_requests_total{model=\"stories260K\",finish_reason=\"length\"} ",
        "kvasir_cost_usd_total{model=\"stories260K\",key=\"none\"} ",
        "kvasir_request_prompt_tokens_total{model=\"stories260K\",key=\"none\"} ",
        "kvasir_http_responses_total{status=\"200\"} ",
        "# TYPE kvasir_time_to_first_token_seconds histogram",
        "# TYPE kvasir_cost_usd_total counter",
        "# TYPE kvasir_kv_cache_usage_ratio gauge",
        "kvasir_time_to_first_token_seconds_bucket{model=\"stories260K\",le=\"+Inf\"} "})
    EXPECT_NE(m.body.find(std::string("\n") + name), std::string::npos) << name << "\n" << m.body;
  EXPECT_GE(metric("kvasir_time_to_first_token_seconds", {"stories260K"}), 2);
  EXPECT_GE(metric("kvasir_inter_token_latency_seconds", {"stories260K"}), 7);
  EXPECT_GT(metric("kvasir_generation_tokens_total", {"stories260K"}), 0);
  EXPECT_GT(metric("kvasir_prompt_tokens_total", {"stories260K"}), 0);
  EXPECT_GT(metric("kvasir_engine_steps_total", {"stories260K"}), 0);
  EXPECT_GT(metric("kvasir_engine_forward_seconds_total", {"stories260K"}), 0);
  EXPECT_GE(metric("kvasir_engine_busy_seconds_total", {"stories260K"}),
            metric("kvasir_engine_forward_seconds_total", {"stories260K"}));
  // Every sample line is "name{labels} value" with a parseable value.
  std::istringstream lines(m.body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    std::string v = line.substr(sp + 1);
    if (v != "+Inf" && v != "NaN") {
      EXPECT_NO_THROW((void)std::stod(v)) << line;
    }
  }
}

TEST_F(ServerMetrics, CostAndTokensAccumulate) {
  const double cost0 = metric("kvasir_cost_usd_total", kModelKey);
  const double prompt0 = metric("kvasir_request_prompt_tokens_total", kModelKey);
  const double gen0 = metric("kvasir_request_generation_tokens_total", kModelKey);
  const double len0 = metric("kvasir_requests_total", {"stories260K", "length"});
  double cost = 0;
  int64_t prompt = 0, gen = 0;
  for (int i = 0; i < 3; ++i) {
    HttpResult r = post(port(), "/v1/completions",
                        Json{{"prompt", "The little bird " + std::to_string(i)},
                             {"max_tokens", 10 + i},
                             {"ignore_eos", true},
                             {"n", 2}});
    ASSERT_EQ(r.status, 200) << r.body;
    cost += r.json["usage"]["cost_usd"].get<double>();
    prompt += r.json["usage"]["prompt_tokens"].get<int64_t>();
    gen += r.json["usage"]["completion_tokens"].get<int64_t>();
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 2 * (10 + i));
  }
  // The sink records a generation when its last output arrives, before the response is sent.
  EXPECT_NEAR(metric("kvasir_cost_usd_total", kModelKey) - cost0, cost, 1e-12);
  EXPECT_EQ(metric("kvasir_request_prompt_tokens_total", kModelKey) - prompt0, prompt);
  EXPECT_EQ(metric("kvasir_request_generation_tokens_total", kModelKey) - gen0, gen);
  EXPECT_EQ(metric("kvasir_requests_total", {"stories260K", "length"}) - len0, 6);
  EXPECT_GT(cost, 0);
}

TEST_F(ServerMetrics, PrefixCacheHitIsBilledAtTheCachedPrice) {
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The big brown dog ran to the park. ";
  Json req{{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
  HttpResult a = post(port(), "/v1/completions", req);
  ASSERT_EQ(a.status, 200) << a.body;
  (void)get(port(), "/metrics");
  const double hits_before = metric("kvasir_prefix_cache_hits_total", {"stories260K"});
  HttpResult b = post(port(), "/v1/completions", req);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.json["choices"][0]["text"], b.json["choices"][0]["text"]);
  const Json& u = b.json["usage"];
  const int64_t p = u["prompt_tokens"], c = u["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(c, 16) << u.dump();  // at least one full 16-token block reused
  EXPECT_LT(c, p);
  EXPECT_NEAR(u["cost_usd"].get<double>(),
              ((p - c) * 0.15 + c * 0.075 + u["completion_tokens"].get<int64_t>() * 0.60) / 1e6,
              1e-15);
  (void)get(port(), "/metrics");  // refreshes the engine counters
  EXPECT_GE(metric("kvasir_prefix_cache_hits_total", {"stories260K"}) - hits_before, static_cast<double>(c));
  EXPECT_GT(metric("kvasir_request_cached_tokens_total", kModelKey), 0);
}

}  // namespace
}  // namespace kvasir::server::testing
