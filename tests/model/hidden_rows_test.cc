// Model::forward's final-norm hidden rows (the embeddings' input, batch.h's hidden_rows): each is
// exactly the input of the output matrix (its logits recomputed from it with matmul.h's F32
// contract are bit-identical to forward's), asking for them changes no logits, a token's row is
// the same whatever else the batch holds, and forward refuses rows it cannot return.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kvasir/kernels/backend.h"
#include "kvasir/kv/kv_storage.h"
#include "kvasir/model/batch.h"
#include "kvasir/model/forward_state.h"
#include "kvasir/model/model.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"
#include "test_util/models.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

const Model& model() {
  return *test_util::Stories260K::get().model;
}

// One CPU backend, KV storage and forward state for stories260K.
struct Rig {
  ThreadPool pool{2};
  std::unique_ptr<Backend> backend = make_backend(BackendKind::kCpu, pool);
  KVStorage kv{model().kv_shape(), 16, *backend};
  ForwardState state{model(), *backend, 128, 128, 128};
};

std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::vector<int32_t> t = test_util::random_tokens(n, model().config().n_vocab, seed);
  t[0] = 1;  // BOS
  return t;
}

// A batch of one sequence at positions [start, start + tokens.size()) with blocks `table`, every
// token asking for logits and/or its hidden row.
void add_sequence(Batch& b, const std::vector<int32_t>& table, const std::vector<int32_t>& tokens,
                  int start, bool logits, bool hidden) {
  const int32_t s = b.add_seq(table);
  for (size_t j = 0; j < tokens.size(); ++j) {
    if (hidden) b.hidden_rows.push_back(static_cast<int32_t>(b.n_tokens()));
    b.add_token(tokens[j], start + static_cast<int>(j), s, 16, logits);
  }
}

// stories260K's output matrix is F32 (output.weight, a copy of the token embeddings), so the
// logits are, by matmul.h's contract, acc = fma(W[r][k], x[k], acc) for k in order over the
// output matrix's input x: recomputing that from the hidden row must give every logit bit for bit.
// (A hidden row that were anything else, e.g. before the final norm or another token's, would
// not.)
TEST(HiddenRows, AreExactlyTheOutputMatrixInput) {
  const gguf::TensorInfo& w = model().file().tensor("output.weight");
  ASSERT_EQ(w.type, DType::F32);
  const auto* W = reinterpret_cast<const float*>(w.data);
  const int dim = model().config().dim, V = model().config().n_vocab;
  Rig r;
  const std::vector<int32_t> table = {0, 1};
  const std::vector<int32_t> toks = prompt(23, 5);
  Batch b;
  add_sequence(b, table, toks, 0, /*logits=*/true, /*hidden=*/true);
  std::vector<float> logits(toks.size() * V), hidden(toks.size() * dim);
  model().forward(b, r.kv, r.state, logits.data(), hidden.data());
  for (size_t t = 0; t < toks.size(); ++t) {
    const float* x = &hidden[t * dim];
    for (int v = 0; v < V; ++v) {
      float acc = 0;
      for (int k = 0; k < dim; ++k) acc = std::fma(W[static_cast<size_t>(v) * dim + k], x[k], acc);
      ASSERT_EQ(std::memcmp(&acc, &logits[t * V + v], sizeof(float)), 0)
          << "token " << t << ", logit " << v << ": " << acc << " vs " << logits[t * V + v];
    }
  }
  // RMSNorm's output has a root mean square near the norm weights' scale, never zero here.
  double ss = 0;
  for (int k = 0; k < dim; ++k) ss += double(hidden[k]) * hidden[k];
  EXPECT_GT(ss, 0);
}

// Asking for hidden rows changes no logit; a token's hidden row does not depend on the other
// sequences of the batch, on which of its own rows were asked for, or on how its prompt was
// chunked (bit-identical).
TEST(HiddenRows, AreBatchInvariantAndLeaveLogitsAlone) {
  const int dim = model().config().dim, V = model().config().n_vocab;
  const std::vector<int32_t> toks = prompt(37, 7), other = prompt(29, 8);
  const std::vector<int32_t> t0 = {0, 1, 2}, t1 = {3, 4};
  const size_t n = toks.size();

  // Alone, logits only, and alone, hidden rows only.
  std::vector<float> ref_logits(n * V), ref_hidden(n * dim);
  {
    Rig r;
    Batch b;
    add_sequence(b, t0, toks, 0, true, false);
    model().forward(b, r.kv, r.state, ref_logits.data());
  }
  {
    Rig r;
    Batch b;
    add_sequence(b, t0, toks, 0, false, true);
    model().forward(b, r.kv, r.state, nullptr, ref_hidden.data());
  }
  // Batched behind another sequence, both lists asked, in chunks of 10.
  Rig r;
  for (size_t start = 0; start < n; start += 10) {
    const size_t len = std::min<size_t>(10, n - start);
    const std::vector<int32_t> chunk(toks.begin() + start, toks.begin() + start + len);
    Batch b;
    if (start < other.size()) {
      const size_t olen = std::min<size_t>(10, other.size() - start);
      add_sequence(b, t1, std::vector<int32_t>(other.begin() + start, other.begin() + start + olen),
                   static_cast<int>(start), false, true);
    }
    const auto first_hidden = static_cast<int64_t>(b.hidden_rows.size());
    add_sequence(b, t0, chunk, static_cast<int>(start), true, true);
    std::vector<float> logits(b.logit_rows.size() * V), hidden(b.hidden_rows.size() * dim);
    model().forward(b, r.kv, r.state, logits.data(), hidden.data());
    ASSERT_EQ(std::memcmp(logits.data(), &ref_logits[start * V], len * V * sizeof(float)), 0)
        << "logits of tokens " << start << ".." << start + len - 1;
    ASSERT_EQ(std::memcmp(&hidden[static_cast<size_t>(first_hidden) * dim],
                          &ref_hidden[start * dim], len * dim * sizeof(float)),
              0)
        << "hidden rows of tokens " << start << ".." << start + len - 1;
  }
}

TEST(HiddenRows, ForwardRefusesRowsItCannotReturn) {
  Rig r;
  const std::vector<int32_t> table = {0};
  std::vector<float> hidden(200 * 64);
  Batch b;
  add_sequence(b, table, {1, 5, 9}, 0, false, true);
  EXPECT_THROW(model().forward(b, r.kv, r.state, nullptr, nullptr), Error) << "nowhere to put them";
  b.hidden_rows.push_back(3);
  EXPECT_THROW(model().forward(b, r.kv, r.state, nullptr, hidden.data()), Error)
      << "row 3 of a 3-token batch";
  // A state sized for no hidden rows (the default) refuses any.
  ForwardState none(model(), *r.backend, 8, 1);
  EXPECT_EQ(none.max_hidden_rows(), 0);
  EXPECT_EQ(none.hidden, nullptr) << "the CPU writes hidden rows straight to the caller";
  Batch one;
  add_sequence(one, table, {1}, 0, false, true);
  EXPECT_THROW(model().forward(one, r.kv, none, nullptr, hidden.data()), Error);
  EXPECT_THROW(ForwardState(model(), *r.backend, 8, 1, -1), Error);
}

}  // namespace
}  // namespace kvasir
