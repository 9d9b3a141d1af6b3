// kv_write(): stores new K/V rows into their paged-cache slots (contract in attention.h).
// The quantized formats go through the reference quantizer of tensor/kv_quant.h, keys after
// their transform ((k - shift) / scale, kv/key_transform.h) and then their rotation
// (kv_rotate_key).
//
// F16 uses the F16C conversion (round to nearest even) on AVX2/AVX-512. It matches
// kvasir::fp32_to_fp16 bit for bit except for NaN payloads, so NaN lanes are first replaced by a
// quiet NaN of the same sign whose conversion is exactly fp32_to_fp16's 0x7e00 | sign. The scalar
// target (no F16C) calls fp32_to_fp16 directly.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvasir/kernels/cpu/attention.h"
#include "kvasir/util/error.h"

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kvasir/kernels/cpu/attention_kv_write.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvasir::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void F32ToF16Row(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t n) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  const auto sign = hn::BitCast(df, hn::Set(du, 0x80000000u));
  const auto qnan = hn::BitCast(df, hn::Set(du, 0x7fc00000u));
  auto* out = reinterpret_cast<hwy::float16_t*>(dst);
  for (; i + N <= n; i += N) {
    auto v = hn::LoadU(df, src + i);
    v = hn::IfThenElse(hn::IsNaN(v), hn::Or(hn::And(v, sign), qnan), v);
    hn::StoreU(hn::DemoteTo(dh, v), dh, out + i);
  }
#endif
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

// One row (token, KV head) of K or V into its tile (block, head): codes at row `offset`, then,
// for the quantized formats, its scales after the tile's block_size rows of codes.
void WriteRow(KVDType type, const float* HWY_RESTRICT src, int dim, uint8_t* tile, int bs,
              size_t offset) {
  switch (type) {
    case KVDType::F16:
      F32ToF16Row(src, reinterpret_cast<uint16_t*>(tile) + offset * dim, static_cast<size_t>(dim));
      return;
    case KVDType::F32: {
      float* d = reinterpret_cast<float*>(tile) + offset * dim;
      for (int i = 0; i < dim; ++i) d[i] = src[i];
      return;
    }
    default: {
      // The reference quantizer (tensor/kv_quant.cc): a step adds few rows, and it defines the
      // format bit for bit.
      const KVRowLayout L = kv_row_layout(type, dim);
      kv_quantize_row(type, src, dim, tile + offset * L.code_bytes,
                      tile + static_cast<size_t>(bs) * L.code_bytes + offset * L.meta_bytes);
      return;
    }
  }
}

void KVWriteImpl(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
                 int64_t n_tokens) {
  const int dim = kv.head_dim;
  const size_t row = static_cast<size_t>(kv.n_kv_heads) * static_cast<size_t>(dim);
  const size_t k_tile = kv.k_tile_bytes();
  const size_t v_tile = kv.v_tile_bytes();
  const bool rotate = kv_rotates_keys(kv.k_type);
  const bool transform = kv.k_shift != nullptr;
  // Scratch for one transformed key row, per thread, grown once: nothing is allocated per step.
  static thread_local std::vector<float> key;
  if ((rotate || transform) && key.size() < static_cast<size_t>(dim))
    key.resize(static_cast<size_t>(dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const size_t block = static_cast<size_t>(slots[t] / kv.block_size);
    const size_t offset = static_cast<size_t>(slots[t] % kv.block_size);
    for (int g = 0; g < kv.n_kv_heads; ++g) {
      const size_t tile = block * static_cast<size_t>(kv.n_kv_heads) + static_cast<size_t>(g);
      const size_t src = static_cast<size_t>(t) * row + static_cast<size_t>(g) * dim;
      const float* krow = k + src;
      if (transform) {  // the cache's key transform (kv/key_transform.h)
        const float* m = kv.k_shift + static_cast<size_t>(g) * dim;
        const float* sc = kv.k_scale ? kv.k_scale + static_cast<size_t>(g) * dim : nullptr;
        for (int d = 0; d < dim; ++d)
          key[static_cast<size_t>(d)] = sc ? (krow[d] - m[d]) / sc[d] : krow[d] - m[d];
        krow = key.data();
      }
      if (rotate) {  // quantized keys are stored rotated (tensor/kv_quant.h)
        if (krow != key.data()) std::copy(krow, krow + dim, key.begin());
        kv_rotate_key(key.data(), dim);
        krow = key.data();
      }
      WriteRow(kv.k_type, krow, dim, static_cast<uint8_t*>(kv.k) + tile * k_tile, kv.block_size,
               offset);
      WriteRow(kv.v_type, v + src, dim, static_cast<uint8_t*>(kv.v) + tile * v_tile, kv.block_size,
               offset);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvasir::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvasir::cpu {

HWY_EXPORT(KVWriteImpl);

void kv_write(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
              int64_t n_tokens) {
  if (kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0 || kv.n_blocks < 0) {
    fail("kv_write: bad KV layout (block_size {}, n_kv_heads {}, head_dim {}, n_blocks {})",
         kv.block_size, kv.n_kv_heads, kv.head_dim, kv.n_blocks);
  }
  if (n_tokens <= 0) return;
  if (!k || !v || !slots || !kv.k || !kv.v) fail("kv_write: null K/V rows, slots or storage");
  const int64_t n_slots = kv.n_blocks * kv.block_size;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0 || slots[t] >= n_slots) {
      fail("kv_write: token {} has slot {}, outside the cache's {} slots ({} blocks of {})", t,
           slots[t], n_slots, kv.n_blocks, kv.block_size);
    }
  }
  HWY_DYNAMIC_DISPATCH(KVWriteImpl)(kv, k, v, slots, n_tokens);
}

}  // namespace kvasir::cpu
#endif  // HWY_ONCE
