// The Batch: the whole input of one forward step (DESIGN.md, "The Batch is the contract").
//
// A flat list of tokens, each with its position, the sequence it belongs to and the KV slot its
// key/value rows are written to (slot = block_id * block_size + offset), plus which tokens need
// logits, which need their final hidden state (the final norm's output, for embeddings) and every
// sequence's block table. Decode, chunked prefill, prefix-cache hits, speculative verification
// and embeddings are all just different Batches. The forward pass is a pure function of (weights,
// Batch, KV storage): Model::forward is const, and what it writes besides the logits and hidden
// rows (the ForwardState's scratch, the batch's own K/V slots) no later step reads except through
// the KV storage. Batches are built in one place: engine/model_runner.h. Index arrays are host
// memory.
#pragma once

#include <cstdint>
#include <vector>

#include "kvasir/kernels/views.h"

namespace kvasir {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_index;    // per token: index into seqs
  std::vector<int32_t> slots;        // per token: KV slot
  std::vector<int32_t> logit_rows;   // tokens whose logits are returned, in output order
  std::vector<int32_t> hidden_rows;  // tokens whose final-norm hidden state is returned, in order
  std::vector<AttentionSeq> seqs;    // block tables (not owned: they point at the caller's)

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }

  void clear() {
    tokens.clear();
    positions.clear();
    seq_index.clear();
    slots.clear();
    logit_rows.clear();
    hidden_rows.clear();
    seqs.clear();
  }

  // Adds a sequence whose block table is `blocks` (must stay valid through forward()).
  int32_t add_seq(const std::vector<int32_t>& blocks) {
    seqs.push_back({blocks.data(), static_cast<int32_t>(blocks.size())});
    return static_cast<int32_t>(seqs.size() - 1);
  }

  // Adds one token of sequence `seq` at `pos`; its slot comes from the sequence's block table.
  void add_token(int32_t token, int32_t pos, int32_t seq, int block_size, bool want_logits) {
    const AttentionSeq& s = seqs[static_cast<size_t>(seq)];
    if (want_logits) logit_rows.push_back(static_cast<int32_t>(tokens.size()));
    tokens.push_back(token);
    positions.push_back(pos);
    seq_index.push_back(seq);
    slots.push_back(s.block_table[pos / block_size] * block_size + pos % block_size);
  }
};

}  // namespace kvasir
