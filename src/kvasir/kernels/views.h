// Backend-neutral views: the data the forward pass hands to kernels, whatever backend runs them
// (kernels/backend.h). A view owns nothing; the memory it points at belongs to the caller
// (a GGUF mapping, the KV storage, the Batch) and lives in the backend's address space.
//
// Paged KV layout (one layer): K and V each hold n_blocks blocks; a block holds `block_size`
// tokens (16 by default) for every KV head. Within a block, each KV head has a tile: the codes of
// its block_size rows (one row = one token's head_dim values, row after row), then their scales
// (none for f16/f32), so a block is [kv_head][codes of the rows | scales of the rows]; the row
// formats are tensor/kv_quant.h's and K and V may have different ones. A token at logical
// position p of a sequence lives in block block_table[p / block_size] at offset p % block_size;
// its "slot" is block_id * block_size + offset. All layers share block ids, so one block table
// per sequence addresses every layer.
#pragma once

#include <cstdint>

#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

// One turning term of a key transform's shift (kv/key_transform.h): RoPE pair (a, b) of a KV
// head, whose mean key before RoPE is (mu_a, mu_b); at position p the shift on the pair is that
// mean turned by p * theta, (mu_a c - mu_b s, mu_a s + mu_b c) with c = cos[p], s = sin[p] read
// from the storage's table (the same floats for the write and the read).
struct KeyTurnPair {
  int32_t a = 0;
  int32_t b = 0;
  float mu_a = 0.0f;
  float mu_b = 0.0f;
  const float* cos = nullptr;  // k_turn_positions + 8 floats (the tail pads a group of 8 keys)
  const float* sin = nullptr;
};

// A weight matrix in ggml row layout: `rows` output features of `cols` input features, each row
// row_bytes(type, cols) bytes (e.g. a view into a GGUF mapping).
struct MatrixView {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;  // rows * row_bytes(type, cols) bytes
};

// One layer of the paged KV cache.
struct PagedKVLayer {
  KVDType k_type = KVDType::F16;
  KVDType v_type = KVDType::F16;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t n_blocks = 0;
  void* k = nullptr;  // n_blocks * n_kv_heads tiles of k_tile_bytes()
  void* v = nullptr;  // n_blocks * n_kv_heads tiles of v_tile_bytes()
  // The key transform (kv/key_transform.h), n_kv_heads x head_dim floats each, or null: a key k
  // of KV head g is stored as (k - k_shift[g]) / k_scale[g], and a query of that head is read as
  // q * k_scale[g]. k_scale may be null with k_shift set (scale 1).
  const float* k_shift = nullptr;
  const float* k_scale = nullptr;
  // The turning part of the shift, or null: k_turn_pairs entries per KV head (head g's at
  // k_turn + g * k_turn_pairs); a key of head g at position p is stored as
  // (k - k_shift[g] - turn_g(p)) / k_scale[g], and its score gets q . turn_g(p) back. Positions
  // below k_turn_positions only.
  const KeyTurnPair* k_turn = nullptr;
  int k_turn_pairs = 0;
  int64_t k_turn_positions = 0;

  size_t k_tile_bytes() const { return tile_bytes(k_type); }
  size_t v_tile_bytes() const { return tile_bytes(v_type); }
  size_t tile_bytes(KVDType t) const {
    return kv_row_layout(t, head_dim).bytes() * static_cast<size_t>(block_size);
  }
};

// One sequence's block table (not owned).
struct AttentionSeq {
  const int32_t* block_table = nullptr;  // block ids of this sequence, in position order
  int32_t n_blocks = 0;
};

// Causal attention of n_tokens query rows over the paged KV cache: query token t (at position
// positions[t] of sequence seqs[seq_index[t]]) attends to that sequence's positions 0..pos.
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

}  // namespace kvasir
