// Serving load generator (`kvasir bench serve`): drives an OpenAI-compatible server over HTTP
// with streaming completions and reports latency percentiles and throughput (BENCH.md).
//
// Arrivals: Poisson at `rate` requests/s (exponential gaps from a seeded RNG), or a fixed number
// of concurrent clients (`concurrency`), each sending its next request as soon as the previous one
// ends. Prompts are random token-id arrays (lengths uniform in [prompt_min, prompt_max]) that may
// share a common prefix of `shared_prefix` tokens; outputs are exactly max_tokens long
// (ignore_eos) with lengths uniform in [output_min, output_max], or (OutputDist::kExponential)
// output_min + an exponential of mean (output_max - output_min) / 4, cut at output_max: a
// heavy-tailed mix like real chat traffic. Everything is seeded, so two
// runs (e.g. continuous vs static batching) send the same workload.
//
// Per request: TTFT (submit → first streamed token), ITL (gaps between streamed tokens), TPOT
// ((e2e − TTFT) / (tokens − 1)), e2e. A request fails on an HTTP error, on an `error` event in its
// stream (a server that gives up mid-stream), or when it streams no token. Only loopback/local
// servers are meant to be targeted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvasir::bench {

enum class OutputDist { kUniform, kExponential };

struct ServeBenchOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model;  // model id to send; empty: ask /v1/models
  std::string api_key;
  int requests = 64;
  double rate = 0;  // req/s (Poisson); 0: use concurrency
  int concurrency = 8;
  int prompt_min = 32, prompt_max = 256;
  int output_min = 16, output_max = 128;
  OutputDist output_dist = OutputDist::kUniform;
  int shared_prefix = 0;
  int vocab_lo = 3, vocab_hi = 500;  // random token ids drawn from [lo, hi)
  // Token ids [ban_lo, ban_hi] the server must not generate (logit_bias -100 on each; none when
  // ban_hi < ban_lo), e.g. a vocabulary's byte tokens, whose random sequences are not valid UTF-8.
  int ban_lo = 0, ban_hi = -1;
  uint64_t seed = 1;
  double timeout_s = 600;
};

struct LatencyStats {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct ServeBenchResult {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  double req_per_s = 0;
  double output_tok_per_s = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  LatencyStats ttft, tpot, itl, e2e;
  std::vector<double> ttft_each;  // per request, in submission order
  std::string first_error;
};

ServeBenchResult run_serve_bench(const ServeBenchOptions& opt);

}  // namespace kvasir::bench
