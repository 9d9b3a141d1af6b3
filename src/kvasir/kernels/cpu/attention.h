// Flash-style causal attention over a paged KV cache, on the CPU.
//
// KV storage (one layer): K and V each hold n_blocks blocks; a block holds `block_size` tokens
// (16 by default) for every KV head, laid out [block][kv_head][token_in_block][head_dim], in F16
// or F32. A token at logical position p of a sequence lives in block block_table[p / block_size]
// at offset p % block_size; its "slot" is block_id * block_size + offset.
//
// For each query token (query position q_pos, its sequence's block table) and each head h, the
// output is softmax(q·Kᵀ·scale) · V over the sequence's KV positions 0..q_pos (causal), with the
// KV head h / (n_heads / n_kv_heads) (GQA/MQA). The kernel walks KV one block at a time (a tile
// = one KV block), keeping a running max and sum (online softmax), so the N×N score matrix is
// never materialised.
//
// Batch invariance: a query's result depends only on its own q, position and KV content; tiles
// are aligned to KV blocks, so the reduction order is the same whatever else is in the batch and
// however the prompt was chunked.
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {

struct PagedKVLayer {
  DType type = DType::F16;  // F16 or F32
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t n_blocks = 0;
  void* k = nullptr;  // n_blocks * n_kv_heads * block_size * head_dim elements
  void* v = nullptr;
};

// Writes K and V rows (n_tokens x n_kv_heads*head_dim floats each) into their slots
// (slot[t] = block_id * block_size + offset). F16 rounds to nearest even, bit-identical to
// fp32_to_fp16. Slots are always checked against n_blocks (kvasir::Error; costs one compare per
// token).
void kv_write(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
              int64_t n_tokens);

struct AttentionSeq {
  const int32_t* block_table = nullptr;  // block ids of this sequence, in position order
  int32_t n_blocks = 0;
};

struct AttentionArgs {
  const float* q = nullptr;  // n_tokens x n_heads*head_dim
  int64_t n_tokens = 0;
  int n_heads = 0;
  const int32_t* positions = nullptr;  // per query token: its position (attends to 0..pos)
  const int32_t* seq_index = nullptr;  // per query token: index into seqs
  const AttentionSeq* seqs = nullptr;
  float scale = 1.0f;    // usually 1/sqrt(head_dim)
  float* out = nullptr;  // n_tokens x n_heads*head_dim; may alias q
  int32_t n_seqs = -1;   // entries in seqs; when >= 0, seq_index is checked against it
};

// Throws kvasir::Error (before any work starts) on a bad layout, seq_index, position, or a block
// table that is too short or names a block outside the cache. Scratch is per thread, grown on
// first use: no allocation in steady state.
void attention(const PagedKVLayer& kv, const AttentionArgs& args, ThreadPool& pool);

// Straightforward reference: materialises the scores of each query, two-pass softmax in double.
// Used by tests only.
void attention_reference(const PagedKVLayer& kv, const AttentionArgs& args);

}  // namespace kvasir::cpu
