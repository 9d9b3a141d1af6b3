// The model's forward pass against the scalar reference (reference_llama.h), on the trained
// stories260K and on random llama/qwen2/qwen3 models covering GQA, MQA, NeoX RoPE, QKV bias, Q/K
// norms, tied and untied output and every weight dtype; plus batch invariance of the logits.
#include "kvasir/model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/util/error.h"
#include "reference_llama.h"
#include "test_util/files.h"
#include "test_util/models.h"
#include "test_util/paths.h"
#include "test_util/tokens.h"

namespace kvasir {
namespace {

using test_util::stories260k_path;
using test_util::synth_model;
using test_util::temp_dir;

// Random tokens after a BOS (id 1).
std::vector<int32_t> random_prompt(int n, int n_vocab, uint32_t seed) {
  std::vector<int32_t> t = test_util::random_tokens(n, n_vocab, seed);
  t[0] = 1;
  return t;
}

struct Diff {
  double max_abs = 0;
  double max_ref = 0;
};

Diff compare_with_reference(const std::string& path, const std::vector<int32_t>& tokens,
                            KVDType kv_type, int threads = 2) {
  auto model = Model::load(path);
  ThreadPool pool(threads);
  SequenceRunnerOptions o;
  o.kv_type = {kv_type, kv_type};
  o.max_ctx = 256;
  o.all_logits = true;
  SequenceRunner runner(*model, pool, o);
  auto logits = runner.feed(tokens, true);
  gguf::GGUFFile f(path);
  auto ref = testing::reference_logits(f, tokens);
  const int64_t V = model->config().n_vocab;
  Diff d;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t v = 0; v < V; ++v) {
      d.max_abs = std::max(d.max_abs, std::abs(double(logits[t * V + v]) - ref[t][v]));
      d.max_ref = std::max(d.max_ref, std::abs(double(ref[t][v])));
    }
  return d;
}

TEST(Model, Stories260KMatchesReferenceF32KV) {
  auto tokens = random_prompt(40, 512, 7);
  Diff d = compare_with_reference(stories260k_path(), tokens, KVDType::F32);
  // F32 weights, F32 KV: the only differences are float vs double accumulation order over at most
  // 172-term dot products (relative ~1e-6 each) compounded over 5 layers; logits are O(10), so
  // 1e-3 absolute leaves two orders of magnitude of margin while catching any real bug (a wrong
  // RoPE pair or mask shifts logits by O(1)).
  EXPECT_LT(d.max_abs, 1e-3) << "max |logit| " << d.max_ref;
}

TEST(Model, Stories260KMatchesReferenceF16KV) {
  auto tokens = random_prompt(40, 512, 8);
  Diff d = compare_with_reference(stories260k_path(), tokens, KVDType::F16);
  // F16 KV rounds K and V to 11 significant bits (relative 2^-12 ≈ 2.4e-4 per element); through
  // attention and 5 layers this moves O(10) logits by ~1e-2 at most. 0.05 still catches bugs.
  EXPECT_LT(d.max_abs, 5e-2) << "max |logit| " << d.max_ref;
}

struct SynthCase {
  const char* name;
  const char* arch;
  int n_heads, n_kv_heads;
  bool tied;
  DType dtype;
  double tol;  // see the comment in the test body
};

class SynthModel : public ::testing::TestWithParam<SynthCase> {};

TEST_P(SynthModel, MatchesReference) {
  const SynthCase& c = GetParam();
  SynthSpec s;
  s.arch = c.arch;
  s.dim = 128;
  s.n_layers = 2;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads;
  s.ffn_dim = 192;
  s.n_vocab = 300;
  s.tied_output = c.tied;
  s.dtype = c.dtype;
  s.seed = 42;
  std::string path = synth_model(s, c.name);
  auto tokens = random_prompt(37, s.n_vocab, 3);
  Diff d = compare_with_reference(path, tokens, KVDType::F32, 3);
  // Tolerances: F32 weights — float vs double accumulation only (1e-3 on O(1..10) logits, see
  // above). F16/BF16 weights are exact in float, so the same bound holds. Q8_0/Q4_0 weights are
  // dequantized exactly by the reference, but our kernels also quantize the *activations* to 8
  // bits (per 32-block, relative error up to 1/254 per element, like ggml): over 2 layers that
  // moves logits by a few 1e-2; 0.15 is a bound that still fails on any structural error (those
  // are O(1)).
  EXPECT_LT(d.max_abs, c.tol) << c.name << ": max |logit| " << d.max_ref;
  EXPECT_GT(d.max_ref, 0.1) << "degenerate model: logits are all ~0";
}

INSTANTIATE_TEST_SUITE_P(
    Archs, SynthModel,
    ::testing::Values(SynthCase{"llama_mha_untied_f32", "llama", 4, 4, false, DType::F32, 1e-3},
                      SynthCase{"llama_gqa_tied_f32", "llama", 8, 2, true, DType::F32, 1e-3},
                      SynthCase{"llama_mqa_f16", "llama", 4, 1, false, DType::F16, 1e-3},
                      SynthCase{"llama_gqa_bf16", "llama", 4, 2, false, DType::BF16, 1e-3},
                      SynthCase{"qwen2_gqa_f32", "qwen2", 8, 2, false, DType::F32, 1e-3},
                      SynthCase{"qwen2_tied_q8_0", "qwen2", 4, 2, true, DType::Q8_0, 0.15},
                      SynthCase{"qwen3_gqa_f32", "qwen3", 8, 2, false, DType::F32, 1e-3},
                      SynthCase{"qwen3_tied_bf16", "qwen3", 4, 1, true, DType::BF16, 1e-3},
                      SynthCase{"llama_gqa_q8_0", "llama", 8, 4, false, DType::Q8_0, 0.15},
                      SynthCase{"llama_gqa_q4_0", "llama", 8, 4, false, DType::Q4_0, 0.15}),
    [](const auto& info) { return std::string(info.param.name); });

// A request's logits must not depend on how its prompt was chunked or on the thread count:
// the prompt fed at once, in chunks of 5, and token by token must give bit-identical logits.
TEST(Model, LogitsAreBatchInvariant) {
  for (DType dt : {DType::F32, DType::Q8_0, DType::Q4_0}) {
    SynthSpec s;
    s.dim = 128, s.n_layers = 2, s.n_heads = 8, s.n_kv_heads = 2, s.ffn_dim = 256;
    s.n_vocab = 300, s.dtype = dt, s.seed = 9;
    std::string path = synth_model(s, std::string("invariance_") + std::string(dtype_name(dt)));
    auto model = Model::load(path);
    auto tokens = random_prompt(41, s.n_vocab, 11);
    const int64_t V = s.n_vocab;
    ThreadPool pool2(2), pool3(3);
    SequenceRunnerOptions o;
    o.max_ctx = 128;
    o.all_logits = true;
    SequenceRunner whole(*model, pool2, o);
    auto all = whole.feed(tokens, true);
    std::vector<float> ref(all.begin(), all.end());

    for (int chunk : {1, 5, 16}) {
      SequenceRunner r(*model, chunk == 5 ? pool3 : pool2, o);
      for (size_t start = 0; start < tokens.size(); start += static_cast<size_t>(chunk)) {
        size_t len = std::min<size_t>(static_cast<size_t>(chunk), tokens.size() - start);
        auto lg = r.feed(std::span(tokens).subspan(start, len), true);
        ASSERT_EQ(0, std::memcmp(lg.data(), &ref[start * V], len * V * sizeof(float)))
            << dtype_name(dt) << ": chunk size " << chunk << " differs at token " << start;
      }
    }
  }
}

TEST(Model, RefusesUnknownArchitecture) {
  std::string path = temp_dir() + "/unknown_arch.gguf";
  gguf::GGUFWriter w;
  w.set("general.architecture", gguf::Value::str("mamba"));
  w.write(path);
  try {
    Model::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported model architecture 'mamba'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Model, MissingTensorIsNamed) {
  SynthSpec s;
  s.dim = 64, s.n_layers = 1, s.n_heads = 2, s.n_kv_heads = 2, s.ffn_dim = 64, s.n_vocab = 50;
  std::string good = synth_model(s, "for_missing");
  gguf::GGUFFile f(good);
  gguf::GGUFWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const auto& t : f.tensors())
    if (t.name != "blk.0.ffn_up.weight") w.add_tensor(t.name, t.type, t.shape, t.data, t.nbytes);
  std::string bad = temp_dir() + "/missing.gguf";
  w.write(bad);
  try {
    Model::load(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
  }
}

TEST(Model, ContextOverflowIsAnError) {
  auto model = Model::load(stories260k_path());
  ThreadPool pool(1);
  SequenceRunnerOptions o;
  o.max_ctx = 16;
  SequenceRunner r(*model, pool, o);
  std::vector<int32_t> t(17, 1);
  EXPECT_THROW(r.feed(t), Error);
  std::vector<int32_t> ok(16, 1);
  EXPECT_NO_THROW(r.feed(ok));
  EXPECT_EQ(r.pool().n_used(), 1);
  r.reset();
  EXPECT_EQ(r.pool().n_used(), 0);
}

}  // namespace
}  // namespace kvasir
