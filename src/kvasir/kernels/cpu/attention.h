// Flash-style causal attention over a paged KV cache, on the CPU.
//
// The KV layout, the block tables and the arguments are the backend-neutral views of
// kernels/views.h.
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

#include "kvasir/kernels/views.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {

// Writes K and V rows (n_tokens x n_kv_heads*head_dim floats each) into their slots
// (slot[t] = block_id * block_size + offset), each in its dtype (K and V may differ). F16 rounds
// to nearest even, bit-identical to fp32_to_fp16; the quantized dtypes are bit-identical to
// kv_quantize_row (one row = one token of one KV head, quantized on its own). Slots are always
// checked against n_blocks (kvasir::Error; costs one compare per token). positions[t] is row t's
// position, read only when the key transform has turning terms (kv.k_turn; then required, and
// each must be below kv.k_turn_positions); otherwise it may be null.
void kv_write(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
              const int32_t* positions, int64_t n_tokens);

// Throws kvasir::Error (before any work starts) on a bad layout, seq_index, position, or a block
// table that is too short or names a block outside the cache. Scratch is per thread, grown on
// first use: no allocation in steady state.
void attention(const PagedKVLayer& kv, const AttentionArgs& args, ThreadPool& pool);

// Straightforward reference: materialises the scores of each query, two-pass softmax in double.
// Used by tests only.
void attention_reference(const PagedKVLayer& kv, const AttentionArgs& args);

}  // namespace kvasir::cpu
