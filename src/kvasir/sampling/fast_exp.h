// fast_exp: exp(x) for float, written as plain arithmetic (Cody-Waite range reduction and the
// Cephes degree-6 polynomial) so that loops over a vocabulary-sized row auto-vectorize, and so
// that sampling gives bit-identical results on every machine instead of depending on the libm
// version. Accuracy: within 2 ulp of exp(x) for x in [-87, 88]; returns 0 below -87 (e^-87 is
// 1.6e-38, negligible against the row maximum, which is 1 after max subtraction) and for NaN,
// and saturates at e^88 above.
#pragma once

#include <bit>
#include <cstdint>

namespace kvasir {

// c ? a : b through bit masks: GCC (with the default -ftrapping-math) will not if-convert a
// floating-point ?: whose condition is a comparison, which would stop loops from vectorizing.
inline float select_float(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}

inline float fast_exp(float x) {
  const bool in_range = x >= -87.0f;      // false also for NaN and -inf
  x = select_float(in_range, x, -87.0f);  // keeps every intermediate finite and normal
  x = select_float(x <= 88.0f, x, 88.0f);
  // n = round(x / ln 2), by the 1.5 * 2^23 trick (|x / ln 2| < 2^22, round-half-even).
  float n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;
  // r = x - n ln 2, with ln 2 split in two so n * ln2_hi is exact.
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const uint32_t pow2 = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  const float result = y * std::bit_cast<float>(pow2);
  return select_float(in_range, result, 0.0f);
}

}  // namespace kvasir
