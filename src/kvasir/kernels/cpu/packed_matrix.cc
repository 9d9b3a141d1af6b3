// packed_matrix.h: the panel repacking (plain byte copies, parallel over panels).
#include "kvasir/kernels/cpu/packed_matrix.h"

#include <algorithm>
#include <cstring>

#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/util/error.h"

namespace kvasir::cpu {

namespace {

constexpr size_t kPanelAlign = 64;

size_t round_up(size_t v, size_t m) {
  return (v + m - 1) / m * m;
}

bool is_float_family(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

size_t element_bytes(DType t) {
  return t == DType::F32 ? 4 : 2;
}

// Codes bytes per block and panel (0 for float types).
size_t code_bytes(DType t) {
  if (t == DType::Q8_0) return 8 * 32;
  if (t == DType::Q4_0) return 8 * 16;
  return 0;
}

void check_shape(DType t, int64_t rows, int64_t cols) {
  if (!is_float_family(t) && t != DType::Q8_0 && t != DType::Q4_0) {
    fail("pack: weight dtype {} is not supported (supported: f32, f16, bf16, q8_0, q4_0)",
         dtype_name(t));
  }
  if (rows < 0 || cols <= 0) fail("pack: invalid weight shape {} x {}", rows, cols);
  if (!is_float_family(t) && cols % kQK8_0 != 0) {
    fail("pack: {} weight has {} columns, not a multiple of the block size {}", dtype_name(t), cols,
         kQK8_0);
  }
}

size_t panel_bytes_of(DType t, int64_t cols) {
  if (is_float_family(t)) {
    return round_up(static_cast<size_t>(cols) * kPanelRows * element_bytes(t), kPanelAlign);
  }
  const auto nb = static_cast<size_t>(cols / kQK8_0);
  return round_up(nb * (code_bytes(t) + kPanelRows * 2), kPanelAlign);
}

// dst[k * 8 + j] = row j's element k, for the n_rows (<= 8) rows starting at src.
template <class E>
void transpose_panel(const uint8_t* src, size_t row_stride, int64_t n_rows, int64_t cols,
                     uint8_t* dst_bytes) {
  const E* rows[kPanelRows];
  for (int64_t j = 0; j < n_rows; ++j)
    rows[j] = reinterpret_cast<const E*>(src + static_cast<size_t>(j) * row_stride);
  E* dst = reinterpret_cast<E*>(dst_bytes);
  for (int64_t k = 0; k < cols; ++k)
    for (int64_t j = 0; j < n_rows; ++j) dst[k * kPanelRows + j] = rows[j][k];
}

// Packs panel p of w into dst (panel_bytes bytes, already zeroed).
void pack_panel(const MatrixView& w, int64_t p, uint8_t* dst) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  const size_t rb = row_bytes(w.type, w.cols);
  const int64_t r0 = p * kPanelRows;
  const int64_t n_rows = std::min<int64_t>(kPanelRows, w.rows - r0);
  if (is_float_family(w.type)) {
    // k outer, rows inner: 8 sequential read streams, one sequential write stream.
    if (w.type == DType::F32) {
      transpose_panel<uint32_t>(src + static_cast<size_t>(r0) * rb, rb, n_rows, w.cols, dst);
    } else {
      transpose_panel<uint16_t>(src + static_cast<size_t>(r0) * rb, rb, n_rows, w.cols, dst);
    }
    return;
  }
  const int64_t nb = w.cols / kQK8_0;
  const size_t cb = code_bytes(w.type);
  uint8_t* scales = dst + static_cast<size_t>(nb) * cb;
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = src + static_cast<size_t>(r0 + j) * rb;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* codes = dst + static_cast<size_t>(b) * cb;
      uint16_t d;
      if (w.type == DType::Q8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        d = blk->d;
        for (int g = 0; g < 8; ++g) std::memcpy(codes + g * 32 + j * 4, blk->qs + g * 4, 4);
      } else {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        d = blk->d;
        for (int v = 0; v < 4; ++v) std::memcpy(codes + v * 32 + j * 4, blk->qs + v * 4, 4);
      }
      std::memcpy(scales + (static_cast<size_t>(b) * kPanelRows + static_cast<size_t>(j)) * 2, &d,
                  2);
    }
  }
  // Padding rows keep zero codes and zero scales. For Q4_0 a zero byte is code -8, not 0, but
  // with a zero scale the padding rows still produce exactly 0 (and are never stored).
}

}  // namespace

size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
  check_shape(t, rows, cols);
  return static_cast<size_t>((rows + kPanelRows - 1) / kPanelRows) * panel_bytes_of(t, cols);
}

PackedMatrix::PackedMatrix(const MatrixView& w, ThreadPool& pool)
    : DeviceMatrix(w.type, w.rows, w.cols) {
  check_shape(w.type, w.rows, w.cols);
  if (w.rows > 0 && w.data == nullptr) fail("pack: weight matrix has no data");
  panel_bytes_ = panel_bytes_of(w.type, w.cols);
  block_code_bytes_ = code_bytes(w.type);
  scales_offset_ = static_cast<size_t>(w.cols / kQK8_0) * block_code_bytes_;
  const int64_t np = n_panels();
  data_ = hwy::AllocateAligned<uint8_t>(std::max<size_t>(bytes(), 1));
  if (!data_) fail("pack: cannot allocate {} bytes for a {} x {} matrix", bytes(), rows(), cols());
  uint8_t* base = data_.get();
  const size_t pb = panel_bytes_;
  pool.parallel_for(np, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      uint8_t* dst = base + static_cast<size_t>(p) * pb;
      std::memset(dst, 0, pb);
      pack_panel(w, p, dst);
    }
  });
}

}  // namespace kvasir::cpu
