// The batched decoder behind tgB: one Batch really holds B sequences, each with its own block
// table, and each sequence's logits are those it gets when decoded alone.
#include "kvasir/bench/multi_seq_decoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "bench_test_util.h"
#include "kvasir/util/error.h"
#include "test_util/tokens.h"

namespace kvasir::bench {
namespace {

using test_util::argmax;
using test_util::random_tokens;

// Per step, the logits row of every sequence.
using Trace = std::vector<std::vector<std::vector<float>>>;  // [seq][step][vocab]

constexpr int kSteps = 7;

// Decodes each prompt alone (a decoder with one sequence), greedily, for kSteps steps.
std::vector<float> solo_decode(Model& m, ThreadPool& pool, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& forced, int block_size,
                               std::vector<std::vector<float>>& rows) {
  DecoderOptions o;
  o.n_seqs = 1;
  o.max_ctx = 64;
  o.block_size = block_size;
  MultiSeqDecoder d(m, pool, o);
  auto lg = d.prefill(0, prompt);
  std::vector<float> first(lg.begin(), lg.end());
  for (int32_t tok : forced) {
    auto r = d.step(std::span<const int32_t>(&tok, 1));
    rows.emplace_back(r.begin(), r.end());
  }
  return first;
}

class DecoderInvariance : public ::testing::TestWithParam<DType> {};

TEST_P(DecoderInvariance, EachSequenceOfTheBatchMatchesItsSoloDecode) {
  auto model = Model::load(testing::tiny_model(GetParam()));
  const int V = model->config().n_vocab;
  ThreadPool pool(2);
  // Block size 4 and prompts of 5, 12 and 9 tokens: tables of different lengths, and blocks
  // allocated mid-decode, interleaved between sequences (so ids are not contiguous per sequence).
  const int bs = 4;
  const std::vector<int> lens{5, 12, 9};
  const int B = static_cast<int>(lens.size());
  DecoderOptions o;
  o.n_seqs = B;
  o.max_ctx = 64;
  o.block_size = bs;
  MultiSeqDecoder dec(*model, pool, o);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> next(static_cast<size_t>(B));
  for (int s = 0; s < B; ++s) {
    prompts.push_back(random_tokens(lens[static_cast<size_t>(s)], V, 100 + s));
    next[static_cast<size_t>(s)] = argmax(dec.prefill(s, prompts.back()).data(), V);
  }
  std::vector<std::vector<int32_t>> fed(static_cast<size_t>(B));
  Trace batched(static_cast<size_t>(B));
  for (int k = 0; k < kSteps; ++k) {
    for (int s = 0; s < B; ++s) fed[static_cast<size_t>(s)].push_back(next[static_cast<size_t>(s)]);
    auto lg = dec.step(next);
    ASSERT_EQ(lg.size(), static_cast<size_t>(B) * V);

    // The batch of this step: B sequences, one token each, each its own block table.
    const Batch& b = dec.last_batch();
    ASSERT_EQ(b.seqs.size(), static_cast<size_t>(B));
    ASSERT_EQ(b.n_tokens(), B);
    ASSERT_EQ(b.logit_rows.size(), static_cast<size_t>(B));
    std::set<int32_t> all_blocks;
    size_t total_blocks = 0;
    for (int s = 0; s < B; ++s) {
      EXPECT_EQ(b.seq_index[static_cast<size_t>(s)], s);
      EXPECT_EQ(b.positions[static_cast<size_t>(s)], lens[static_cast<size_t>(s)] + k);
      const auto& table = dec.block_table(s);
      EXPECT_EQ(b.seqs[static_cast<size_t>(s)].block_table, table.data());
      EXPECT_EQ(b.seqs[static_cast<size_t>(s)].n_blocks, static_cast<int32_t>(table.size()));
      EXPECT_EQ(static_cast<int>(table.size()), (lens[static_cast<size_t>(s)] + k + bs) / bs);
      all_blocks.insert(table.begin(), table.end());
      total_blocks += table.size();
    }
    EXPECT_EQ(all_blocks.size(), total_blocks) << "sequences share a KV block at step " << k;

    for (int s = 0; s < B; ++s) {
      const float* row = lg.data() + static_cast<size_t>(s) * V;
      batched[static_cast<size_t>(s)].emplace_back(row, row + V);
      next[static_cast<size_t>(s)] = argmax(row, V);
    }
  }

  // Bit-exact: the kernels are batch invariant (a row's result depends only on its own inputs,
  // see kernels/cpu/attention.h and the model's LogitsAreBatchInvariant test), so any difference
  // means the batch mixed up sequences, positions or block tables.
  for (int s = 0; s < B; ++s) {
    std::vector<std::vector<float>> solo;
    solo_decode(*model, pool, prompts[static_cast<size_t>(s)], fed[static_cast<size_t>(s)], bs,
                solo);
    ASSERT_EQ(solo.size(), static_cast<size_t>(kSteps));
    for (int k = 0; k < kSteps; ++k)
      ASSERT_EQ(0, std::memcmp(solo[static_cast<size_t>(k)].data(),
                               batched[static_cast<size_t>(s)][static_cast<size_t>(k)].data(),
                               sizeof(float) * static_cast<size_t>(V)))
          << "sequence " << s << " step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecoderInvariance, ::testing::Values(DType::F32, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Decoder, TruncateRewindsAndFreesBlocks) {
  auto model = Model::load(testing::tiny_model(DType::F32));
  const int V = model->config().n_vocab;
  ThreadPool pool(2);
  DecoderOptions o;
  o.n_seqs = 2;
  o.max_ctx = 40;
  o.block_size = 4;
  MultiSeqDecoder dec(*model, pool, o);
  dec.prefill(0, random_tokens(6, V, 1));
  dec.prefill(1, random_tokens(3, V, 2));
  std::vector<int32_t> toks{7, 9};
  std::vector<float> first;
  std::vector<float> again;
  for (int rep = 0; rep < 2; ++rep) {
    auto& keep = rep == 0 ? first : again;
    for (int k = 0; k < 5; ++k) {
      auto lg = dec.step(toks);
      keep.insert(keep.end(), lg.begin(), lg.end());
    }
    EXPECT_EQ(dec.n_past(0), 11);
    EXPECT_EQ(dec.n_past(1), 8);
    EXPECT_EQ(dec.block_table(0).size(), 3u);
    EXPECT_EQ(dec.block_table(1).size(), 2u);
    dec.truncate(0, 6);
    dec.truncate(1, 3);
    EXPECT_EQ(dec.n_past(0), 6);
    EXPECT_EQ(dec.block_table(0).size(), 2u);
    EXPECT_EQ(dec.block_table(1).size(), 1u);
  }
  // The second run rewrote the same positions from the same state: same logits.
  ASSERT_EQ(first.size(), again.size());
  EXPECT_EQ(0, std::memcmp(first.data(), again.data(), sizeof(float) * first.size()));
}

TEST(Decoder, RejectsBadUse) {
  auto model = Model::load(testing::tiny_model(DType::F32));
  ThreadPool pool(1);
  DecoderOptions o;
  o.n_seqs = 2;
  o.max_ctx = 8;
  MultiSeqDecoder dec(*model, pool, o);
  std::vector<int32_t> one{1};
  EXPECT_THROW(dec.step(one), Error);  // two sequences need two tokens
  EXPECT_THROW(dec.prefill(2, one), Error);
  EXPECT_THROW(dec.prefill(0, std::vector<int32_t>(9, 1)), Error);  // beyond max_ctx
  EXPECT_THROW(dec.truncate(0, 1), Error);                          // nothing to keep yet
  dec.prefill(0, std::vector<int32_t>(8, 1));
  std::vector<int32_t> two{1, 1};
  try {
    dec.step(two);  // sequence 0 is full
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed its context of 8"), std::string::npos) << e.what();
  }
  DecoderOptions bad = o;
  bad.n_seqs = 0;
  EXPECT_THROW(MultiSeqDecoder(*model, pool, bad), Error);
}

}  // namespace
}  // namespace kvasir::bench
