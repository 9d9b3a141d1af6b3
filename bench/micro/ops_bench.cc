// Microbenchmarks for the element-wise and row-wise ops at TinyLlama-1.1B sizes
// (hidden 2048, 32 heads x 64, FFN 5632, vocabulary 32000).
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "kvasir/kernels/cpu/ops.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {
namespace {

// One thread: these measure the kernels themselves, not the pool.
ThreadPool& serial() {
  static ThreadPool pool(1);
  return pool;
}

void BM_RmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = 2048;
  std::vector<float> x(rows * dim, 0.5f), w(dim, 1.1f), out(x.size());
  for (auto _ : state) {
    rms_norm(x.data(), w.data(), out.data(), rows, dim, 1e-5f, serial());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * dim * 8);
}
BENCHMARK(BM_RmsNorm)->Arg(1)->Arg(512);

void BM_Rope(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const int heads = 32, dim = 64;
  std::vector<float> x(rows * heads * dim, 0.5f), inv_freq(dim / 2);
  for (int i = 0; i < dim / 2; ++i)
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / dim));
  std::vector<int32_t> pos(rows);
  for (int64_t r = 0; r < rows; ++r) pos[r] = static_cast<int32_t>(r + 100);
  for (auto _ : state) {
    rope(x.data(), pos.data(), rows, heads, dim, dim, inv_freq.data(), false, serial());
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * rows);
}
BENCHMARK(BM_Rope)->Arg(1)->Arg(512);

void BM_Swiglu(benchmark::State& state) {
  const int64_t n = 5632 * state.range(0);
  std::vector<float> g(n, 0.3f), u(n, 0.7f), out(n);
  for (auto _ : state) {
    swiglu(g.data(), u.data(), out.data(), n, serial());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Swiglu)->Arg(1)->Arg(64);

void BM_Add(benchmark::State& state) {
  const int64_t n = 2048 * state.range(0);
  std::vector<float> x(n, 0.3f), y(n, 0.7f);
  for (auto _ : state) {
    add(x.data(), y.data(), n, serial());
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Add)->Arg(1)->Arg(512);

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 37) * 0.1f;
  std::vector<float> y(n);
  for (auto _ : state) {
    y = x;
    softmax(y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Softmax)->Arg(32000);

}  // namespace
}  // namespace kvasir::cpu
