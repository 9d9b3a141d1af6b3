// The KV cache's element formats: what one cached K or V row (one token, one KV head, head_dim
// values) looks like in memory in each dtype, and the reference quantizer and dequantizer that
// define them. The paged storage itself is kv/kv_storage.h; the kernels that write and read these
// rows (kernels/cpu/attention*.cc) must produce exactly the values kv_dequantize_row() gives.
//
// A row is `code_bytes` of codes plus `meta_bytes` of scales; in a block the codes of the block's
// rows come first (row after row), then their scales (kernels/views.h):
//   f32, f16   head_dim values, no scales.
//   int8       symmetric: x ~= s * c, c in [-127, 127]; one fp16 scale s per row (amax / 127,
//              rounded up so that no code saturates).
//   fp8_e4m3   x ~= s * e4m3(c): c is the OCP/NVIDIA E4M3 byte (bias 7, no infinities, max 448)
//              of x / s rounded to nearest even and saturated to +-448, as Hopper's
//              cvt.rn.satfinite does; one fp16 scale per row (amax / 448, rounded up).
//   fp8_e5m2   the same with E5M2 (bias 15, max 57344); scale amax / 57344.
//   int4       asymmetric in groups of 32 values along the head (the whole head when it is
//              shorter; the last group may be shorter): x ~= s * (c - z / u), c in [0, 15]; per
//              group an fp16 scale s and an int8 zero point z in units of s / u. They cover the
//              group's own range lo..hi (0 need not be in it) or, when that has less squared
//              error, a range clipped by 3-10% at either end. u = 8 (the grid starts within s/16
//              of lo): s = max((hi - lo) / (15 - 1/16), |lo| * 8 / 127) rounded up, z =
//              round(-lo * 8 / s); u = 1 when a group lies so far from 0 for its spread that
//              whole steps give a smaller s (s = max((hi - lo) / 14.5, |lo| / 127), z =
//              round(-lo / s)), flagged by the stored scale's sign bit. The codes of a group of g
//              values take ceil(g/2) bytes: byte j holds value j in its low nibble and value j +
//              ceil(g/2) in its high nibble (ggml's Q4_0 order). Meta: the fp16 scales of all
//              groups, then the zero points.
// Rounding a scale up (to the next fp16 at or above the exact quotient) keeps every code in range,
// so the only error is the rounding of x / s: at most s / 2 per value for int8, half an fp8 ulp
// of x / s for fp8; int4's grid starts within s / 16 of the range it covers, so a value inside
// that range is off by at most s / 2 (plus the float rounding of x / s), a clipped one by its
// distance to the range on top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace kvasir {

enum class KVDType : uint8_t { F32, F16, Int8, FP8E4M3, FP8E5M2, Int4 };

// "f32", "f16", "int8", "fp8_e4m3", "fp8_e5m2", "int4".
std::string_view kv_dtype_name(KVDType t);
// Accepts the names above, "fp8" (= fp8_e4m3), and llama.cpp's cache type names "q8_0" (= int8)
// and "q4_0" (= int4; Kvasir's int4 has a zero point, llama.cpp's q4_0 does not). Case-insensitive.
std::optional<KVDType> kv_dtype_from_name(std::string_view name);
// The accepted names, for error messages: "f16, f32, int8 (q8_0), fp8 (fp8_e4m3), ...".
std::string_view kv_dtype_choices();
bool kv_dtype_is_quantized(KVDType t);

// The K and V dtypes of a cache (they may differ, as llama.cpp's -ctk / -ctv).
struct KVCacheType {
  KVDType k = KVDType::F16;
  KVDType v = KVDType::F16;
  bool operator==(const KVCacheType&) const = default;
  // "f16", or "k=int8,v=int4" when they differ.
  std::string name() const;
};

// Bytes of one row of `head_dim` values in dtype t.
struct KVRowLayout {
  size_t code_bytes = 0;
  size_t meta_bytes = 0;
  int group = 0;     // int4: values per group (the last may be shorter); else head_dim
  int n_groups = 0;  // int4: groups per row; else 1
  size_t bytes() const { return code_bytes + meta_bytes; }
};
KVRowLayout kv_row_layout(KVDType t, int head_dim);

// Quantizes one row of head_dim floats into its codes and meta (layout above). A row (an int4
// group) holding a NaN or an infinity gets a NaN scale, so all its values read back as NaN: the
// attention output is then NaN, as it would be with the value itself in an f16 cache.
void kv_quantize_row(KVDType t, const float* x, int head_dim, void* codes, void* meta);
// The exact values the attention kernels compute from a stored row: for int8 fl(c * s), fp8
// fl(fp8(c) * s), int4 fl((u c - z) * (s / u)) (one rounding each), f16/f32 the stored value.
void kv_dequantize_row(KVDType t, const void* codes, const void* meta, int head_dim, float* out);

// Keys in int8 and int4 are stored rotated: the row is multiplied by the orthonormal
// Walsh-Hadamard matrix (blocks of the largest power of two that divides head_dim, at most
// head_dim) before it is quantized, and readers rotate each query the same way: q.k is unchanged
// (H is orthonormal), while a key's few large channels (RoPE'd keys have them) are spread over the
// block, so one scale per row fits all values (QuaRot, Ashkboos et al. 2024, does this for 4-bit
// caches). Values are not rotated, nor are fp8 keys: fp8's error is relative to each value, so
// spreading a large channel over the others makes it worse (stories260K, ctx 256: ΔPPL of fp8
// keys +0.93% as they are, +2.7% rotated; int8 keys +0.19% -> +0.09%, int4 +62% -> +46%).
// The rotation of one row depends on that row only.
bool kv_rotates_keys(KVDType t);
// In place: x <- x H (fast Walsh-Hadamard butterflies in increasing stride, then x 1/sqrt(block)).
void kv_rotate_key(float* x, int head_dim);
int kv_rotation_block(int head_dim);

// The encoder's parts that kv_write's SIMD path (kernels/cpu/attention_kv_write.cc) shares, so
// that it writes the reference's bytes exactly.
//
// The fp16 scale of an int8 / fp8 row: amax / top rounded up (top 127, 448 or 57344); NaN (0x7e00)
// when the row holds a NaN or an infinity.
uint16_t kv_row_scale(KVDType t, const float* x, int n);
// One int4 grid the encoder tries for a group: its stored scale and zero point, and what encoding
// and decoding with it cost: code = clamp(nearbyint((x - lo) * inv), 0, 15) and value =
// fl(fl(unit c - zero) * step), step = s / unit. s == 0 (an all-zero group, or one below fp16's
// scales) encodes every value as code 0, with no error counted.
struct KVInt4Grid {
  uint16_t scale = 0;  // with the whole-step flag (sign bit)
  int8_t zero = 0;
  float s = 0.0f, unit = 0.0f, step = 0.0f, lo = 0.0f, inv = 0.0f;
};
constexpr int kKVInt4MaxGrids = 16;
// The grids tried for a finite group of g values, the full range lo..hi first, then the clipped
// ones (kv_quant.cc); returns how many (1 when the group is constant).
int kv_int4_grids(const float* x, int g, KVInt4Grid* out);
// A grid's squared error over the group, summed in float in a fixed order that 8-lane SIMD
// reproduces: lane j (0..7) adds the values j, j + 8, ... in turn, then the lanes are added 0 to 7.
// The encoder keeps the first grid with the least error.
float kv_int4_sq_error(const float* x, int g, const KVInt4Grid& grid);
// The first of n grids with the least err(grid) (ties keep the earlier one, the full range first).
template <class Err>
int kv_int4_best_grid(const KVInt4Grid* grids, int n, Err&& err) {
  int best = 0;
  float best_err = std::numeric_limits<float>::infinity();
  for (int k = 0; k < n; ++k) {
    const float e = err(grids[k]);
    if (e < best_err) {
      best_err = e;
      best = k;
    }
  }
  return best;
}

// FP8 conversions (round to nearest even, saturating to the largest finite value; NaN stays NaN).
uint8_t fp32_to_e4m3(float f);
uint8_t fp32_to_e5m2(float f);
float e4m3_to_fp32(uint8_t c);
float e5m2_to_fp32(uint8_t c);

// The smallest fp16 value >= f (f >= 0, finite); 65504 when f is larger.
uint16_t fp32_to_fp16_round_up(float f);

}  // namespace kvasir
