// The model runner: a step's scheduled work → one Batch → forward → logits rows → sampled
// tokens. It is the only place Batches are built (the engine, `kvasir run`, perplexity and the
// benchmark decoders all run through it).
//
// A runner owns what one model needs to run steps: a backend on the caller's thread pool, the
// paged KV storage, the ForwardState, the Batch and the logits rows. It shares the (const) Model:
// several runners can run one set of weights. Block accounting stays with the caller (a
// KVCacheManager or a BlockPool over blocks [0, kv_blocks)): the runner reads block tables and
// never allocates blocks.
//
// Work: each SeqWork computes tokens at positions start .. start + n - 1 of one sequence (a
// prefill chunk, one decode token, or later K+1 verification tokens) whose block table already
// covers them, asks for the logits of its last token, of all its tokens, or none, and may name a
// Sampler that draws a token from its last row. The step's logits rows come in work order. A work
// item may also ask for the final-norm hidden rows (Model::forward) of a range of its tokens
// (embeddings); they come in work order too. Work that asks for none costs nothing extra.
//
// Static padding (comparison mode, ModelRunnerOptions::static_padding): the runner computes a
// padded static batch. The sequences of the first step that holds a sequence it has not seen
// form a batch; a member reported finished keeps a row in every later step (one padding token,
// at the position the sequence would have reached, so its attention context grows as the
// sequence's would) until a step brings a new sequence, i.e. the scheduler started the next
// batch. Padding rows read and write only a block of their own beyond the caller's blocks (their
// results are never used), so they cannot disturb anyone's cache; batch invariance keeps every
// real row's result unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvasir/kernels/backend.h"
#include "kvasir/kv/kv_storage.h"
#include "kvasir/model/batch.h"
#include "kvasir/model/forward_state.h"
#include "kvasir/model/matmul_observer.h"
#include "kvasir/model/model.h"
#include "kvasir/sampling/sampler.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct ModelRunnerOptions {
  int64_t kv_blocks = 0;  // KV blocks the caller hands out
  int block_size = 16;
  KVCacheType kv_type{};
  int max_tokens = 512;     // tokens per step (without padding rows)
  int max_logit_rows = 1;   // logits rows per step
  int max_hidden_rows = 0;  // final-norm hidden rows per step (embeddings; 0: none)
  bool static_padding = false;
  int max_seqs = 0;       // static padding: the most members a batch has
  int max_positions = 0;  // static padding: a padding row's last position + 1
  // Quantized keys (int8, fp8, int4) are stored through this key transform (kv/key_transform.h,
  // calibrated by engine/key_calibration.h for a context); null: as they are. Unused for f16/f32
  // keys. Opt-in: a constant shift suits the context it was made for only (key_calibration.h).
  std::shared_ptr<const KeyTransform> key_transform;
};

enum class Logits { kNone, kLast, kAll };

struct SeqWork {
  uint64_t id = 0;                               // the caller's id for the sequence
  std::span<const int32_t> tokens;               // the tokens to compute
  int start = 0;                                 // position of tokens[0]
  const std::vector<int32_t>* blocks = nullptr;  // covers positions < start + tokens.size()
  Logits logits = Logits::kLast;
  Sampler* sampler = nullptr;         // draws from the last row (logits must not be kNone)
  bool logprobs = false;              // fill the sample's logprobs (StepOutput::samples)
  const uint64_t* allowed = nullptr;  // the sampler's allowed set (Sampler::sample); null: all
  int hidden_begin = 0;  // tokens[hidden_begin, hidden_end): their final-norm hidden rows are
  int hidden_end = 0;    // returned (StepOutput::hidden); empty: none
};

struct StepOutput {
  std::span<const float> logits;      // rows of n_vocab floats, work items in order
  std::vector<int32_t> first_row;     // per work item: its first logits row, -1 for none
  std::vector<SampleResult> samples;  // per work item: token -1 unless it had a sampler
  std::span<const float> hidden;      // hidden rows of dim floats, work items in order
  std::vector<int32_t> first_hidden;  // per work item: its first hidden row, -1 for none
  int64_t n_padding = 0;              // padding rows computed in this step
};

class ModelRunner {
 public:
  // Allocates the KV storage and the forward state. Throws kvasir::Error for bad options or
  // when memory is not there.
  ModelRunner(const Model& model, ThreadPool& pool, const ModelRunnerOptions& options);

  // Builds one Batch from `work`, runs the model and samples. `finished` lists sequences that
  // ended since the previous step (static padding turns them into padding rows). Throws
  // kvasir::Error, before the forward pass, for work that does not fit (more tokens, logits
  // rows or hidden rows than the options allow, a block table that does not cover the positions,
  // a sampler without logits, a hidden range outside the tokens); the output is valid until the
  // next run().
  const StepOutput& run(std::span<const SeqWork> work, std::span<const uint64_t> finished = {});

  const Model& model() const { return model_; }
  const KVStorage& kv() const { return kv_; }
  const ModelRunnerOptions& options() const { return opt_; }
  int n_vocab() const { return model_.config().n_vocab; }
  const Backend& backend() const { return *backend_; }
  // The Batch of the last run() (tests inspect its sequences and block tables).
  const Batch& last_batch() const { return batch_; }
  // Shows `observer` (nullptr: none) the input of every weight matmul of the following steps,
  // padding rows included (model/matmul_observer.h). It must outlive those steps.
  void set_matmul_observer(MatmulObserver* observer) { state_.matmul_observer = observer; }

 private:
  struct Member {
    uint64_t id;
    int next_pos;   // position the sequence computes next
    bool finished;  // its row is padding now
  };
  void track_static_batch(std::span<const SeqWork> work, std::span<const uint64_t> finished);
  void add_padding_rows();

  const Model& model_;
  ModelRunnerOptions opt_;
  std::unique_ptr<Backend> backend_;
  KVStorage kv_;
  ForwardState state_;
  Batch batch_;
  std::vector<float> logits_;
  std::vector<float> hidden_;  // max_hidden_rows x dim
  StepOutput out_;
  // Static padding.
  std::vector<Member> members_;
  std::vector<int32_t> pad_table_;  // every entry the padding block
};

}  // namespace kvasir
