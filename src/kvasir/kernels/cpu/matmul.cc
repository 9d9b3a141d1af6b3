// matmul.h: validation, activation preparation and the split of output rows across threads. The
// SIMD work itself is in matmul_kernels.cc.
#include "kvasir/kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>

#include "kvasir/kernels/cpu/matmul_kernels.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"

namespace kvasir::cpu {

namespace {

// Threads own whole chunks of panels. A chunk is a multiple of 2 panels (16 rows), so within a
// token's output row (when `rows` is a multiple of 16, as in every real model) two threads never
// write the same 64-byte cache line.
constexpr int64_t kPanelAlign = 2;
// GEMV chunk: small enough to balance the load, large enough to amortise taking a chunk.
constexpr int64_t kGemvChunkPanels = 8;
// GEMM chunk: the panels of one chunk stay in L2 while every token tile passes over them.
constexpr size_t kGemmChunkBytes = 192 * 1024;
// Below this many multiply-adds a matmul runs on the calling thread only (waking workers costs
// more than the work).
constexpr int64_t kMinParallelMacs = int64_t{1} << 16;
// Activation quantization runs on the pool only above this many blocks.
constexpr int64_t kMinParallelBlocks = 512;

bool is_quantized(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0;
}

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

int64_t chunk_panels(const PackedMatrix& w, int64_t n_tokens, int n_threads) {
  int64_t by_cache = kGemvChunkPanels;
  if (n_tokens > 1) {
    const auto pb = static_cast<int64_t>(w.panel_bytes());
    by_cache = std::max<int64_t>(
        kPanelAlign, static_cast<int64_t>(kGemmChunkBytes) / pb / kPanelAlign * kPanelAlign);
  }
  // At least ~4 chunks per thread so a thread slowed down by something else is compensated.
  const int64_t np = w.n_panels();
  const int64_t by_balance = round_up((np + 4 * n_threads - 1) / (4 * n_threads), kPanelAlign);
  return std::max(kPanelAlign, std::min(by_cache, by_balance));
}

void validate(const PackedMatrix& w, const Activations& x, const float* y) {
  if (w.rows() > 0 && w.empty()) fail("matmul: weight matrix has no data (not packed)");
  if (x.cols() != w.cols()) {
    fail("matmul: activations have {} columns but the {} weight matrix has {} columns", x.cols(),
         dtype_name(w.type()), w.cols());
  }
  if (x.n_tokens() < 0) fail("matmul: negative token count {}", x.n_tokens());
  if (x.n_tokens() > 0 && w.rows() > 0 && y == nullptr) fail("matmul: output pointer is null");
  if (is_quantized(w.type())) {
    if (!is_quantized(x.prepared_for())) {
      fail(
          "matmul: activations were prepared for {} but the weight is {}: call prepare with the "
          "weight's dtype so they are quantized to q8_0",
          dtype_name(x.prepared_for()), dtype_name(w.type()));
    }
  } else if (x.n_tokens() > 0 && x.f32() == nullptr) {
    fail("matmul: activations have no data");
  }
}

}  // namespace

void Activations::prepare(const float* x, int64_t n_tokens, int64_t cols, DType for_type,
                          ThreadPool& pool) {
  if (n_tokens < 0 || cols < 0) {
    fail("Activations::prepare: invalid shape {} tokens x {} columns", n_tokens, cols);
  }
  if (x == nullptr && n_tokens > 0 && cols > 0) fail("Activations::prepare: input is null");
  x_ = x;
  n_tokens_ = n_tokens;
  cols_ = cols;
  for_type_ = for_type;
  if (!is_quantized(for_type)) return;
  if (cols % kQK8_0 != 0) {
    fail(
        "Activations::prepare: {} columns is not a multiple of the q8_0 block size {} (needed "
        "for {} weights)",
        cols, kQK8_0, dtype_name(for_type));
  }
  const int64_t nb = n_tokens * (cols / kQK8_0);
  if (static_cast<int64_t>(q8_.size()) < nb) {
    q8_.resize(static_cast<size_t>(nb));
    q8_scale_.resize(static_cast<size_t>(nb));
    q8_sum_.resize(static_cast<size_t>(nb));
  }
  BlockQ8_0* q = q8_.data();
  float* s = q8_scale_.data();
  int32_t* sums = q8_sum_.data();
  if (pool.size() == 1 || nb < kMinParallelBlocks) {
    matmul_detail::quantize_q8_0_blocks(x, q, s, sums, 0, nb);
  } else {
    pool.parallel_for(nb, [&](int64_t b0, int64_t b1, int) {
      matmul_detail::quantize_q8_0_blocks(x, q, s, sums, b0, b1);
    });
  }
}

void matmul(const PackedMatrix& w, const Activations& x, float* y, ThreadPool& pool) {
  validate(w, x, y);
  const int64_t n_tokens = x.n_tokens();
  const int64_t np = w.n_panels();
  if (np == 0 || n_tokens == 0) return;

  const int64_t chunk = chunk_panels(w, n_tokens, pool.size());
  const int64_t n_chunks = (np + chunk - 1) / chunk;
  const bool parallel =
      pool.size() > 1 && n_chunks > 1 && w.rows() * w.cols() * n_tokens >= kMinParallelMacs;
  if (!parallel) {
    matmul_detail::matmul_panels(w, x, y, 0, np);
    return;
  }
  // Chunks are handed out dynamically; which thread computes a row never changes its value.
  alignas(64) std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) return;
      matmul_detail::matmul_panels(w, x, y, c * chunk, std::min(np, (c + 1) * chunk));
    }
  });
}

void matmul(const Matrix& w, const Activations& x, float* y, ThreadPool& pool) {
  const PackedMatrix packed(w, pool);
  matmul(packed, x, y, pool);
}

void matmul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const PackedMatrix packed(w, pool);
  Activations a;
  a.prepare(x, n_tokens, w.cols, w.type, pool);
  matmul(packed, a, y, pool);
}

void dequantize_row(const Matrix& w, int64_t row, float* out) {
  if (row < 0 || row >= w.rows) {
    fail("dequantize_row: row {} out of range for a matrix of {} rows", row, w.rows);
  }
  if (w.data == nullptr) fail("dequantize_row: matrix has no data");
  const auto* base = static_cast<const uint8_t*>(w.data);
  kvasir::dequantize_row(w.type, base + static_cast<size_t>(row) * row_bytes(w.type, w.cols), out,
                         w.cols);
}

const char* simd_target_name() {
  return matmul_detail::chosen_target_name();
}

std::vector<std::string> simd_targets() {
  return matmul_detail::runnable_target_names();
}

void force_simd_target(const std::string& name) {
  if (!matmul_detail::force_target(name)) {
    std::string list;
    for (const auto& n : simd_targets()) list += (list.empty() ? "" : ", ") + n;
    fail("force_simd_target: '{}' is not a SIMD target this build can run here ({})", name, list);
  }
}

}  // namespace kvasir::cpu
