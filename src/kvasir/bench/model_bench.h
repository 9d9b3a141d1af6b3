// `kvasir bench`: the throughput figures of BENCH.md for one model, measured in one run.
//
//   bandwidth   memory read bandwidth (BandwidthProbe), GB/s, best pass of each repetition
//   pp<P>       prefill: one P-token prompt in one forward pass (logits of the last token), tok/s
//   tg<T>       decode: one sequence, T steps of one token after a tg_prompt-token prompt, tok/s
//   tg<B>       batched decode: B sequences (batch_prompt-token prompts, one block table each),
//               T steps of ONE forward with B tokens; aggregate tok/s = B*T / time
//   tg<T>@<C>   as tg<T> with C tokens already in the KV cache (when ctx_prefill > 0)
//
// Decode steps compute the logits of every sequence and feed back its greedy argmax. Each figure
// has an untimed warm-up (a full prefill, or warmup_steps decode steps), then `reps` timed
// repetitions summarised as median/min/max; prompts and cache fills are setup, never timed
// (between repetitions sequences are truncated back to their prompt). Timing uses a monotonic
// clock around the forward passes only.
//
// Roofline (decode figures): bytes streamed per step = streamed weight bytes (every weight
// matrix once; the token-embedding table is not streamed — only B rows are read — unless it is
// also the output matrix) + the K and V rows each sequence's attention reads (n_past + 1
// positions). roofline_pct = (steps/s × average bytes per step) ÷ median bandwidth × 100.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/bench/stats.h"
#include "kvasir/kv/key_transform.h"
#include "kvasir/model/model.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::bench {

struct BenchOptions {
  int reps = 3;
  int pp = 512;                         // 0: skip pp
  int tg = 128;                         // 0: skip every decode figure
  int tg_prompt = 16;                   // prompt before tg<T>
  std::vector<int> batches{8, 16, 64};  // tg<B> figures; empty: none
  int batch_prompt = 128;      // per-sequence prompt before tg<B> (llama-batched-bench -npp)
  int ctx_prefill = 0;         // > 0: also tg<T>@<ctx_prefill>
  bool bandwidth = true;       // run the probe (needed for roofline_pct)
  size_t bandwidth_bytes = 0;  // 0: default_probe_bytes()
  int bandwidth_passes = 5;
  int warmup_steps = 8;
  KVCacheType kv_type{};
  std::shared_ptr<const KeyTransform> key_transform;  // of quantized keys (kv/key_transform.h)
  int block_size = 16;
  uint32_t seed = 1;  // prompt tokens
};

struct BenchResult {
  std::string name;  // "pp512", "tg128", "tg16", "tg128@2048", "bandwidth"
  std::string unit;  // "tok/s" or "GB/s"
  Summary stats;
  int seqs = 0;                        // sequences decoding together (decode figures)
  double bytes_per_step = 0;           // average bytes streamed per step (decode figures)
  std::optional<double> roofline_pct;  // decode figures, when the bandwidth was measured
};

// Throws kvasir::Error on invalid options (reps < 1, negative sizes, a batch size < 1, a
// context longer than the model's).
void validate(const BenchOptions& opt, const Model* model);

// Weight bytes one decode step reads (see the header comment).
size_t streamed_weight_bytes(const Model& model);

// Probe only: `reps` probes of opt.bandwidth_passes passes each.
BenchResult run_bandwidth(ThreadPool& pool, const BenchOptions& opt);

// All figures the options ask for, in the order bandwidth, pp, tg, tg@ctx, tgB. on_result (if
// set) is called as each figure completes, so callers can print progressively.
std::vector<BenchResult> run_model_bench(
    const Model& model, ThreadPool& pool, const BenchOptions& opt,
    const std::function<void(const BenchResult&)>& on_result = {});

}  // namespace kvasir::bench
