// attention_reference(): the naive definition, for tests (contract in attention.h).
// Materialises all scores of a query, softmax and weighted sum in double precision, over the
// values kv_dequantize_row gives for the cached rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kvasir/kernels/cpu/attention.h"
#include "kvasir/util/error.h"

namespace kvasir::cpu {

namespace {
// Row `offset` of tile `tile` (block x KV head) of K or V, dequantized by the reference.
std::vector<float> kv_row(const PagedKVLayer& kv, KVDType t, const void* base, size_t tile,
                          int offset) {
  const KVRowLayout L = kv_row_layout(t, kv.head_dim);
  const auto* p = static_cast<const uint8_t*>(base) + tile * kv.tile_bytes(t);
  std::vector<float> out(static_cast<size_t>(kv.head_dim));
  kv_dequantize_row(t, p + static_cast<size_t>(offset) * L.code_bytes,
                    p + static_cast<size_t>(kv.block_size) * L.code_bytes +
                        static_cast<size_t>(offset) * L.meta_bytes,
                    kv.head_dim, out.data());
  return out;
}
}  // namespace

void attention_reference(const PagedKVLayer& kv, const AttentionArgs& a) {
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
      std::vector<float> q(a.q + (t * a.n_heads + h) * dim, a.q + (t * a.n_heads + h + 1) * dim);
      const std::vector<float> q0 = q;  // the query as given, for the turning shift's term
      if (kv.k_scale)  // keys are stored divided by the transform's scale (kv/key_transform.h)
        for (int d = 0; d < dim; ++d) q[d] *= kv.k_scale[g * dim + d];
      if (kv_rotates_keys(kv.k_type)) kv_rotate_key(q.data(), dim);  // keys are stored rotated
      auto tile = [&](int32_t p) {
        return static_cast<size_t>(seq.block_table[p / bs]) * kv.n_kv_heads + g;
      };
      scores.assign(pos + 1, 0.0);
      double mx = -INFINITY;
      for (int32_t p = 0; p <= pos; ++p) {
        const std::vector<float> k = kv_row(kv, kv.k_type, kv.k, tile(p), p % bs);
        double s = 0;
        for (int d = 0; d < dim; ++d) s += static_cast<double>(q[d]) * k[d];
        if (kv.k_turn) {  // the keys' turning shift, given back: q . turn(p) (kv/key_transform.h)
          const KeyTurnPair* tp = kv.k_turn + static_cast<size_t>(g) * kv.k_turn_pairs;
          for (int i = 0; i < kv.k_turn_pairs; ++i) {
            const double c = tp[i].cos[p], sn = tp[i].sin[p];
            s += q0[tp[i].a] * (tp[i].mu_a * c - tp[i].mu_b * sn) +
                 q0[tp[i].b] * (tp[i].mu_a * sn + tp[i].mu_b * c);
          }
        }
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
        const std::vector<float> v = kv_row(kv, kv.v_type, kv.v, tile(p), p % bs);
        for (int d = 0; d < dim; ++d) acc[d] += scores[p] * v[d];
      }
      float* out = a.out + (t * a.n_heads + h) * dim;
      for (int d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d] / sum);
    }
  }
}

}  // namespace kvasir::cpu
