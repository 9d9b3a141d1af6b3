// Contraction off: ggml's reference quantizers are built without FMA, so x * id + 8.5f must stay
// two roundings here even if this file is ever compiled for an FMA-capable baseline.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kvasir/tensor/quantize.h"

#include <cmath>
#include <cstring>

#include "kvasir/tensor/quant_iq4.h"
#include "kvasir/tensor/quant_k.h"
#include "kvasir/tensor/quant_legacy.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

// Float -> small integer conversions that equal C's (int8_t) cast for every value the quantizers
// produce from finite input, and stay defined (no UB) for NaN or out-of-range values.
inline int8_t round_to_q8(float v) {
  float r = std::roundf(v);  // ties away from zero, as ggml's reference uses
  if (!(r >= -128.0f)) r = (r == r) ? -128.0f : 0.0f;
  if (r > 127.0f) r = 127.0f;
  return static_cast<int8_t>(r);
}

// min(15, trunc(v)) for v >= 0; 0 for NaN and v < 0 (only reachable from non-finite input).
inline uint8_t trunc_to_q4(float v) {
  if (!(v >= 0.0f)) return 0;
  if (v > 15.0f) return 15;
  return static_cast<uint8_t>(static_cast<int>(v));
}

void check_supported(DType t, int64_t n, const char* what) {
  if (!has_reference_quantizer(t)) {
    fail(
        "{}: dtype {} has no reference quantizer (supported: f32, f16, bf16, q8_0, q4_0, q4_1, "
        "q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs)",
        what, dtype_name(t));
  }
  const int bs = dtype_info(t).block_size;
  if (n < 0 || n % bs != 0) {
    fail("{}: row length {} is not a multiple of the {} block size {}", what, n, dtype_name(t), bs);
  }
}

}  // namespace

bool has_reference_quantizer(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

bool uses_importance(DType t) {
  return has_reference_quantizer(t) && t != DType::F32 && t != DType::F16 && t != DType::BF16 &&
         t != DType::Q8_0;
}

namespace {
enum class Family { kHere, kLegacy, kK, kIq4 };
Family family(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      return Family::kLegacy;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return Family::kK;
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return Family::kIq4;
    default:
      return Family::kHere;
  }
}
}  // namespace

void quantize_rows(DType t, const float* x, void* out, int64_t rows, int64_t cols,
                   const float* importance) {
  check_supported(t, cols, "quantize_rows");
  if (rows < 0) fail("quantize_rows: negative row count {}", rows);
  if (!uses_importance(t)) importance = nullptr;
  // The importance-weighted Q4_0 is ggml's quantize_row_q4_0_impl, next to the other legacy ones.
  const Family f = t == DType::Q4_0 && importance != nullptr ? Family::kLegacy : family(t);
  switch (f) {
    case Family::kLegacy:
      return quantize_rows_legacy(t, x, out, rows, cols, importance);
    case Family::kK:
      return quantize_rows_k(t, x, out, rows, cols, importance);
    case Family::kIq4:
      return quantize_rows_iq4(t, x, out, rows, cols, importance);
    case Family::kHere:
      break;
  }
  const size_t rb = row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(t, x + r * cols, static_cast<uint8_t*>(out) + static_cast<size_t>(r) * rb, cols);
}

void quantize_block_q8_0(const float* x, BlockQ8_0* out) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;  // same operand order as ggml's MAX(amax, fabsf(v))
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  out->d = fp32_to_fp16(d);
  for (int j = 0; j < kQK8_0; ++j) out->qs[j] = round_to_q8(x[j] * id);
}

float quantize_superblock_q8(const float* x, int8_t* codes) {
  constexpr int kN = 256;
  float amax = 0.0f;
  for (int j = 0; j < kN; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kN; ++j) codes[j] = round_to_q8(x[j] * id);
  return d;
}

void quantize_block_q4_0(const float* x, BlockQ4_0* out) {
  // The first value of largest magnitude, with its sign.
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQK4_0; ++j) {
    const float a = std::fabs(x[j]);
    if (amax < a) {
      amax = a;
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  out->d = fp32_to_fp16(d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const uint8_t lo = trunc_to_q4(x[j] * id + 8.5f);
    const uint8_t hi = trunc_to_q4(x[j + kQK4_0 / 2] * id + 8.5f);
    out->qs[j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

void quantize_row(DType t, const float* x, void* out, int64_t n) {
  check_supported(t, n, "quantize_row");
  if (family(t) != Family::kHere) return quantize_rows(t, x, out, 1, n, nullptr);
  switch (t) {
    case DType::F32:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::F16: {
      auto* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_fp16(x[i]);
      break;
    }
    case DType::BF16: {
      auto* o = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_bf16(x[i]);
      break;
    }
    case DType::Q8_0: {
      auto* o = static_cast<BlockQ8_0*>(out);
      for (int64_t b = 0; b < n / kQK8_0; ++b) quantize_block_q8_0(x + b * kQK8_0, o + b);
      break;
    }
    case DType::Q4_0: {
      auto* o = static_cast<BlockQ4_0*>(out);
      for (int64_t b = 0; b < n / kQK4_0; ++b) quantize_block_q4_0(x + b * kQK4_0, o + b);
      break;
    }
    default:
      break;  // rejected by check_supported
  }
}

void dequantize_row(DType t, const void* in, float* out, int64_t n) {
  check_supported(t, n, "dequantize_row");
  switch (family(t)) {
    case Family::kLegacy:
      return dequantize_row_legacy(t, in, out, n);
    case Family::kK:
      return dequantize_row_k(t, in, out, n);
    case Family::kIq4:
      return dequantize_row_iq4(t, in, out, n);
    case Family::kHere:
      break;
  }
  switch (t) {
    case DType::F32:
      std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(in);
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
      break;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(in);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(h[i]);
      break;
    }
    case DType::Q8_0: {
      const auto* blocks = static_cast<const BlockQ8_0*>(in);
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const float d = fp16_to_fp32(blocks[b].d);
        for (int j = 0; j < kQK8_0; ++j)
          out[b * kQK8_0 + j] = static_cast<float>(blocks[b].qs[j]) * d;
      }
      break;
    }
    case DType::Q4_0: {
      const auto* blocks = static_cast<const BlockQ4_0*>(in);
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const float d = fp16_to_fp32(blocks[b].d);
        float* o = out + b * kQK4_0;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          o[j] = static_cast<float>((blocks[b].qs[j] & 0x0f) - 8) * d;
          o[j + kQK4_0 / 2] = static_cast<float>((blocks[b].qs[j] >> 4) - 8) * d;
        }
      }
      break;
    }
    default:
      break;
  }
}

std::vector<uint8_t> quantize_tensor(DType t, const float* x, int64_t rows, int64_t cols) {
  check_supported(t, cols, "quantize_tensor");
  if (rows < 0) fail("quantize_tensor: negative row count {}", rows);
  std::vector<uint8_t> out(row_bytes(t, cols) * static_cast<size_t>(rows));
  quantize_rows(t, x, out.data(), rows, cols, nullptr);
  return out;
}

}  // namespace kvasir
