// packed_matrix.h: the panel repacking (plain byte copies, parallel over panels).
#include "kvasir/kernels/cpu/packed_matrix.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/tensor/quant_iq4.h"
#include "kvasir/tensor/quant_legacy.h"
#include "kvasir/tensor/quantize.h"
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
  switch (t) {
    case DType::Q8_0:
      return 8 * 32;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::IQ4_NL:
    case DType::Q4_K:
    case DType::IQ4_XS:
      return 8 * 16;  // nibbles
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q5_K:
      return 8 * 16 + 8 * 4;  // nibbles, then the fifth bits
    case DType::Q6_K:
      return 8 * 16 + 8 * 8;  // nibbles, then the top 2 bits
    case DType::Q2_K:
      return 8 * 8;  // 2-bit codes
    case DType::Q3_K:
      return 8 * 8 + 8 * 4;  // their low 2 bits, then the third bits
    default:
      return 0;
  }
}

// Q4_K, Q5_K, Q6_K: bytes of one super-block of a panel (meta, then its 8 blocks' codes).
size_t super_block_bytes(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K
             ? kSuperMetaBytes + 8 * code_bytes(t)
             : 0;
}

bool has_kernel(DType t) {
  return is_float_family(t) || code_bytes(t) != 0;
}

// Bytes of scales per panel after the codes (the formats not laid out in super-blocks).
size_t meta_bytes(DType t, int64_t cols) {
  const auto ns = static_cast<size_t>(cols / kQK_K);
  const auto nb = static_cast<size_t>(cols / kQK8_0);
  switch (t) {
    case DType::Q3_K:
      return ns * kQ6KPanelMetaBytes;
    case DType::Q2_K:
      return ns * kQ2KPanelMetaBytes;
    case DType::IQ4_XS:
      return ns * kIQ4XSPanelMetaBytes;
    case DType::Q4_1:
    case DType::Q5_1:
      return nb * kPanelRows * 4;  // d, then m
    default:
      return nb * kPanelRows * 2;  // d
  }
}

// `stored`: the file's type. Its row length must be whole blocks of its own block size (also
// when it is packed as f16).
void check_shape(DType stored, int64_t rows, int64_t cols) {
  if (!has_kernel(stored)) {
    fail(
        "pack: weight dtype {} is not supported (supported: f32, f16, bf16, q8_0, q4_0, q4_1, "
        "q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs)",
        dtype_name(stored));
  }
  if (rows < 0 || cols <= 0) fail("pack: invalid weight shape {} x {}", rows, cols);
  const int bs = dtype_info(stored).block_size;
  if (cols % bs != 0) {
    fail("pack: {} weight has {} columns, not a multiple of the block size {}", dtype_name(stored),
         cols, bs);
  }
}

// One panel packed on its own (pack_panel below): all its code parts (unit after unit), then all
// its meta parts. The group layout of packed_matrix.h interleaves 4 such panels unit by unit.
size_t panel_bytes_of(DType t, int64_t cols) {
  if (is_float_family(t)) {
    return static_cast<size_t>(cols) * kPanelRows * element_bytes(t);
  }
  if (const size_t sb = super_block_bytes(t); sb != 0)
    return static_cast<size_t>(cols / kQK_K) * sb;
  const auto nb = static_cast<size_t>(cols / kQK8_0);
  return nb * code_bytes(t) + meta_bytes(t, cols);
}

// The units of packed_matrix.h: how many per panel, and the bytes of each one's code and meta
// parts. A code part is `n_sub` sub-parts (the blocks of a super-block unit) of `sub` bytes each.
struct Units {
  int64_t n;
  size_t code;
  size_t meta;
  int64_t n_sub;
  size_t sub;
};
Units units_of(DType t, int64_t cols) {
  if (is_float_family(t)) {
    const size_t c = kPanelRows * element_bytes(t);
    return {cols, c, 0, 1, c};
  }
  if (const size_t sb = super_block_bytes(t); sb != 0) {  // one unit: the panel's whole row
    const size_t c = static_cast<size_t>(cols / kQK_K) * sb;
    return {1, c, 0, 1, c};
  }
  if (t == DType::IQ4_XS || t == DType::Q2_K || t == DType::Q3_K) {
    const int64_t ns = cols / kQK_K;
    return {ns, 8 * code_bytes(t), meta_bytes(t, cols) / static_cast<size_t>(ns), 8, code_bytes(t)};
  }
  const int64_t nb = cols / kQK8_0;
  return {nb, code_bytes(t), meta_bytes(t, cols) / static_cast<size_t>(nb), 1, code_bytes(t)};
}

size_t group_bytes_of(DType t, int64_t cols) {
  const Units u = units_of(t, cols);
  return round_up(static_cast<size_t>(u.n) * kGroupPanels * (u.code + u.meta), kPanelAlign);
}

// Q4_K (ggml block of 256: fp16 d, fp16 dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes
// of nibbles; element 64c + l is the low nibble of qs[32c + l], element 64c + 32 + l its high
// nibble, l < 32): row j of panel p goes into the Q4_0 code layout and the panel's meta area.
// Q5_K is the same with a fifth bit per code (qh[32]: bit c of qh[l] is the top bit of element
// 32c + l), stored after the nibbles as packed_matrix.h describes.
void pack_q4_k_row(DType t, const uint8_t* row, int64_t cols, int j, uint8_t* panel) {
  const bool q5 = t == DType::Q5_K;
  const size_t block_bytes = static_cast<size_t>(dtype_info(t).block_bytes);
  const size_t cb = code_bytes(t);
  const size_t sb = super_block_bytes(t);
  const int64_t ns = cols / kQK_K;
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* blk = row + static_cast<size_t>(s) * block_bytes;
    const uint8_t* sc = blk + 4;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (q5 ? 48 : 16);
    uint8_t* meta = panel + static_cast<size_t>(s) * sb;
    std::memcpy(meta + j * 2, blk, 2);                       // d
    std::memcpy(meta + kPanelRows * 2 + j * 2, blk + 2, 2);  // dmin
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t scale, min;
      if (sub < 4) {
        scale = sc[sub] & 63;
        min = sc[sub + 4] & 63;
      } else {
        scale = static_cast<uint8_t>((sc[sub + 4] & 0x0f) | ((sc[sub - 4] >> 6) << 4));
        min = static_cast<uint8_t>((sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4));
      }
      meta[32 + sub * kPanelRows + j] = scale;
      meta[32 + 64 + sub * kPanelRows + j] = min;
    }
    auto code = [&](int e) -> uint8_t {  // element e of the super-block
      const int c = e / 64, l = e % 64;
      return l < 32 ? qs[32 * c + l] & 0x0f : qs[32 * c + l - 32] >> 4;
    };
    auto top = [&](int e) -> int { return (qh[e % 32] >> (e / 32)) & 1; };
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t* codes = meta + kSuperMetaBytes + static_cast<size_t>(sub) * cb;
      for (int v = 0; v < 4; ++v)
        for (int i = 0; i < 4; ++i) {
          const int e = sub * 32 + 4 * v + i;
          codes[v * 32 + j * 4 + i] = static_cast<uint8_t>(code(e) | code(e + 16) << 4);
          if (q5) {
            // Bit 2v + h of byte 4j + i: the fifth bit of the code of column 16h + 4v + i.
            codes[128 + j * 4 + i] |=
                static_cast<uint8_t>(top(e) << (2 * v) | top(e + 16) << (2 * v + 1));
          }
        }
    }
  }
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

// One 32-column block of row j of a panel, from its codes c[0..31] (column order), in the nibble
// layout of packed_matrix.h (the low 4 bits), plus the fifth-bit plane when `fifth`.
void put_nibbles(const uint8_t* c, int j, uint8_t* codes, bool fifth) {
  for (int v = 0; v < 4; ++v)
    for (int i = 0; i < 4; ++i) {
      const int e = 4 * v + i;
      codes[v * 32 + j * 4 + i] = static_cast<uint8_t>((c[e] & 15) | (c[e + 16] & 15) << 4);
      if (fifth) {
        codes[128 + j * 4 + i] |= static_cast<uint8_t>(((c[e] >> 4) & 1) << (2 * v) |
                                                       ((c[e + 16] >> 4) & 1) << (2 * v + 1));
      }
    }
}

// The same block in the 2-bit layout (the low 2 bits of each code), plus the third-bit plane
// when `third`.
void put_crumbs(const uint8_t* c, int j, uint8_t* codes, bool third) {
  for (int h = 0; h < 2; ++h)
    for (int v = 0; v < 4; ++v)
      for (int i = 0; i < 4; ++i) {
        const int e = 16 * h + 4 * v + i;
        codes[h * 32 + j * 4 + i] |= static_cast<uint8_t>((c[e] & 3) << (2 * v));
        if (third) codes[64 + j * 4 + i] |= static_cast<uint8_t>(((c[e] >> 2) & 1) << (2 * v + h));
      }
}

// A ggml 32-weight nibble group (byte l: weight l low, weight l + 16 high) as codes.
void unpack_nibbles(const uint8_t* qs, uint8_t* c) {
  for (int l = 0; l < 16; ++l) {
    c[l] = qs[l] & 15;
    c[l + 16] = qs[l] >> 4;
  }
}

// Q4_1, Q5_0, Q5_1, IQ4_NL (one scale d, and for Q4_1/Q5_1 a min m, per 32-weight block): row j
// of the panel. d (and m) go to the scales area: per block 8 fp16 d, then 8 fp16 m.
void pack_block32_row(DType t, const uint8_t* row, int64_t cols, int j, uint8_t* panel,
                      size_t scales_offset) {
  const int64_t nb = cols / kQK8_0;
  const size_t cb = code_bytes(t);
  const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
  const size_t stride = has_min ? kPanelRows * 4 : kPanelRows * 2;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t c[32];
    uint16_t d, m = 0;
    uint32_t qh = 0;
    const uint8_t* qs;
    if (t == DType::Q4_1) {
      const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
      d = blk->d, m = blk->m, qs = blk->qs;
    } else if (t == DType::Q5_0) {
      const auto* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
      d = blk->d, qs = blk->qs;
      std::memcpy(&qh, blk->qh, 4);
    } else if (t == DType::Q5_1) {
      const auto* blk = reinterpret_cast<const BlockQ5_1*>(row) + b;
      d = blk->d, m = blk->m, qs = blk->qs;
      std::memcpy(&qh, blk->qh, 4);
    } else {
      const auto* blk = reinterpret_cast<const BlockIQ4_NL*>(row) + b;
      d = blk->d, qs = blk->qs;
    }
    unpack_nibbles(qs, c);
    for (int l = 0; l < 32; ++l) c[l] = static_cast<uint8_t>(c[l] | ((qh >> l) & 1) << 4);
    put_nibbles(c, j, panel + static_cast<size_t>(b) * cb, cb == 160);
    uint8_t* sc = panel + scales_offset + static_cast<size_t>(b) * stride;
    std::memcpy(sc + j * 2, &d, 2);
    if (has_min) std::memcpy(sc + kPanelRows * 2 + j * 2, &m, 2);
  }
}

// IQ4_XS, Q2_K, Q3_K (256-weight super-blocks): row j of the panel, codes and the meta area
// described in packed_matrix.h.
void pack_superblock_row(DType t, const uint8_t* row, int64_t cols, int j, uint8_t* panel,
                         size_t meta_offset) {
  const int64_t ns = cols / kQK_K;
  const size_t cb = code_bytes(t);
  for (int64_t s = 0; s < ns; ++s) {
    uint8_t c[kQK_K];
    uint8_t* codes = panel + static_cast<size_t>(s * 8) * cb;
    if (t == DType::IQ4_XS) {
      const auto* blk = reinterpret_cast<const BlockIQ4_XS*>(row) + s;
      uint8_t* meta = panel + meta_offset + static_cast<size_t>(s) * kIQ4XSPanelMetaBytes;
      std::memcpy(meta + j * 2, &blk->d, 2);
      for (int g = 0; g < 8; ++g) {
        const int ls =
            ((blk->scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | ((blk->scales_h >> (2 * g)) & 3) << 4;
        meta[16 + g * kPanelRows + j] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
        unpack_nibbles(blk->qs + 16 * g, c + 32 * g);
        put_nibbles(c + 32 * g, j, codes + static_cast<size_t>(g) * cb, false);
      }
      continue;
    }
    if (t == DType::Q2_K) {
      const auto* blk = reinterpret_cast<const BlockQ2_K*>(row) + s;
      uint8_t* meta = panel + meta_offset + static_cast<size_t>(s) * kQ2KPanelMetaBytes;
      std::memcpy(meta + j * 2, &blk->d, 2);
      std::memcpy(meta + 16 + j * 2, &blk->dmin, 2);
      for (int g = 0; g < 16; ++g) meta[32 + g * kPanelRows + j] = blk->scales[g];
      for (int e = 0; e < kQK_K; ++e)  // weight 128h + 32k + l: bits 2k of qs[32h + l]
        c[e] = (blk->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    } else {
      const auto* blk = reinterpret_cast<const BlockQ3_K*>(row) + s;
      uint8_t* meta = panel + meta_offset + static_cast<size_t>(s) * kQ6KPanelMetaBytes;
      std::memcpy(meta + j * 2, &blk->d, 2);
      for (int g = 0; g < 16; ++g) {
        // ggml's 6-bit scale (stored + 32): low nibble, then the top two bits.
        const int low = g < 8 ? (blk->scales[g] & 0xf) : (blk->scales[g - 8] >> 4);
        const int sc = low | ((blk->scales[8 + g % 4] >> (2 * (g / 4))) & 3) << 4;
        meta[16 + g * kPanelRows + j] = static_cast<uint8_t>(static_cast<int8_t>(sc - 32));
      }
      for (int e = 0; e < kQK_K; ++e) {  // as Q2_K, plus bit e / 32 of hmask[e % 32]
        const int low = (blk->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        c[e] = static_cast<uint8_t>(low | ((blk->hmask[e % 32] >> (e / 32)) & 1) << 2);
      }
    }
    for (int g = 0; g < 8; ++g)
      put_crumbs(c + 32 * g, j, codes + static_cast<size_t>(g) * cb, t == DType::Q3_K);
  }
}

// Q6_K (ggml block of 256: ql[128] low nibbles, qh[64] top 2 bits, int8 scales[16] per 16
// elements, fp16 d; see quant_k.h): codes 0..63 split into the Q4_0 nibble layout and the 2-bit
// plane described in packed_matrix.h, scales and d into the meta area.
void pack_q6_k_row(const uint8_t* row, int64_t cols, int j, uint8_t* panel) {
  const int64_t ns = cols / kQK_K;
  for (int64_t s = 0; s < ns; ++s) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(row) + s;
    uint8_t* meta = panel + static_cast<size_t>(s) * super_block_bytes(DType::Q6_K);
    std::memcpy(meta + j * 2, &blk->d, 2);
    for (int g = 0; g < 16; ++g)
      meta[16 + g * kPanelRows + j] = static_cast<uint8_t>(blk->scales[g]);
    auto code = [&](int e) -> int {  // element e of the super-block, 0..63
      const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      const uint8_t* ql = blk->ql + 64 * h;
      const uint8_t* qh = blk->qh + 32 * h;
      const int low = quarter == 0   ? ql[l] & 0x0f
                      : quarter == 1 ? ql[l + 32] & 0x0f
                      : quarter == 2 ? ql[l] >> 4
                                     : ql[l + 32] >> 4;
      return low | ((qh[l] >> (2 * quarter)) & 3) << 4;
    };
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t* codes = meta + kSuperMetaBytes + static_cast<size_t>(sub) * code_bytes(DType::Q6_K);
      uint8_t* high = codes + 128;
      for (int v = 0; v < 4; ++v)
        for (int i = 0; i < 4; ++i) {
          const int e = sub * 32 + 4 * v + i;
          const int lo = code(e), hi = code(e + 16);
          codes[v * 32 + j * 4 + i] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
          const int bits = (lo >> 4) | (hi >> 4) << 2;  // 4 bits for this code byte
          high[(v % 2) * 32 + j * 4 + i] |= static_cast<uint8_t>(bits << (v < 2 ? 0 : 4));
        }
    }
  }
}

// Packs panel p of w on its own into dst (panel_bytes_of bytes, already zeroed): its code parts,
// then its meta parts (the constructor interleaves 4 such panels into a group).
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
  if (w.type == DType::Q4_K || w.type == DType::Q5_K) {
    for (int64_t j = 0; j < n_rows; ++j)
      pack_q4_k_row(w.type, src + static_cast<size_t>(r0 + j) * rb, w.cols, static_cast<int>(j),
                    dst);
    return;  // padding rows: zero scales, so they produce exactly 0
  }
  if (w.type == DType::Q6_K) {
    for (int64_t j = 0; j < n_rows; ++j)
      pack_q6_k_row(src + static_cast<size_t>(r0 + j) * rb, w.cols, static_cast<int>(j), dst);
    return;  // padding rows: zero scales
  }
  if (w.type == DType::IQ4_XS || w.type == DType::Q2_K || w.type == DType::Q3_K) {
    for (int64_t j = 0; j < n_rows; ++j)
      pack_superblock_row(w.type, src + static_cast<size_t>(r0 + j) * rb, w.cols,
                          static_cast<int>(j), dst, static_cast<size_t>(nb) * cb);
    return;  // padding rows: zero scales
  }
  if (w.type != DType::Q8_0 && w.type != DType::Q4_0) {
    for (int64_t j = 0; j < n_rows; ++j)
      pack_block32_row(w.type, src + static_cast<size_t>(r0 + j) * rb, w.cols, static_cast<int>(j),
                       dst, static_cast<size_t>(nb) * cb);
    return;  // padding rows: zero scales
  }
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

// Asks for transparent huge pages (where the kernel's policy is "madvise") on the 2 MiB-aligned
// interior of a freshly allocated, not yet touched buffer: decode streams every weight once per
// step, and with 4 KiB pages every 4 KiB of every stream is a TLB miss.
void advise_huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (a + bytes) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // a hint only
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace

DType packed_type(DType stored) {
  return stored;  // every supported format has a kernel of its own
}

size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
  check_shape(t, rows, cols);
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  return static_cast<size_t>((panels + kGroupPanels - 1) / kGroupPanels) *
         group_bytes_of(packed_type(t), cols);
}

PackedMatrix::PackedMatrix(const MatrixView& w, ThreadPool& pool)
    : DeviceMatrix(packed_type(w.type), w.rows, w.cols), stored_type_(w.type) {
  const DType t = type();
  check_shape(w.type, w.rows, w.cols);
  if (w.rows > 0 && w.data == nullptr) fail("pack: weight matrix has no data");
  const Units units = units_of(t, w.cols);
  group_bytes_ = group_bytes_of(t, w.cols);
  unit_code_bytes_ = units.code;
  unit_meta_bytes_ = units.meta;
  unit_sub_bytes_ = units.sub;
  block_code_bytes_ = code_bytes(t);
  super_bytes_ = super_block_bytes(t);
  const int64_t np = n_panels();
  const int64_t ng = n_groups();
  data_ = hwy::AllocateAligned<uint8_t>(std::max<size_t>(bytes(), 1));
  if (!data_) fail("pack: cannot allocate {} bytes for a {} x {} matrix", bytes(), rows(), cols());
  advise_huge_pages(data_.get(), bytes());
  uint8_t* base = data_.get();
  const size_t one = panel_bytes_of(t, w.cols);  // a panel packed on its own
  const size_t stride = unit_stride();
  pool.parallel_for(ng, [&](int64_t g0, int64_t g1, int) {
    auto tmp = hwy::AllocateAligned<uint8_t>(std::max<size_t>(one, 1));
    for (int64_t g = g0; g < g1; ++g) {
      uint8_t* group = base + static_cast<size_t>(g) * group_bytes_;
      std::memset(group, 0, group_bytes_);  // padding panels: zero codes and zero scales
      for (int64_t l = 0; l < kGroupPanels && g * kGroupPanels + l < np; ++l) {
        std::memset(tmp.get(), 0, one);
        pack_panel(w, g * kGroupPanels + l, tmp.get());
        const uint8_t* meta = tmp.get() + static_cast<size_t>(units.n) * units.code;
        for (int64_t u = 0; u < units.n; ++u) {
          uint8_t* unit = group + static_cast<size_t>(u) * stride;
          const uint8_t* part = tmp.get() + static_cast<size_t>(u) * units.code;
          for (int64_t k = 0; k < units.n_sub; ++k) {
            std::memcpy(unit + static_cast<size_t>(k * kGroupPanels + l) * units.sub,
                        part + static_cast<size_t>(k) * units.sub, units.sub);
          }
          if (units.meta != 0) {
            std::memcpy(unit + kGroupPanels * units.code + static_cast<size_t>(l) * units.meta,
                        meta + static_cast<size_t>(u) * units.meta, units.meta);
          }
        }
      }
    }
  });
}

}  // namespace kvasir::cpu
