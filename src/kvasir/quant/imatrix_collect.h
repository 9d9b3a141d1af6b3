// Computing an importance matrix (quant/imatrix.h) from calibration text, as llama.cpp's
// llama-imatrix does, so that our files and its files agree (tests/quant/imatrix_collect_test.cc
// holds ours to files the pinned llama-imatrix wrote):
//  - The token stream (the text tokenized with BOS first when the vocabulary adds one) is cut
//    into n_chunks = min(max_chunks, tokens / ctx) non-overlapping chunks of ctx tokens. Each
//    chunk is evaluated from an empty cache with its first token replaced by BOS (bos_id >= 0).
//  - Every token of every chunk is collected (not only the scored half; but see the steps below):
//    for each weight matrix named "blk.*" (and
//    "output.weight" with process_output; a tied output matrix is token_embd.weight and never
//    collected, as in llama.cpp) the sum over the tokens of each input column's squared
//    activation, and the number of tokens. model/matmul_observer.h says what each matrix sees.
//  - The forward steps are llama-imatrix's (llama.cpp's batch splitting), so that the same
//    tokens are collected: n_seq = max(1, batch / ctx) chunks are evaluated together; with
//    n_seq > 1 each step takes the same number of tokens, ubatch / k, from each of the group's
//    k chunks (llama.cpp's split_equal over its per-sequence KV streams), with n_seq = 1 a chunk
//    runs in pieces of at most ubatch tokens (of batch-token decodes). As in llama.cpp, a
//    multiplication of fewer than 16 rows is not collected, so a step of under 16 tokens is lost
//    to the statistics, exactly as llama-imatrix loses it: e.g. -c 512 --chunks 3 runs three
//    steps of 170 tokens from each chunk and one of 2 from each, so 1530 of the 1536 tokens are
//    counted and chunk_count is 2; -c 1030 counts 1024 tokens per chunk.
//  - The perplexity shown alongside is llama-imatrix's (and llama-perplexity's): the predictions
//    from positions ctx/2 .. ctx-2 of each chunk are scored.
//  - The file's chunk_size is ctx and its chunk_count the largest count / ctx (the chunks the
//    statistics cover); the caller names the dataset.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "kvasir/model/matmul_observer.h"
#include "kvasir/model/model.h"
#include "kvasir/quant/imatrix.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

// The statistics on their own: a MatmulObserver that adds each collected input's squared
// activations to its weight's sums (in double; llama.cpp sums in float) and its rows to the
// weight's count. Column sums are split over `pool`'s threads when one is given (each column
// summed in row order by one thread, so the result does not depend on the thread count).
class ImatrixCollector : public MatmulObserver {
 public:
  static constexpr int64_t kMinRows = 16;  // fewer rows are not collected (as llama.cpp)

  explicit ImatrixCollector(bool process_output = false, ThreadPool* pool = nullptr);

  // Whether a weight of that name is collected: "blk.*", and "output.weight" with
  // process_output.
  bool wants(std::string_view weight) const;
  void on_matmul(std::string_view weight, const float* x, int64_t n_rows, int64_t cols) override;

  // One dense matrix per entry (counts has one element).
  std::map<std::string, ImatrixStats> stats() const;
  // The first weight whose sums stopped being finite ("" while all are finite).
  const std::string& non_finite() const { return non_finite_; }

 private:
  bool process_output_;
  ThreadPool* pool_;
  std::map<std::string, ImatrixStats, std::less<>> stats_;
  std::string non_finite_;
};

struct ImatrixCollectOptions {
  int ctx = 512;        // tokens per chunk (llama-imatrix -c)
  int max_chunks = -1;  // -1: every whole chunk the tokens hold
  int bos_id = -1;      // replaces each chunk's first token when >= 0
  bool process_output = false;
  bool compute_ppl = true;
  int batch = 2048;  // llama-imatrix's --batch-size: chunks evaluated together (see above)
  int ubatch = 512;  // llama-imatrix's --ubatch-size: tokens per forward step, at most
  KVCacheType kv_type{};
};

struct ImatrixCollectProgress {
  int chunks_done = 0;
  int n_chunks = 0;
  double ppl = 0;  // over the chunks done so far (0 without compute_ppl)
  double elapsed_s = 0;
};

struct ImatrixCollectResult {
  std::map<std::string, ImatrixStats> stats;
  int chunk_count = 0;   // the largest count / chunk_size
  int chunk_size = 0;    // ctx
  int n_chunks = 0;      // chunks evaluated
  double ppl = 0;        // 0 without compute_ppl
  double ppl_error = 0;  // llama.cpp's +/- (standard error of the mean nll, times ppl)
  int64_t scored = 0;    // predictions scored for the perplexity
  double seconds = 0;
};

// Throws kvasir::Error for options out of range, tokens that do not fill one chunk, a backend
// whose memory is not host memory, a non-finite statistic (naming the weight and the chunk) and
// a run that collected nothing (every step under 16 tokens). `progress` is called after each
// chunk.
ImatrixCollectResult collect_imatrix(
    const Model& model, ThreadPool& pool, std::span<const int32_t> tokens,
    const ImatrixCollectOptions& options,
    const std::function<void(const ImatrixCollectProgress&)>& progress = {});

}  // namespace kvasir
