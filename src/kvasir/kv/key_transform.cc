#include "kvasir/kv/key_transform.h"

#include <cmath>

#include "kvasir/util/error.h"

namespace kvasir {

void KeyTransform::validate() const {
  if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0)
    fail("key transform: bad shape ({} layers, {} KV heads, head dim {})", n_layers, n_kv_heads,
         head_dim);
  const size_t n = layer_stride() * static_cast<size_t>(n_layers);
  if (shift.size() != n)
    fail("key transform: {} shift values, expected {} ({} layers x {} KV heads x {})", shift.size(),
         n, n_layers, n_kv_heads, head_dim);
  if (!scale.empty() && scale.size() != n)
    fail("key transform: {} scale values, expected {} or none", scale.size(), n);
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(shift[i])) fail("key transform: shift {} is not finite", i);
  for (size_t i = 0; i < scale.size(); ++i)
    if (!(std::isfinite(scale[i]) && scale[i] > 0.0f))
      fail("key transform: scale {} is {}, expected a finite value > 0", i, scale[i]);
  if (turn_pairs < 0 || turn_pairs > head_dim / 2)
    fail("key transform: {} turning pairs per head, expected 0 .. {}", turn_pairs, head_dim / 2);
  const size_t n_turn =
      static_cast<size_t>(turn_pairs) * static_cast<size_t>(n_kv_heads) * n_layers;
  if (turn.size() != n_turn)
    fail("key transform: {} turning terms, expected {} ({} layers x {} KV heads x {})", turn.size(),
         n_turn, n_layers, n_kv_heads, turn_pairs);
  for (size_t i = 0; i < n_turn; ++i) {
    const KeyTurn& t = turn[i];
    if (t.a < 0 || t.b < 0 || t.a >= head_dim || t.b >= head_dim || t.a == t.b)
      fail(
          "key transform: turning term {} has channels {} and {}, expected two distinct ones "
          "below {}",
          i, t.a, t.b, head_dim);
    if (!std::isfinite(t.theta) || !std::isfinite(t.mu_a) || !std::isfinite(t.mu_b))
      fail("key transform: turning term {} has a non-finite angle or mean", i);
  }
}

KeyTransformKind key_transform_kind(KVDType k) {
  switch (k) {
    case KVDType::F32:
    case KVDType::F16:
      return KeyTransformKind::kNone;
    case KVDType::Int8:
    case KVDType::FP8E4M3:
    case KVDType::FP8E5M2:
      return KeyTransformKind::kShift;
    case KVDType::Int4:
      return KeyTransformKind::kShiftAndScale;
  }
  return KeyTransformKind::kNone;
}

}  // namespace kvasir
