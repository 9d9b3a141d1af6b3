// The models and option sets of the llama-quantize fixtures (tests/fixtures/quant-mixtures), so
// the generator (mixture_fixture_test.cc, run by make.sh) and the tests build exactly the same
// files: synthetic llama / qwen2 / MoE models written here with a seeded generator of their own
// (independent of `kvasir synth`, so the recorded hashes stay valid), a synthetic imatrix, and
// "columns" naming one llama-quantize invocation each ("Q4_K_M", "Q4_0/imatrix",
// "Q4_K_M/pure", "Q6_K/out=q8_0/embd=q8_0", "Q4_K_M/leave-output").
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/quant/imatrix.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/splitmix64.h"

namespace kvasir::quant_fixtures {

struct FixtureModel {
  std::string name;
  std::string arch = "llama";
  int dim = 256, n_layer = 4, n_head = 4, n_head_kv = 4, ffn = 512, vocab = 256, n_expert = 0;
  bool tied = false;
  DType dtype = DType::F16;
  uint64_t seed = 1;
};

// The models whose per-tensor types are recorded (types only: llama-quantize --dry-run).
inline std::vector<FixtureModel> type_models() {
  std::vector<FixtureModel> m(5);
  // GQA 4 (n_gqa >= 4 rules), 16 layers (the n/16 and "more bits" layer rules), untied output.
  m[0] = {.name = "llama-gqa4-16l",
          .dim = 256,
          .n_layer = 16,
          .n_head = 4,
          .n_head_kv = 1,
          .ffn = 512,
          .vocab = 320};
  // qwen2 with biases, GQA 2, tied embeddings (token_embd takes the output rules).
  m[1] = {.name = "qwen2-tied-8l",
          .arch = "qwen2",
          .dim = 512,
          .n_layer = 8,
          .n_head = 8,
          .n_head_kv = 4,
          .ffn = 1536,
          .vocab = 256,
          .tied = true};
  // MHA, ffn 1376 (a multiple of 32, not of 256): ffn_down falls back, the rest does not.
  m[2] = {.name = "llama-mha-ffn1376-12l",
          .dim = 512,
          .n_layer = 12,
          .n_head = 8,
          .n_head_kv = 8,
          .ffn = 1376,
          .vocab = 256};
  // 8 experts (Mixtral-like): the n_expert == 8 rules and layers read from the names.
  m[3] = {.name = "llama-moe8-4l",
          .dim = 256,
          .n_layer = 4,
          .n_head = 4,
          .n_head_kv = 1,
          .ffn = 256,
          .vocab = 256,
          .n_expert = 8};
  // 80 layers with GQA: llama.cpp's "70B" (attn_v q3_k/q4_k -> q5_k).
  m[4] = {.name = "llama-70b-shape-80l",
          .dim = 256,
          .n_layer = 80,
          .n_head = 4,
          .n_head_kv = 1,
          .ffn = 256,
          .vocab = 256};
  return m;
}

// The model whose quantized bytes are recorded: small, ffn 800 (ffn_down falls back to the
// 32-blocks), GQA 2, f16.
inline FixtureModel hash_model() {
  return {.name = "llama-hash-2l",
          .dim = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_head_kv = 2,
          .ffn = 800,
          .vocab = 256,
          .seed = 7};
}

// The mixtures kvasir writes, as llama-quantize names them.
inline std::vector<std::string> writable_names() {
  std::vector<std::string> v;
  for (const Mixture& m : all_mixtures())
    if (!m.alias && mixture_is_writable(m.ftype)) v.emplace_back(m.name);
  return v;
}

inline std::vector<std::string> type_columns(const std::string& model) {
  std::vector<std::string> c;
  if (model == "llama-70b-shape-80l") {
    // The mixtures whose attn_v the 70B rule changes (q3_k / q4_k -> q5_k), and one it leaves.
    for (const char* n : {"Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M", "IQ3_XS", "Q5_K_M"})
      c.emplace_back(n);
    return c;
  }
  for (const Mixture& m : all_mixtures())
    if (!m.alias) c.emplace_back(m.name);
  for (const char* n :
       {"Q4_0/imatrix", "Q5_0/imatrix", "Q2_K_S/imatrix", "IQ3_XXS/imatrix", "IQ4_NL/imatrix",
        "IQ4_XS/imatrix", "Q4_K_M/pure", "Q3_K_S/pure", "IQ2_XXS/pure", "Q4_K_M/leave-output",
        "Q4_0/out=q8_0/embd=q8_0", "Q4_K_M/out=f16"})
    c.emplace_back(n);
  // stories260K's rows of 64 take no 256-block type as an explicit choice.
  const bool narrow = model == "stories260K";
  c.emplace_back(narrow ? "Q5_K_S/embd=q8_0" : "Q5_K_S/embd=q6_k");
  c.emplace_back(narrow ? "F16/out=q8_0/embd=q8_0" : "F16/out=q8_0/embd=q4_k");
  return c;
}

inline std::vector<std::string> hash_columns(const std::string& model) {
  std::vector<std::string> c;
  if (model == "stories260K") {
    for (const char* n : {"Q8_0", "Q4_K_M", "Q4_K_M/imatrix", "Q5_K_M/imatrix", "Q4_0/imatrix",
                          "Q3_K_M/imatrix", "IQ4_XS/imatrix", "Q2_K/imatrix"})
      c.emplace_back(n);
    return c;
  }
  // (Q2_K_S is left out: its q2_k tensors require an entry for blk.1.ffn_up.weight, which the
  // synthetic imatrix lacks on purpose; its bytes are Q2_K/imatrix's.)
  for (const std::string& n : writable_names()) {
    if (n == "Q2_K_S") continue;
    c.push_back(n);
    if (n != "F32" && n != "F16" && n != "BF16" && n != "Q8_0") c.push_back(n + "/imatrix");
  }
  for (const char* n :
       {"Q4_K_M/pure", "Q3_K_L/pure", "Q4_0/out=q8_0/embd=q8_0", "Q4_K_S/out=q4_k/embd=q2_k"})
    c.emplace_back(n);
  return c;
}

struct Column {
  FileType ftype = FileType::MOSTLY_Q8_0;
  bool imatrix = false, pure = false, leave_output = false;
  std::optional<DType> out_type, embd_type;
};

inline Column parse_column(const std::string& s) {
  Column c;
  std::stringstream ss(s);
  std::string part;
  bool first = true;
  while (std::getline(ss, part, '/')) {
    if (first) {
      auto m = mixture_from_name(part);
      if (!m) fail("bad fixture column {}", s);
      c.ftype = m->ftype;
      first = false;
    } else if (part == "imatrix") {
      c.imatrix = true;
    } else if (part == "pure") {
      c.pure = true;
    } else if (part == "leave-output") {
      c.leave_output = true;
    } else if (part.rfind("out=", 0) == 0) {
      c.out_type = ggml_type_from_name(part.substr(4));
    } else if (part.rfind("embd=", 0) == 0) {
      c.embd_type = ggml_type_from_name(part.substr(5));
    } else {
      fail("bad fixture column {}", s);
    }
  }
  return c;
}

// llama-quantize's options for a column (before the file arguments).
inline std::string llama_args(const Column& c, const std::string& imatrix_path) {
  std::string a;
  if (c.imatrix) a += " --imatrix " + imatrix_path;
  if (c.pure) a += " --pure";
  if (c.leave_output) a += " --leave-output-tensor";
  if (c.out_type) a += " --output-tensor-type " + std::string(dtype_name(*c.out_type));
  if (c.embd_type) a += " --token-embedding-type " + std::string(dtype_name(*c.embd_type));
  return a;
}

inline MixtureOptions mixture_options(const Column& c) {
  MixtureOptions o;
  o.ftype = c.ftype;
  o.has_imatrix = c.imatrix;
  o.pure = c.pure;
  o.leave_output_tensor = c.leave_output;
  o.output_tensor_type = c.out_type;
  o.token_embedding_type = c.embd_type;
  return o;
}

inline QuantizeOptions quantize_options(const Column& c, const Imatrix* im) {
  QuantizeOptions o;
  o.pure = c.pure;
  o.leave_output_tensor = c.leave_output;
  o.output_tensor_type = c.out_type;
  o.token_embedding_type = c.embd_type;
  o.imatrix = c.imatrix ? im : nullptr;
  return o;
}

// The tensors of a model, in the order the file holds them.
inline std::vector<MixtureTensor> model_tensors(const FixtureModel& m) {
  std::vector<MixtureTensor> t;
  const int64_t d = m.dim, kv = m.dim / m.n_head * m.n_head_kv, f = m.ffn, v = m.vocab;
  auto mat = [&](std::string n, std::vector<int64_t> shape) {
    t.push_back({std::move(n), m.dtype, std::move(shape)});
  };
  auto vec = [&](std::string n, int64_t len) { t.push_back({std::move(n), DType::F32, {len}}); };
  mat("token_embd.weight", {d, v});
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", d);
    mat(p + "attn_q.weight", {d, d});
    mat(p + "attn_k.weight", {d, kv});
    mat(p + "attn_v.weight", {d, kv});
    if (m.arch == "qwen2") {
      vec(p + "attn_q.bias", d);
      vec(p + "attn_k.bias", kv);
      vec(p + "attn_v.bias", kv);
    }
    mat(p + "attn_output.weight", {d, d});
    vec(p + "ffn_norm.weight", d);
    if (m.n_expert > 0) {
      const int64_t e = m.n_expert;
      t.push_back({p + "ffn_gate_inp.weight", DType::F32, {d, e}});
      mat(p + "ffn_gate_exps.weight", {d, f, e});
      mat(p + "ffn_up_exps.weight", {d, f, e});
      mat(p + "ffn_down_exps.weight", {f, d, e});
    } else {
      mat(p + "ffn_gate.weight", {d, f});
      mat(p + "ffn_up.weight", {d, f});
      mat(p + "ffn_down.weight", {f, d});
    }
  }
  vec("output_norm.weight", d);
  if (!m.tied) mat("output.weight", {d, v});
  return t;
}

inline MixtureModel mixture_model_of(const FixtureModel& m) {
  return {.arch = m.arch,
          .n_layer = m.n_layer,
          .n_head = m.n_head,
          .n_head_kv = m.n_head_kv,
          .n_expert = m.n_expert};
}

using Rng = SplitMix64;  // uniform in [-1, 1)

// Writes the model with seeded weights: matrices ~ U(-1,1) / sqrt(cols) with a few larger
// outliers (so the importance-aware searches have something to do), norms around 1.
inline void write_model(const FixtureModel& m, const std::string& path) {
  gguf::GGUFWriter w;
  const std::string a = m.arch;
  auto u32 = [](int x) { return gguf::Value::u32(static_cast<uint32_t>(x)); };
  w.set("general.architecture", gguf::Value::str(a));
  w.set("general.name", gguf::Value::str(m.name));
  w.set("general.file_type", u32(m.dtype == DType::F16 ? 1 : 0));
  w.set(a + ".context_length", u32(2048));
  w.set(a + ".embedding_length", u32(m.dim));
  w.set(a + ".block_count", u32(m.n_layer));
  w.set(a + ".feed_forward_length", u32(m.ffn));
  w.set(a + ".attention.head_count", u32(m.n_head));
  w.set(a + ".attention.head_count_kv", u32(m.n_head_kv));
  w.set(a + ".attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
  w.set(a + ".rope.freq_base", gguf::Value::f32(10000.0f));
  w.set(a + ".rope.dimension_count", u32(m.dim / m.n_head));
  w.set(a + ".vocab_size", u32(m.vocab));
  if (m.n_expert > 0) {
    w.set(a + ".expert_count", u32(m.n_expert));
    w.set(a + ".expert_used_count", u32(2));
  }
  Rng rng{m.seed};
  for (const MixtureTensor& t : model_tensors(m)) {
    int64_t n = 1;
    for (int64_t x : t.shape) n *= x;
    std::vector<float> x(static_cast<size_t>(n));
    if (t.shape.size() == 1) {
      for (float& v : x) v = 1.0f + 0.2f * rng.uniform();
    } else {
      const float scale = 1.0f / std::sqrt(static_cast<float>(t.shape[0]));
      for (float& v : x) {
        v = rng.uniform() * scale;
        if ((rng.next() & 63) == 0) v *= 6.0f;
      }
    }
    std::vector<uint8_t> bytes(row_bytes(t.type, t.shape[0]) * static_cast<size_t>(n / t.shape[0]));
    quantize_rows(t.type, x.data(), bytes.data(), n / t.shape[0], t.shape[0]);
    w.add_tensor_copy(t.name, t.type, t.shape, std::move(bytes));
  }
  w.write(path);
}

// A seeded imatrix for the model's matrices (all but blk.1.ffn_up.weight, which exercises the
// "no entry" path: quantized without importance, as llama-quantize does).
inline std::map<std::string, ImatrixStats> model_imatrix(const FixtureModel& m) {
  std::map<std::string, ImatrixStats> s;
  Rng rng{m.seed * 31 + 5};
  for (const MixtureTensor& t : model_tensors(m)) {
    if (t.shape.size() < 2 || t.name == "token_embd.weight" || t.name == "output.weight" ||
        t.name == "blk.1.ffn_up.weight" || t.name.find("ffn_gate_inp") != std::string::npos)
      continue;
    const int64_t n_mat = t.shape.size() >= 3 ? t.shape[2] : 1;
    ImatrixStats& e = s[t.name];
    e.counts.assign(static_cast<size_t>(n_mat), 512);
    e.sum_sq.resize(static_cast<size_t>(n_mat * t.shape[0]));
    for (double& v : e.sum_sq) {
      const float u = rng.uniform();
      v = static_cast<double>(
          static_cast<float>(512.0 * (0.05 + u * u * (1.0 + 8.0 * (u > 0.9f)))));
    }
  }
  return s;
}

inline uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace kvasir::quant_fixtures
