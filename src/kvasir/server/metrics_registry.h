// MetricsRegistry: counters, gauges and histograms with labels, exposed in Prometheus's text
// format (version 0.0.4).
//
// A metric family is declared once (name, help, label names; histograms also their bucket upper
// bounds, ascending) and then updated by name with one label value per label name. Updating an
// undeclared family, or with the wrong number of label values, throws kvasir::Error (a
// programming error, never caused by a client). Families are exposed in declaration order, and
// within a family series in the order they first appeared. All methods are thread-safe (one
// mutex; each update is a map lookup and an add).
//
// Exposition: "# HELP name help" and "# TYPE name counter|gauge|histogram", then one line per
// series; histograms have cumulative name_bucket{...,le="B"} lines ending with le="+Inf", then
// name_sum and name_count. Label values are escaped (backslash, double quote, newline).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvasir::server {

class MetricsRegistry {
 public:
  void add_counter(const std::string& name, const std::string& help,
                   std::vector<std::string> labels = {});
  void add_gauge(const std::string& name, const std::string& help,
                 std::vector<std::string> labels = {});
  void add_histogram(const std::string& name, const std::string& help, std::vector<double> buckets,
                     std::vector<std::string> labels = {});

  // Counters: add a delta >= 0 (negative deltas are ignored). set_counter() mirrors a total kept
  // elsewhere (e.g. the engine's): it never decreases what was exposed before.
  void inc(const std::string& name, const std::vector<std::string>& label_values = {},
           double delta = 1.0);
  void set_counter(const std::string& name, const std::vector<std::string>& label_values,
                   double total);
  void set(const std::string& name, const std::vector<std::string>& label_values, double value);
  // Sets a gauge and drops the family's other series that share its first n_key label values: an
  // info metric whose other labels change (a model's hash known later) keeps one series per key.
  void set_replacing(const std::string& name, const std::vector<std::string>& label_values,
                     double value, size_t n_key);
  void observe(const std::string& name, const std::vector<std::string>& label_values, double value);

  // Current value of a counter or gauge series (0 if the series does not exist yet); for a
  // histogram, its observation count. For tests and reports.
  double value(const std::string& name, const std::vector<std::string>& label_values = {}) const;
  double histogram_sum(const std::string& name,
                       const std::vector<std::string>& label_values = {}) const;

  std::string expose() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;               // counter / gauge
    std::vector<uint64_t> buckets;  // histogram: per bucket (not cumulative), + overflow
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<std::string> labels;
    std::vector<double> bounds;
    std::vector<std::pair<std::vector<std::string>, Series>> series;  // first-seen order
  };
  void add(const std::string& name, Kind kind, const std::string& help,
           std::vector<std::string> labels, std::vector<double> bounds);
  Series& series(const std::string& name, Kind kind, const std::vector<std::string>& values);
  const Series* find(const std::string& name, const std::vector<std::string>& values) const;

  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

// Bucket bounds vLLM uses for the same measurements.
std::vector<double> ttft_buckets();             // time_to_first_token_seconds
std::vector<double> token_latency_buckets();    // time_per_output_token / inter_token_latency
std::vector<double> request_latency_buckets();  // e2e_request_latency / queue_time

}  // namespace kvasir::server
