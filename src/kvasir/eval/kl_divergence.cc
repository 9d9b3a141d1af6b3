#include "kvasir/eval/kl_divergence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'L', 'O', 'G', 'I', 'T', '1'};
constexpr size_t kHeaderBytes = 8 + 4 * 4 + 8;

// log-softmax of `logits` in double: max, then log of the sum of exp.
void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  double mx = logits[0];
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

template <class T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double stderr_of(double sum, double sq, int64_t n) {
  if (n < 2) return 0;
  const double mean = sum / static_cast<double>(n);
  const double var = std::max(0.0, sq / static_cast<double>(n) - mean * mean);
  return std::sqrt(var / static_cast<double>(n - 1));
}

}  // namespace

LogitsWriter::LogitsWriter(const std::string& path, int n_vocab, int ctx, int n_chunks,
                           std::span<const int32_t> tokens)
    : path_(path), n_vocab_(n_vocab) {
  if (n_vocab <= 0 || ctx < 4 || n_chunks <= 0)
    fail("{}: cannot save logits for vocab {}, ctx {}, {} chunks", path, n_vocab, ctx, n_chunks);
  expected_rows_ = static_cast<int64_t>(n_chunks) * (ctx - 1 - ctx / 2);
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) fail("{}: cannot create the logits file ({})", path, std::strerror(errno));
  const uint32_t head[4] = {static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(ctx),
                            static_cast<uint32_t>(n_chunks), 0};
  const uint64_t n_tokens = tokens.size();
  bool ok = std::fwrite(kMagic, 1, 8, f_) == 8 && std::fwrite(head, 4, 4, f_) == 4 &&
            std::fwrite(&n_tokens, 8, 1, f_) == 1 &&
            std::fwrite(tokens.data(), 4, tokens.size(), f_) == tokens.size();
  if (!ok) fail("{}: write failed ({})", path, std::strerror(errno));
}

LogitsWriter::~LogitsWriter() {
  if (f_) {  // not finished (an error on the way): no half-written file is left behind
    std::fclose(f_);
    std::remove(path_.c_str());
  }
}

void LogitsWriter::add(std::span<const float> logits) {
  if (static_cast<int64_t>(logits.size()) != n_vocab_)
    fail("{}: a row of {} logits, expected {}", path_, logits.size(), n_vocab_);
  if (rows_ >= expected_rows_) fail("{}: more rows than the header's {}", path_, expected_rows_);
  log_softmax(logits, lp_);
  buf_.resize(lp_.size());
  for (size_t i = 0; i < lp_.size(); ++i) buf_[i] = static_cast<float>(lp_[i]);
  if (std::fwrite(buf_.data(), 4, buf_.size(), f_) != buf_.size())
    fail("{}: write failed ({})", path_, std::strerror(errno));
  rows_++;
}

void LogitsWriter::finish() {
  if (rows_ != expected_rows_)
    fail("{}: {} rows written, the header promises {}", path_, rows_, expected_rows_);
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok) fail("{}: close failed ({})", path_, std::strerror(errno));
}

LogitsReader::LogitsReader(const std::string& path)
    : path_(path), map_(std::make_unique<MappedFile>(path)) {
  const uint8_t* p = map_->data();
  const size_t size = map_->size();
  if (size < kHeaderBytes || std::memcmp(p, kMagic, 8) != 0)
    fail(
        "{}: not a kvasir logits file (expected the magic \"KVLOGIT1\" written by "
        "`kvasir perplexity --save-logits`)",
        path);
  const uint32_t n_vocab = read_le<uint32_t>(p + 8);
  const uint32_t ctx = read_le<uint32_t>(p + 12);
  const uint32_t n_chunks = read_le<uint32_t>(p + 16);
  const uint64_t n_tokens = read_le<uint64_t>(p + 24);
  if (n_vocab == 0 || n_vocab > (1u << 24)) fail("{}: n_vocab {} is out of range", path, n_vocab);
  if (ctx < 4 || ctx > (1u << 24)) fail("{}: ctx {} is out of range", path, ctx);
  if (n_chunks == 0) fail("{}: n_chunks is 0", path);
  if (n_tokens < static_cast<uint64_t>(ctx) * n_chunks || n_tokens > size / 4)
    fail("{}: n_tokens {} cannot hold {} chunks of {}", path, n_tokens, n_chunks, ctx);
  n_vocab_ = static_cast<int>(n_vocab);
  ctx_ = static_cast<int>(ctx);
  n_chunks_ = static_cast<int>(n_chunks);
  const size_t rows_at = kHeaderBytes + 4 * n_tokens;
  const uint64_t want = rows_at + static_cast<uint64_t>(n_chunks) * rows_per_chunk() * n_vocab * 4;
  if (size != want)
    fail(
        "{}: {} bytes, but its header ({} chunks of {} tokens, vocab {}, {} text tokens) "
        "means {} bytes (truncated or not written to the end?)",
        path, size, n_chunks, ctx, n_vocab, n_tokens, want);
  tokens_ = {reinterpret_cast<const int32_t*>(p + kHeaderBytes), n_tokens};
  rows_ = reinterpret_cast<const float*>(p + rows_at);
}

void KLAccumulator::add(std::span<const float> logits, int32_t next) {
  const int64_t total = static_cast<int64_t>(base_.n_chunks()) * base_.rows_per_chunk();
  if (row_ >= total) fail("{}: more scored tokens than the file's {}", base_.path(), total);
  if (static_cast<int>(logits.size()) != base_.n_vocab())
    fail("{}: the model has {} logits a token, the reference {}", base_.path(), logits.size(),
         base_.n_vocab());
  log_softmax(logits, q_);
  const std::vector<double>& q = q_;
  const float* b = base_.row(row_++);
  double kld = 0;
  size_t top_b = 0, top_q = 0;
  for (size_t v = 0; v < q.size(); ++v) {
    const double bv = b[v];
    kld += std::exp(bv) * (bv - q[v]);
    if (b[v] > b[top_b]) top_b = v;
    if (q[v] > q[top_q]) top_q = v;
  }
  kld_.push_back(kld);
  const double bn = b[next], qn = q[static_cast<size_t>(next)];
  ln_ratio_sum_ += bn - qn;
  ln_ratio_sq_ += (bn - qn) * (bn - qn);
  nll_b_ -= bn;
  nll_q_ -= qn;
  const double dp = std::exp(qn) - std::exp(bn);
  dp_sum_ += dp;
  dp_sq_ += dp * dp;
  same_ += top_b == top_q ? 1 : 0;
}

KLStats KLAccumulator::finish() const {
  KLStats s;
  s.n = static_cast<int64_t>(kld_.size());
  if (s.n == 0) fail("{}: no tokens were compared", base_.path());
  const double n = static_cast<double>(s.n);
  double sum = 0, sq = 0;
  for (double k : kld_) {
    sum += k;
    sq += k * k;
  }
  s.kld = sum / n;
  s.kld_err = stderr_of(sum, sq, s.n);
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  auto q = [&](double p) {
    return sorted[static_cast<size_t>(std::llround(p * static_cast<double>(s.n - 1)))];
  };
  s.kld_max = sorted.back();
  s.kld_min = sorted.front();
  s.kld_p999 = q(0.999);
  s.kld_p99 = q(0.99);
  s.kld_p95 = q(0.95);
  s.kld_p90 = q(0.90);
  s.kld_median = q(0.5);
  s.ppl_q = std::exp(nll_q_ / n);
  s.ppl_base = std::exp(nll_b_ / n);
  s.ln_ratio = ln_ratio_sum_ / n;
  s.ln_ratio_err = stderr_of(ln_ratio_sum_, ln_ratio_sq_, s.n);
  s.same_top = static_cast<double>(same_) / n;
  s.same_top_err = s.n > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / (n - 1)) : 0;
  s.dp_mean = dp_sum_ / n;
  s.dp_rms = std::sqrt(dp_sq_ / n);
  return s;
}

std::string describe_kl(const KLStats& s) {
  std::string o;
  o += fmt::format("====== Perplexity statistics ({} tokens) ======\n", s.n);
  o += fmt::format("Mean PPL(Q)                   : {:10.6f}\n", s.ppl_q);
  o += fmt::format("Mean PPL(base)                : {:10.6f}\n", s.ppl_base);
  o += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.ln_ratio,
                   s.ln_ratio_err);
  o += fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f}\n", s.ppl_q / s.ppl_base);
  o += "\n====== KL divergence statistics ======\n";
  o += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld, s.kld_err);
  o += fmt::format("Maximum KLD: {:10.6f}\n", s.kld_max);
  o += fmt::format("99.9%   KLD: {:10.6f}\n", s.kld_p999);
  o += fmt::format("99.0%   KLD: {:10.6f}\n", s.kld_p99);
  o += fmt::format("95.0%   KLD: {:10.6f}\n", s.kld_p95);
  o += fmt::format("90.0%   KLD: {:10.6f}\n", s.kld_p90);
  o += fmt::format("Median  KLD: {:10.6f}\n", s.kld_median);
  o += fmt::format("Minimum KLD: {:10.6f}\n", s.kld_min);
  o += "\n====== Token probability statistics ======\n";
  o += fmt::format("Mean    Δp: {:7.3f} %\n", 100 * s.dp_mean);
  o += fmt::format("RMS     Δp: {:7.3f} %\n", 100 * s.dp_rms);
  o += fmt::format("Same top p: {:7.3f} ± {:6.3f} %\n", 100 * s.same_top, 100 * s.same_top_err);
  return o;
}

}  // namespace kvasir
