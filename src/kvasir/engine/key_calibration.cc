#include "kvasir/engine/key_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kvasir/engine/model_runner.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

// One RoPE pair of a head: channels a and b, turned by p * theta at position p.
struct Pair {
  int a, b;
  double theta;
};

std::vector<Pair> rope_pairs(const Model& model) {
  const ModelConfig& c = model.config();
  const std::vector<float>& inv_freq = model.rope_inv_freqs();
  std::vector<Pair> pairs;
  const int half = c.rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const int a = c.rope_neox ? i : 2 * i;
    const int b = c.rope_neox ? i + half : 2 * i + 1;
    pairs.push_back({a, b, static_cast<double>(inv_freq[static_cast<size_t>(i)])});
  }
  return pairs;
}

}  // namespace

std::shared_ptr<const KeyTransform> calibrate_key_transform(const Model& model, ThreadPool& pool,
                                                            KVDType k,
                                                            std::span<const int32_t> tokens,
                                                            int32_t bos, std::string source) {
  const KeyTransformKind kind = key_transform_kind(k);
  if (kind == KeyTransformKind::kNone) return nullptr;
  if (tokens.empty()) fail("key calibration ({}): no tokens", source);
  const ModelConfig& c = model.config();
  const int L = c.n_layers;
  const int G = c.n_kv_heads;
  const int D = c.head_dim;
  const size_t stride = static_cast<size_t>(G) * static_cast<size_t>(D);
  const int chunk = std::max(2, std::min(kChunkTokens, c.ctx_train));
  const int text_per_chunk = bos >= 0 ? chunk - 1 : chunk;

  // The post-RoPE keys of every calibration token, read back from an f32 cache.
  constexpr int kBlock = 16;
  ModelRunnerOptions ro;
  ro.kv_blocks = (chunk + kBlock - 1) / kBlock;
  ro.block_size = kBlock;
  ro.kv_type = {KVDType::F32, KVDType::F32};
  ro.max_tokens = chunk;
  ro.max_logit_rows = 1;
  ModelRunner runner(model, pool, ro);
  std::vector<int32_t> table(static_cast<size_t>(ro.kv_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<std::vector<float>> keys(static_cast<size_t>(L));  // [layer][token][head][channel]
  std::vector<int32_t> token_pos;
  std::vector<int32_t> ids;
  for (size_t off = 0; off < tokens.size(); off += static_cast<size_t>(text_per_chunk)) {
    const size_t n_text = std::min(tokens.size() - off, static_cast<size_t>(text_per_chunk));
    ids.clear();
    if (bos >= 0) ids.push_back(bos);
    ids.insert(ids.end(), tokens.begin() + static_cast<std::ptrdiff_t>(off),
               tokens.begin() + static_cast<std::ptrdiff_t>(off + n_text));
    SeqWork w;
    w.id = 1;
    w.tokens = ids;
    w.start = 0;
    w.blocks = &table;
    w.logits = Logits::kNone;
    runner.run({&w, 1});
    const int n = static_cast<int>(ids.size());
    for (int l = 0; l < L; ++l) {
      const PagedKVLayer kl = runner.kv().layer(l);
      const auto* base = static_cast<const float*>(kl.k);
      std::vector<float>& out = keys[static_cast<size_t>(l)];
      for (int p = 0; p < n; ++p)
        for (int g = 0; g < G; ++g) {
          const float* row = base + ((static_cast<size_t>(p / kBlock) * G + g) * kBlock +
                                     static_cast<size_t>(p % kBlock)) *
                                        static_cast<size_t>(D);
          out.insert(out.end(), row, row + D);
        }
    }
    for (int p = 0; p < n; ++p) token_pos.push_back(p);
  }
  const size_t T = token_pos.size();

  // mu: the mean key before RoPE. The kTurnPairs RoPE pairs of a head with the largest |mu| get a
  // turning shift (mu turned by p * theta); channels RoPE leaves alone get the constant mu; the
  // other pairs no shift.
  const std::vector<Pair> pairs = rope_pairs(model);
  const int n_turn = std::min(kTurnPairs, static_cast<int>(pairs.size()));
  auto t = std::make_shared<KeyTransform>();
  t->n_layers = L;
  t->n_kv_heads = G;
  t->head_dim = D;
  t->shift.resize(stride * static_cast<size_t>(L));
  t->turn_pairs = n_turn;
  t->turn.resize(static_cast<size_t>(n_turn) * G * L);
  if (kind == KeyTransformKind::kShiftAndScale) t->scale.resize(t->shift.size());
  t->source = source + ", " + std::to_string(T) + " tokens";
  std::vector<double> mu(stride);
  std::vector<double> pre(static_cast<size_t>(D));
  std::vector<double> r(static_cast<size_t>(D));
  std::vector<size_t> order(pairs.size());
  for (int l = 0; l < L; ++l) {
    const std::vector<float>& kl = keys[static_cast<size_t>(l)];
    std::fill(mu.begin(), mu.end(), 0.0);
    for (size_t tok = 0; tok < T; ++tok) {
      const double pos = token_pos[tok];
      for (int g = 0; g < G; ++g) {
        const float* k_row = kl.data() + (tok * G + static_cast<size_t>(g)) * D;
        std::copy(k_row, k_row + D, pre.begin());
        for (const Pair& pr : pairs) {  // undo the turn: R(-p theta) on the pair
          const double a = pos * pr.theta, x = k_row[pr.a], y = k_row[pr.b];
          pre[pr.a] = x * std::cos(a) + y * std::sin(a);
          pre[pr.b] = -x * std::sin(a) + y * std::cos(a);
        }
        double* u = mu.data() + static_cast<size_t>(g) * D;
        for (int d = 0; d < D; ++d) u[d] += pre[d];
      }
    }
    float* m = t->shift.data() + stride * static_cast<size_t>(l);
    for (size_t i = 0; i < stride; ++i) mu[i] /= static_cast<double>(T);
    for (int g = 0; g < G; ++g) {
      const double* u = mu.data() + static_cast<size_t>(g) * D;
      float* mg = m + static_cast<size_t>(g) * D;
      for (int d = 0; d < D; ++d) mg[d] = static_cast<float>(u[d]);
      for (const Pair& pr : pairs) mg[pr.a] = mg[pr.b] = 0.0f;
      std::iota(order.begin(), order.end(), size_t{0});
      auto norm = [&](size_t i) {
        return u[pairs[i].a] * u[pairs[i].a] + u[pairs[i].b] * u[pairs[i].b];
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t x, size_t y) { return norm(x) > norm(y); });
      KeyTurn* tg = t->turn.data() + (static_cast<size_t>(l) * G + g) * n_turn;
      for (int i = 0; i < n_turn; ++i) {
        const Pair& pr = pairs[order[static_cast<size_t>(i)]];
        tg[i] = {pr.a, pr.b, pr.theta, static_cast<float>(u[pr.a]), static_cast<float>(u[pr.b])};
      }
    }
    if (kind != KeyTransformKind::kShiftAndScale) continue;
    // s: each channel's largest |k - m|, to the power alpha, over the head's geometric mean.
    float* s = t->scale.data() + stride * static_cast<size_t>(l);
    for (int g = 0; g < G; ++g) {
      const float* mg = m + static_cast<size_t>(g) * D;
      const KeyTurn* tg = t->turn.data() + (static_cast<size_t>(l) * G + g) * n_turn;
      std::fill(r.begin(), r.end(), 0.0);
      for (size_t tok = 0; tok < T; ++tok) {
        const float* k_row = kl.data() + (tok * G + static_cast<size_t>(g)) * D;
        for (int d = 0; d < D; ++d) pre[d] = double{k_row[d]} - mg[d];
        for (int i = 0; i < n_turn; ++i) {  // the turning shift at the token's position
          const double a = token_pos[tok] * tg[i].theta, c = std::cos(a), sn = std::sin(a);
          pre[tg[i].a] -= tg[i].mu_a * c - tg[i].mu_b * sn;
          pre[tg[i].b] -= tg[i].mu_a * sn + tg[i].mu_b * c;
        }
        for (int d = 0; d < D; ++d) r[d] = std::max(r[d], std::fabs(pre[d]));
      }
      const double top = *std::max_element(r.begin(), r.end());
      float* sg = s + static_cast<size_t>(g) * D;
      if (!(top > 0.0) || !std::isfinite(top)) {  // a head whose keys never vary: no scaling
        std::fill(sg, sg + D, 1.0f);
        continue;
      }
      double log_sum = 0;
      for (int d = 0; d < D; ++d) {
        // A channel that never moved keeps a small scale rather than 0 (s must be > 0).
        r[d] = std::pow(std::max(r[d], top * 1e-6), kScaleAlpha);
        log_sum += std::log(r[d]);
      }
      const double gm = std::exp(log_sum / D);
      for (int d = 0; d < D; ++d) sg[d] = static_cast<float>(r[d] / gm);
    }
  }
  t->validate();
  return t;
}

std::shared_ptr<const KeyTransform> calibrate_key_transform(const Model& model, ThreadPool& pool,
                                                            KVDType k) {
  if (key_transform_kind(k) == KeyTransformKind::kNone) return nullptr;
  const Tokenizer tok = Tokenizer::from_gguf(model.file());
  const std::vector<TokenId> ids = tok.encode(key_calibration_text(), false, false);
  const int32_t bos = tok.add_bos() ? tok.bos_id() : -1;
  return calibrate_key_transform(model, pool, k, ids, bos, "the built-in calibration text");
}

}  // namespace kvasir
