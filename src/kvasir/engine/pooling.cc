#include "kvasir/engine/pooling.h"

#include <algorithm>
#include <cmath>

#include "kvasir/util/error.h"

namespace kvasir {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
    default:
      return "none";
  }
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  if (name == "none") return Pooling::kNone;
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  if (name == "last") return Pooling::kLast;
  return std::nullopt;
}

std::optional<Pooling> pooling_from_gguf(int64_t type) {
  switch (type) {
    case 0:
      return Pooling::kNone;
    case 1:
      return Pooling::kMean;
    case 2:
      return Pooling::kCls;
    case 3:
      return Pooling::kLast;
    default:
      return std::nullopt;
  }
}

Pooler::Pooler(const EmbeddingParams& params, int dim, int n_tokens)
    : params_(params), dim_(dim), n_tokens_(n_tokens) {
  if (params.pooling == Pooling::kNone)
    fail(
        "pooling 'none' gives one vector per token, not one per input: embeddings need mean, cls "
        "or last pooling");
  if (params.dimensions < 0 || params.dimensions > dim)
    fail("dimensions: must be between 1 and the model's embedding size {}, got {}", dim,
         params.dimensions);
  if (n_tokens <= 0) fail("an embedding input needs at least one token");
  if (params.pooling == Pooling::kMean)
    sum_.assign(static_cast<size_t>(dim), 0.0);
  else
    row_.assign(static_cast<size_t>(dim), 0.0f);
}

std::pair<int, int> Pooler::rows_wanted(int start, int n) const {
  switch (params_.pooling) {
    case Pooling::kMean:
      return {0, n};
    case Pooling::kCls:
      return start == 0 ? std::pair{0, 1} : std::pair{0, 0};
    case Pooling::kLast:
      return start + n == n_tokens_ ? std::pair{n - 1, n} : std::pair{0, 0};
    default:
      return {0, 0};
  }
}

void Pooler::add(int start, int n, const float* rows) {
  if (start == 0) {
    next_ = 0;
    std::fill(sum_.begin(), sum_.end(), 0.0);
  }
  if (start != next_ || n <= 0 || start + n > n_tokens_)
    fail("pooler: a chunk at positions {}..{} does not continue at position {} of {}", start,
         start + n - 1, next_, n_tokens_);
  const auto [begin, end] = rows_wanted(start, n);
  const auto d = static_cast<size_t>(dim_);
  if (params_.pooling == Pooling::kMean) {
    for (int r = 0; r < end - begin; ++r) {
      const float* row = rows + static_cast<size_t>(r) * d;
      for (size_t i = 0; i < d; ++i) sum_[i] += row[i];
    }
  } else if (end > begin) {
    std::copy(rows, rows + d, row_.begin());
  }
  next_ = start + n;
}

std::vector<float> Pooler::finish() const {
  if (!complete()) fail("pooler: the embedding is asked for before its last token was computed");
  const size_t keep =
      params_.dimensions > 0 ? static_cast<size_t>(params_.dimensions) : static_cast<size_t>(dim_);
  std::vector<float> v(keep);
  for (size_t i = 0; i < keep; ++i)
    v[i] = params_.pooling == Pooling::kMean ? static_cast<float>(sum_[i] / n_tokens_) : row_[i];
  if (params_.normalize) {
    double ss = 0;
    for (float x : v) ss += static_cast<double>(x) * x;
    const double inv = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
    for (float& x : v) x = static_cast<float>(x * inv);
  }
  return v;
}

}  // namespace kvasir
