// Calibration of a quantized KV cache's key transform (kv/key_transform.h): the model runs a
// calibration text once, its post-RoPE keys are read back from an f32 cache, and per layer, KV
// head and channel the shift m and (for int4) the scale s are derived from them.
//
// The shift. RoPE turns each channel pair of a key by an angle that grows with the position, so
// a mean of post-RoPE keys is the mean over the positions it was taken at only. The keys are
// turned back to before RoPE (their positions are known) and averaged there (mu). On the
// kTurnPairs pairs of each head with the largest |mu| the shift turns with the position (mu
// turned by p * theta: the mean key at position p, for any context); channels RoPE leaves alone
// get the constant mu; the other pairs none. Before (a constant shift: mu turned by RoPE's mean
// rotation over the positions 0 .. P-1 it was made for), stories260K, kvasir perplexity, all
// chunks, built-in text, ΔPPL against f16 KV:
//   evaluated at ctx 256:  fp8 e4m3 +0.99% without a shift, +0.47% with P = 256
//   evaluated at ctx 2048: fp8 e4m3 +3.6% without, +13.6% with P = 256, +1.8% with P = 2048;
//                          int4 +33.7% without, +104% with P = 256
// a shift made for one context hurt another, so it was opt-in and bound to a context; the
// turning shift needs no context (figures: bench/NOTES.md, "Quantized KV: the turning key
// shift").
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
// the text, without BOS: each chunk starts with `bos`, or with the text itself when bos < 0), for
// every position; null for a dtype that uses none. `source` names the text in the result. Throws
// kvasir::Error for an empty token list or an id outside the vocabulary.
std::shared_ptr<const KeyTransform> calibrate_key_transform(const Model& model, ThreadPool& pool,
                                                            KVDType k,
                                                            std::span<const int32_t> tokens,
                                                            int32_t bos, std::string source);

// The same over the built-in text, tokenized by the model's tokenizer (BOS as the vocabulary
// asks). Throws kvasir::Error when the model file has no usable tokenizer.
std::shared_ptr<const KeyTransform> calibrate_key_transform(const Model& model, ThreadPool& pool,
                                                            KVDType k);

}  // namespace kvasir
