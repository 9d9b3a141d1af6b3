// PackedMatrix: a weight matrix repacked once, at load time, into the layout the matmul kernels
// stream (matmul.h). GGUF stores a matrix row by row; the kernels instead want the rows of a
// *panel* of kPanelRows = 8 consecutive output rows interleaved, so that one SIMD register holds
// the same input position of 8 rows and one activation value (or one 4-byte group of activation
// codes) feeds all 8 rows with a single broadcast. Each output element then owns one SIMD lane
// for its whole reduction: no horizontal sums, and the reduction order of an element is the plain
// sequential order a scalar loop would use (see matmul.h), whatever the tile shape.
//
// Panel groups: the panels are stored in groups of kGroupPanels = 4 (32 rows; the last group is
// padded with zero panels), and within a group the 4 panels are interleaved unit by unit: a
// panel's data is a sequence of units (one 32-column block, or one 256-column super-block, see
// below), each with a code part and a meta part; a group stores, for each unit u, the 4 panels'
// code parts of u, then their 4 meta parts of u. A GEMV tile of 4 panels (matmul_kernels.cc)
// therefore reads ONE sequential stream, codes and scales together, instead of 4 panels' codes and
// 4 scale areas a few KiB apart. That is what the hardware prefetcher follows best: on the Zen 4
// VM, one thread reading 768-column Q4_0 panels (3.4 KiB each) as 4 parallel streams got 19-21
// GB/s against 35 GB/s as one stream (bench/NOTES.md). codes(p) and meta(p) point at panel p's
// unit 0; unit u of the panel is unit_stride() bytes after unit u - 1.
//   32-column formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): a unit is one 32-column block; its
//     code part is block_code_bytes() long, its meta part is the block's scales (below).
//   IQ4_XS, Q2_K, Q3_K: a unit is one 256-column super-block: the code parts of its 8 blocks, and
//     the super-block's meta (below). Within a unit the 4 panels' blocks are interleaved block by
//     block (block 0 of panels 0..3, then block 1 of panels 0..3, ...): block k of a panel is
//     k * block_stride() bytes after its block 0, so a tile walking blocks in order still reads
//     one sequential stream (with each panel's 8 blocks together, a tile read 4 streams 1 KiB
//     apart, and cold k-quant GEMVs ran at 12-16 GB/s against Q4_0's 36; bench/NOTES.md).
//   Q4_K, Q5_K, Q6_K: the exception (per_panel()): a panel is ONE unit, all code part, holding
//     its super-blocks one after the other (each its kSuperMetaBytes head, head(p) for the first,
//     then its 8 blocks' codes); a group stores its 4 panels one after the other, so all of a
//     matrix's panels lie in panel order and a GEMV taking one panel per tile reads ONE sequential
//     stream. Against the interleaved layout above (cold GEMV, 2 threads, Zen 4): 32000 x 2048
//     Q4_K 20.9 -> 30.3 GB/s, Q6_K 20.3 -> 27.7 with 4-panel tiles, then 38-51 GB/s for both
//     with 1-panel tiles (matmul_kernels.cc); bench/NOTES.md.
//   F32, F16, BF16: a unit is one column (its 8 elements, all code): a group stores column by
//     column the 4 panels' 8 elements, 32 elements in all (64 bytes in F16). Longer units
//     (64 columns, 1 KiB a panel in F16) made a GEMV tile read 4 streams 1 KiB apart again, and
//     one thread's cold F16 GEMV fell from 27 to 11 GB/s.
// Every code part starts on a 32-byte boundary and every meta part on a 16-byte one.
//
// Layout of one panel's units (panel p holds rows 8p .. 8p+7; rows past the matrix are zero):
//   F32 / F16 / BF16: cols x 8 elements of the weight dtype, k-major: element (r, k) is at index
//     k * 8 + r % 8 of its panel.
//   Q8_0: for each 32-column block b: 8 groups g (columns 32b + 4g .. 32b + 4g + 3) of 32 bytes,
//     bytes 4j .. 4j+3 of a group = the four int8 codes of row 8p + j; meta: the block's 8 fp16
//     scales (row order).
//   Q4_0: for each block b: 4 vectors v of 32 bytes, bytes 4j .. 4j+3 of vector v = bytes
//     4v .. 4v+3 of row 8p + j's ggml block (low nibbles: columns 32b + 4v + i, high nibbles:
//     columns 32b + 16 + 4v + i, each code q + 8 in 0..15 as in ggml); meta: the 8 fp16 scales.
//   Q4_K, Q5_K, Q6_K: 256-column super-blocks, each super_bytes() long: its kSuperMetaBytes =
//     160 bytes of meta, then its 8 blocks' codes (hot Q6_K GEMV, 1 thread, Zen 4: 20-32 -> 39-44
//     GB/s against a separate scales area; see bench/NOTES.md).
//   Q4_K: the codes (4-bit, 0..15) in the Q4_0 code layout, 128 bytes per 32-column block; the
//     meta (kQ4KPanelMetaBytes = 160): the 8 rows' fp16 d, the 8 rows' fp16 dmin, then
//     sub-block scales sc[8 sub-blocks][8 rows] and mins m[8][8] (uint8, 0..63, unpacked from
//     ggml's 12-byte 6-bit encoding). w = d * sc * code - dmin * m.
//   Q5_K: as Q4_K, with 160 code bytes per block: the nibbles (128), then 32 bytes of fifth bits:
//     bit 2v + h of byte 4j + i is the top bit of row 8p + j's code of column 16h + 4v + i
//     (the code whose low bits are nibble h of byte 4j + i of code vector v). Codes 0..31.
//   Q6_K: per 32-column block 192 bytes: the low 4 bits of the codes (0..63) in the Q4_0 code
//     layout (128 bytes), then their top 2 bits in two 32-byte vectors: byte 4j + i of vector h
//     (h = 0, 1) holds, for the code byte 4j + i of code vector v = h (bits 0-3) and of v = h + 2
//     (bits 4-7), the top bits of its low-nibble code (2 bits) then of its high-nibble code.
//     The meta: kQ6KPanelMetaBytes = 144 bytes, the 8 rows' fp16 d, then the int8 scales
//     sc[16 sub-blocks of 16 columns][8 rows], then 16 bytes of padding (the codes stay 32-byte
//     aligned). w = d * sc * (code - 32).
//   Q4_1, IQ4_NL: the codes (0..15) in the Q4_0 code layout; meta per block: the 8 rows'
//     fp16 d, then (Q4_1) the 8 rows' fp16 m. Q4_1: w = d * code + m; IQ4_NL: w = d *
//     kIQ4NLValues[code].
//   Q5_0, Q5_1: the codes (0..31) in the Q5_K code layout (160 bytes per block); scales as Q4_1
//     (Q5_0: d only). Q5_0: w = d * (code - 16); Q5_1: w = d * code + m.
//   IQ4_XS: codes as IQ4_NL; meta per super-block kIQ4XSPanelMetaBytes = 80 bytes: the 8 rows' fp16
//     d, then int8 group scales ls - 32 [8 groups of 32 columns][8 rows].
//     w = d * (ls - 32) * kIQ4NLValues[code].
//   Q2_K: per 32-column block 64 bytes of 2-bit codes (0..3): bits 2v .. 2v+1 of byte 4j + i of
//     vector h (h = 0, 1) hold row 8p + j's code of column 16h + 4v + i. Meta per super-block:
//     kQ2KPanelMetaBytes = 160 bytes: the 8 rows' fp16 d, their fp16 dmin, then ggml's scale
//     bytes (sc low nibble, m high nibble) [16 sub-blocks of 16 columns][8 rows].
//     w = d * sc * code - dmin * m.
//   Q3_K: per block 96 bytes: the low 2 bits of the codes (0..7) as Q2_K's, then 32 bytes of
//     third bits: bit 2v + h of byte 4j + i for the code of column 16h + 4v + i (as Q5_K's
//     fifth bits). Meta per super-block: kQ6KPanelMetaBytes = 144 bytes as Q6_K's: fp16 d, then the
//     int8 scales sc - 32 [16][8]. w = d * (sc - 32) * (code - 4).
// The codes and scales are copied bit for bit (Q3_K's and IQ4_XS's 6-bit scales and Q4_K's
// sub-block scales unpacked to bytes): packing loses nothing.
#pragma once

#include <hwy/aligned_allocator.h>

#include <cstddef>
#include <cstdint>

#include "kvasir/kernels/backend.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/quant_k.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {

constexpr int64_t kPanelRows = 8;
constexpr int64_t kGroupPanels = 4;  // panels interleaved unit by unit (see above)
constexpr size_t kQ4KPanelMetaBytes = 2 * kPanelRows * 2 + 2 * 8 * kPanelRows;
constexpr size_t kQ6KPanelMetaBytes = kPanelRows * 2 + 16 * kPanelRows;
constexpr size_t kQ2KPanelMetaBytes = 2 * kPanelRows * 2 + 16 * kPanelRows;
constexpr size_t kIQ4XSPanelMetaBytes = kPanelRows * 2 + 8 * kPanelRows;
constexpr size_t kSuperMetaBytes = 160;  // Q4_K, Q5_K, Q6_K: meta at the head of a super-block
static_assert(kQ4KPanelMetaBytes <= kSuperMetaBytes && kQ6KPanelMetaBytes <= kSuperMetaBytes);

// The CPU backend's DeviceMatrix (kernels/backend.h).
class PackedMatrix final : public DeviceMatrix {
 public:
  PackedMatrix() = default;
  // Repacks `w` (ggml row layout; any type packed_type() accepts). The copy runs on `pool`.
  // Throws kvasir::Error for an unsupported dtype or a shape the dtype cannot have.
  PackedMatrix(const MatrixView& w, ThreadPool& pool);
  PackedMatrix(PackedMatrix&&) noexcept = default;
  PackedMatrix& operator=(PackedMatrix&&) noexcept = default;

  BackendKind backend() const override { return BackendKind::kCpu; }
  DType stored_type() const { return stored_type_; }  // the type the weights were read in
  int64_t n_panels() const { return (rows() + kPanelRows - 1) / kPanelRows; }
  int64_t n_groups() const { return (n_panels() + kGroupPanels - 1) / kGroupPanels; }
  // Bytes of one group of kGroupPanels panels (a multiple of 64).
  size_t group_bytes() const { return group_bytes_; }
  // The average bytes per panel (group_bytes() / kGroupPanels): for sizing work by bytes.
  size_t panel_bytes() const { return group_bytes_ / kGroupPanels; }
  // Panel p's unit 0: its codes (of block 0 in a super-block unit), its first super-block's head
  // (Q4_K, Q5_K, Q6_K; nullptr for the others) and its meta part (nullptr for the formats without
  // one: Q4_K, Q5_K, Q6_K and the float formats). Unit u is u * unit_stride() bytes further; block
  // k of a super-block unit k * block_stride() bytes after block 0.
  const uint8_t* codes(int64_t p) const {
    return data_.get() + static_cast<size_t>(p / kGroupPanels) * group_bytes_ +
           static_cast<size_t>(p % kGroupPanels) * unit_sub_bytes_ +
           (per_panel() ? kSuperMetaBytes : 0);
  }
  const uint8_t* head(int64_t p) const {
    return per_panel() ? codes(p) - kSuperMetaBytes : nullptr;
  }
  // Block k of a super-block is k * block_stride() bytes after its block 0; in Q4_K, Q5_K, Q6_K
  // super-block s of a panel is s * super_bytes() bytes after its first.
  size_t block_stride() const {
    return per_panel() ? block_code_bytes_ : kGroupPanels * unit_sub_bytes_;
  }
  // Q4_K, Q5_K, Q6_K: each panel's super-blocks one after the other, the 4 panels of a group one
  // after the other (see above).
  bool per_panel() const { return super_bytes_ != 0; }
  const uint8_t* meta(int64_t p) const {
    if (unit_meta_bytes_ == 0) return nullptr;
    return data_.get() + static_cast<size_t>(p / kGroupPanels) * group_bytes_ +
           kGroupPanels * unit_code_bytes_ +
           static_cast<size_t>(p % kGroupPanels) * unit_meta_bytes_;
  }
  size_t unit_stride() const { return kGroupPanels * (unit_code_bytes_ + unit_meta_bytes_); }
  const uint8_t* data() const { return data_.get(); }
  size_t bytes() const override { return static_cast<size_t>(n_groups()) * group_bytes_; }
  bool empty() const { return data_ == nullptr; }

  // Q4_K, Q5_K, Q6_K: bytes of one super-block of a panel (head then codes); 0 otherwise.
  size_t super_bytes() const { return super_bytes_; }
  // Bytes of codes per 32-column block and panel: 256 (Q8_0), 128 (Q4_0, Q4_1, IQ4_NL, Q4_K,
  // IQ4_XS), 160 (Q5_0, Q5_1, Q5_K), 192 (Q6_K), 64 (Q2_K) or 96 (Q3_K).
  size_t block_code_bytes() const { return block_code_bytes_; }

 private:
  size_t group_bytes_ = 0;
  size_t unit_code_bytes_ = 0;
  size_t unit_meta_bytes_ = 0;
  size_t unit_sub_bytes_ = 0;  // one block's codes (super-block units), else the code part
  size_t block_code_bytes_ = 0;
  size_t super_bytes_ = 0;
  DType stored_type_ = DType::F32;
  hwy::AlignedFreeUniquePtr<uint8_t[]> data_;
};

// The type a matrix stored as `stored` is packed and computed in: today always itself (every
// format has its own kernel), kept so that a format could be converted at load.
DType packed_type(DType stored);

// Bytes a packed copy of a rows x cols matrix of dtype t takes (for memory planning).
size_t packed_bytes(DType t, int64_t rows, int64_t cols);

}  // namespace kvasir::cpu
