// Calibration of a quantized KV cache's key transform (kv/key_transform.h): the model runs a
// calibration text once, its post-RoPE keys are read back from an f32 cache, and per layer, KV
// head and channel the shift m and (for int4) the scale s are derived from them.
//
// The shift. RoPE turns each channel pair of a key by an angle that grows with the position, so
// the mean post-RoPE key of a short text is the mean of its positions only. The keys are turned
// back to before RoPE (their positions are known), averaged there (mu), and m is mu turned by
// RoPE's mean rotation over positions 0 .. P-1: the mean key over those positions, the constant
// that leaves the least squared key over them. For a pair that barely turns in P positions
// (RoPE's slow pairs, where the large means are) m is mu; for one that turns many times the
// rotations average out and m goes to 0. Any m is exact (key_transform.h); P decides where it
// helps, and a shift made for one context can hurt another: stories260K (head_dim 8, its large
// means in pairs turning 0.01 and 0.001 a position), kvasir perplexity, all chunks, built-in
// text, ΔPPL against f16 KV:
//   evaluated at ctx 256:  fp8 e4m3 +0.99% without a shift, +0.47% with P = 256
//                          (tools/kv-sim: +0.40% with P = 512, +3.1% with P = 2048)
//   evaluated at ctx 2048: fp8 e4m3 +3.6% without, +13.6% with P = 256, +1.8% with P = 2048;
//                          int4 +33.7% without, +104% with P = 256
// So the transform is opt-in and made for a stated context (kvasir perplexity --kv-calib,
// --kv-calib-positions, default its --ctx). Serving every position with one cache needs the
// keys stored before RoPE, centred there, and turned at read time (KVQuant's pre-RoPE
// quantization): not built.
//
// The scale (int4 only). s is each channel's largest |k - m| over the calibration keys to the
// power kScaleAlpha, divided by the head's geometric mean so that s stays near 1 (SmoothQuant's
// migration, applied between q and k; tools/kv-sim on stories260K: alpha 0.25 / 0.35 / 0.5 / 0.75
// gave +4.1 / +3.2 / +2.4 / +2.8% ΔPPL for int4 keys, and a radius shared by the two channels of
// a RoPE pair +7.8%).
//
// The default text is built in (kvasir/engine/key_calibration_text.cc): a few hundred words of
// narrative, expository, instructional, dialogue and code text in English, tokenized with the
// model's own tokenizer, in chunks of at most kChunkTokens tokens (each from position 0, with BOS
// where the vocabulary adds it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvasir/kv/key_transform.h"
#include "kvasir/model/model.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

inline constexpr int kChunkTokens = 256;
inline constexpr double kScaleAlpha = 0.5;

// The built-in calibration text.
std::string_view key_calibration_text();

// The transform the K dtype `k` uses (key_transform_kind), calibrated on `tokens` (model ids of
// the text, without BOS: each chunk starts with `bos`, or with the text itself when bos < 0) for
// a cache of `positions` positions (0: the model's training context); null for a dtype
// that uses none. `source` names the text in the result. Throws kvasir::Error for an empty token
// list or an id outside the vocabulary.
std::shared_ptr<const KeyTransform> calibrate_key_transform(const Model& model, ThreadPool& pool,
                                                            KVDType k,
                                                            std::span<const int32_t> tokens,
                                                            int32_t bos, std::string source,
                                                            int positions = 0);

// The same over the built-in text, tokenized by the model's tokenizer (BOS as the vocabulary
// asks). Throws kvasir::Error when the model file has no usable tokenizer.
std::shared_ptr<const KeyTransform> calibrate_key_transform(const Model& model, ThreadPool& pool,
                                                            KVDType k, int positions = 0);

}  // namespace kvasir
