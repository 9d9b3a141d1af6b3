// MetricsRegistry: exposition in Prometheus text format 0.0.4 (exact text), histogram bucket
// placement at the inclusive bounds, label escaping, misuse errors, and concurrent updates.
#include "kvasir/server/metrics_registry.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir::server {
namespace {

TEST(MetricsRegistry, ExposesCountersGaugesHistograms) {
  MetricsRegistry r;
  r.add_counter("x_total", "Things.", {"kind"});
  r.add_gauge("g", "A gauge.");
  r.add_histogram("h_seconds", "Latency.", {0.1, 1.0});
  r.inc("x_total", {"a"});
  r.inc("x_total", {"b"}, 2.5);
  r.inc("x_total", {"a"}, 2);
  r.inc("x_total", {"a"}, -5);  // ignored: counters never go down
  r.set("g", {}, 0.25);
  r.observe("h_seconds", {}, 0.1);  // le=0.1 is inclusive
  r.observe("h_seconds", {}, 0.5);
  r.observe("h_seconds", {}, 7.0);  // only +Inf
  EXPECT_EQ(r.expose(),
            "# HELP x_total Things.\n"
            "# TYPE x_total counter\n"
            "x_total{kind=\"a\"} 3\n"
            "x_total{kind=\"b\"} 2.5\n"
            "# HELP g A gauge.\n"
            "# TYPE g gauge\n"
            "g 0.25\n"
            "# HELP h_seconds Latency.\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.1\"} 1\n"
            "h_seconds_bucket{le=\"1\"} 2\n"
            "h_seconds_bucket{le=\"+Inf\"} 3\n"
            "h_seconds_sum 7.6\n"
            "h_seconds_count 3\n");
  EXPECT_EQ(r.value("x_total", {"a"}), 3);
  EXPECT_EQ(r.value("x_total", {"zzz"}), 0);
  EXPECT_EQ(r.value("h_seconds"), 3);
  EXPECT_DOUBLE_EQ(r.histogram_sum("h_seconds"), 7.6);
}

TEST(MetricsRegistry, MirroredCounterNeverDecreases) {
  MetricsRegistry r;
  r.add_counter("c_total", "C.");
  r.set_counter("c_total", {}, 10);
  r.set_counter("c_total", {}, 4);
  EXPECT_EQ(r.value("c_total"), 10);
}

TEST(MetricsRegistry, EscapesLabelValues) {
  MetricsRegistry r;
  r.add_counter("c_total", "C.", {"model"});
  r.inc("c_total", {"a\"b\\c\nd"});
  EXPECT_NE(r.expose().find("c_total{model=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos)
      << r.expose();
}

TEST(MetricsRegistry, Misuse) {
  MetricsRegistry r;
  r.add_counter("c_total", "C.", {"a"});
  EXPECT_THROW(r.add_counter("c_total", "again"), Error);
  EXPECT_THROW(r.inc("nope"), Error);
  EXPECT_THROW(r.inc("c_total", {}), Error);                    // wrong number of labels
  EXPECT_THROW(r.set("c_total", {"x"}, 1), Error);              // a counter is not a gauge
  EXPECT_THROW(r.add_histogram("h", "H.", {1.0, 0.5}), Error);  // buckets must ascend
}

TEST(MetricsRegistry, ConcurrentUpdates) {
  MetricsRegistry r;
  r.add_counter("c_total", "C.", {"t"});
  r.add_histogram("h", "H.", ttft_buckets());
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        r.inc("c_total", {t % 2 ? "odd" : "even"});
        r.observe("h", {}, 0.003);
        if (i % 100 == 0) (void)r.expose();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(r.value("c_total", {"odd"}), 4000);
  EXPECT_EQ(r.value("c_total", {"even"}), 4000);
  EXPECT_EQ(r.value("h"), 8000);
  EXPECT_NE(r.expose().find("h_bucket{le=\"0.005\"} 8000\n"), std::string::npos);
  EXPECT_NE(r.expose().find("h_bucket{le=\"0.001\"} 0\n"), std::string::npos);
}

TEST(MetricsRegistry, VllmBuckets) {
  for (const auto& b : {ttft_buckets(), token_latency_buckets(), request_latency_buckets()}) {
    ASSERT_FALSE(b.empty());
    EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  }
  EXPECT_EQ(ttft_buckets().front(), 0.001);
  EXPECT_EQ(ttft_buckets().back(), 2560.0);
  EXPECT_EQ(token_latency_buckets().front(), 0.01);
  EXPECT_EQ(request_latency_buckets().back(), 7680.0);
}

}  // namespace
}  // namespace kvasir::server
