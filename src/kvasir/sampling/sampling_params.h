// SamplingParams: everything one request says about how its next tokens are chosen and when its
// generation stops. Plain data, copied into the request; validate() checks every range and
// returns the first problem as a message naming the field (OpenAI / vLLM field names), so the
// server can answer 400 with it. Sampler (sampler.h) implements the semantics pinned down here:
//
//   temperature        0 (anything below 1e-5, as in vLLM) = greedy: argmax, ties -> lowest id.
//   top_k              -1 or 0 = off; k > 0 keeps exactly the k best tokens (ties -> lowest id).
//   top_p              1 = off; keeps the shortest prefix of the tokens sorted by probability
//                      (ties -> lowest id) whose mass reaches top_p (the token that crosses it is
//                      kept), computed after temperature and top-k, as in vLLM.
//   min_p              0 = off; keeps tokens with p >= min_p * p_max (inclusive).
//   repetition_penalty 1 = off; CTRL / llama.cpp / vLLM style: for every token present in the
//                      penalty window, a positive logit is divided by it, a logit <= 0 is
//                      multiplied by it.
//   frequency_penalty, presence_penalty
//                      0 = off; OpenAI style: logit -= frequency * count + presence * (count > 0).
//   penalty_last_n     how many of the most recent tokens (prompt followed by output) the penalties
//                      look at: -1 = all, 0 = penalties off, N = the last N.
//                      Which tokens count (vLLM's choice): the repetition penalty looks at prompt
//                      and output tokens in the window; frequency and presence count only output
//                      tokens in the window (OpenAI's definition: "tokens generated so far").
//   seed               unset = random (Sampler::seed() reports the one drawn, so a run can be
//                      replayed); the same seed and logits give the same tokens on every machine.
//   max_tokens         -1 = until the context is full; otherwise >= 1.
//   stop, stop_token_ids, ignore_eos
//                      stop strings (see StopMatcher; the stop string is not emitted); extra token
//                      ids that end generation; ignore_eos = an EOS token does not end generation
//                      (it is still sampled and emitted normally, as in vLLM).
//   logprobs, top_logprobs, logprobs_mode
//                      logprobs = return the chosen token's logprob; top_logprobs = also the N
//                      (0..20) most likely tokens. kProcessed (default): log-softmax of the
//                      logits after logit_bias and penalties, before temperature and truncation
//                      (the distribution the model-plus-penalties defines, independent of how it
//                      is then sampled). kRaw: log-softmax of the model's logits untouched.
//   logit_bias         token id -> value added to its logit, in [-100, 100] (OpenAI), or -inf to
//                      ban a token outright.
//
// SamplingDefaults: the defaults a model carries for some of these fields (a Hugging Face
// folder's generation_config.json, a GGUF's general.sampling.* keys; read by the CLI). Each set
// field replaces the built-in default of SamplingParams' field of the same name wherever the
// user (a `kvasir run` flag) or the request (a JSON field) did not choose a value; unset fields
// leave the built-in default alone.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvasir {

enum class LogprobsMode { kProcessed, kRaw };

struct SamplingParams {
  // Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS).
  static constexpr float kGreedyTemperature = 1e-5f;
  static constexpr int32_t kMaxTopLogprobs = 20;
  static constexpr float kMaxLogitBias = 100.0f;
  static constexpr float kMaxFrequencyPresencePenalty = 2.0f;

  float temperature = 1.0f;
  int32_t top_k = -1;
  float top_p = 1.0f;
  float min_p = 0.0f;

  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_last_n = -1;

  std::optional<uint64_t> seed;

  int32_t max_tokens = -1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;

  bool logprobs = false;
  int32_t top_logprobs = 0;
  LogprobsMode logprobs_mode = LogprobsMode::kProcessed;

  std::map<int32_t, float> logit_bias;

  // Returns the first invalid field as "field: what was expected, got what", or nullopt when all
  // are valid. With n_vocab > 0, token ids (logit_bias keys, stop_token_ids) must be < n_vocab.
  std::optional<std::string> validate(int32_t n_vocab = 0) const;

  bool is_greedy() const { return temperature < kGreedyTemperature; }
  bool penalties_enabled() const {
    return penalty_last_n != 0 &&
           (repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f);
  }
  // Whether sampling `token` ends the generation: one of stop_token_ids, or one of the model's
  // EOS / end-of-generation ids unless ignore_eos.
  bool stops_on_token(int32_t token, std::span<const int32_t> eos_token_ids) const;
};

struct SamplingDefaults {
  std::optional<float> temperature;  // 0 when the model asks for greedy (do_sample: false)
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int32_t> penalty_last_n;
  std::optional<int32_t> max_tokens;

  bool empty() const {
    return !temperature && !top_k && !top_p && !min_p && !repetition_penalty && !penalty_last_n &&
           !max_tokens;
  }
  // "temperature 0, top_p 0.9, max_tokens 512" (the set fields, in declaration order), "" when
  // empty.
  std::string describe() const;
};

}  // namespace kvasir
