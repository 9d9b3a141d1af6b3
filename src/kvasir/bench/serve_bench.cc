#include "kvasir/bench/serve_bench.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "kvasir/bench/stats.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::bench {

namespace {

struct Job {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  double send_at = 0;  // seconds after start (Poisson mode)
};

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int tokens = 0;
  int prompt_tokens = 0, cached_tokens = 0;
  int usage_completion = 0;  // completion_tokens from the final usage chunk
};

Outcome one_request(const ServeBenchOptions& opt, const std::string& model, const Job& job) {
  Outcome out;
  httplib::Client cli(opt.host, opt.port);
  cli.set_read_timeout(static_cast<time_t>(opt.timeout_s), 0);
  cli.set_connection_timeout(10, 0);
  nlohmann::json body = {{"model", model},
                         {"prompt", job.prompt},
                         {"max_tokens", job.max_tokens},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (opt.ban_hi >= opt.ban_lo) {
    nlohmann::json bias = nlohmann::json::object();
    for (int id = opt.ban_lo; id <= opt.ban_hi; ++id) bias[std::to_string(id)] = -100;
    body["logit_bias"] = std::move(bias);
  }
  httplib::Headers headers;
  if (!opt.api_key.empty()) headers.emplace("Authorization", "Bearer " + opt.api_key);
  const double t0 = now_seconds();
  double last = 0;
  std::string buf;
  auto on_data = [&](const char* data, size_t len) {
    buf.append(data, len);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      std::string payload = ev.substr(6);
      if (payload == "[DONE]") continue;
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error") && out.error.empty()) {  // the server gave up mid-stream
        const auto& e = j["error"];
        out.error = "error event in the stream: " +
                    (e.is_object() && e.contains("message") && e["message"].is_string()
                         ? e["message"].get<std::string>()
                         : e.dump());
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        out.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        out.usage_completion = j["usage"].value("completion_tokens", 0);
        if (j["usage"].contains("prompt_tokens_details") &&
            j["usage"]["prompt_tokens_details"].is_object())
          out.cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const double now = now_seconds();
      if (out.tokens == 0) {
        out.ttft = now - t0;
      } else {
        out.itl.push_back(now - last);
      }
      last = now;
      out.tokens++;
    }
    return true;
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) { return on_data(d, n); };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err)) {
    out.error = "request failed: " + httplib::to_string(err);
    return out;
  }
  if (res.status != 200) {
    out.error = "HTTP " + std::to_string(res.status) + ": " + buf.substr(0, 200);
    return out;
  }
  if (!out.error.empty()) return out;
  if (out.tokens == 0) {
    out.error = "no tokens streamed";
    return out;
  }
  // A chunk may carry several tokens' text: the server's usage count is authoritative.
  if (out.usage_completion > 0) out.tokens = out.usage_completion;
  out.e2e = now_seconds() - t0;
  out.ok = true;
  return out;
}

}  // namespace

static std::string discover_model(const ServeBenchOptions& opt) {
  httplib::Client cli(opt.host, opt.port);
  httplib::Headers h;
  if (!opt.api_key.empty()) h.emplace("Authorization", "Bearer " + opt.api_key);
  auto res = cli.Get("/v1/models", h);
  if (!res || res->status != 200)
    fail("bench serve: cannot list models at {}:{} ({})", opt.host, opt.port,
         res ? "HTTP " + std::to_string(res->status) : httplib::to_string(res.error()));
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty())
    fail("bench serve: /v1/models returned no model");
  return j["data"][0].value("id", "");
}

static LatencyStats latency(const std::vector<double>& v) {
  LatencyStats s;
  if (v.empty()) return s;
  s.p50 = percentile(v, 50);
  s.p90 = percentile(v, 90);
  s.p99 = percentile(v, 99);
  s.mean = summarize(v).mean;
  return s;
}

ServeBenchResult run_serve_bench(const ServeBenchOptions& opt) {
  if (opt.requests <= 0) fail("bench serve: --requests must be positive");
  if (opt.prompt_min < 1 || opt.prompt_max < opt.prompt_min || opt.output_min < 1 ||
      opt.output_max < opt.output_min)
    fail("bench serve: invalid prompt/output length ranges");
  if (opt.rate <= 0 && opt.concurrency <= 0)
    fail("bench serve: give a positive --rate or --concurrency");
  const std::string model = opt.model.empty() ? discover_model(opt) : opt.model;

  // The workload, fully determined by the seed.
  std::mt19937_64 rng(opt.seed);
  auto uni = [&](int lo, int hi) {
    return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto exponential = [&](double mean) {  // u in (0, 1) from 53 random bits
    const double u = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
    return -mean * std::log(u);
  };
  std::vector<int32_t> prefix(static_cast<size_t>(opt.shared_prefix));
  for (auto& t : prefix) t = uni(opt.vocab_lo, opt.vocab_hi - 1);
  std::vector<Job> jobs(static_cast<size_t>(opt.requests));
  double t = 0;
  for (auto& j : jobs) {
    j.prompt = prefix;
    const int n = uni(opt.prompt_min, opt.prompt_max);
    for (int i = 0; i < n; ++i) j.prompt.push_back(uni(opt.vocab_lo, opt.vocab_hi - 1));
    if (opt.output_dist == OutputDist::kExponential) {
      // Heavy-tailed, like real chat traffic: many short answers, a few long ones.
      const double len = opt.output_min + exponential((opt.output_max - opt.output_min) / 4.0);
      j.max_tokens = static_cast<int>(std::min<double>(opt.output_max, std::floor(len)));
    } else {
      j.max_tokens = uni(opt.output_min, opt.output_max);
    }
    if (opt.rate > 0) {
      t += exponential(1.0 / opt.rate);  // Poisson arrivals
      j.send_at = t;
    }
  }

  std::vector<Outcome> outs(jobs.size());
  const double t0 = now_seconds();
  std::vector<std::thread> threads;
  std::atomic<size_t> next{0};  // fixed concurrency: the next job to send (outlives the threads)
  if (opt.rate > 0) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const double wait = jobs[i].send_at - (now_seconds() - t0);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      threads.emplace_back([&, i] { outs[i] = one_request(opt, model, jobs[i]); });
    }
  } else {
    for (int c = 0; c < opt.concurrency; ++c)
      threads.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < jobs.size();)
          outs[i] = one_request(opt, model, jobs[i]);
      });
  }
  for (auto& th : threads) th.join();
  ServeBenchResult r;
  r.duration_s = now_seconds() - t0;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const Outcome& o : outs) {
    r.ttft_each.push_back(o.ok ? o.ttft : NAN);
    if (!o.ok) {
      r.failed++;
      if (r.first_error.empty()) r.first_error = o.error;
      continue;
    }
    r.completed++;
    r.output_tokens += o.tokens;
    r.prompt_tokens += o.prompt_tokens;
    r.cached_tokens += o.cached_tokens;
    ttft.push_back(o.ttft);
    e2e.push_back(o.e2e);
    if (o.tokens > 1) tpot.push_back((o.e2e - o.ttft) / (o.tokens - 1));
    itl.insert(itl.end(), o.itl.begin(), o.itl.end());
  }
  r.req_per_s = r.completed / r.duration_s;
  r.output_tok_per_s = static_cast<double>(r.output_tokens) / r.duration_s;
  r.ttft = latency(ttft);
  r.tpot = latency(tpot);
  r.itl = latency(itl);
  r.e2e = latency(e2e);
  return r;
}

}  // namespace kvasir::bench
