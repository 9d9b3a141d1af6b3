#include "kvasir/sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "kvasir/sampling/row_math.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float sanitized(float x) {
  return std::isnan(x) ? kNegInf : x;
}

// Dense rows are processed in blocks; each block's float partial sums (<= 128 terms each, so
// ~1e-6 relative error at worst, far below what a draw can resolve) are added in double, and the
// draw skips whole blocks by their mass.
constexpr int32_t kBlock = 1024;

// Top-p on a full row sorts its candidates when there are at most this many, and otherwise
// narrows them with a histogram first.
constexpr int32_t kTopPSortLimit = 4096;

// Top-p histogram buckets: the top 12 bits of a probability's float encoding (sign, exponent and
// 3 mantissa bits), i.e. buckets 2^(1/8) apart. Probabilities are in [0, 1], so <= 0x3F8.
constexpr int32_t kBuckets = 1024;
int32_t bucket_of(float p) {
  return std::min<int32_t>(static_cast<int32_t>(std::bit_cast<uint32_t>(p) >> 20), kBuckets - 1);
}

// Min-p pre-filters on logits with this margin (times T, so 0.1% in probability) before the exact
// test on probabilities; fast_exp's error is ~1e-7, so the margin never drops a survivor.
constexpr float kMinPMargin = 1e-3f;

// One token's penalties; shared by the row pass and the single-token recomputation for logprobs
// so both give bit-identical results.
inline float penalized(float x, const PenaltyWindow::Entry& e, const SamplingParams& p) {
  if (e.count_all > 0 && p.repetition_penalty != 1.0f) {
    x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
  }
  if (e.count_output > 0) {
    x -= p.frequency_penalty * static_cast<float>(e.count_output) + p.presence_penalty;
  }
  return x;
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      greedy_(params.is_greedy()),
      use_penalties_(params.penalties_enabled()),
      window_(params.penalties_enabled() ? params.penalty_last_n : 0),
      seed_(params.seed ? *params.seed : Rng::random_seed()),
      rng_(seed_) {
  if (n_vocab <= 0) fail("Sampler: n_vocab must be > 0, got {}", n_vocab);
  if (auto err = params.validate(n_vocab)) fail("invalid sampling parameters: {}", *err);
  for (const auto& [token, bias] : params.logit_bias) {
    if (bias != 0.0f) bias_.emplace_back(token, bias);  // std::map: already sorted by token
  }
  if (params_.min_p > 0.0f) log_min_p_ = std::log(params_.min_p);
}

void Sampler::check_vocab(int32_t n_vocab) const {
  if (n_vocab != n_vocab_) {
    fail("Sampler: logits row has {} entries, the sampler was built for a vocabulary of {}",
         n_vocab, n_vocab_);
  }
}

void Sampler::ensure_buffers() {
  if (work_.size() != static_cast<size_t>(n_vocab_)) {
    work_.resize(n_vocab_);
    ids_.resize(n_vocab_);
    block_mass_.resize((n_vocab_ + kBlock - 1) / kBlock);
  }
}

void Sampler::accept_prompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab_) {
      fail("Sampler::accept_prompt: token id {} is outside the vocabulary [0, {})", t, n_vocab_);
    }
  }
  if (!use_penalties_) return;
  // Only the last penalty_last_n tokens can end up in the window.
  size_t first = 0;
  if (params_.penalty_last_n > 0 && tokens.size() > static_cast<size_t>(params_.penalty_last_n)) {
    first = tokens.size() - static_cast<size_t>(params_.penalty_last_n);
  }
  for (size_t i = first; i < tokens.size(); ++i) window_.push(tokens[i], /*is_output=*/false);
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_) {
    fail("Sampler::accept: token id {} is outside the vocabulary [0, {})", token, n_vocab_);
  }
  if (use_penalties_) window_.push(token, /*is_output=*/true);
}

// ---------------------------------------------------------------- steps 1-2 and logprobs

const float* Sampler::apply_bias_and_penalties(const float* logits) {
  if (bias_.empty() && !use_penalties_ && !allowed_) return logits;
  float* w = work_.data();
  if (!allowed_) {
    for (int32_t i = 0; i < n_vocab_; ++i) {
      w[i] = select_float(logits[i] == logits[i], logits[i], kNegInf);  // NaN -> -inf, branch-free
    }
  } else {
    // Step 0 fused with the copy, one 64-token word of the set at a time, branch-free inside a
    // word (the compiler vectorizes it): a token outside the set, or NaN, becomes -inf.
    for (int32_t lo = 0; lo < n_vocab_; lo += 64) {
      const uint64_t bits = allowed_[lo >> 6];
      const int32_t n = std::min<int32_t>(64, n_vocab_ - lo);
      const float* x = logits + lo;
      float* y = w + lo;
      for (int32_t j = 0; j < n; ++j) {
        const bool keep = ((bits >> j) & 1u) != 0 && x[j] == x[j];
        y[j] = select_float(keep, x[j], kNegInf);
      }
    }
  }
  for (const auto& [token, bias] : bias_) w[token] += bias;
  if (use_penalties_) {
    window_.for_each(
        [&](const PenaltyWindow::Entry& e) { w[e.token] = penalized(w[e.token], e, params_); });
  }
  return w;
}

float Sampler::processed_logit(const float* logits, int32_t token) const {
  if (!is_allowed(token)) return kNegInf;
  float x = sanitized(logits[token]);
  const auto it = std::lower_bound(bias_.begin(), bias_.end(), token,
                                   [](const auto& b, int32_t t) { return b.first < t; });
  if (it != bias_.end() && it->first == token) x += it->second;
  if (use_penalties_) x = penalized(x, window_.find(token), params_);
  return x;
}

void Sampler::prepare_logprobs(const float* row, SampleResult* out) {
  // log p(t) = (x_t - max) - log(sum_i exp(x_i - max)). The exponentials go through a small
  // stack block, so row (which may be work_) stays intact for the steps that follow.
  const int32_t n = n_vocab_;
  const float mx = row_max(row, n);
  double sum = 0.0;
  float block[kBlock];
  for (int32_t lo = 0; lo < n; lo += kBlock) {
    sum += exp_shifted(row + lo, std::min(kBlock, n - lo), mx, 1.0f, block);
  }
  lp_max_ = mx;
  lp_log_sum_ = std::log(sum);
  out->top_logprobs.clear();
  const int32_t k = top_.select(row, n, params_.top_logprobs, ids_.data());
  for (int32_t j = 0; j < k; ++j) out->top_logprobs.push_back({ids_[j], logprob_of(row[ids_[j]])});
}

float Sampler::logprob_of(float logit) const {
  return static_cast<float>(static_cast<double>(shifted(sanitized(logit), lp_max_)) - lp_log_sum_);
}

int32_t Sampler::argmax(const float* row) const {
  const float mx = row_max(row, n_vocab_);
  if (mx == kNegInf) return 0;  // every logit -inf or NaN
  int32_t i = 0;
  while (row[i] != mx) ++i;  // the first (lowest id) of the ties
  return i;
}

// ---------------------------------------------------------------- steps 4-7

void Sampler::truncate(const float* row) {
  const int32_t n = n_vocab_;
  // Multiplying by 1 / T instead of dividing by T differs by at most an ulp, and is faster.
  const float inv_t = 1.0f / params_.temperature;
  float* p = work_.data();
  const int32_t k = params_.top_k > 0 && params_.top_k < n ? params_.top_k : 0;

  float mx;
  if (k > 0) {
    top_.select(row, n, k, ids_.data());
    mx = sanitized(row[ids_[0]]);
  } else {
    mx = row_max(row, n);
  }
  if (mx == kNegInf) {  // nothing is possible: fall back to the lowest id, as greedy does
    ids_[0] = 0;
    p[0] = 1.0f;
    n_kept_ = 1;
    kept_all_ = false;
    return;
  }

  if (k > 0) {
    // Only the k survivors need probabilities; ids_ is ordered best first.
    for (int32_t j = 0; j < k; ++j) p[ids_[j]] = fast_exp(shifted(row[ids_[j]], mx) * inv_t);
    n_kept_ = k;
    kept_all_ = false;
  } else if (params_.top_p >= 1.0f && params_.min_p > 0.0f) {
    // Min-p alone: pre-filter on logits (x >= max + T log(min_p), less a margin) so that only
    // plausible survivors need an exponential; the exact test on probabilities follows below.
    const float t = params_.temperature;
    float threshold = mx + t * log_min_p_;
    threshold -= kMinPMargin * t + 1e-6f * std::fabs(threshold);  // covers rounding of the sum
    if (std::isinf(mx)) threshold = mx;                           // +inf: only +inf passes
    const int32_t m = collect_at_least(row, n, threshold, ids_.data());
    for (int32_t j = 0; j < m; ++j) p[ids_[j]] = fast_exp(shifted(row[ids_[j]], mx) * inv_t);
    n_kept_ = m;
    kept_all_ = false;
  } else {
    // Every token: weights and per-block mass for the draw.
    for (int32_t b = 0, lo = 0; lo < n; ++b, lo += kBlock) {
      block_mass_[b] = exp_shifted(row + lo, std::min(kBlock, n - lo), mx, inv_t, p + lo);
    }
    n_kept_ = n;
    kept_all_ = true;
  }

  if (params_.top_p < 1.0f) {
    const double target = static_cast<double>(params_.top_p) * kept_mass();
    if (kept_all_) {
      top_p_dense(target);
    } else {
      double cum = 0.0;
      for (int32_t j = 0; j < n_kept_; ++j) {
        cum += p[ids_[j]];
        if (cum >= target) {
          n_kept_ = j + 1;
          break;
        }
      }
    }
  }

  if (params_.min_p > 0.0f) {
    // The best token has weight exactly 1 (exp(0)), so p >= min_p * p_max is p >= min_p. Filter
    // in place, keeping the order (the best token always survives).
    const float threshold = params_.min_p;
    int32_t m = 0;
    if (kept_all_) {
      for (int32_t i = 0; i < n; ++i) {
        if (p[i] >= threshold) ids_[m++] = i;
      }
      kept_all_ = false;
    } else {
      for (int32_t j = 0; j < n_kept_; ++j) {
        if (p[ids_[j]] >= threshold) ids_[m++] = ids_[j];
      }
    }
    n_kept_ = m;
  }
}

void Sampler::top_p_dense(double target) {
  const int32_t n = n_vocab_;
  const float* p = work_.data();
  // Tokens below tau = (1 - top_p) * total / n together weigh less than (1 - top_p) * total, so
  // the tokens at or above tau already reach target, and the kept prefix lies among them. For a
  // peaked distribution they are few: sort them (best first, ties -> lowest id) and take the
  // prefix. (The 0.999 only guards tau against rounding upwards.)
  const double total = kept_mass();
  const float tau = static_cast<float>(0.999 * (total - target) / n);
  int32_t m = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (p[i] >= tau) ids_[m++] = i;
  }
  const auto best_first = [p](int32_t a, int32_t b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
  };
  double cum = 0.0;
  if (m <= kTopPSortLimit) {
    std::sort(ids_.data(), ids_.data() + m, best_first);
    int32_t j = 0;
    while (j < m) {
      cum += p[ids_[j++]];
      if (cum >= target) break;
    }
    n_kept_ = j;
    kept_all_ = false;
    return;
  }
  // Flat distribution: histogram the candidates' mass by probability bucket and find the bucket
  // where the cumulative mass (from the top) reaches target; keep every token above it, and from
  // that bucket only the best tokens (sorted) needed to reach target.
  hist_mass_.assign(kBuckets, 0.0);
  for (int32_t j = 0; j < m; ++j) hist_mass_[bucket_of(p[ids_[j]])] += p[ids_[j]];
  int32_t boundary = 0;  // stays 0 if rounding never reaches target: everything is kept
  for (int32_t b = kBuckets - 1; b >= 0; --b) {
    if (cum + hist_mass_[b] >= target) {
      boundary = b;
      break;
    }
    cum += hist_mass_[b];
  }
  int32_t kept = 0;
  for (int32_t j = 0; j < m; ++j) {
    if (bucket_of(p[ids_[j]]) > boundary) ids_[kept++] = ids_[j];
  }
  // The boundary bucket's tokens, re-found from the row (the candidate list was overwritten).
  // Any below tau sort after those above it and are never reached.
  int32_t* tail = ids_.data() + kept;
  int32_t n_tail = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (bucket_of(p[i]) == boundary) tail[n_tail++] = i;
  }
  std::sort(tail, tail + n_tail, best_first);
  int32_t j = 0;
  while (j < n_tail) {
    cum += p[tail[j++]];
    if (cum >= target) break;
  }
  n_kept_ = kept + j;
  kept_all_ = false;
}

// ---------------------------------------------------------------- step 8

double Sampler::kept_mass() const {
  double total = 0.0;
  if (kept_all_) {
    for (double b : block_mass_) total += b;
  } else {
    const float* p = work_.data();
    for (int32_t j = 0; j < n_kept_; ++j) total += p[ids_[j]];
  }
  return total;
}

int32_t Sampler::draw() {
  const double total = kept_mass();
  const double u = rng_.uniform() * total;
  const float* p = work_.data();
  double acc = 0.0;
  int32_t last = -1;
  if (kept_all_) {
    // Skip whole blocks, then scan token by token in id order.
    int32_t b = 0;
    const int32_t n_blocks = static_cast<int32_t>(block_mass_.size());
    while (b + 1 < n_blocks && acc + block_mass_[b] <= u) acc += block_mass_[b++];
    for (int32_t i = b * kBlock; i < n_vocab_; ++i) {
      if (!(p[i] > 0.0f)) continue;
      acc += p[i];
      last = i;
      if (u < acc) return i;
    }
  } else {
    for (int32_t j = 0; j < n_kept_; ++j) {
      const int32_t id = ids_[j];
      if (!(p[id] > 0.0f)) continue;
      acc += p[id];
      last = id;
      if (u < acc) return id;
    }
  }
  // Reached only when rounding puts u at the very end: take the last token with mass.
  return last >= 0 ? last : (kept_all_ ? 0 : ids_[0]);
}

// ---------------------------------------------------------------- public entry points

int32_t Sampler::sample(const float* logits, int32_t n_vocab, SampleResult* out,
                        const uint64_t* allowed) {
  check_vocab(n_vocab);
  ensure_buffers();
  allowed_ = allowed;
  struct Reset {
    const uint64_t*& p;
    ~Reset() { p = nullptr; }
  } reset{allowed_};
  const float* row = apply_bias_and_penalties(logits);
  const bool raw = params_.logprobs_mode == LogprobsMode::kRaw;
  const bool want_logprobs = out != nullptr && params_.logprobs;
  // Logprobs read the row before truncate() overwrites work_ with probabilities.
  if (want_logprobs) prepare_logprobs(raw ? logits : row, out);
  int32_t token;
  if (greedy_) {
    token = argmax(row);
  } else {
    truncate(row);
    token = draw();
  }
  if (out != nullptr) {
    out->token = token;
    if (want_logprobs) {
      out->logprob = logprob_of(raw ? logits[token] : processed_logit(logits, token));
    } else {
      out->logprob = 0.0f;
      out->top_logprobs.clear();
    }
  }
  return token;
}

void Sampler::score(const float* logits, int32_t n_vocab, int32_t token, SampleResult* out) {
  check_vocab(n_vocab);
  if (token < 0 || token >= n_vocab_)
    fail("Sampler::score: token id {} is outside the vocabulary [0, {})", token, n_vocab_);
  if (out == nullptr) return;
  out->token = token;
  if (!params_.logprobs) {
    out->logprob = 0.0f;
    out->top_logprobs.clear();
    return;
  }
  ensure_buffers();
  const float* row = apply_bias_and_penalties(logits);
  const bool raw = params_.logprobs_mode == LogprobsMode::kRaw;
  prepare_logprobs(raw ? logits : row, out);
  out->logprob = logprob_of(raw ? logits[token] : processed_logit(logits, token));
}

void Sampler::probabilities(const float* logits, int32_t n_vocab, float* probs) {
  check_vocab(n_vocab);
  ensure_buffers();
  const float* row = apply_bias_and_penalties(logits);
  std::fill(probs, probs + n_vocab_, 0.0f);
  if (greedy_) {
    probs[argmax(row)] = 1.0f;
    return;
  }
  truncate(row);
  const double total = kept_mass();
  const float* p = work_.data();
  if (kept_all_) {
    for (int32_t i = 0; i < n_vocab_; ++i) probs[i] = static_cast<float>(p[i] / total);
  } else {
    for (int32_t j = 0; j < n_kept_; ++j) probs[ids_[j]] = static_cast<float>(p[ids_[j]] / total);
  }
}

}  // namespace kvasir
