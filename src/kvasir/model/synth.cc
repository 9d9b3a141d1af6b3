#include "kvasir/model/synth.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/splitmix64.h"

namespace kvasir {

namespace {

using Rng = SplitMix64;

}  // namespace

SynthSpec synth_shape(const std::string& name) {
  SynthSpec s;
  s.name = name;
  s.n_vocab = 32000;
  if (name == "llama-110m") {
    s.dim = 768, s.n_layers = 12, s.n_heads = 12, s.n_kv_heads = 12, s.ffn_dim = 2048;
  } else if (name ==
             "llama-tiny") {  // for tests: every dim a multiple of 256 (k-quant blocks), GQA
    s.dim = 256, s.n_layers = 4, s.n_heads = 4, s.n_kv_heads = 2, s.ffn_dim = 768;
  } else if (name == "tinyllama-1.1b") {
    s.dim = 2048, s.n_layers = 22, s.n_heads = 32, s.n_kv_heads = 4, s.ffn_dim = 5632;
  } else if (name == "llama3-8b") {
    s.dim = 4096, s.n_layers = 32, s.n_heads = 32, s.n_kv_heads = 8, s.ffn_dim = 14336;
    s.n_vocab = 128256, s.rope_base = 500000.0f;
  } else {
    fail("unknown synthetic shape '{}' (known: llama-tiny, llama-110m, tinyllama-1.1b, llama3-8b)",
         name);
  }
  s.ctx = 4096;
  return s;
}

void write_synthetic_model(const SynthSpec& sp, const std::string& path) {
  if (sp.arch != "llama" && sp.arch != "qwen2" && sp.arch != "qwen3")
    fail("synth: unsupported architecture '{}' (llama, qwen2 or qwen3)", sp.arch);
  if (sp.dim % sp.n_heads != 0 || sp.n_heads % sp.n_kv_heads != 0)
    fail("synth: dim {} must divide by heads {}, and heads by kv heads {}", sp.dim, sp.n_heads,
         sp.n_kv_heads);
  gguf::GGUFWriter w;
  const std::string a = sp.arch;
  w.set("general.architecture", gguf::Value::str(a));
  w.set("general.name", gguf::Value::str(sp.name));
  w.set("general.file_type", gguf::Value::u32(sp.dtype == DType::F32    ? 0
                                              : sp.dtype == DType::F16  ? 1
                                              : sp.dtype == DType::Q4_0 ? 2
                                              : sp.dtype == DType::Q8_0 ? 7
                                                                        : 32));
  w.set(a + ".context_length", gguf::Value::u32(static_cast<uint32_t>(sp.ctx)));
  w.set(a + ".embedding_length", gguf::Value::u32(static_cast<uint32_t>(sp.dim)));
  w.set(a + ".block_count", gguf::Value::u32(static_cast<uint32_t>(sp.n_layers)));
  w.set(a + ".feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(sp.ffn_dim)));
  w.set(a + ".attention.head_count", gguf::Value::u32(static_cast<uint32_t>(sp.n_heads)));
  w.set(a + ".attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(sp.n_kv_heads)));
  w.set(a + ".attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
  w.set(a + ".rope.freq_base", gguf::Value::f32(sp.rope_base));
  w.set(a + ".rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(sp.dim / sp.n_heads)));
  w.set(a + ".vocab_size", gguf::Value::u32(static_cast<uint32_t>(sp.n_vocab)));

  if (!sp.vocab_from.empty()) {
    gguf::GGUFFile vf(sp.vocab_from);
    for (const auto& [k, v] : vf.metadata()) {
      if (k.rfind("tokenizer.", 0) != 0) continue;
      if (k == "tokenizer.ggml.tokens" && static_cast<int64_t>(v.as_array().items.size()) != sp.n_vocab)
        fail("synth: vocabulary {} has {} tokens but the shape needs {}", sp.vocab_from,
             v.as_array().items.size(), sp.n_vocab);
      w.set(k, v);
    }
  }

  Rng rng{sp.seed};
  const int head_dim = sp.dim / sp.n_heads;
  const int kv_dim = head_dim * sp.n_kv_heads;
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, DType t) {
    // Scale ~ 1/sqrt(cols) keeps activations O(1) through the layers.
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    std::vector<float> x(static_cast<size_t>(cols * rows));
    for (float& v : x) v = rng.uniform() * scale * 1.7f;
    w.add_tensor_copy(name, t, {cols, rows}, quantize_tensor(t, x.data(), rows, cols));
  };
  auto vector = [&](const std::string& name, int64_t n, float center, float spread) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = center + spread * rng.uniform();
    std::vector<uint8_t> bytes(x.size() * 4);
    std::memcpy(bytes.data(), x.data(), bytes.size());
    w.add_tensor_copy(name, DType::F32, {n}, std::move(bytes));
  };
  const DType out_t = sp.output_dtype.value_or(sp.dtype);
  // The embedding is read row by row; keep it in the matrix dtype like llama.cpp's quantize does
  // for pure formats (tied models then use it as the output matrix too).
  matrix("token_embd.weight", sp.dim, sp.n_vocab, sp.tied_output ? out_t : sp.dtype);
  for (int l = 0; l < sp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vector(p + "attn_norm.weight", sp.dim, 1.0f, 0.2f);
    matrix(p + "attn_q.weight", sp.dim, sp.dim, sp.dtype);
    matrix(p + "attn_k.weight", sp.dim, kv_dim, sp.dtype);
    matrix(p + "attn_v.weight", sp.dim, kv_dim, sp.dtype);
    if (sp.arch == "qwen2") {
      vector(p + "attn_q.bias", sp.dim, 0.0f, 0.1f);
      vector(p + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      vector(p + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    if (sp.arch == "qwen3") {
      vector(p + "attn_q_norm.weight", head_dim, 1.0f, 0.2f);
      vector(p + "attn_k_norm.weight", head_dim, 1.0f, 0.2f);
    }
    matrix(p + "attn_output.weight", sp.dim, sp.dim, sp.dtype);
    vector(p + "ffn_norm.weight", sp.dim, 1.0f, 0.2f);
    matrix(p + "ffn_gate.weight", sp.dim, sp.ffn_dim, sp.dtype);
    matrix(p + "ffn_up.weight", sp.dim, sp.ffn_dim, sp.dtype);
    matrix(p + "ffn_down.weight", sp.ffn_dim, sp.dim, sp.dtype);
  }
  vector("output_norm.weight", sp.dim, 1.0f, 0.2f);
  if (!sp.tied_output) matrix("output.weight", sp.dim, sp.n_vocab, out_t);
  w.write(path);
}

}  // namespace kvasir
