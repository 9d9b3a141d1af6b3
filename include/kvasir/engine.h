// The serving engine's public API: submit requests, receive a stream of outputs, abort.
//
// An Engine owns the paged KV cache of one model (whose weights it only reads: several engines
// may share one Model) and runs one step loop on its own thread: every step the scheduler picks
// a token budget's worth of work (running decodes first, then chunked prefills of waiting
// prompts), the model runner runs it as one Batch and samples the next token of each sequence
// that finished its prompt, and the engine updates every sequence from that output. Outputs are
// delivered to each request's sink from the engine thread, in order; the last output of a
// request has finished = true.
//
// Thread safety: submit(), abort(), stats() and set_step_observer() may be called from any
// thread.
// A sink must be quick and must not call back into the engine (it may call abort() — that is
// queued). Nothing a client does can fail a step: bad requests are refused at submit().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/sampling/sampling_params.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

class Model;
class Proposer;
class Tokenizer;
struct KeyTransform;

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort"

// Speculative decoding (spec/): a proposer guesses up to K tokens after each decoding sequence's
// last one, the target scores all of them in the step's one pass, and the rejection sampler keeps
// the longest prefix the target agrees with plus one token of its own, so the output follows the
// target's distribution exactly (token for token when greedy). An AcceptanceMonitor falls back to
// plain decoding while acceptance stays below warn_acceptance, and re-probes.
enum class SpecMethod { kNone, kDraft, kNgram };
const char* spec_method_name(SpecMethod m);  // "none", "draft", "ngram"

struct SpecConfig {
  SpecMethod method = SpecMethod::kNone;
  const Model* draft = nullptr;  // kDraft: shares the target's vocabulary (checked)
  int k = 4;                     // draft tokens per step; 0: auto (chosen from measurements)
  int k_max = 8;                 // auto's ceiling
  int ngram_min = 1, ngram_max = 4;
  double warn_acceptance = 0.60;  // warn and fall back below this acceptance rate ...
  int window = 64;                // ... over this many proposals
  int reprobe_steps = 512;        // plain steps between probes while fallen back
  int probe = 16;                 // proposals a probe judges
  int64_t draft_kv_blocks = 0;    // the draft's KV blocks; 0: as many as the target's
  // A proposer of the caller's (tests and benchmarks: e.g. one that replays known output); used
  // instead of `method` when set.
  std::shared_ptr<Proposer> proposer;
  // Tests only: on rejection draw from p instead of max(0, p - q), to show a distribution test
  // catches it.
  bool broken_rejection_for_tests = false;
  bool enabled() const { return method != SpecMethod::kNone || proposer != nullptr; }
};

struct EngineConfig {
  int max_seqs = 64;             // sequences running at once
  int max_batched_tokens = 512;  // tokens per step (decodes + prefill chunks)
  int max_model_len = 0;         // context per sequence; 0: the model's training context
  int64_t kv_blocks = 0;         // KV cache size in blocks; 0: enough for max_seqs full contexts
  int block_size = 16;
  KVCacheType kv_type{};
  bool prefix_caching = true;
  bool static_batching = false;  // for comparison only: admit a new batch only when all finished
  bool static_padding = true;    // ... and keep finished rows in the batch (padding) until then
  int threads = 0;               // compute threads; 0: all cores
  double kv_warn_ratio = 0.90;   // warn (log + metric) above this KV usage
  SpecConfig spec;
  // Quantized keys (int8, fp8, int4 K) are stored through this key transform (kv/key_transform.h,
  // engine/key_calibration.h; null: as they are). A draft model's cache takes none.
  std::shared_ptr<const KeyTransform> key_transform;
};

// Embeddings: how the final-norm hidden states of a sequence's tokens (Model::forward's hidden
// rows) become one vector. kNone (llama.cpp's pooling "none": one vector per token) cannot make one
// vector; it exists for configuration (a GGUF's pooling_type, --pooling) and is refused in a
// request. Names and parsing: engine/pooling.h.
enum class Pooling { kNone, kMean, kCls, kLast };

struct EmbeddingParams {
  Pooling pooling = Pooling::kMean;  // kMean: mean of every token's row; kCls: the first token's
                                     // (position 0); kLast: the last token's
  bool normalize = true;             // divide by the L2 norm (a zero vector stays zero)
  int dimensions = 0;  // > 0: keep only the first `dimensions` values (before normalizing); <= dim
};

// Prompt scoring (GenerateRequest::score_prompt): how uncertain the model is over a prompt, from
// its raw logits (temperature 1, no penalties, bias or grammar). A router asks a small model for
// it to decide whether a request needs a larger one. Computed by engine/prompt_scorer.h.
struct PromptScore {
  int n = 0;                // positions scored: the prompt's tokens after the first (n_prompt - 1)
  double mean_entropy = 0;  // mean over those positions of H(softmax(logits at position i-1)), nats
  double mean_nll = 0;  // mean of -log p(prompt[i] | prompt[<i]), nats (prompt perplexity = exp)
};

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids (the server applies templates and tokenizes)
  SamplingParams params;
  std::string api_key;     // for accounting only
  bool detokenize = true;  // produce text (with stop strings) as well as tokens
  bool strip_leading_space = false;
  // Control tokens' text appears in the output text (tool-call markers such as [TOOL_CALLS] or
  // <|python_tag|> are control tokens in their vocabularies); end-of-generation tokens never do.
  bool render_special = false;
  bool speculative = true;  // false: this request decodes plainly even when the engine speculates
  // Constrained decoding (grammar/): a GBNF grammar (llama.cpp's dialect, start rule `root`) the
  // output must follow. Before each sample the tokens the grammar does not admit next are removed
  // (as a logit_bias of -inf would: processed logprobs see the mask, raw ones do not); an
  // end-of-generation token is admitted only where the grammar is complete, and the request
  // finishes (stop) as soon as the grammar is complete and admits nothing more. Empty: none.
  // submit() throws kvasir::Error for a grammar that does not parse. Constrained requests do not
  // speculate. Compiled grammars and their token-mask caches are shared by requests with the same
  // text (the engine keeps the most recent ones).
  std::string grammar;
  // Embeddings: when set, the request only computes its prompt (prefill, chunked and batched with
  // other work; the prompt may fill the whole context) and finishes (stop) with
  // RequestOutput::embedding; nothing is sampled, no token is generated, `params`, `grammar` and
  // the text options are unused. Its K/V are neither taken from nor given to the prefix cache
  // (every token's hidden state is computed; the blocks are freed when it finishes). The vector
  // does not depend on the batch, the chunking or preemptions: rows are pooled in position order,
  // and the mean is a double-precision sum in that order. submit() throws kvasir::Error for
  // pooling kNone or dimensions outside [0, dim].
  std::optional<EmbeddingParams> embedding;
  // Prompt scoring: prefill only: the prompt's PromptScore under this model; no token is generated.
  // The prompt is computed like any prompt (chunked, batched with other work; it may fill the
  // whole context) and the request finishes (stop) with RequestOutput::prompt_score,
  // completion_tokens 0. Every position's logits are needed, so it takes no prefix-cache hits
  // (cached_tokens 0: it computes the whole prompt), but its full blocks are published to the
  // prefix cache as a generation's are, so a later request with the same prompt finds them. The
  // score does not depend on the batch, the chunking or preemptions (rows are scored in position
  // order, summed in double). `params` are not used (temperature, truncation, seed, max_tokens and
  // stop conditions are ignored), nor are the text options and `speculative`. submit() throws
  // kvasir::Error when it is combined with `embedding` or `grammar`, or with params that would
  // change the logits or ask for per-token output (logit_bias, penalties, logprobs): the score is
  // of the raw logits, and no token is produced.
  bool score_prompt = false;
};

struct TokenInfo {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

struct RequestOutput {
  uint64_t id = 0;
  std::vector<TokenInfo> tokens;  // tokens produced since the previous output
  std::string text;               // text completed since the previous output (stop-aware)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // set when the engine had to fail the request
  // Embedding requests: the pooled vector, on the final output (finish reason stop).
  std::vector<float> embedding;
  // Prompt-scoring requests: the score, on the final output (finish reason stop).
  std::optional<PromptScore> prompt_score;
  // Usage, cumulative; complete on the final output.
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache
  int completion_tokens = 0;
  // Timing (seconds since submit): first token, and queue time before first scheduled.
  double ttft = 0;
  double queue_time = 0;
  // Speculative decoding, cumulative: draft tokens the target judged, those it accepted, and
  // target passes that verified a proposal (each also yields one token of the target's own).
  int spec_proposed = 0;
  int spec_accepted = 0;
  int spec_passes = 0;
};

using OutputSink = std::function<void(const RequestOutput&)>;

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  double kv_usage = 0;  // used / total
  uint64_t preemptions = 0;
  uint64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hits = 0;     // prompt tokens found there
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t padding_tokens = 0;  // rows computed for padded static batching (comparison mode)
  uint64_t steps = 0;
  // Where the engine thread's time goes under load: busy_seconds is the wall time of its loop
  // iterations that had work (scheduling, the model step, handing out tokens, stats);
  // forward_seconds the part inside the model runner (the forward pass and sampling). The
  // difference is the per-step overhead around the model.
  double busy_seconds = 0;
  double forward_seconds = 0;
  // KV pressure warnings logged: one when usage crosses EngineConfig::kv_warn_ratio, then at most
  // one per 30 s while it stays above (crossings in between are counted into the next one).
  uint64_t kv_pressure_warnings = 0;
  // Speculative decoding (all zero when off): draft tokens judged and accepted, verification
  // passes (per sequence) and the tokens they produced, the acceptance rate over the monitor's
  // window, whether it has fallen back to plain decoding, warnings (entries into fallback),
  // probes, and the K of the last step.
  SpecMethod spec_method = SpecMethod::kNone;
  uint64_t spec_proposed = 0;
  uint64_t spec_accepted = 0;
  uint64_t spec_passes = 0;
  uint64_t spec_emitted = 0;
  double spec_window_acceptance = 0;
  bool spec_fallback = false;
  uint64_t spec_warnings = 0;
  uint64_t spec_probes = 0;
  int spec_k = 0;
  // Constrained decoding: token masks computed (cache misses: one walk of the vocabulary trie)
  // and served from a grammar's mask cache, and the time spent computing and applying masks.
  uint64_t grammar_masks_computed = 0;
  uint64_t grammar_mask_cache_hits = 0;
  double grammar_seconds = 0;
};

class Engine {
 public:
  // Plans the KV cache and starts the step loop. Throws kvasir::Error when the plan cannot hold
  // one full-length sequence.
  Engine(const Model& model, const Tokenizer& tokenizer, const EngineConfig& config);
  ~Engine();  // stops the loop; unfinished requests are finished with kAbort
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Returns its id, or throws kvasir::Error with a user-facing message when
  // the request can never be served (empty prompt, prompt + max_tokens beyond the context,
  // invalid sampling parameters, token ids out of range).
  uint64_t submit(GenerateRequest request, OutputSink sink);
  // Aborts a request (queued or running); its sink receives a final kAbort output. Unknown ids
  // are ignored.
  void abort(uint64_t id);

  EngineStats stats() const;
  const EngineConfig& config() const;
  int max_model_len() const;
  // The kernel backend running the model, e.g. "cpu (AVX3, 2 threads)" (Backend::description).
  std::string backend_description() const;
  // Called (engine thread) after every step with the stats as they are then, for metrics.
  void set_step_observer(std::function<void(const EngineStats&)> fn);

  // Blocks until no request is queued or running (tests, benchmarks).
  void wait_idle();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir
