// Element types of weights and activations, with GGUF/GGML's numeric type ids and block layouts.
//
// Block formats are bit-compatible with ggml's definitions:
//   Q8_0: 32 weights per block: fp16 scale d, then 32 x int8 q;     w = d * q
//   Q4_0: 32 weights per block: fp16 scale d, then 16 bytes of nibbles; byte j holds weight j in
//         its low nibble and weight j+16 in its high nibble;        w = d * (nibble - 8)
// A tensor's shape follows ggml order: ne[0] is the innermost (contiguous) dimension, so a 2-D
// weight of ne = {in_features, out_features} stores out_features rows of in_features each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kvasir {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

struct DTypeInfo {
  DType type;
  std::string_view name;  // lower-case as kvasir prints it: "f32", "q8_0", ...
  int block_size;         // elements per block (1 for plain types)
  int block_bytes;        // bytes per block
};

// Info for every type id ggml defines (even ones we cannot compute with), or nullopt for an
// unknown id: the GGUF reader uses it to size tensors and reject unknown dtypes.
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);  // t must be a known type
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // "f16", "q4_0", ...

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_size) * static_cast<size_t>(i.block_bytes);
}

// ---- scalar conversions (IEEE binary16 and bfloat16) ----
inline float fp16_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, as _cvtss_sh / numpy do.
inline uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  }
  if (absx >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (absx < 0x38800000) {  // subnormal or zero in fp16
    // Add 0.5 (as a float) to shift the mantissa into place with correct rounding.
    float a;
    std::memcpy(&a, &absx, 4);
    a += 0.5f;
    uint32_t r;
    std::memcpy(&r, &a, 4);
    return static_cast<uint16_t>(sign | (r - 0x3f000000u));
  }
  uint32_t mant_odd = (absx >> 13) & 1;
  absx += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (absx >> 13));
}

inline float bf16_to_fp32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 64);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

// ---- block layouts ----
constexpr int kQK8_0 = 32;
constexpr int kQK4_0 = 32;

struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

}  // namespace kvasir
