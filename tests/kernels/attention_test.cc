// Tests for the paged flash attention kernel and kv_write (src/kvasir/kernels/cpu/attention.h).
//
// Accuracy: attention() is compared with attention_reference() (scores, softmax and weighted sum
// in double over the same f16/f32 cache contents). q, K, V are uniform in [-1, 1] (q in [-2, 2]).
// The kernel's error sources, all float: the score (a D-term fused multiply-add chain), exp
// (Highway, <= 1 ulp), the running sums over n keys and the rescales. Rounding errors of such sums
// grow like sqrt(n) * 2^-24 * (sum of |terms|); with weights summing to 1 and |v| <= 1 this is
// ~3e-6 at n = 2000 (observed: at most 3.3e-7 over all tests, D up to 128). kTol = 5e-6 leaves
// >10x headroom, while a mask wrong by one key changes an output by ~|v - out| / n (~1e-4 at
// n = 2000, far more for the short sequences every test includes), and a wrong head, block or
// scale is off by O(0.1). (Checked: masking the diagonal key fails 10 tests.)
//
// Batch invariance is tested bitwise (memcmp): batch vs each query alone, one call vs chunked
// prefill, and 1 vs 2 vs 3 threads.
#include "kvasir/kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "kvasir/kv/key_transform.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/kv_quant.h"
#include "kvasir/util/error.h"

namespace kvasir::cpu {
namespace {

constexpr float kTol = 5e-6f;

constexpr KVCacheType kF16{KVDType::F16, KVDType::F16};
constexpr KVCacheType kF32{KVDType::F32, KVDType::F32};
constexpr KVCacheType kInt8{KVDType::Int8, KVDType::Int8};
constexpr KVCacheType kE4M3{KVDType::FP8E4M3, KVDType::FP8E4M3};
constexpr KVCacheType kE5M2{KVDType::FP8E5M2, KVDType::FP8E5M2};
constexpr KVCacheType kInt4{KVDType::Int4, KVDType::Int4};

// "h8_kv2_d64_k_int8_v_int4": a test name from a shape.
std::string shape_name(int h, int kv, int d, const KVCacheType& t) {
  std::string n = fmt::format("h{}_kv{}_d{}_{}", h, kv, d, t.name());
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// A paged KV layer with random non-contiguous block tables and random K/V for every position of
// every sequence, written through kv_write().
// The turning part of a key transform for a World (kernels/views.h): per KV head, `pairs` terms
// (RoPE pair channels, angle per position, mean before RoPE); with `offset_keys` every key at
// position p also gets that mean turned by p * theta added (keys whose mean turns with RoPE);
// without `store` the cache stores the keys as they are (no transform).
struct TurnSpec {
  int pairs = 0;
  std::vector<KeyTurn> terms;  // [kv head][pair]
  bool offset_keys = true;
  bool store = true;
};

struct World {
  int n_heads, n_kv_heads, head_dim, block_size;
  KVCacheType type;
  std::vector<int> seq_len;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer layer;
  // q for every (seq, position): q_of[s][pos * n_heads * head_dim ...]
  std::vector<std::vector<float>> q_of;
  // K/V rows for every (seq, position), n_kv_heads * head_dim each (to rewrite a fresh cache)
  std::vector<std::vector<float>> k_of, v_of;
  std::vector<float> turn_table;  // per term: cos then sin over n_pos + 8 positions
  std::vector<KeyTurnPair> turn_pairs;

  // key_offset (n_kv_heads * head_dim, optional) is added to every key (RoPE'd keys have large
  // per-channel means); k_shift / k_scale (optional) are the layer's key transform.
  World(int n_heads_, int n_kv_heads_, int head_dim_, KVCacheType type_, std::vector<int> lens,
        uint32_t seed, int block_size_ = 16, const std::vector<float>* key_offset = nullptr,
        const float* k_shift = nullptr, const float* k_scale = nullptr,
        const TurnSpec* turn = nullptr)
      : n_heads(n_heads_),
        n_kv_heads(n_kv_heads_),
        head_dim(head_dim_),
        block_size(block_size_),
        type(type_),
        seq_len(std::move(lens)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int64_t n_blocks = 3;  // a few spare blocks that no sequence uses
    for (int len : seq_len) n_blocks += (len + block_size - 1) / block_size;
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (int len : seq_len) {
      tables.emplace_back(ids.begin() + next,
                          ids.begin() + next + (len + block_size - 1) / block_size);
      next += tables.back().size();
    }
    for (auto& t : tables) seqs.push_back({t.data(), static_cast<int32_t>(t.size())});

    layer = {type.k, type.v, block_size, n_kv_heads, head_dim, n_blocks, nullptr, nullptr};
    const size_t tiles = static_cast<size_t>(n_blocks) * n_kv_heads;
    // Fill unused slots with NaN bit patterns (a NaN fp16 scale for the quantized dtypes): the
    // kernel must never let them leak.
    kbuf.assign(tiles * layer.k_tile_bytes(), 0xff);
    vbuf.assign(tiles * layer.v_tile_bytes(), 0xff);
    layer.k = kbuf.data();
    layer.v = vbuf.data();
    layer.k_shift = k_shift;
    layer.k_scale = k_scale;
    const int64_t n_pos = n_blocks * block_size;
    const size_t trow = static_cast<size_t>(n_pos) + 8;
    if (turn) {
      turn_table.assign(2 * trow * turn->terms.size(), 0.0f);
      for (size_t i = 0; i < turn->terms.size(); ++i) {
        const KeyTurn& t = turn->terms[i];
        float* c = turn_table.data() + 2 * trow * i;
        for (int64_t p = 0; p < n_pos; ++p) {
          c[p] = static_cast<float>(std::cos(static_cast<double>(p) * t.theta));
          c[trow + static_cast<size_t>(p)] =
              static_cast<float>(std::sin(static_cast<double>(p) * t.theta));
        }
        turn_pairs.push_back({t.a, t.b, t.mu_a, t.mu_b, c, c + trow});
      }
      if (turn->store) {
        layer.k_turn = turn_pairs.data();
        layer.k_turn_pairs = turn->pairs;
        layer.k_turn_positions = n_pos;
      }
    }

    const int qrow = n_heads * head_dim, kvrow = n_kv_heads * head_dim;
    for (size_t s = 0; s < seq_len.size(); ++s) {
      const int len = seq_len[s];
      q_of.emplace_back(static_cast<size_t>(len) * qrow);
      for (float& x : q_of.back()) x = 2.0f * u(rng);
      k_of.emplace_back(static_cast<size_t>(len) * kvrow);
      v_of.emplace_back(static_cast<size_t>(len) * kvrow);
      for (float& x : k_of.back()) x = u(rng);
      if (key_offset)
        for (size_t i = 0; i < k_of.back().size(); ++i)
          k_of.back()[i] += (*key_offset)[i % static_cast<size_t>(kvrow)];
      if (turn && turn->offset_keys)
        for (int p = 0; p < len; ++p)
          for (int g = 0; g < n_kv_heads; ++g)
            for (int i = 0; i < turn->pairs; ++i) {
              const KeyTurnPair& t = turn_pairs[static_cast<size_t>(g * turn->pairs + i)];
              float* k = k_of.back().data() + static_cast<size_t>(p) * kvrow +
                         static_cast<size_t>(g) * head_dim;
              k[t.a] += t.mu_a * t.cos[p] - t.mu_b * t.sin[p];
              k[t.b] += t.mu_a * t.sin[p] + t.mu_b * t.cos[p];
            }
      for (float& x : v_of.back()) x = u(rng);
      write(layer, static_cast<int>(s), 0, len);
    }
  }

  int32_t slot(int s, int pos) const {
    return tables[s][pos / block_size] * block_size + pos % block_size;
  }

  // Writes K/V of positions [p0, p1) of sequence s into `l`.
  void write(const PagedKVLayer& l, int s, int p0, int p1) const {
    std::vector<int32_t> slots, positions;
    for (int p = p0; p < p1; ++p) {
      slots.push_back(slot(s, p));
      positions.push_back(p);
    }
    const size_t kvrow = static_cast<size_t>(n_kv_heads) * head_dim;
    kv_write(l, k_of[s].data() + p0 * kvrow, v_of[s].data() + p0 * kvrow, slots.data(),
             positions.data(), p1 - p0);
  }

  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
};

// A turning shift on `pairs` RoPE pairs per head (normal RoPE: channels 2i, 2i + 1, angle
// 10000^(-2i/d) per position), the slowest pairs first, means of ~4..6 (stories260K's largest key
// means sit in its slow pairs, up to ~4).
TurnSpec turn_spec(int n_kv_heads, int head_dim, int pairs) {
  TurnSpec t;
  t.pairs = pairs;
  for (int g = 0; g < n_kv_heads; ++g)
    for (int i = 0; i < pairs; ++i) {
      const int pair = head_dim / 2 - 1 - 2 * i;  // every other pair from the slowest
      const double theta = std::pow(10000.0, -2.0 * pair / head_dim);
      t.terms.push_back({2 * pair, 2 * pair + 1, theta, 4.0f + static_cast<float>(g + i) * 0.5f,
                         -5.0f + static_cast<float>(i)});
    }
  return t;
}

// The same keys as `t` gives, stored as they are (no transform).
TurnSpec stored_as_they_are(TurnSpec t) {
  t.store = false;
  return t;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return e;
}

// A batch of query tokens (seq, pos).
struct Batch {
  std::vector<float> q, out;
  std::vector<int32_t> pos, seq;
  AttentionArgs args;

  Batch(const World& w, const std::vector<std::pair<int, int>>& tokens) {
    const size_t qrow = static_cast<size_t>(w.n_heads) * w.head_dim;
    for (auto [s, p] : tokens) {
      seq.push_back(s);
      pos.push_back(p);
      q.insert(q.end(), w.q_of[s].begin() + p * qrow, w.q_of[s].begin() + (p + 1) * qrow);
    }
    out.assign(q.size(), -12345.0f);
    args.q = q.data();
    args.n_tokens = static_cast<int64_t>(tokens.size());
    args.n_heads = w.n_heads;
    args.positions = pos.data();
    args.seq_index = seq.data();
    args.seqs = w.seqs.data();
    args.n_seqs = static_cast<int32_t>(w.seqs.size());
    args.scale = w.scale();
    args.out = out.data();
  }
};

std::vector<std::pair<int, int>> prefill_tokens(const World& w) {
  std::vector<std::pair<int, int>> t;
  for (size_t s = 0; s < w.seq_len.size(); ++s) {
    for (int p = 0; p < w.seq_len[s]; ++p) t.emplace_back(static_cast<int>(s), p);
  }
  return t;
}

std::vector<std::pair<int, int>> decode_tokens(const World& w) {
  std::vector<std::pair<int, int>> t;
  for (size_t s = 0; s < w.seq_len.size(); ++s)
    t.emplace_back(static_cast<int>(s), w.seq_len[s] - 1);
  return t;
}

// Runs attention and the reference on the same tokens; returns the max abs difference.
float max_error(const World& w, const std::vector<std::pair<int, int>>& tokens, ThreadPool& pool) {
  Batch b(w, tokens), r(w, tokens);
  attention(w.layer, b.args, pool);
  attention_reference(w.layer, r.args);
  float err = 0;
  for (size_t i = 0; i < b.out.size(); ++i) {
    EXPECT_TRUE(std::isfinite(b.out[i])) << "at " << i;
    err = std::max(err, std::abs(b.out[i] - r.out[i]));
  }
  return err;
}

struct Shape {
  int n_heads, n_kv_heads, head_dim;
  KVCacheType type;
};

class AttentionVsReference : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionVsReference, PrefillSeveralSequences) {
  const Shape sh = GetParam();
  // Lengths cross block boundaries (15/16/17, 33) and include a single-token sequence.
  World w(sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.type, {1, 17, 5, 33, 16, 70}, 1);
  ThreadPool pool(2);
  EXPECT_LT(max_error(w, prefill_tokens(w), pool), kTol);
}

TEST_P(AttentionVsReference, DecodeOneQueryPerSequence) {
  const Shape sh = GetParam();
  World w(sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.type, {1, 2, 15, 16, 17, 31, 32, 33, 100}, 2);
  ThreadPool pool(2);
  EXPECT_LT(max_error(w, decode_tokens(w), pool), kTol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionVsReference,
    ::testing::Values(Shape{8, 2, 64, kF16}, Shape{8, 2, 64, kF32},   // GQA
                      Shape{4, 1, 32, kF16}, Shape{4, 1, 128, kF32},  // MQA
                      Shape{8, 2, 128, kF16}, Shape{2, 2, 32, kF32},  // MHA
                      Shape{6, 3, 36, kF16}, Shape{3, 1, 20, kF32},   // odd dims
                      // quantized caches: the reference reads the same dequantized values
                      Shape{8, 2, 64, kInt8}, Shape{4, 1, 32, kE4M3}, Shape{8, 2, 128, kE5M2},
                      Shape{8, 2, 64, kInt4}, Shape{6, 3, 36, kInt4}, Shape{3, 1, 20, kInt8},
                      Shape{2, 2, 32, kE4M3}, Shape{8, 4, 8, kInt4},  // stories260K's head
                      Shape{8, 4, 8, kInt8}, Shape{4, 2, 80, kInt4},
                      Shape{8, 2, 64, {KVDType::Int8, KVDType::Int4}},  // K and V differ
                      Shape{4, 4, 32, {KVDType::F16, KVDType::FP8E4M3}},
                      Shape{4, 4, 32, {KVDType::F32, KVDType::F16}}),
    [](const ::testing::TestParamInfo<Shape>& i) {
      return shape_name(i.param.n_heads, i.param.n_kv_heads, i.param.head_dim, i.param.type);
    });

TEST(Attention, LongContext2000) {
  for (KVCacheType type : {kF16, kF32, kInt8, kE4M3, kInt4}) {
    World w(8, 2, 64, type, {2000}, 3);
    ThreadPool pool(2);
    // The decode query and a prefill chunk at the end of the prompt.
    std::vector<std::pair<int, int>> tokens;
    for (int p = 1985; p < 2000; ++p) tokens.emplace_back(0, p);
    const float err = max_error(w, tokens, pool);
    EXPECT_LT(err, kTol) << type.name();
  }
}

TEST(Attention, OtherBlockSizes) {
  // Block sizes that are not a multiple of 8 exercise the 4- and 1-key score paths.
  for (int bs : {1, 5, 8, 32}) {
    World w(8, 2, 64, kF16, {1, 9, 40}, 4, bs);
    ThreadPool pool(2);
    EXPECT_LT(max_error(w, prefill_tokens(w), pool), kTol) << "block_size " << bs;
  }
}

TEST(Attention, EverySimdTargetMatchesReference) {
  ThreadPool pool(2);
  for_each_target([&] {
    World w(8, 2, 64, kF16, {3, 17, 50}, 5);
    EXPECT_LT(max_error(w, prefill_tokens(w), pool), kTol);
    World m(3, 1, 36, kF32, {1, 33}, 6);
    EXPECT_LT(max_error(m, prefill_tokens(m), pool), kTol);
    for (KVCacheType t : {kInt8, kE4M3, kE5M2, kInt4}) {
      World q(8, 2, 64, t, {3, 17, 50}, 5);
      EXPECT_LT(max_error(q, prefill_tokens(q), pool), kTol) << t.name();
      World r(3, 1, 36, t, {1, 33}, 6);  // a ragged head: whole-row dequantization
      EXPECT_LT(max_error(r, prefill_tokens(r), pool), kTol) << t.name();
    }
  });
}

TEST(Attention, Avx3GivesAvx2sBits) {
  // The AVX3 target holds two 8-lane vectors in one zmm (the scores of keys j and j + 4, output
  // chunks c and c + 1); every lane performs AVX2's operations in AVX2's order, so the outputs
  // are the same bits: prefill (the f32 tile shared by rows) and decode (f16/f32 read in place),
  // every KV dtype, head sizes of 1, 4.5, 8 and 16 chunks.
  const int64_t have = hwy::SupportedTargets();
  if ((have & HWY_AVX3) == 0 || (have & HWY_AVX2) == 0) {
    GTEST_SKIP() << "no AVX-512 here: the AVX3 attention paths are compiled but not run";
  }
  ThreadPool pool(2);
  for (KVCacheType t : {kF16, kF32, kInt8, kE4M3, kInt4}) {
    for (int dim : {8, 36, 64, 128}) {
      const std::vector<float> zero(static_cast<size_t>(2) * dim, 0.0f);
      const TurnSpec turn = turn_spec(2, dim, std::min(4, dim / 4));
      const bool turns = kv_dtype_is_quantized(t.k);  // the turning shift: quantized keys only
      World w(8, 2, dim, t, {1, 17, 70}, 50 + dim, 16, nullptr, turns ? zero.data() : nullptr,
              nullptr, turns ? &turn : nullptr);
      for (bool decode : {false, true}) {
        const auto tokens = decode ? decode_tokens(w) : prefill_tokens(w);
        Batch a(w, tokens), b(w, tokens);
        hwy::SetSupportedTargetsForTest(HWY_AVX3);
        attention(w.layer, a.args, pool);
        hwy::SetSupportedTargetsForTest(HWY_AVX2);
        attention(w.layer, b.args, pool);
        hwy::SetSupportedTargetsForTest(0);
        EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 4), 0)
            << t.name() << " dim " << dim << (decode ? " decode" : " prefill");
      }
    }
  }
}

TEST(Attention, QuantizedValuesReadBackExactlyAsTheReferenceDequantizer) {
  // Position 0 sees key 0 alone: out = 1 * V_0 / 1, so the kernel's output is its dequantized V
  // row itself, which must be kv_dequantize_row's bit for bit (the SIMD readers are exact
  // rewrites of code x scale), on every target. K goes through the same reader. Head sizes: the
  // vector readers (16, 48, 64, 128: int4 groups of 16 and 32, and a 32 + 16 tail), ragged ones
  // (8, 36); int4 also with V far from 0 in its first 32 channels (whole-step groups).
  ThreadPool pool(1);
  struct Case {
    KVCacheType t;
    float v_offset;
  };
  for_each_target([&] {
    for (Case c : {Case{kInt8, 0}, Case{kE4M3, 0}, Case{kE5M2, 0}, Case{kInt4, 0},
                   Case{kInt4, 40.0f}, Case{KVCacheType{KVDType::Int8, KVDType::FP8E4M3}, 0}}) {
      const KVCacheType t = c.t;
      for (int dim : {8, 16, 36, 48, 64, 128}) {
        World w(4, 2, dim, t, {3}, 30 + dim);
        if (c.v_offset != 0.0f) {
          for (size_t i = 0; i < w.v_of[0].size(); ++i)
            if (static_cast<int>(i % static_cast<size_t>(dim)) < 32) w.v_of[0][i] += c.v_offset;
          w.write(w.layer, 0, 0, 3);
        }
        Batch b(w, {{0, 0}});
        attention(w.layer, b.args, pool);
        const KVRowLayout L = kv_row_layout(t.v, dim);
        bool whole_step = false;
        for (int g = 0; g < 2; ++g) {
          const size_t tile = static_cast<size_t>(w.tables[0][0]) * 2 + g;
          const uint8_t* base = w.vbuf.data() + tile * w.layer.v_tile_bytes();
          const uint8_t* meta = base + w.block_size * L.code_bytes;
          if (t.v == KVDType::Int4) whole_step |= (meta[1] & 0x80) != 0;  // group 0's flag
          std::vector<float> want(dim);
          kv_dequantize_row(t.v, base, meta, dim, want.data());
          for (int h = 2 * g; h < 2 * g + 2; ++h)
            for (int d = 0; d < dim; ++d)
              ASSERT_EQ(b.out[h * dim + d], want[d]) << t.name() << " dim " << dim << " d " << d;
        }
        EXPECT_EQ(whole_step, c.v_offset != 0.0f) << t.name() << " dim " << dim;
      }
    }
  });
}

TEST(Attention, QuantizedCacheStaysCloseToF32) {
  // The same K/V stored in f32 and in each quantized dtype; the outputs differ by what the
  // quantization of K (through the scores) and V does. Bounds: |v| <= 1, |q| <= 2, D = 64, scale
  // 1/8. int8: per-value error <= amax/254 ~ 0.004, so a score moves by <= 0.125 * 64 * 2 *
  // 0.004 = 0.06 at worst (random signs: ~0.01), softmax weights by ~1%, the output by ~0.01;
  // fp8 e4m3 has 3 mantissa bits (relative error 1/16), e5m2 2 bits (1/8), int4 steps of
  // 2/15 (error <= 0.13). Observed maxima (seed 40): int8 3.9e-3, e4m3 3.5e-2, e5m2 7.1e-2,
  // int4 6.6e-2; the bounds below leave ~3x. A wrong scale or code would be off by O(1).
  ThreadPool pool(2);
  World f(8, 2, 64, kF32, {1, 40, 300}, 40);
  Batch want(f, decode_tokens(f));
  attention(f.layer, want.args, pool);
  const std::pair<KVCacheType, float> cases[] = {
      {kInt8, 0.012f}, {kE4M3, 0.1f}, {kE5M2, 0.2f}, {kInt4, 0.2f}};
  for (const auto& [t, bound] : cases) {
    World q(8, 2, 64, t, {1, 40, 300}, 40);  // same seed: same q, K and V
    Batch got(q, decode_tokens(q));
    attention(q.layer, got.args, pool);
    float err = 0;
    for (size_t i = 0; i < got.out.size(); ++i)
      err = std::max(err, std::abs(got.out[i] - want.out[i]));
    EXPECT_LT(err, bound) << t.name();
    EXPECT_GT(err, 0.0f) << t.name() << ": quantization had no effect";
    std::printf("[ info ] %s: max |out - f32 out| = %.3g\n", t.name().c_str(), err);
  }
}

// Keys with large per-channel means, as RoPE'd keys have: channel c of KV head g is offset by
// 6 * sin(1 + c + 7 g) (|offset| <= 6 against the keys' own spread of 1).
std::vector<float> key_offsets(int n_kv_heads, int head_dim) {
  std::vector<float> o(static_cast<size_t>(n_kv_heads) * head_dim);
  for (size_t i = 0; i < o.size(); ++i)
    o[i] = 6.0f * std::sin(1.0f + static_cast<float>(i % head_dim) +
                           7.0f * static_cast<float>(i / head_dim));
  return o;
}

TEST(Attention, KeyTransformLeavesTheOutputUnchanged) {
  // An f32 cache stores (k - m) / s and reads q * s: q.k moves by the same q.m for every key of a
  // query, which softmax ignores, so the output is the untransformed cache's up to float
  // rounding (scores are sums of 64 products of magnitude <= 2 * 7 / 8: a few ulps of ~10, ~1e-5
  // on softmax weights; observed ~1e-6). A shift applied on one side only (or a scale on q only)
  // moves scores by O(1) and fails it.
  ThreadPool pool(2);
  const int kv = 2, d = 64;
  const std::vector<float> off = key_offsets(kv, d);
  std::vector<float> shift(off.size()), scale(off.size());
  for (size_t i = 0; i < off.size(); ++i) {
    shift[i] = 0.9f * off[i] + 0.1f;  // not the exact mean: any constant must do
    scale[i] = 0.5f + static_cast<float>(i % 5) * 0.3f;
  }
  World plain(8, kv, d, kF32, {1, 40, 300}, 41, 16, &off);
  for (const float* sc :
       {static_cast<const float*>(nullptr), static_cast<const float*>(scale.data())}) {
    World t(8, kv, d, kF32, {1, 40, 300}, 41, 16, &off, shift.data(), sc);
    const char* what = sc ? "shift and scale" : "shift";
    for (const auto& tokens : {decode_tokens(t), prefill_tokens(t)}) {
      Batch want(plain, tokens), got(t, tokens), ref(t, tokens);
      attention(plain.layer, want.args, pool);
      attention(t.layer, got.args, pool);
      attention_reference(t.layer, ref.args);
      float err = 0, ref_err = 0;
      for (size_t i = 0; i < got.out.size(); ++i) {
        err = std::max(err, std::abs(got.out[i] - want.out[i]));
        ref_err = std::max(ref_err, std::abs(got.out[i] - ref.out[i]));
      }
      EXPECT_LT(err, 2e-5f) << what;
      EXPECT_LT(ref_err, kTol) << what << ": kernel vs reference";
    }
  }
}

TEST(Attention, KeyTransformTakesTheMeanOutOfQuantizedKeys) {
  // With keys offset by up to 6 per channel, one scale per row spends the codes on the offsets;
  // shifting them out (m = the offsets) and evening the channels (s) leaves the step for the
  // keys' own spread. int4 without the transform: step ~ 13/15 of a range ~13, error ~0.4 per
  // value, scores off by ~1 (observed max output error ~0.5); with it: step ~2/15, as for
  // centred keys (the int4 bound of QuantizedCacheStaysCloseToF32, 0.2). int8 and fp8 get the
  // shift alone; their errors shrink with the range too (bounds from that test, x1.5).
  ThreadPool pool(2);
  const int kv = 2, d = 64;
  const std::vector<float> off = key_offsets(kv, d);
  const std::vector<float> ones(off.size(), 1.0f);
  World f(8, kv, d, kF32, {1, 40, 300}, 42, 16, &off);
  Batch want(f, decode_tokens(f));
  attention(f.layer, want.args, pool);
  const std::pair<KVCacheType, float> cases[] = {{kInt8, 0.018f}, {kE4M3, 0.15f}, {kInt4, 0.2f}};
  for (const auto& [type, bound] : cases) {
    auto error = [&](const float* shift, const float* scale) {
      World q(8, kv, d, type, {1, 40, 300}, 42, 16, &off, shift, scale);
      Batch got(q, decode_tokens(q));
      attention(q.layer, got.args, pool);
      float err = 0;
      for (size_t i = 0; i < got.out.size(); ++i)
        err = std::max(err, std::abs(got.out[i] - want.out[i]));
      return err;
    };
    const float raw = error(nullptr, nullptr);
    const float shifted = error(off.data(), type.k == KVDType::Int4 ? ones.data() : nullptr);
    std::printf("[ info ] %s: max |out - f32 out| %.3g without the transform, %.3g with it\n",
                type.name().c_str(), raw, shifted);
    EXPECT_LT(shifted, bound) << type.name();
    EXPECT_LT(shifted, raw) << type.name();
  }
}

TEST(Attention, TurningKeyShiftLeavesTheOutputUnchanged) {
  // An f32 cache stores k - m - turn(p) and gives q . turn(p) back to each score: the scores are
  // q . k up to rounding (terms of magnitude <= 2 * 7: a few ulps of ~10, as in
  // KeyTransformLeavesTheOutputUnchanged; observed ~1e-6), at every position (a sequence of 2000
  // turns the fastest of these pairs many times). Dropping the read-side term moves scores by
  // O(10) and fails it; so does a term with the wrong sign.
  ThreadPool pool(2);
  const int kv = 2, d = 64;
  const std::vector<float> zero(static_cast<size_t>(kv) * d, 0.0f);
  const std::vector<float> ones(zero.size(), 1.0f);
  const TurnSpec turn = turn_spec(kv, d, 4);
  const TurnSpec keys_only = stored_as_they_are(turn);
  World plain(8, kv, d, kF32, {1, 40, 2000}, 43, 16, nullptr, nullptr, nullptr, &keys_only);
  for (const float* sc : {static_cast<const float*>(nullptr), ones.data()}) {
    World t(8, kv, d, kF32, {1, 40, 2000}, 43, 16, nullptr, zero.data(), sc, &turn);
    for (const auto& tokens : {decode_tokens(t), prefill_tokens(t)}) {
      Batch want(plain, tokens), got(t, tokens), ref(t, tokens);
      attention(plain.layer, want.args, pool);
      attention(t.layer, got.args, pool);
      attention_reference(t.layer, ref.args);
      EXPECT_LT(max_abs_diff(got.out, want.out), 2e-5f);
      EXPECT_LT(max_abs_diff(got.out, ref.out), kTol) << "kernel vs reference";
    }
  }
}

TEST(Attention, TurningKeyShiftTakesATurningMeanOutOfQuantizedKeys) {
  // Keys whose mean turns with the position (|mean| ~6 on 4 of 32 pairs): no constant shift can
  // take it out over 2000 positions, the turning one does at every position. V is f32, so the
  // output error is the keys' alone. Observed (Zen 5) as they are / with the shift: int8 0.0017 /
  // 0.00046, fp8 0.0085 / 0.0022, int4 0.031 / 0.0064; the bounds are 2x the shifted figures,
  // and the shift must at least halve the error.
  ThreadPool pool(2);
  const int kv = 2, d = 64;
  const std::vector<float> zero(static_cast<size_t>(kv) * d, 0.0f);
  const std::vector<float> ones(zero.size(), 1.0f);
  const TurnSpec turn = turn_spec(kv, d, 4);
  const TurnSpec keys_only = stored_as_they_are(turn);
  World f(8, kv, d, kF32, {1, 300, 2000}, 44, 16, nullptr, nullptr, nullptr, &keys_only);
  Batch want(f, decode_tokens(f));
  attention(f.layer, want.args, pool);
  const std::pair<KVCacheType, float> cases[] = {{kInt8, 0.001f}, {kE4M3, 0.005f}, {kInt4, 0.013f}};
  for (const auto& [type, bound] : cases) {
    const float* scale = type.k == KVDType::Int4 ? ones.data() : nullptr;
    const KVCacheType k_only{type.k, KVDType::F32};  // V exact: the keys' error alone
    World raw(8, kv, d, k_only, {1, 300, 2000}, 44, 16, nullptr, nullptr, nullptr, &keys_only);
    World shifted(8, kv, d, k_only, {1, 300, 2000}, 44, 16, nullptr, zero.data(), scale, &turn);
    auto error = [&](const World& w) {
      Batch got(w, decode_tokens(w)), ref(w, decode_tokens(w));
      attention(w.layer, got.args, pool);
      attention_reference(w.layer, ref.args);
      EXPECT_LT(max_abs_diff(got.out, ref.out), kTol) << type.name() << ": kernel vs reference";
      return max_abs_diff(got.out, want.out);
    };
    const float e_raw = error(raw), e_shifted = error(shifted);
    std::printf("[ info ] %s: max |out - f32 out| %.3g as they are, %.3g with the turning shift\n",
                type.name().c_str(), e_raw, e_shifted);
    EXPECT_LT(e_shifted, bound) << type.name();
    EXPECT_LT(e_shifted, e_raw / 2) << type.name();
  }
}

TEST(Attention, TurningShiftNeedsPositionsInRange) {
  // kv_write refuses rows without positions, or past the table; attention refuses a query whose
  // blocks reach past it.
  const int kv = 1, d = 16;
  const std::vector<float> zero(static_cast<size_t>(kv) * d, 0.0f);
  const TurnSpec turn = turn_spec(kv, d, 2);
  World w(2, kv, d, kInt8, {20}, 45, 16, nullptr, zero.data(), nullptr, &turn);
  std::vector<float> row(static_cast<size_t>(kv) * d, 0.5f);
  const int32_t slot = 0, far = static_cast<int32_t>(w.layer.k_turn_positions);
  EXPECT_THROW(kv_write(w.layer, row.data(), row.data(), &slot, nullptr, 1), Error);
  EXPECT_THROW(kv_write(w.layer, row.data(), row.data(), &slot, &far, 1), Error);
  PagedKVLayer short_table = w.layer;
  short_table.k_turn_positions = 16;  // the sequence's second block is past it
  Batch b(w, decode_tokens(w));
  ThreadPool pool(1);
  EXPECT_THROW(attention(short_table, b.args, pool), Error);
}

TEST(Attention, ScalarTargetIsReallyDispatched) {
  // Guards for_each_target: the scalar target does not fuse multiply-adds, so its results differ
  // (in the last bits) from the AVX2 ones. Otherwise SetSupportedTargetsForTest did nothing.
  if ((hwy::SupportedTargets() & (HWY_AVX2 | HWY_AVX3)) == 0) GTEST_SKIP() << "no AVX2";
  World w(8, 2, 64, kF32, {40}, 7);
  ThreadPool pool(1);
  Batch a(w, prefill_tokens(w)), b(w, prefill_tokens(w));
  attention(w.layer, a.args, pool);
  hwy::SetSupportedTargetsForTest(HWY_SCALAR);
  attention(w.layer, b.args, pool);
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_NE(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 4), 0);
}

TEST(Attention, CausalFirstTokenSeesOnlyItself) {
  // Position 0 attends to key 0 alone: out = v_0 (up to the f16 storage of V).
  World w(4, 2, 32, kF32, {10}, 8);
  ThreadPool pool(1);
  Batch b(w, {{0, 0}});
  attention(w.layer, b.args, pool);
  for (int h = 0; h < 4; ++h) {
    for (int d = 0; d < 32; ++d) {
      ASSERT_EQ(b.out[h * 32 + d], w.v_of[0][(h / 2) * 32 + d]) << h << " " << d;
    }
  }
}

// ---- batch invariance ----

void expect_rows_equal(const std::vector<float>& a, size_t ai, const std::vector<float>& b,
                       size_t bi, size_t row, const char* what) {
  ASSERT_EQ(std::memcmp(a.data() + ai * row, b.data() + bi * row, row * sizeof(float)), 0)
      << what << ": token " << ai;
}

class AttentionInvariance : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionInvariance, BatchEqualsEachQueryAlone) {
  const Shape sh = GetParam();
  World w(sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.type, {60, 51, 4, 37}, 11);
  // Mixed batch: a prefill, a decode, a prefill chunk continuing earlier tokens, a short prefill,
  // and a second query of sequence 1 far from its first (same sequence, not adjacent).
  std::vector<std::pair<int, int>> tokens;
  for (int p = 0; p < 38; ++p) tokens.emplace_back(0, p);
  tokens.emplace_back(1, 50);
  for (int p = 20; p < 37; ++p) tokens.emplace_back(3, p);
  for (int p = 0; p < 4; ++p) tokens.emplace_back(2, p);
  tokens.emplace_back(1, 7);
  ThreadPool pool(2);
  Batch all(w, tokens);
  attention(w.layer, all.args, pool);
  // The same tokens in reverse order form different chunks.
  std::vector<std::pair<int, int>> rev(tokens.rbegin(), tokens.rend());
  Batch reversed(w, rev);
  attention(w.layer, reversed.args, pool);
  const size_t row = static_cast<size_t>(w.n_heads) * w.head_dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    Batch one(w, {tokens[i]});
    attention(w.layer, one.args, pool);
    expect_rows_equal(all.out, i, one.out, 0, row, "batch vs alone");
    expect_rows_equal(all.out, i, reversed.out, tokens.size() - 1 - i, row, "batch vs reversed");
  }
}

// A decode step of many sequences (work items of all KV heads, walking each block once) gives
// each sequence's row bit for bit what it gets decoded alone (items of one KV head).
TEST_P(AttentionInvariance, ManySequenceDecodeEqualsEachAlone) {
  const Shape sh = GetParam();
  World w(sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.type, {1, 16, 17, 40, 33, 5, 64, 2, 31, 48},
          13);
  const std::vector<std::pair<int, int>> tokens = decode_tokens(w);
  ThreadPool pool(2);
  Batch all(w, tokens);
  attention(w.layer, all.args, pool);
  const size_t row = static_cast<size_t>(w.n_heads) * w.head_dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    Batch one(w, {tokens[i]});
    attention(w.layer, one.args, pool);
    expect_rows_equal(all.out, i, one.out, 0, row, "many-sequence decode vs alone");
  }
}

TEST_P(AttentionInvariance, ChunkedPrefillEqualsOneCall) {
  const Shape sh = GetParam();
  const int len = 100;
  World w(sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.type, {len}, 12);
  ThreadPool pool(2);
  Batch whole(w, prefill_tokens(w));
  attention(w.layer, whole.args, pool);

  // A fresh cache with the same block table, filled chunk by chunk of 7 tokens, each chunk's
  // attention run right after its K/V are written.
  std::vector<uint8_t> k2(w.kbuf.size(), 0xff), v2(w.vbuf.size(), 0xff);
  PagedKVLayer l2 = w.layer;
  l2.k = k2.data();
  l2.v = v2.data();
  const size_t row = static_cast<size_t>(w.n_heads) * w.head_dim;
  for (int p0 = 0; p0 < len; p0 += 7) {
    const int p1 = std::min(len, p0 + 7);
    w.write(l2, 0, p0, p1);
    std::vector<std::pair<int, int>> tokens;
    for (int p = p0; p < p1; ++p) tokens.emplace_back(0, p);
    Batch chunk(w, tokens);
    attention(l2, chunk.args, pool);
    for (int p = p0; p < p1; ++p)
      expect_rows_equal(whole.out, p, chunk.out, p - p0, row, "chunked");
  }
}

TEST_P(AttentionInvariance, ThreadCountDoesNotMatter) {
  const Shape sh = GetParam();
  World w(sh.n_heads, sh.n_kv_heads, sh.head_dim, sh.type, {45, 3, 80}, 13);
  std::vector<std::pair<int, int>> tokens = prefill_tokens(w);
  std::vector<std::vector<float>> outs;
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    Batch b(w, tokens);
    attention(w.layer, b.args, pool);
    outs.push_back(b.out);
  }
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4), 0) << "1 vs 2";
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * 4), 0) << "1 vs 3";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionInvariance,
    // MHA shapes (one row per decode item) read the cache in place
    // when alone and through a converted tile in a batch: both must agree.
    ::testing::Values(Shape{8, 2, 64, kF16}, Shape{4, 4, 32, kF32}, Shape{4, 1, 128, kF16},
                      Shape{6, 6, 64, kF16}, Shape{2, 2, 24, kF16}, Shape{8, 2, 64, kInt8},
                      Shape{6, 6, 64, kE4M3}, Shape{4, 4, 32, kInt4},
                      Shape{4, 4, 32, {KVDType::F16, KVDType::F32}}, Shape{8, 4, 8, kE5M2}),
    [](const ::testing::TestParamInfo<Shape>& i) {
      return shape_name(i.param.n_heads, i.param.n_kv_heads, i.param.head_dim, i.param.type);
    });

TEST(Attention, OutputMayAliasQ) {
  World w(8, 2, 64, kF16, {30, 9}, 14);
  ThreadPool pool(2);
  Batch ref(w, prefill_tokens(w)), in_place(w, prefill_tokens(w));
  attention(w.layer, ref.args, pool);
  in_place.args.out = in_place.q.data();
  attention(w.layer, in_place.args, pool);
  EXPECT_EQ(std::memcmp(ref.out.data(), in_place.q.data(), ref.out.size() * 4), 0);
}

// ---- bad input ----

TEST(Attention, RejectsBadInput) {
  World w(8, 2, 64, kF16, {20}, 15);
  ThreadPool pool(1);
  {
    Batch b(w, {{0, 19}});
    b.pos[0] = 32;  // needs a third block; the table has two
    EXPECT_THROW(attention(w.layer, b.args, pool), Error);
    b.pos[0] = -1;
    EXPECT_THROW(attention(w.layer, b.args, pool), Error);
  }
  {
    Batch b(w, {{0, 19}});
    b.seq[0] = 1;  // only one sequence
    EXPECT_THROW(attention(w.layer, b.args, pool), Error);
  }
  {
    std::vector<int32_t> table = w.tables[0];
    table[1] = static_cast<int32_t>(w.layer.n_blocks);  // past the cache
    AttentionSeq bad{table.data(), 2};
    Batch b(w, {{0, 19}});
    b.args.seqs = &bad;
    EXPECT_THROW(attention(w.layer, b.args, pool), Error);
  }
  {
    Batch b(w, {{0, 19}});
    b.args.n_heads = 7;  // not a multiple of 2 KV heads
    EXPECT_THROW(attention(w.layer, b.args, pool), Error);
  }
  PagedKVLayer bad_dim = w.layer;
  bad_dim.head_dim = 0;
  Batch b(w, {{0, 19}});
  EXPECT_THROW(attention(bad_dim, b.args, pool), Error);
}

// ---- kv_write ----

TEST(KVWrite, F16IsBitIdenticalToScalarConversion) {
  // Random bit patterns (every class: normals, subnormals, inf, NaN with payloads), values near
  // f16 rounding ties and the overflow threshold.
  std::mt19937 rng(21);
  std::vector<float> vals;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    vals.push_back(f);
  }
  for (uint32_t h = 0; h < 0x7c00; h += 7) {  // ties and neighbours between f16 values
    const float a = fp16_to_fp32(static_cast<uint16_t>(h));
    const float b = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const float mid = 0.5f * (a + b);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      vals.push_back(f);
      vals.push_back(-f);
    }
  }
  for (float f : {65504.0f, 65519.0f, 65520.0f, 1e9f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-45f, 0.0f,
                  -0.0f, INFINITY, -INFINITY, NAN, -NAN}) {
    vals.push_back(f);
    vals.push_back(-f);
  }
  const int dim = 64;
  while (vals.size() % dim) vals.push_back(1.0f);
  const int64_t n = static_cast<int64_t>(vals.size()) / dim;
  std::vector<uint16_t> k(n * dim), v(n * dim);
  PagedKVLayer l{KVDType::F16, KVDType::F16, 1, 1, dim, n, k.data(), v.data()};
  std::vector<int32_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  std::reverse(slots.begin(), slots.end());
  for_each_target([&] {
    std::fill(k.begin(), k.end(), 0);
    kv_write(l, vals.data(), vals.data(), slots.data(), nullptr, n);
    for (int64_t t = 0; t < n; ++t) {
      for (int d = 0; d < dim; ++d) {
        const float f = vals[t * dim + d];
        const uint16_t want = fp32_to_fp16(f);
        ASSERT_EQ(k[slots[t] * dim + d], want) << std::hexfloat << f;
        ASSERT_EQ(v[slots[t] * dim + d], want) << std::hexfloat << f;
      }
    }
  });
}

// Rows that stress each encoder: Gaussian, one large channel (RoPE'd keys), far from 0 for
// their spread (int4's whole-step mode), constant, all zero, tiny (fp16 scale underflow), huge
// (scale saturation), random finite bit patterns, and ones holding a NaN or an infinity.
std::vector<std::vector<float>> encoder_rows(int dim, std::mt19937& rng) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  auto row = [&](auto f) {
    std::vector<float> r(static_cast<size_t>(dim));
    for (int i = 0; i < dim; ++i) r[static_cast<size_t>(i)] = f(i);
    rows.push_back(std::move(r));
  };
  for (int rep = 0; rep < 40; ++rep) {
    row([&](int) { return n01(rng); });
    row([&](int i) { return i == rep % dim ? 40.0f * n01(rng) : n01(rng); });
    row([&](int) { return 30.0f + 0.1f * n01(rng); });
    row([&](int) { return -7.0f + n01(rng); });
    row([&](int) { return 1e-6f * n01(rng); });
    row([&](int) { return 1e9f * n01(rng); });
    row([&](int) {
      for (;;) {
        const uint32_t bits = rng();
        float f;
        std::memcpy(&f, &bits, 4);
        if (std::isfinite(f)) return f;
      }
    });
  }
  row([](int) { return 0.25f; });
  row([](int) { return 0.0f; });
  row([](int i) { return i % 2 ? -0.0f : 0.0f; });
  row([](int i) { return i == 1 ? NAN : 1.0f; });
  row([](int i) { return i == 0 ? -INFINITY : 1.0f; });
  return rows;
}

TEST(KVWrite, QuantizedRowsAreTheReferenceQuantizersBytes) {
  // The SIMD encoders must write exactly kv_quantize_row's codes and scales on every target, for
  // head sizes that take the vector path (multiples of 8), a vector body with a scalar tail (12,
  // 20) and int4's reference fallback (36, 3).
  std::mt19937 rng(5);
  for (KVDType t : {KVDType::Int8, KVDType::FP8E4M3, KVDType::FP8E5M2, KVDType::Int4}) {
    for (int dim : {8, 16, 24, 32, 40, 64, 128, 12, 20, 36, 3}) {
      const std::vector<std::vector<float>> rows = encoder_rows(dim, rng);
      const int64_t n = static_cast<int64_t>(rows.size());
      std::vector<float> flat;
      for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
      const KVRowLayout L = kv_row_layout(t, dim);
      std::vector<float> k(static_cast<size_t>(n * dim));
      std::vector<uint8_t> v(L.bytes() * static_cast<size_t>(n));
      // One slot per block, one KV head: tile t holds row t's codes, then its meta. V is not
      // rotated, so its bytes are kv_quantize_row's of the row itself.
      PagedKVLayer l{KVDType::F32, t, 1, 1, dim, n, k.data(), v.data()};
      std::vector<int32_t> slots(static_cast<size_t>(n));
      std::iota(slots.begin(), slots.end(), 0);
      std::vector<uint8_t> want(L.bytes());
      for_each_target([&] {
        std::fill(v.begin(), v.end(), uint8_t{0xcd});
        kv_write(l, flat.data(), flat.data(), slots.data(), nullptr, n);
        for (int64_t r = 0; r < n; ++r) {
          kv_quantize_row(t, rows[static_cast<size_t>(r)].data(), dim, want.data(),
                          want.data() + L.code_bytes);
          const uint8_t* got = v.data() + static_cast<size_t>(r) * L.bytes();
          ASSERT_EQ(std::memcmp(got, want.data(), L.bytes()), 0)
              << kv_dtype_name(t) << " dim " << dim << " row " << r;
        }
      });
    }
  }
}

TEST(KVWrite, Fp8EncodesEveryCodeAndTieLikeTheReference) {
  // A row whose largest value is the format's maximum has scale 1 exactly, so its values are
  // converted as they are: every fp8 code's value, the midpoints between neighbours (ties to
  // even) and the floats next to them, and values far below the subnormal quantum. (Saturation
  // needs a clamped scale: the huge rows of QuantizedRowsAreTheReferenceQuantizersBytes.)
  for (KVDType t : {KVDType::FP8E4M3, KVDType::FP8E5M2}) {
    const bool e4 = t == KVDType::FP8E4M3;
    const float top = e4 ? 448.0f : 57344.0f;
    auto dec = [&](int c) {
      return e4 ? e4m3_to_fp32(static_cast<uint8_t>(c)) : e5m2_to_fp32(static_cast<uint8_t>(c));
    };
    const int max_code = e4 ? 0x7e : 0x7b;
    std::vector<float> vals;
    for (int c = 0; c < max_code; ++c) {
      const float a = dec(c);
      const float mid = 0.5f * (a + dec(c + 1));
      for (float f : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, top)}) {
        vals.push_back(f);
        vals.push_back(-f);
      }
    }
    for (float f : {top, std::nextafter(top, 0.0f), 1e-30f, 1e-45f}) {  // and below the quantum
      vals.push_back(f);
      vals.push_back(-f);
    }
    const int dim = 63;  // + the maximum in each row: 64
    std::vector<float> flat;
    int64_t n = 0;
    for (size_t i = 0; i < vals.size(); i += dim, ++n) {
      flat.push_back(top);
      for (size_t j = i; j < i + dim; ++j) flat.push_back(j < vals.size() ? vals[j] : 0.0f);
    }
    const KVRowLayout L = kv_row_layout(t, dim + 1);
    std::vector<float> k(flat.size());
    std::vector<uint8_t> v(L.bytes() * static_cast<size_t>(n));
    PagedKVLayer l{KVDType::F32, t, 1, 1, dim + 1, n, k.data(), v.data()};
    std::vector<int32_t> slots(static_cast<size_t>(n));
    std::iota(slots.begin(), slots.end(), 0);
    for_each_target([&] {
      kv_write(l, flat.data(), flat.data(), slots.data(), nullptr, n);
      for (int64_t r = 0; r < n; ++r) {
        uint16_t sh;
        std::memcpy(&sh, v.data() + static_cast<size_t>(r) * L.bytes() + L.code_bytes, 2);
        ASSERT_EQ(fp16_to_fp32(sh), 1.0f);
        for (int j = 0; j <= dim; ++j) {
          const float f = flat[static_cast<size_t>(r * (dim + 1) + j)];
          const uint8_t want = e4 ? fp32_to_e4m3(f) : fp32_to_e5m2(f);
          ASSERT_EQ(v[static_cast<size_t>(r) * L.bytes() + static_cast<size_t>(j)], want)
              << kv_dtype_name(t) << " " << std::hexfloat << f;
        }
      }
    });
  }
}

TEST(KVWrite, PlacesRowsInTheirSlots) {
  // 3 blocks of 4 tokens, 2 KV heads of dim 3 (odd: scalar tail), F32.
  const int bs = 4, nkv = 2, dim = 3;
  std::vector<float> k(3 * nkv * bs * dim, 0.0f), v(k.size(), 0.0f);
  PagedKVLayer l{KVDType::F32, KVDType::F32, bs, nkv, dim, 3, k.data(), v.data()};
  std::vector<float> rows(2 * nkv * dim);
  std::iota(rows.begin(), rows.end(), 1.0f);
  const int32_t slots[2] = {9, 2};  // block 2 offset 1; block 0 offset 2
  kv_write(l, rows.data(), rows.data(), slots, nullptr, 2);
  for (int t = 0; t < 2; ++t) {
    for (int g = 0; g < nkv; ++g) {
      for (int d = 0; d < dim; ++d) {
        const int block = slots[t] / bs, off = slots[t] % bs;
        EXPECT_EQ(k[((block * nkv + g) * bs + off) * dim + d], rows[(t * nkv + g) * dim + d]);
        EXPECT_EQ(v[((block * nkv + g) * bs + off) * dim + d], rows[(t * nkv + g) * dim + d]);
      }
    }
  }
  const int32_t bad[1] = {12};
  EXPECT_THROW(kv_write(l, rows.data(), rows.data(), bad, nullptr, 1), Error);
  const int32_t neg[1] = {-1};
  EXPECT_THROW(kv_write(l, rows.data(), rows.data(), neg, nullptr, 1), Error);
}

}  // namespace
}  // namespace kvasir::cpu
