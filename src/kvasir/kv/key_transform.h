// The key transform of a quantized KV cache: per layer and KV head, a shift m(p) and a
// per-channel scale s, so that the cache stores k' = (k - m(p)) / s instead of the post-RoPE key k
// at position p, every query is read as q' = q * s, and a score gets q . m(p) back.
//
// Why it is exact: q' . k' + q . m(p) = q . k, for every key, in real arithmetic (only rounding
// differs). What it buys: keys carry large per-channel means (stories260K's last layer has
// channel means of -3.9, 2.7, -2.5 in its slow RoPE channels), and with one scale per row those
// means set every row's range; taking them out, and evening out the channels' spreads with s,
// leaves the row's quantization step for the information that varies.
//
// The shift has two parts. A constant part (channels RoPE does not turn) costs nothing at read
// time: q . m is the same for every key a query scores, and softmax ignores it. The turning part
// follows RoPE: on a few RoPE pairs per head (those with the largest mean before RoPE, mu), it is
// mu turned by p * theta, which is the mean key at every position p, so one calibration holds for
// every context length (a constant shift is the mean over the positions it was made for, and
// hurts other ones: +13.6% ΔPPL at ctx 2048 for one made at 256). Its read cost is q . m(p):
// two multiply-adds per pair per key, over a cos/sin table the KV storage keeps
// (kv/kv_storage.h); kTurnPairs bounds it.
//
// The constants come from a calibration text run through the model once (engine/
// key_calibration.h), and are handed to the cache by its owner (ModelRunnerOptions::
// key_transform); they are fixed for the life of the cache, so a row's codes still depend
// only on that row and its position: batch invariance and prefix caching hold unchanged. A
// transform is a property of the stored rows, like the format's rotation (tensor/kv_quant.h):
// kv_write applies it before quantizing and attention applies q * s and q . m(p) when scoring;
// values are never transformed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

// Turning pairs per (layer, KV head): the read cost is 2 multiply-adds per pair per key, against
// head_dim for the score itself (64 for most models: +12.5%).
inline constexpr int kTurnPairs = 4;

// One turning term of the shift: RoPE pair (a, b), turned by theta per position, with the mean
// (mu_a, mu_b) of the keys before RoPE.
struct KeyTurn {
  int32_t a = 0;
  int32_t b = 0;
  double theta = 0.0;
  float mu_a = 0.0f;
  float mu_b = 0.0f;
};

struct KeyTransform {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // [layer][kv head][channel]: the constant part of the shift, subtracted from each key before it
  // is stored.
  std::vector<float> shift;
  // The turning part: turn_pairs terms per (layer, KV head), [layer][kv head][term]; 0 and empty
  // for none. Calibration picks distinct RoPE pairs of the head; any pairs are exact (each term
  // is taken out on write and given back on read).
  int turn_pairs = 0;
  std::vector<KeyTurn> turn;
  // Same shape, or empty (s = 1): keys are divided by it, queries multiplied. Every entry is
  // finite and > 0.
  std::vector<float> scale;
  // Where the constants came from, for reports ("the built-in calibration text, 1357 tokens").
  std::string source;

  size_t layer_stride() const {
    return static_cast<size_t>(n_kv_heads) * static_cast<size_t>(head_dim);
  }
  const float* layer_shift(int l) const { return shift.data() + layer_stride() * l; }
  const float* layer_scale(int l) const {
    return scale.empty() ? nullptr : scale.data() + layer_stride() * l;
  }
  const KeyTurn* layer_turn(int l) const {
    return turn.empty() ? nullptr : turn.data() + static_cast<size_t>(n_kv_heads) * turn_pairs * l;
  }
  // Throws kvasir::Error unless the vectors match the shape, every shift is finite and every
  // scale finite and > 0, and every turning term names two distinct channels of the head with a
  // finite angle and mean.
  void validate() const;
};

// What a K dtype uses of the transform: f16/f32 keys are stored as they are (none); int8 and fp8
// keys get the shift (their error is relative to each row's largest value, or to each value, so
// evening out channels does not help them: tools/kv-sim); int4 keys get shift and scale.
enum class KeyTransformKind { kNone, kShift, kShiftAndScale };
KeyTransformKind key_transform_kind(KVDType k);

}  // namespace kvasir
