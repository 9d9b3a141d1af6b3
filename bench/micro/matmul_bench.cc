// Microbenchmarks for matmul (y = x · Wᵀ, weights packed once outside the timed loop) at
// TinyLlama-1.1B sizes: every weight dtype, GEMV (1
// token, decode) and GEMM (16 and 128 tokens, prefill) on a 2048x2048 (attention projection) and a
// 768x2048 matrix, on a 2-thread pool (or $KVASIR_BENCH_THREADS). Bytes processed = weight bytes
// streamed, so GEMV rows read as weight bandwidth (GB/s); GEMM rows also report GFLOPS (2 * rows *
// cols * tokens per call). Activations are prepared (quantized for Q8_0/Q4_0) once, outside the
// timed loop.
//
// These matrices fit in L3; BM_MatmulCold cycles through enough copies of a 2048x5632 (FFN-size)
// Q4_0 matrix to stream from DRAM, the number that bounds decode speed.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/tensor/quantize.h"

namespace kvasir::cpu {
namespace {

// Threads of the pool: 2, or $KVASIR_BENCH_THREADS.
int bench_threads() {
  const char* env = std::getenv("KVASIR_BENCH_THREADS");
  return env != nullptr ? std::atoi(env) : 2;
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = nd(rng);
  return v;
}

ThreadPool& pool() {
  static ThreadPool p(bench_threads());
  return p;
}

// Args: dtype id, rows, cols, n_tokens.
void BM_Matmul(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const std::vector<float> wf = random_floats(rows * cols, 1);
  const std::vector<uint8_t> wq = quantize_tensor(type, wf.data(), rows, cols);
  const PackedMatrix w(MatrixView{type, rows, cols, wq.data()}, pool());
  const std::vector<float> x = random_floats(n * cols, 2);
  std::vector<float> y(static_cast<size_t>(n * rows));
  Activations a;
  a.prepare(x.data(), n, cols, type, pool());
  for (auto _ : state) {
    matmul(w, a, y.data(), pool());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(wq.size()));
  state.counters["GFLOPS"] = benchmark::Counter(static_cast<double>(2 * rows * cols * n),
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
  state.SetLabel(std::string(dtype_name(type)) + " " + simd_target_name());
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "rows", "cols", "tokens"});
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    for (int64_t rows : {2048, 768}) {
      for (int64_t n : {1, 16, 128}) b->Args({static_cast<int64_t>(t), rows, 2048, n});
    }
  }
  b->UseRealTime();
}
BENCHMARK(BM_Matmul)->Apply(MatmulArgs);

// llama-110m's shapes (dim 768, ffn 2048, vocab 32000) at the batch sizes of batched decode.
void Matmul110mArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "rows", "cols", "tokens"});
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}}) {
      for (int64_t n : {1, 16, 32, 512}) b->Args({static_cast<int64_t>(t), rows, cols, n});
    }
  }
  b->UseRealTime();
}
BENCHMARK(BM_Matmul)->Name("BM_Matmul110m")->Apply(Matmul110mArgs);

// TinyLlama-1.1B's FFN (dim 2048, ffn 5632) in a 512-token prefill: the longest rows a GEMM of
// BENCH.md's models walks (5632 columns, the down projection).
void MatmulTinyllamaArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "rows", "cols", "tokens"});
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5632, 2048}, {2048, 5632}}) {
      b->Args({static_cast<int64_t>(t), rows, cols, 512});
    }
  }
  b->UseRealTime();
}
BENCHMARK(BM_Matmul)->Name("BM_MatmulTinyllama")->Apply(MatmulTinyllamaArgs);

// Every GGUF weight format on TinyLlama's FFN down-projection shape (2048 x 5632): decode (1
// token, from L3: 2-8 MB) and a 128-token prefill tile, per format (BM_MatmulCold below streams
// each from DRAM).
constexpr DType kEveryFormat[] = {DType::F16,  DType::Q8_0,   DType::Q4_0,   DType::Q4_1,
                                  DType::Q5_0, DType::Q5_1,   DType::Q2_K,   DType::Q3_K,
                                  DType::Q4_K, DType::Q5_K,   DType::Q6_K,   DType::IQ4_NL,
                                  DType::IQ4_XS};
void MatmulFormatArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "rows", "cols", "tokens"});
  for (DType t : kEveryFormat) {
    for (int64_t n : {1, 128}) b->Args({static_cast<int64_t>(t), 2048, 5632, n});
  }
  b->UseRealTime();
}
BENCHMARK(BM_Matmul)->Name("BM_MatmulFormats")->Apply(MatmulFormatArgs);

// GEMV from DRAM: cycles through copies of the matrix totalling > 64 MiB (more than L3).
// Args: dtype id, rows, cols[, n_tokens (default 1)].
void MatmulCold(benchmark::State& state, int64_t n) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  const std::vector<float> wf = random_floats(rows * cols, 3);
  const std::vector<uint8_t> wq = quantize_tensor(type, wf.data(), rows, cols);
  const int copies = static_cast<int>(64 * 1024 * 1024 / wq.size()) + 1;
  std::vector<PackedMatrix> ws;
  for (int c = 0; c < copies; ++c) ws.emplace_back(MatrixView{type, rows, cols, wq.data()}, pool());
  const std::vector<float> x = random_floats(n * cols, 4);
  std::vector<float> y(static_cast<size_t>(n * rows));
  Activations a;
  a.prepare(x.data(), n, cols, type, pool());
  size_t i = 0;
  for (auto _ : state) {
    const PackedMatrix& w = ws[i];
    i = (i + 1) % ws.size();
    matmul(w, a, y.data(), pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(wq.size()));
  state.counters["GFLOPS"] = benchmark::Counter(static_cast<double>(2 * rows * cols * n),
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
  state.SetLabel(std::string(dtype_name(type)) + " " + simd_target_name());
}
void BM_MatmulCold(benchmark::State& state) {
  MatmulCold(state, 1);
}
void BM_MatmulColdTokens(benchmark::State& state) {
  MatmulCold(state, state.range(3));
}
BENCHMARK(BM_MatmulCold)
    ->ArgNames({"dtype", "rows", "cols"})
    ->Args({static_cast<int64_t>(DType::Q4_0), 2048, 5632})
    ->Args({static_cast<int64_t>(DType::Q4_0), 5632, 2048})
    ->Args({static_cast<int64_t>(DType::Q8_0), 2048, 5632})
    ->Args({static_cast<int64_t>(DType::F16), 2048, 5632})
    // llama-110m's matrices: each call streams only 0.3-1.8 MB, so start-up costs show.
    ->Args({static_cast<int64_t>(DType::Q4_0), 768, 768})
    ->Args({static_cast<int64_t>(DType::Q4_0), 4096, 768})
    ->Args({static_cast<int64_t>(DType::Q4_0), 768, 2048})
    ->UseRealTime();
BENCHMARK(BM_MatmulCold)->Name("BM_MatmulColdFormats")->ArgNames({"dtype", "rows", "cols"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (DType t : kEveryFormat) b->Args({static_cast<int64_t>(t), 2048, 5632});
    })
    ->UseRealTime();

// The formats of TinyLlama's Q4_K_M and Q6_K files on its other decode shapes (gate/up, q/o, the
// output matrix), from DRAM.
BENCHMARK(BM_MatmulCold)->Name("BM_MatmulColdKQuant")->ArgNames({"dtype", "rows", "cols"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (DType t : {DType::F16, DType::Q4_K, DType::Q6_K}) {
        for (int64_t rows : {5632, 2048, 32000}) b->Args({static_cast<int64_t>(t), rows, 2048});
      }
    })
    ->UseRealTime();

// Small batches from DRAM: a speculative verification of K + 1 = 5 tokens, or a decode step of a
// few sequences, costs little more than the GEMV while the weights' bytes bound it.
BENCHMARK(BM_MatmulColdTokens)
    ->ArgNames({"dtype", "rows", "cols", "tokens"})
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        for (int64_t n : {1, 2, 4, 5, 8}) b->Args({static_cast<int64_t>(t), 2048, 5632, n});
      }
    })
    ->UseRealTime();

// Prefill of a 512-token prompt through one 2048x2048 Q4_0 matrix: one GEMM versus 512 GEMVs.
void BM_Prefill512(benchmark::State& state) {
  const bool as_gemvs = state.range(0) != 0;
  const int64_t rows = 2048, cols = 2048, n = 512;
  const std::vector<float> wf = random_floats(rows * cols, 5);
  const std::vector<uint8_t> wq = quantize_tensor(DType::Q4_0, wf.data(), rows, cols);
  const PackedMatrix w(MatrixView{DType::Q4_0, rows, cols, wq.data()}, pool());
  const std::vector<float> x = random_floats(n * cols, 6);
  std::vector<float> y(static_cast<size_t>(n * rows));
  Activations a;
  for (auto _ : state) {
    if (as_gemvs) {
      for (int64_t t = 0; t < n; ++t) {
        a.prepare(x.data() + t * cols, 1, cols, DType::Q4_0, pool());
        matmul(w, a, y.data() + t * rows, pool());
      }
    } else {
      a.prepare(x.data(), n, cols, DType::Q4_0, pool());
      matmul(w, a, y.data(), pool());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);  // tokens/s
}
BENCHMARK(BM_Prefill512)
    ->ArgName("as_gemvs")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvasir::cpu
