// attention_reference(): the naive definition, for tests (contract in attention.h).
// Materialises all scores of a query, softmax and weighted sum in double precision.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kvasir/kernels/cpu/attention.h"
#include "kvasir/util/error.h"

namespace kvasir::cpu {

namespace {
double kv_value(const PagedKVLayer& kv, const void* base, size_t index) {
  if (kv.type == DType::F16) return fp16_to_fp32(static_cast<const uint16_t*>(base)[index]);
  return static_cast<const float*>(base)[index];
}
}  // namespace

void attention_reference(const PagedKVLayer& kv, const AttentionArgs& a) {
  if (kv.type != DType::F16 && kv.type != DType::F32) fail("attention_reference: bad KV dtype");
  if (kv.n_kv_heads <= 0 || a.n_heads % kv.n_kv_heads != 0) {
    fail("attention_reference: n_heads {} not a multiple of n_kv_heads {}", a.n_heads,
         kv.n_kv_heads);
  }
  const int dim = kv.head_dim;
  const int bs = kv.block_size;
  const int G = a.n_heads / kv.n_kv_heads;
  std::vector<double> scores;
  std::vector<double> acc(dim);
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const AttentionSeq& seq = a.seqs[a.seq_index[t]];
    const int32_t pos = a.positions[t];
    if (pos < 0 || pos / bs >= seq.n_blocks)
      fail("attention_reference: position {} out of range", pos);
    for (int h = 0; h < a.n_heads; ++h) {
      const int g = h / G;
      const float* q = a.q + (t * a.n_heads + h) * dim;
      auto row = [&](int32_t p) {
        const size_t block = static_cast<size_t>(seq.block_table[p / bs]);
        return ((block * kv.n_kv_heads + g) * bs + p % bs) * dim;
      };
      scores.assign(pos + 1, 0.0);
      double mx = -INFINITY;
      for (int32_t p = 0; p <= pos; ++p) {
        const size_t base = row(p);
        double s = 0;
        for (int d = 0; d < dim; ++d) s += static_cast<double>(q[d]) * kv_value(kv, kv.k, base + d);
        scores[p] = s * a.scale;
        mx = std::max(mx, scores[p]);
      }
      double sum = 0;
      for (double& s : scores) {
        s = std::exp(s - mx);
        sum += s;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int32_t p = 0; p <= pos; ++p) {
        const size_t base = row(p);
        for (int d = 0; d < dim; ++d) acc[d] += scores[p] * kv_value(kv, kv.v, base + d);
      }
      float* out = a.out + (t * a.n_heads + h) * dim;
      for (int d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d] / sum);
    }
  }
}

}  // namespace kvasir::cpu
