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

// Threads own whole chunks of panels. A chunk is whole groups of kGroupPanels = 4 panels (32
// rows): a GEMV tile of 4 panels is then one group, read as one sequential stream
// (packed_matrix.h), and within a token's output row (when `rows` is a multiple of 16, as in
// every real model) two threads never write the same 64-byte cache line.
constexpr int64_t kPanelAlign = kGroupPanels;
// GEMV chunk: small enough to balance the load, large enough to amortise taking a chunk.
constexpr int64_t kGemvChunkPanels = 8;
// GEMM chunk: the panels of one chunk stay in L2 while every token tile passes over them.
constexpr size_t kGemmChunkBytes = 192 * 1024;
// Below this many multiply-adds a matmul runs on the calling thread only (waking workers costs
// more than the work).
constexpr int64_t kMinParallelMacs = int64_t{1} << 16;
// Activation quantization runs on the pool only above this many blocks.
constexpr int64_t kMinParallelBlocks = 512;
// Regrouping float activations into token tiles runs on the pool above as many floats.
constexpr int64_t kMinParallelTileFloats = kMinParallelBlocks * kQK8_0;

// A thread's own run of chunks in matmul(): the next one to take, and its end.
struct alignas(64) Region {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
};
constexpr int kMaxRegions = 64;  // pools larger than this deal chunks from one counter

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
  const ActivationFormat want = activation_format(w.type());
  if (want != x.format()) {
    fail(
        "matmul: activations were prepared for {} ({} activations) but the {} weight reads {} "
        "activations: call prepare with the weight's dtype",
        dtype_name(x.prepared_for()), activation_format_name(x.format()), dtype_name(w.type()),
        activation_format_name(want));
  }
  if (want == ActivationFormat::kFloat && x.n_tokens() > 0 && x.f32() == nullptr) {
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
  tiles_ = nullptr;
  const ActivationFormat format = activation_format(for_type);
  if (format == ActivationFormat::kFloat) {
    if (n_tokens < 2 || cols == 0) return;
    const auto n = static_cast<size_t>(n_tokens * cols);
    if (tile_buf_.size() < n) tile_buf_.resize(n);
    float* out = tile_buf_.data();
    const int64_t n_tiles = (n_tokens + kFloatTokenTile - 1) / kFloatTokenTile;
    auto pack = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t0 = i * kFloatTokenTile;
        const int64_t T = std::min(kFloatTokenTile, n_tokens - t0);
        matmul_detail::interleave_tokens(x + t0 * cols, T, cols, out + t0 * cols);
      }
    };
    if (pool.size() == 1 || n_tokens * cols < kMinParallelTileFloats) {
      pack(0, n_tiles);
    } else {
      pool.parallel_for(n_tiles, [&](int64_t i0, int64_t i1, int) { pack(i0, i1); });
    }
    tiles_ = out;
    return;
  }
  const bool super = format == ActivationFormat::kQ8_K;
  const int64_t block = super ? kQK_K : kQK8_0;
  if (cols % block != 0) {
    fail(
        "Activations::prepare: {} columns is not a multiple of the {} block size {} (needed "
        "for {} weights)",
        cols, super ? "q8_k" : "q8_0", block, dtype_name(for_type));
  }
  const int64_t nb = n_tokens * (cols / kQK8_0);
  if (static_cast<int64_t>(q8_.size()) < nb) {
    q8_.resize(static_cast<size_t>(nb));
    q8_scale_.resize(static_cast<size_t>(nb));
    q8_sum_.resize(static_cast<size_t>(nb));
    q8_sum_lo_.resize(static_cast<size_t>(nb));
  }
  BlockQ8_0* q = q8_.data();
  float* s = q8_scale_.data();
  int32_t* sums = q8_sum_.data();
  int32_t* sums_lo = q8_sum_lo_.data();
  // Work items: Q8_0 blocks, or Q8_K super-blocks of 8 blocks.
  const int64_t per_item = super ? kQK_K / kQK8_0 : 1;
  const int64_t n_items = nb / per_item;
  auto run = [&](int64_t i0, int64_t i1) {
    if (super) {
      matmul_detail::quantize_q8_k_superblocks(x, q, s, sums, sums_lo, i0, i1);
    } else {
      matmul_detail::quantize_q8_0_blocks(x, q, s, sums, sums_lo, i0, i1);
    }
  };
  if (pool.size() == 1 || nb < kMinParallelBlocks) {
    run(0, n_items);
  } else {
    pool.parallel_for(n_items, [&](int64_t i0, int64_t i1, int) { run(i0, i1); });
  }
}

void matmul(const PackedMatrix& w, const Activations& x, float* y, ThreadPool& pool) {
  const MatmulOutput one{&w, y};
  matmul(std::span<const MatmulOutput>(&one, 1), x, pool);
}

void matmul(std::span<const MatmulOutput> outs, const Activations& x, ThreadPool& pool) {
  constexpr size_t kMaxOutputs = 8;
  if (outs.size() > kMaxOutputs)
    fail("matmul: {} outputs in one call (at most {})", outs.size(), kMaxOutputs);
  const int64_t n_tokens = x.n_tokens();
  // Chunks of every matrix, numbered consecutively: matrix m owns [first[m], first[m + 1]).
  int64_t chunk[kMaxOutputs], first[kMaxOutputs + 1];
  first[0] = 0;
  int64_t macs = 0;
  for (size_t m = 0; m < outs.size(); ++m) {
    const PackedMatrix& w = *outs[m].w;
    validate(w, x, outs[m].y);
    chunk[m] = chunk_panels(w, n_tokens, pool.size());
    const int64_t n_chunks = n_tokens == 0 ? 0 : (w.n_panels() + chunk[m] - 1) / chunk[m];
    first[m + 1] = first[m] + n_chunks;
    macs += w.rows() * w.cols() * n_tokens;
  }
  const int64_t total = first[outs.size()];
  if (total == 0) return;
  auto run_chunk = [&](int64_t c) {
    size_t m = 0;
    while (c >= first[m + 1]) ++m;
    const PackedMatrix& w = *outs[m].w;
    const int64_t p0 = (c - first[m]) * chunk[m];
    matmul_detail::matmul_panels(w, x, outs[m].y, p0, std::min(w.n_panels(), p0 + chunk[m]));
  };
  if (pool.size() == 1 || total == 1 || macs < kMinParallelMacs) {
    for (int64_t c = 0; c < total; ++c) run_chunk(c);
    return;
  }
  // Each thread owns a contiguous run of chunks and takes them in order, so that what it reads is
  // one long sequential stream (chunks dealt out round-robin made every thread jump every chunk,
  // and the hardware prefetcher start over: 768-column Q4_0 GEMVs ran no faster on two threads
  // than on one). A thread that finishes its run helps the others, taking their next chunks, so a
  // thread slowed down by something else is still compensated. Which thread computes a row never
  // changes its value.
  const int nth = pool.size();
  if (nth > kMaxRegions) {
    alignas(64) std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
      for (;;) {
        const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
        if (c >= total) return;
        run_chunk(c);
      }
    });
    return;
  }
  Region regions[kMaxRegions];
  for (int t = 0; t < nth; ++t) {
    regions[t].next.store(total * t / nth, std::memory_order_relaxed);
    regions[t].end = total * (t + 1) / nth;
  }
  pool.run([&](int ith, int) {
    for (int k = 0; k < nth; ++k) {
      Region& r = regions[(ith + k) % nth];
      for (;;) {
        const int64_t c = r.next.fetch_add(1, std::memory_order_relaxed);
        if (c >= r.end) break;
        run_chunk(c);
      }
    }
  });
}

void matmul(const MatrixView& w, const Activations& x, float* y, ThreadPool& pool) {
  const PackedMatrix packed(w, pool);
  matmul(packed, x, y, pool);
}

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const PackedMatrix packed(w, pool);
  Activations a;
  a.prepare(x, n_tokens, w.cols, packed.type(), pool);
  matmul(packed, a, y, pool);
}

ActivationFormat activation_format(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return ActivationFormat::kQ8_0;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return ActivationFormat::kQ8_K;
    default:
      return ActivationFormat::kFloat;
  }
}

const char* activation_format_name(ActivationFormat f) {
  switch (f) {
    case ActivationFormat::kQ8_0:
      return "q8_0";
    case ActivationFormat::kQ8_K:
      return "q8_k";
    default:
      return "float";
  }
}

void dequantize_row(const MatrixView& w, int64_t row, float* out) {
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
