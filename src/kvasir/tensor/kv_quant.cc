// Reference quantizer and dequantizer of the KV cache's element formats (kv_quant.h). Scalar on
// purpose: they define the values; kv_write()'s SIMD encoders (kernels/cpu/attention_kv_write.cc)
// reproduce their bytes exactly and use the scalar parts exported here (row scales, int4 grids).
// FP8 encoding is written here because no Debian-packaged library converts to E4M3/E5M2 with
// Hopper's saturating round-to-nearest-even.
#include "kvasir/tensor/kv_quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "kvasir/tensor/dtype.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

constexpr uint16_t kFp16NaN = 0x7e00;
constexpr int kInt4Group = 32;

// An fp8 format: 1 sign bit, E exponent bits with bias B, M mantissa bits; max finite value.
struct Fp8Format {
  int mant_bits;
  int bias;
  float max_finite;
  uint8_t max_code;  // code of +max_finite
  uint8_t nan_code;  // code of +NaN
};
constexpr Fp8Format kE4M3{3, 7, 448.0f, 0x7e, 0x7f};
constexpr Fp8Format kE5M2{2, 15, 57344.0f, 0x7b, 0x7e};

uint8_t fp32_to_fp8(float f, const Fp8Format& fmt) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | fmt.nan_code);
  const float a = std::fabs(f);
  if (a == 0.0f) return sign;
  const int emin = 1 - fmt.bias;  // exponent of the smallest normal
  // Quantum of a's binade (subnormals share the smallest normal binade's quantum).
  const int e = std::max(std::ilogb(a), emin);
  const float quantum = std::ldexp(1.0f, e - fmt.mant_bits);
  // a / quantum is exact (a power of two); nearbyint rounds to nearest even (default mode).
  const float r = std::nearbyint(a / quantum) * quantum;
  if (!(r <= fmt.max_finite)) return static_cast<uint8_t>(sign | fmt.max_code);  // saturate
  if (r == 0.0f) return sign;
  const int er = std::ilogb(r);
  uint32_t code;
  if (er < emin) {  // subnormal: exponent field 0, mantissa in quanta of 2^(emin - M)
    code = static_cast<uint32_t>(r / std::ldexp(1.0f, emin - fmt.mant_bits));
  } else {
    const uint32_t mant =
        static_cast<uint32_t>(r / std::ldexp(1.0f, er - fmt.mant_bits)) - (1u << fmt.mant_bits);
    code = static_cast<uint32_t>(er + fmt.bias) << fmt.mant_bits | mant;
  }
  return static_cast<uint8_t>(sign | code);
}

float fp8_to_fp32(uint8_t c, const Fp8Format& fmt) {
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  const uint32_t mag = c & 0x7f;
  if (mag == fmt.nan_code || (fmt.mant_bits == 2 && mag > 0x7c)) return std::nanf("");
  if (fmt.mant_bits == 2 && mag == 0x7c) return sign * INFINITY;
  const uint32_t exp = mag >> fmt.mant_bits;
  const uint32_t mant = mag & ((1u << fmt.mant_bits) - 1);
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), 1 - fmt.bias - fmt.mant_bits);
  return sign * std::ldexp(static_cast<float>(mant | (1u << fmt.mant_bits)),
                           static_cast<int>(exp) - fmt.bias - fmt.mant_bits);
}

bool all_finite(const float* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

float abs_max(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// One row scaled so that amax maps to `top` (top = 127 for int8, the fp8 maximum for fp8): the
// fp16 scale, rounded up; NaN when the row is not finite.
uint16_t row_scale(const float* x, int n, float top) {
  if (!all_finite(x, n)) return kFp16NaN;
  return fp32_to_fp16_round_up(abs_max(x, n) / top);
}

// int4's zero point is in eighths of the scale: the grid's lowest value -z s / 8 is within s / 16
// of the range's low end (an integer zero point leaves up to s / 2 there: tools/kv-sim measured
// stories260K's int4 keys at +3.6% ΔPPL with it against +2.4% in eighths). A range whose low end
// is more than ~16 steps from 0 (a row far from 0 for its spread) cannot be reached in eighths by
// an int8; it gets a whole-step zero point instead (reach 127 steps), flagged by the fp16 scale's
// sign bit (scales are never negative otherwise).
constexpr int kFineUnit = 8;
constexpr uint16_t kCoarseFlag = 0x8000;

// Scale (with the flag) and zero point that cover lo..hi: in eighths, s >= (hi - lo) /
// (15 - 1/16) so that the grid still reaches hi after its low end moved up by as much as s / 16,
// and |lo| <= 127 s / 8 for z to fit; else in whole steps, s >= (hi - lo) / 14.5 (the low end
// moves by up to s / 2) and |lo| <= 127 s.
void int4_params(float lo, float hi, uint16_t* scale, int8_t* zero) {
  const float fine = (hi - lo) / (15.0f - 0.5f / kFineUnit);
  int unit = kFineUnit;
  uint16_t sh = fp32_to_fp16_round_up(std::max(fine, std::fabs(lo) * kFineUnit / 127.0f));
  if (fp16_to_fp32(sh) > fine * 1.0625f) {  // the reach, not the range, would set the step
    const uint16_t coarse =
        fp32_to_fp16_round_up(std::max((hi - lo) / 14.5f, std::fabs(lo) / 127.0f));
    if (fp16_to_fp32(coarse) < fp16_to_fp32(sh)) {
      sh = coarse;
      unit = 1;
    }
  }
  const float s = fp16_to_fp32(sh);
  *scale = static_cast<uint16_t>(sh | (unit == 1 ? kCoarseFlag : 0));
  *zero =
      s == 0.0f
          ? int8_t{0}
          : static_cast<int8_t>(std::clamp(
                static_cast<int>(std::nearbyint(-lo * static_cast<float>(unit) / s)), -128, 127));
}

// A group's step and zero unit from its stored scale.
struct Int4Step {
  float s;
  int unit;
};
Int4Step int4_step(uint16_t scale) {
  return {fp16_to_fp32(static_cast<uint16_t>(scale & ~kCoarseFlag)),
          (scale & kCoarseFlag) ? 1 : kFineUnit};
}

// The value of code c as kv_dequantize_row computes it: one rounding of (unit c - z) x s / unit.
float int4_value(int c, Int4Step st, int z) {
  return static_cast<float>(st.unit * c - z) * (st.s / static_cast<float>(st.unit));
}

KVInt4Grid int4_grid(float lo, float hi) {
  KVInt4Grid gr;
  int4_params(lo, hi, &gr.scale, &gr.zero);
  const Int4Step st = int4_step(gr.scale);
  gr.s = st.s;
  gr.unit = static_cast<float>(st.unit);
  gr.step = st.s / gr.unit;
  if (st.s > 0.0f) {
    gr.lo = static_cast<float>(-gr.zero) * gr.step;
    gr.inv = 1.0f / st.s;
  }
  return gr;
}

// The value of code c under a grid, as kv_dequantize_row computes it.
float fl_int4_value(const KVInt4Grid& gr, int c) {
  return (gr.unit * static_cast<float>(c) - static_cast<float>(gr.zero)) * gr.step;
}

int int4_code(const KVInt4Grid& gr, float x) {
  // Clamped as a float: a value far outside the grid (a group of huge values) must not overflow
  // the conversion to int.
  return static_cast<int>(std::clamp(std::nearbyint((x - gr.lo) * gr.inv), 0.0f, 15.0f));
}

void quantize_int4_group(const float* x, int g, uint8_t* codes, uint16_t* scale, int8_t* zero) {
  const int half = (g + 1) / 2;
  std::memset(codes, 0, static_cast<size_t>(half));
  if (!all_finite(x, g)) {
    *scale = kFp16NaN;
    *zero = 0;
    return;
  }
  KVInt4Grid grids[kKVInt4MaxGrids];
  const int n = kv_int4_grids(x, g, grids);
  const KVInt4Grid& gr = grids[kv_int4_best_grid(
      grids, n, [&](const KVInt4Grid& c) { return kv_int4_sq_error(x, g, c); })];
  *scale = gr.scale;
  *zero = gr.zero;
  if (gr.s == 0.0f) return;  // an all-zero group (or one whose values underflow fp16's scales)
  for (int i = 0; i < g; ++i)
    codes[i % half] |= static_cast<uint8_t>(int4_code(gr, x[i]) << (i < half ? 0 : 4));
}

}  // namespace

uint16_t kv_row_scale(KVDType t, const float* x, int n) {
  switch (t) {
    case KVDType::Int8:
      return row_scale(x, n, 127.0f);
    case KVDType::FP8E4M3:
      return row_scale(x, n, kE4M3.max_finite);
    case KVDType::FP8E5M2:
      return row_scale(x, n, kE5M2.max_finite);
    default:
      fail("kv_row_scale: {} has no row scale", kv_dtype_name(t));
  }
}

int kv_int4_grids(const float* x, int g, KVInt4Grid* out) {
  // The group's own range lo..hi (0 need not be in it: keys shifted by their calibrated mean,
  // kv/key_transform.h, are not centred on 0 row by row), then the clipped ranges
  // lo + a r .. hi - b r (a, b in {0, 3%, 6%, 10%} of the range r), as llama.cpp's k-quants
  // search their scales (stories260K int4 keys: +2.4% -> +2.15% ΔPPL in tools/kv-sim).
  float lo = x[0];
  float hi = x[0];
  for (int i = 1; i < g; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float r = hi - lo;
  if (r == 0.0f) {  // nothing to clip
    out[0] = int4_grid(lo, hi);
    return 1;
  }
  static constexpr float kClip[] = {0.0f, 0.03f, 0.06f, 0.1f};
  int n = 0;
  for (float a : kClip)
    for (float b : kClip) out[n++] = int4_grid(lo + a * r, hi - b * r);
  return n;
}

float kv_int4_sq_error(const float* x, int g, const KVInt4Grid& gr) {
  if (gr.s == 0.0f) return 0.0f;
  float lane[8] = {};
  for (int i = 0; i < g; ++i) {
    const float e = x[i] - fl_int4_value(gr, int4_code(gr, x[i]));
    lane[i % 8] += e * e;
  }
  float sum = 0.0f;
  for (float v : lane) sum += v;
  return sum;
}

uint8_t fp32_to_e4m3(float f) {
  return fp32_to_fp8(f, kE4M3);
}
uint8_t fp32_to_e5m2(float f) {
  return fp32_to_fp8(f, kE5M2);
}
float e4m3_to_fp32(uint8_t c) {
  return fp8_to_fp32(c, kE4M3);
}
float e5m2_to_fp32(uint8_t c) {
  return fp8_to_fp32(c, kE5M2);
}

uint16_t fp32_to_fp16_round_up(float f) {
  if (!(f > 0.0f)) return 0;
  if (f >= 65504.0f) return 0x7bff;
  uint16_t h = fp32_to_fp16(f);
  if (fp16_to_fp32(h) < f) ++h;  // positive fp16 codes are ordered like their values
  return h;
}

bool kv_rotates_keys(KVDType t) {
  return t == KVDType::Int8 || t == KVDType::Int4;
}

int kv_rotation_block(int head_dim) {
  int b = 1;
  while (head_dim % (2 * b) == 0) b *= 2;
  return b;
}

void kv_rotate_key(float* x, int head_dim) {
  const int b = kv_rotation_block(head_dim);
  if (b == 1) return;
  const float norm = 1.0f / std::sqrt(static_cast<float>(b));
  for (int base = 0; base < head_dim; base += b) {
    float* y = x + base;
    for (int len = 1; len < b; len *= 2) {
      for (int i = 0; i < b; i += 2 * len) {
        for (int j = i; j < i + len; ++j) {
          const float u = y[j];
          const float v = y[j + len];
          y[j] = u + v;
          y[j + len] = u - v;
        }
      }
    }
    for (int i = 0; i < b; ++i) y[i] *= norm;
  }
}

std::string_view kv_dtype_name(KVDType t) {
  switch (t) {
    case KVDType::F32:
      return "f32";
    case KVDType::F16:
      return "f16";
    case KVDType::Int8:
      return "int8";
    case KVDType::FP8E4M3:
      return "fp8_e4m3";
    case KVDType::FP8E5M2:
      return "fp8_e5m2";
    case KVDType::Int4:
      return "int4";
  }
  return "?";
}

std::optional<KVDType> kv_dtype_from_name(std::string_view name) {
  std::string n(name);
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n == "f32" || n == "fp32") return KVDType::F32;
  if (n == "f16" || n == "fp16") return KVDType::F16;
  if (n == "int8" || n == "q8_0") return KVDType::Int8;
  if (n == "fp8" || n == "fp8_e4m3" || n == "e4m3") return KVDType::FP8E4M3;
  if (n == "fp8_e5m2" || n == "e5m2") return KVDType::FP8E5M2;
  if (n == "int4" || n == "q4_0") return KVDType::Int4;
  return std::nullopt;
}

std::string_view kv_dtype_choices() {
  return "f16, f32, int8 (or q8_0), fp8 (= fp8_e4m3), fp8_e5m2, int4 (or q4_0)";
}

bool kv_dtype_is_quantized(KVDType t) {
  return t != KVDType::F32 && t != KVDType::F16;
}

std::string KVCacheType::name() const {
  if (k == v) return std::string(kv_dtype_name(k));
  return "k=" + std::string(kv_dtype_name(k)) + ",v=" + std::string(kv_dtype_name(v));
}

KVRowLayout kv_row_layout(KVDType t, int head_dim) {
  if (head_dim <= 0) fail("KV row: head dim must be > 0, got {}", head_dim);
  const size_t d = static_cast<size_t>(head_dim);
  KVRowLayout r;
  r.group = head_dim;
  r.n_groups = 1;
  switch (t) {
    case KVDType::F32:
      r.code_bytes = 4 * d;
      break;
    case KVDType::F16:
      r.code_bytes = 2 * d;
      break;
    case KVDType::Int8:
    case KVDType::FP8E4M3:
    case KVDType::FP8E5M2:
      r.code_bytes = d;
      r.meta_bytes = 2;
      break;
    case KVDType::Int4: {
      r.group = std::min(head_dim, kInt4Group);
      r.n_groups = (head_dim + r.group - 1) / r.group;
      const int full = head_dim / r.group;
      const int tail = head_dim - full * r.group;
      r.code_bytes = static_cast<size_t>(full) * static_cast<size_t>((r.group + 1) / 2) +
                     static_cast<size_t>((tail + 1) / 2);
      r.meta_bytes = 3 * static_cast<size_t>(r.n_groups);
      break;
    }
  }
  return r;
}

void kv_quantize_row(KVDType t, const float* x, int head_dim, void* codes, void* meta) {
  const KVRowLayout L = kv_row_layout(t, head_dim);
  switch (t) {
    case KVDType::F32:
      std::memcpy(codes, x, L.code_bytes);
      return;
    case KVDType::F16: {
      auto* h = static_cast<uint16_t*>(codes);
      for (int i = 0; i < head_dim; ++i) h[i] = fp32_to_fp16(x[i]);
      return;
    }
    case KVDType::Int8: {
      const uint16_t sh = row_scale(x, head_dim, 127.0f);
      std::memcpy(meta, &sh, 2);
      auto* c = static_cast<int8_t*>(codes);
      const float s = fp16_to_fp32(sh);
      for (int i = 0; i < head_dim; ++i) {
        c[i] = (s > 0.0f && std::isfinite(s))
                   ? static_cast<int8_t>(std::clamp(std::nearbyint(x[i] / s), -127.0f, 127.0f))
                   : 0;
      }
      return;
    }
    case KVDType::FP8E4M3:
    case KVDType::FP8E5M2: {
      const bool e4 = t == KVDType::FP8E4M3;
      const uint16_t sh = row_scale(x, head_dim, e4 ? kE4M3.max_finite : kE5M2.max_finite);
      std::memcpy(meta, &sh, 2);
      auto* c = static_cast<uint8_t*>(codes);
      const float s = fp16_to_fp32(sh);
      for (int i = 0; i < head_dim; ++i) {
        const float y = (s > 0.0f && std::isfinite(s)) ? x[i] / s : 0.0f;
        c[i] = e4 ? fp32_to_e4m3(y) : fp32_to_e5m2(y);
      }
      return;
    }
    case KVDType::Int4: {
      auto* c = static_cast<uint8_t*>(codes);
      auto* m = static_cast<uint8_t*>(meta);
      auto* zeros = reinterpret_cast<int8_t*>(m + 2 * static_cast<size_t>(L.n_groups));
      for (int gi = 0; gi < L.n_groups; ++gi) {
        const int g0 = gi * L.group;
        const int g = std::min(L.group, head_dim - g0);
        uint16_t sh;
        quantize_int4_group(x + g0, g, c, &sh, zeros + gi);
        std::memcpy(m + 2 * gi, &sh, 2);
        c += (g + 1) / 2;
      }
      return;
    }
  }
}

void kv_dequantize_row(KVDType t, const void* codes, const void* meta, int head_dim, float* out) {
  const KVRowLayout L = kv_row_layout(t, head_dim);
  auto scale_at = [&](int i) {
    uint16_t sh;
    std::memcpy(&sh, static_cast<const uint8_t*>(meta) + 2 * i, 2);
    return fp16_to_fp32(sh);
  };
  switch (t) {
    case KVDType::F32:
      std::memcpy(out, codes, L.code_bytes);
      return;
    case KVDType::F16: {
      const auto* h = static_cast<const uint16_t*>(codes);
      for (int i = 0; i < head_dim; ++i) out[i] = fp16_to_fp32(h[i]);
      return;
    }
    case KVDType::Int8: {
      const float s = scale_at(0);
      const auto* c = static_cast<const int8_t*>(codes);
      for (int i = 0; i < head_dim; ++i) out[i] = static_cast<float>(c[i]) * s;
      return;
    }
    case KVDType::FP8E4M3:
    case KVDType::FP8E5M2: {
      const float s = scale_at(0);
      const auto* c = static_cast<const uint8_t*>(codes);
      const bool e4 = t == KVDType::FP8E4M3;
      for (int i = 0; i < head_dim; ++i)
        out[i] = (e4 ? e4m3_to_fp32(c[i]) : e5m2_to_fp32(c[i])) * s;
      return;
    }
    case KVDType::Int4: {
      const auto* c = static_cast<const uint8_t*>(codes);
      const auto* zeros = reinterpret_cast<const int8_t*>(static_cast<const uint8_t*>(meta) +
                                                          2 * static_cast<size_t>(L.n_groups));
      for (int gi = 0; gi < L.n_groups; ++gi) {
        const int g0 = gi * L.group;
        const int g = std::min(L.group, head_dim - g0);
        const int half = (g + 1) / 2;
        uint16_t sh;
        std::memcpy(&sh, static_cast<const uint8_t*>(meta) + 2 * gi, 2);
        const Int4Step st = int4_step(sh);
        const int z = zeros[gi];
        for (int i = 0; i < g; ++i) {
          const int q = (c[i % half] >> (i < half ? 0 : 4)) & 0xf;
          out[g0 + i] = int4_value(q, st, z);
        }
        c += half;
      }
      return;
    }
  }
}

}  // namespace kvasir
