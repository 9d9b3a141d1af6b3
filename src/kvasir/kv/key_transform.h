// The key transform of a quantized KV cache: per layer and KV head, a constant shift m and a
// per-channel scale s, so that the cache stores k' = (k - m) / s instead of the post-RoPE key k
// and every query is read as q' = q * s.
//
// Why it is exact: q' . k' = q . k - q . m. The second term is the same for every key a query
// scores, and softmax ignores a constant added to all scores, so the attention output is that of
// the untransformed keys in real arithmetic (only rounding differs). What it buys: RoPE'd keys
// carry large per-channel means (stories260K's last layer has channel means of -3.9, 2.7, -2.5
// in its slow RoPE channels), and with one scale per row those means set every row's range;
// shifting them out, and evening out the channels' spreads with s, leaves the row's quantization
// step for the information that varies. kvasir perplexity, stories260K, ctx 256, K and V in the
// dtype, shift made for that context: fp8 e4m3 +0.99% -> +0.47% ΔPPL, int4 +26.4% -> +2.8% (shift
// and scale). A shift made for one context can hurt another, so the transform is opt-in
// (engine/key_calibration.h has the figures).
//
// The constants come from a calibration text run through the model once (engine/
// key_calibration.h), and are handed to the cache by its owner (ModelRunnerOptions::
// key_transform); they are fixed for the life of the cache, so a row's codes still depend
// only on that row: batch invariance and prefix caching hold unchanged. A transform is a property
// of the stored rows, like the format's rotation (tensor/kv_quant.h): kv_write applies it before
// quantizing and attention applies q * s before scoring; values are never transformed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

struct KeyTransform {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // [layer][kv head][channel]: subtracted from each key before it is stored.
  std::vector<float> shift;
  // Same shape, or empty (s = 1): keys are divided by it, queries multiplied. Every entry is
  // finite and > 0.
  std::vector<float> scale;
  // Where the constants came from, for reports ("the built-in calibration text, 1357 tokens,
  // shift for positions < 256").
  std::string source;

  size_t layer_stride() const {
    return static_cast<size_t>(n_kv_heads) * static_cast<size_t>(head_dim);
  }
  const float* layer_shift(int l) const { return shift.data() + layer_stride() * l; }
  const float* layer_scale(int l) const {
    return scale.empty() ? nullptr : scale.data() + layer_stride() * l;
  }
  // Throws kvasir::Error unless the vectors match the shape, every shift is finite and every
  // scale finite and > 0.
  void validate() const;
};

// What a K dtype uses of the transform: f16/f32 keys are stored as they are (none); int8 and fp8
// keys get the shift (their error is relative to each row's largest value, or to each value, so
// evening out channels does not help them: tools/kv-sim); int4 keys get shift and scale.
enum class KeyTransformKind { kNone, kShift, kShiftAndScale };
KeyTransformKind key_transform_kind(KVDType k);

}  // namespace kvasir
