// Memory planner: how much of a memory budget goes to weights, scratch and the paged KV cache.
//
// plan_memory() is a pure function of the model's hyperparameters, its weight bytes and the
// serving options. The budget is split as
//
//   memory = weights + activations + margin + KV cache
//
//   weights      the bytes of every tensor in the GGUF file (they are mmap'd, but resident).
//   activations  an estimate of the forward pass's scratch for one step of max_batched_tokens
//                tokens (the f32 buffers Model::forward keeps: 2 x dim, 2 x q_dim, 2 x kv_dim,
//                2 x ffn_dim per token, plus one int8 copy of the widest input row per token for
//                quantized matmuls or one f32 copy, regrouped in token tiles, for float ones)
//                and max_seqs rows of logits (n_vocab + dim floats each) plus the rows a
//                prompt-scoring chunk may fill (score_rows_per_step, engine/prompt_scorer.h),
//                doubled for the sampler's and the engine's per-row buffers.
//   margin       a fixed headroom (PlanOptions::margin_bytes, 64 MiB by default) for the
//                allocator, thread stacks, the tokenizer and the HTTP server.
//   KV cache     the rest, in whole blocks of block_size tokens; KV bytes per token are
//                layers x kv_heads x head_dim x 2 (K and V) x bytes of the KV dtype.
//
// kv_blocks_fit is what the budget holds; kv_blocks (what an engine should allocate) is that,
// capped at max_seqs full-length sequences: memory beyond that could never be used by running
// sequences at once. A plan that cannot hold one full-length sequence (ctx tokens) is refused
// with a kvasir::Error that says how much memory is missing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/model/config.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

struct PlanOptions {
  int64_t memory_bytes = 0;      // the whole budget (weights included)
  int ctx = 0;                   // max model length; 0: the model's training context
  int max_seqs = 64;             // sequences running at once
  int max_batched_tokens = 512;  // tokens per step
  KVCacheType kv_type{};         // K and V element formats
  int block_size = 16;
  int64_t margin_bytes = int64_t{64} << 20;
};

struct Plan {
  int ctx = 0;
  int block_size = 0;
  int max_seqs = 0;
  KVCacheType kv_type{};
  int64_t memory_bytes = 0;
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t margin_bytes = 0;
  int64_t kv_budget_bytes = 0;  // memory - weights - activations - margin (may be < 0)
  int64_t kv_bytes_per_token = 0;
  int64_t kv_bytes_per_token_f16 = 0;  // the same cache in f16, for comparison
  std::string kv_bytes_formula;        // kv_bytes_per_token_formula()
  int64_t kv_bytes_per_block = 0;
  int64_t blocks_per_seq = 0;  // ceil(ctx / block_size)
  int64_t kv_blocks_fit = 0;   // blocks the budget holds
  int64_t kv_blocks = 0;       // blocks to allocate: fit, capped at max_seqs full sequences
  int max_batch_at_ctx = 0;    // full-length sequences that run at once (<= max_seqs)
  int64_t max_batch_fit = 0;   // full-length sequences the budget holds (ignoring max_seqs)

  int64_t kv_bytes() const { return kv_blocks * kv_bytes_per_block; }
  int64_t kv_tokens() const { return kv_blocks * block_size; }
};

// Bytes of K and V for one token across all layers, scales included:
// n_layers x n_kv_heads x (K row bytes + V row bytes), a row being head_dim values in its dtype
// (tensor/kv_quant.h).
int64_t kv_bytes_per_token(const ModelConfig& config, KVCacheType kv_type);
// The same as a formula with the model's numbers, e.g.
// "22 layers x 4 KV heads x (66 + 66) B (int8: 64 codes + 2 B scale) = 11616 B".
std::string kv_bytes_per_token_formula(const ModelConfig& config, KVCacheType kv_type);

// Throws kvasir::Error for invalid options or a budget that cannot hold one full sequence.
Plan plan_memory(const ModelConfig& config, int64_t weight_bytes, const PlanOptions& options);

// Several models in one budget (multi-model serving): every model's weights and activations
// first, one margin (margin_bytes) for the process, and the KV cache's share of the rest split
// between the models: by `share` (fractions of that rest, summing to at most 1) where given, the
// remainder by need (each model's max_seqs full-length sequences, in proportion to their bytes);
// a model that needs less than its share leaves the difference to the others. Each Plan is what
// plan_memory() gives for that model's share (its memory_bytes: weights + activations + its part
// of the margin + its KV share). Throws kvasir::Error naming the model whose share cannot hold one
// full-length sequence, and the memory missing for all of them.
struct SharedPlanInput {
  std::string name;
  const ModelConfig* config = nullptr;
  int64_t weight_bytes = 0;
  PlanOptions options;  // memory_bytes and margin_bytes are ignored
  double share = 0;     // fraction of the KV budget; 0: by need
};
std::vector<Plan> plan_memory_shared(const std::vector<SharedPlanInput>& models,
                                     int64_t memory_bytes,
                                     int64_t margin_bytes = int64_t{64} << 20);

// A human-readable report of a plan (what `kvasir plan` prints).
std::string describe_plan(const Plan& plan);

// Parses a size: a number (decimal point allowed) with an optional unit: B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB, T/TB/TiB (case-insensitive; every unit is binary: 1K = 1KiB = 1024 bytes). Throws
// kvasir::Error naming `what` (e.g. "--memory") for anything else.
int64_t parse_size(std::string_view text, std::string_view what = "size");

// "8.00 GiB", "512.0 MiB", "640 B".
std::string format_size(int64_t bytes);

// The default budget when none is given: 90% of the memory the system reports available
// (MemAvailable in /proc/meminfo), or nullopt where that cannot be read.
std::optional<int64_t> default_memory_budget();

}  // namespace kvasir
