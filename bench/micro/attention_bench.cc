// Microbenchmarks for paged attention: decode (one query) and prefill, TinyLlama-1.1B shape
// (32 query heads, 4 KV heads, head_dim 64, 16-token blocks, F16 KV). Times are per layer.
// Args: {context or prompt length, threads}. BM_KVWrite: kv_write of one decode token or a
// 512-token prompt into one layer, K and V in one dtype (the quantized formats' encoders).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvasir/kernels/cpu/attention.h"

namespace kvasir::cpu {
namespace {

constexpr int kHeads = 32, kKvHeads = 4, kDim = 64, kBlock = 16;

struct Setup {
  std::vector<uint16_t> k, v;
  std::vector<int32_t> table;
  PagedKVLayer layer;
  AttentionSeq seq;

  explicit Setup(int ctx) {
    const int n_blocks = (ctx + kBlock - 1) / kBlock;
    const size_t elems = static_cast<size_t>(n_blocks) * kKvHeads * kBlock * kDim;
    k.resize(elems);
    v.resize(elems);
    layer = {KVDType::F16, KVDType::F16, kBlock, kKvHeads, kDim, n_blocks, k.data(), v.data()};
    table.resize(n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::mt19937 rng(1);
    std::shuffle(table.begin(), table.end(), rng);
    seq = {table.data(), n_blocks};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> rows(static_cast<size_t>(ctx) * kKvHeads * kDim);
    for (float& x : rows) x = u(rng);
    std::vector<int32_t> slots(ctx);
    for (int p = 0; p < ctx; ++p) slots[p] = table[p / kBlock] * kBlock + p % kBlock;
    kv_write(layer, rows.data(), rows.data(), slots.data(), nullptr, ctx);
  }
};

void run(benchmark::State& state, int ctx, int n_queries) {
  Setup s(ctx);
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::vector<float> q(static_cast<size_t>(n_queries) * kHeads * kDim, 0.1f), out(q.size());
  std::vector<int32_t> pos(n_queries), seq_index(n_queries, 0);
  std::iota(pos.begin(), pos.end(), ctx - n_queries);
  AttentionArgs a;
  a.q = q.data();
  a.n_tokens = n_queries;
  a.n_heads = kHeads;
  a.positions = pos.data();
  a.seq_index = seq_index.data();
  a.seqs = &s.seq;
  a.n_seqs = 1;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  a.out = out.data();
  for (auto _ : state) {
    attention(s.layer, a, pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_queries),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionDecode(benchmark::State& state) {
  run(state, static_cast<int>(state.range(0)), 1);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{128, 512, 2048}, {1, 2}})
    ->ArgNames({"ctx", "threads"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_AttentionPrefill(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  run(state, n, n);
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgsProduct({{512}, {1, 2}})
    ->ArgNames({"tokens", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: {tokens, KVDType (1 f16, 2 int8, 3 fp8_e4m3, 5 int4)}.
void BM_KVWrite(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto t = static_cast<KVDType>(state.range(1));
  const int n_blocks = (n + kBlock - 1) / kBlock;
  PagedKVLayer layer{t, t, kBlock, kKvHeads, kDim, n_blocks, nullptr, nullptr};
  const size_t tiles = static_cast<size_t>(n_blocks) * kKvHeads;
  std::vector<uint8_t> k(tiles * layer.k_tile_bytes()), v(tiles * layer.v_tile_bytes());
  layer.k = k.data();
  layer.v = v.data();
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(n) * kKvHeads * kDim);
  for (float& x : rows) x = nd(rng);
  std::vector<int32_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  for (auto _ : state) {
    kv_write(layer, rows.data(), rows.data(), slots.data(), nullptr, n);
    benchmark::DoNotOptimize(k.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KVWrite)
    ->ArgsProduct({{1, 512}, {1, 2, 3, 5}})
    ->ArgNames({"tokens", "dtype"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvasir::cpu
