#include "kvasir/server/metrics_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kvasir/util/error.h"

namespace kvasir::server {

namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

std::string label_set(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const std::string& extra_name = {}, const std::string& extra_value = {}) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!s.empty()) s += ',';
    s += fmt::format("{}=\"{}\"", names[i], escape_label(values[i]));
  }
  if (!extra_name.empty()) {
    if (!s.empty()) s += ',';
    s += fmt::format("{}=\"{}\"", extra_name, escape_label(extra_value));
  }
  return s.empty() ? s : "{" + s + "}";
}

}  // namespace

void MetricsRegistry::add(const std::string& name, Kind kind, const std::string& help,
                          std::vector<std::string> labels, std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (families_.count(name)) fail("metrics: '{}' is declared twice", name);
  if (!std::is_sorted(bounds.begin(), bounds.end()))
    fail("metrics: the buckets of '{}' are not ascending", name);
  families_[name] = Family{kind, help, std::move(labels), std::move(bounds), {}};
  order_.push_back(name);
}

void MetricsRegistry::add_counter(const std::string& name, const std::string& help,
                                  std::vector<std::string> labels) {
  add(name, Kind::kCounter, help, std::move(labels), {});
}
void MetricsRegistry::add_gauge(const std::string& name, const std::string& help,
                                std::vector<std::string> labels) {
  add(name, Kind::kGauge, help, std::move(labels), {});
}
void MetricsRegistry::add_histogram(const std::string& name, const std::string& help,
                                    std::vector<double> buckets, std::vector<std::string> labels) {
  add(name, Kind::kHistogram, help, std::move(labels), std::move(buckets));
}

MetricsRegistry::Series& MetricsRegistry::series(const std::string& name, Kind kind,
                                                 const std::vector<std::string>& values) {
  auto it = families_.find(name);
  if (it == families_.end()) fail("metrics: '{}' is not declared", name);
  Family& f = it->second;
  if (f.kind != kind) fail("metrics: '{}' is used as the wrong kind of metric", name);
  if (values.size() != f.labels.size())
    fail("metrics: '{}' takes {} label values, got {}", name, f.labels.size(), values.size());
  for (auto& [v, s] : f.series)
    if (v == values) return s;
  Series s;
  if (kind == Kind::kHistogram) s.buckets.assign(f.bounds.size() + 1, 0);
  f.series.emplace_back(values, std::move(s));
  return f.series.back().second;
}

const MetricsRegistry::Series* MetricsRegistry::find(const std::string& name,
                                                     const std::vector<std::string>& values) const {
  auto it = families_.find(name);
  if (it == families_.end()) fail("metrics: '{}' is not declared", name);
  for (auto& [v, s] : it->second.series)
    if (v == values) return &s;
  return nullptr;
}

void MetricsRegistry::inc(const std::string& name, const std::vector<std::string>& values,
                          double delta) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, Kind::kCounter, values);
  if (delta > 0) s.value += delta;
}

void MetricsRegistry::set_counter(const std::string& name, const std::vector<std::string>& values,
                                  double total) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, Kind::kCounter, values);
  s.value = std::max(s.value, total);
}

void MetricsRegistry::set(const std::string& name, const std::vector<std::string>& values,
                          double value) {
  std::lock_guard<std::mutex> lock(mu_);
  series(name, Kind::kGauge, values).value = value;
}

void MetricsRegistry::set_replacing(const std::string& name, const std::vector<std::string>& values,
                                    double value, size_t n_key) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_.at(name);
  n_key = std::min(n_key, values.size());
  std::erase_if(f.series, [&](const auto& s) {
    return s.first != values && std::equal(values.begin(), values.begin() + n_key, s.first.begin());
  });
  series(name, Kind::kGauge, values).value = value;
}

void MetricsRegistry::observe(const std::string& name, const std::vector<std::string>& values,
                              double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, Kind::kHistogram, values);
  const auto& bounds = families_[name].bounds;
  // Prometheus buckets are inclusive upper bounds: the first bound >= value.
  size_t b =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  s.buckets[b]++;
  s.sum += value;
  s.count++;
}

double MetricsRegistry::value(const std::string& name,
                              const std::vector<std::string>& values) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Series* s = find(name, values);
  if (!s) return 0;
  return families_.at(name).kind == Kind::kHistogram ? static_cast<double>(s->count) : s->value;
}

double MetricsRegistry::histogram_sum(const std::string& name,
                                      const std::vector<std::string>& values) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Series* s = find(name, values);
  return s ? s->sum : 0;
}

std::string MetricsRegistry::expose() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    const char* type = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(f.help), name, type);
    for (const auto& [values, s] : f.series) {
      if (f.kind != Kind::kHistogram) {
        out += fmt::format("{}{} {}\n", name, label_set(f.labels, values), format_value(s.value));
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= f.bounds.size(); ++b) {
        cumulative += s.buckets[b];
        const std::string le = b < f.bounds.size() ? format_value(f.bounds[b]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, label_set(f.labels, values, "le", le),
                           cumulative);
      }
      out += fmt::format("{}_sum{} {}\n", name, label_set(f.labels, values), format_value(s.sum));
      out += fmt::format("{}_count{} {}\n", name, label_set(f.labels, values), s.count);
    }
  }
  return out;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> token_latency_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace kvasir::server
