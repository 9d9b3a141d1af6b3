// KL divergence of a model's next-token distributions from a reference model's, over the tokens
// perplexity() scores (eval/perplexity.h), as llama.cpp's `llama-perplexity --kl-divergence`
// reports it: the reference run saves its distributions (`kvasir perplexity --save-logits F`), the
// run under test compares with them (`--kl-base F`).
//
// Saved reference logits, "kvasir logits" version 1 (little-endian):
//   magic    8 bytes "KVLOGIT1"
//   n_vocab  u32;  ctx u32 (tokens per chunk);  n_chunks u32;  reserved u32 (0)
//   n_tokens u64, then n_tokens i32: the evaluated text's tokens, as the reference's tokenizer
//            gave them (the chunks are cut from these; a run under test evaluates exactly them)
//   rows     for each chunk, for each scored position j = ctx/2 .. ctx-2: n_vocab f32, the
//            log-softmax (natural log) of the reference's logits, computed in double.
// f32 log-probabilities keep the KL of near-identical models exact (llama.cpp's file stores
// 16-bit codes: a step of ~5e-4 in log-probability, the size of an int8 KV cache's whole KLD);
// the price is 4 bytes x n_vocab a scored token (stories260K, ctx 256: 95 MiB): --chunks limits it.
//
// Statistics per scored token t with reference log-probabilities b and tested q: KLD_t =
// sum_v exp(b_v) (b_v - q_v); "same top" = argmax b == argmax q; dp_t = p_q(next) - p_b(next);
// ln(PPL(Q)/PPL(base)) = mean of (b_next - q_next). Means come with their standard errors
// (sample standard deviation / sqrt(n - 1), as llama.cpp prints), quantiles are nearest-rank on
// the sorted values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvasir/util/mmap_file.h"

namespace kvasir {

class LogitsWriter {
 public:
  // Creates `path` (kvasir::Error naming it when it cannot) for n_chunks chunks of ctx tokens.
  LogitsWriter(const std::string& path, int n_vocab, int ctx, int n_chunks,
               std::span<const int32_t> tokens);
  ~LogitsWriter();
  LogitsWriter(const LogitsWriter&) = delete;
  LogitsWriter& operator=(const LogitsWriter&) = delete;
  // One scored row's raw logits, in order.
  void add(std::span<const float> logits);
  // Checks that every row was written and closes the file. A writer destroyed before finish()
  // removes the file.
  void finish();

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int n_vocab_;
  int64_t expected_rows_;
  int64_t rows_ = 0;
  std::vector<double> lp_;  // the row's log-softmax, reused
  std::vector<float> buf_;
};

class LogitsReader {
 public:
  // Maps `path`; kvasir::Error naming the file and the field for a bad magic, version, size.
  explicit LogitsReader(const std::string& path);
  int n_vocab() const { return n_vocab_; }
  int ctx() const { return ctx_; }
  int n_chunks() const { return n_chunks_; }
  int rows_per_chunk() const { return ctx_ - 1 - ctx_ / 2; }
  std::span<const int32_t> tokens() const { return tokens_; }
  // Log-probabilities of scored row i (chunk * rows_per_chunk() + (j - ctx/2)).
  const float* row(int64_t i) const { return rows_ + i * n_vocab_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<MappedFile> map_;
  int n_vocab_ = 0, ctx_ = 0, n_chunks_ = 0;
  std::span<const int32_t> tokens_;
  const float* rows_ = nullptr;
};

struct KLStats {
  int64_t n = 0;
  double ppl_q = 0, ppl_base = 0;
  double ln_ratio = 0, ln_ratio_err = 0;  // mean ln(PPL(Q)/PPL(base)) per token
  double kld = 0, kld_err = 0;            // mean KLD (nats)
  double kld_max = 0, kld_p999 = 0, kld_p99 = 0, kld_p95 = 0, kld_p90 = 0, kld_median = 0;
  double kld_min = 0;
  double same_top = 0, same_top_err = 0;  // fraction of tokens whose argmax agrees
  double dp_mean = 0, dp_rms = 0;         // p_q(next) - p_b(next)
};

class KLAccumulator {
 public:
  explicit KLAccumulator(const LogitsReader& base) : base_(base) {}
  // The tested model's raw logits for the next scored row (rows come in the file's order).
  void add(std::span<const float> logits, int32_t next);
  KLStats finish() const;

 private:
  const LogitsReader& base_;
  int64_t row_ = 0;
  std::vector<double> kld_;
  double ln_ratio_sum_ = 0, ln_ratio_sq_ = 0, nll_q_ = 0, nll_b_ = 0;
  double dp_sum_ = 0, dp_sq_ = 0;
  int64_t same_ = 0;
  std::vector<double> q_;  // the row's log-softmax, reused
};

// llama-perplexity's "Perplexity statistics" and "KL divergence statistics" blocks.
std::string describe_kl(const KLStats& s);

}  // namespace kvasir
