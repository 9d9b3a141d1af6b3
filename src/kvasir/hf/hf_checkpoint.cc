#include "kvasir/hf/hf_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "kvasir/format/safetensors.h"
#include "kvasir/hf/hf_config.h"
#include "kvasir/tensor/dtype.h"
#include "kvasir/tokenizer/hf_tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::hf {

namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using gguf::TensorInfo;
using gguf::Value;

// What the view's tensors point into: the mapped shards and the copies made at open.
struct Owner {
  st::SafetensorsCheckpoint checkpoint;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// The GGUF name of a Hugging Face tensor, "" for one to skip; `layer` receives N of
// model.layers.N. Throws for a name the mapping does not know.
struct Mapped {
  std::string gguf;
  enum Kind { kMatrix, kVector } kind = kMatrix;
  enum Role { kOther, kQ, kK } role = kOther;
};

std::optional<Mapped> map_name(const std::string& name) {
  static const std::map<std::string, Mapped, std::less<>> kGlobal = {
      {"model.embed_tokens.weight", {"token_embd.weight"}},
      {"lm_head.weight", {"output.weight"}},
      {"model.norm.weight", {"output_norm.weight", Mapped::kVector}},
  };
  static const std::map<std::string, Mapped, std::less<>> kLayer = {
      {"input_layernorm.weight", {"attn_norm.weight", Mapped::kVector}},
      {"post_attention_layernorm.weight", {"ffn_norm.weight", Mapped::kVector}},
      {"self_attn.q_proj.weight", {"attn_q.weight", Mapped::kMatrix, Mapped::kQ}},
      {"self_attn.k_proj.weight", {"attn_k.weight", Mapped::kMatrix, Mapped::kK}},
      {"self_attn.v_proj.weight", {"attn_v.weight"}},
      {"self_attn.o_proj.weight", {"attn_output.weight"}},
      {"self_attn.q_proj.bias", {"attn_q.bias", Mapped::kVector}},
      {"self_attn.k_proj.bias", {"attn_k.bias", Mapped::kVector}},
      {"self_attn.v_proj.bias", {"attn_v.bias", Mapped::kVector}},
      {"self_attn.q_norm.weight", {"attn_q_norm.weight", Mapped::kVector}},
      {"self_attn.k_norm.weight", {"attn_k_norm.weight", Mapped::kVector}},
      {"mlp.gate_proj.weight", {"ffn_gate.weight"}},
      {"mlp.up_proj.weight", {"ffn_up.weight"}},
      {"mlp.down_proj.weight", {"ffn_down.weight"}},
  };
  if (auto it = kGlobal.find(name); it != kGlobal.end()) return it->second;
  // model.layers.<N>.<rest>, N decimal (std::regex is avoided: GCC 12 warns inside <regex>).
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) == 0) {
    const size_t digits = name.find_first_not_of("0123456789", kPrefix.size());
    if (digits != std::string::npos && digits > kPrefix.size() && digits - kPrefix.size() <= 9 &&
        name[digits] == '.') {
      const std::string layer = name.substr(kPrefix.size(), digits - kPrefix.size());
      const std::string rest = name.substr(digits + 1);
      if (rest == "self_attn.rotary_emb.inv_freq") return Mapped{""};
      if (auto it = kLayer.find(rest); it != kLayer.end()) {
        Mapped r = it->second;
        r.gguf = "blk." + std::to_string(std::stoi(layer)) + "." + r.gguf;
        return r;
      }
    }
  }
  return std::nullopt;
}

std::optional<DType> gguf_dtype(st::DType t) {
  switch (t) {
    case st::DType::F32:
      return DType::F32;
    case st::DType::F16:
      return DType::F16;
    case st::DType::BF16:
      return DType::BF16;
    default:
      return std::nullopt;
  }
}

float element_to_f32(DType t, const uint8_t* p) {
  uint16_t h;
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::F16:
      std::memcpy(&h, p, 2);
      return fp16_to_fp32(h);
    default:
      std::memcpy(&h, p, 2);
      return bf16_to_fp32(h);
  }
}

// Within each head of `n_heads` x head_dim rows, HF row j * head_dim/2 + i (j in {0, 1}) becomes
// row 2i + j, as convert_hf_to_gguf.py's permute() (reshape(n_head, 2, hd/2, cols).swapaxes(1,
// 2)).
void permute_rows(const uint8_t* src, uint8_t* dst, int64_t n_rows, size_t row_bytes, int n_heads) {
  const int64_t hd = n_rows / n_heads, half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = h * hd + j * half + i, to = h * hd + 2 * i + j;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
}

// Pads tokenizer.ggml.tokens (and .scores, .token_type) to `n_vocab` entries as the converter
// does; refuses a tokenizer larger than the embedding table.
void pad_vocab(std::vector<std::pair<std::string, Value>>& kv, int n_vocab,
               const std::string& folder) {
  auto find = [&](std::string_view key) -> Value* {
    for (auto& [k, v] : kv)
      if (k == key) return &v;
    return nullptr;
  };
  Value* tokens = find("tokenizer.ggml.tokens");
  if (!tokens) return;
  auto& items = std::get<gguf::Array>(tokens->v).items;
  const int n = static_cast<int>(items.size());
  if (n > n_vocab)
    fail("{}: the tokenizer has {} tokens but config.json's vocab_size is {}", folder, n, n_vocab);
  for (int i = n; i < n_vocab; ++i) items.push_back(Value::str("[PAD" + std::to_string(i) + "]"));
  if (Value* s = find("tokenizer.ggml.scores"))
    std::get<gguf::Array>(s->v).items.resize(static_cast<size_t>(n_vocab), Value::f32(-1000.0f));
  if (Value* t = find("tokenizer.ggml.token_type"))
    std::get<gguf::Array>(t->v).items.resize(static_cast<size_t>(n_vocab),
                                             Value::i32(5 /* unused */));
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

std::unique_ptr<gguf::GGUFFile> open_hf_folder(const std::string& folder) {
  HfConfig cfg = read_hf_config(folder);
  auto owner = std::make_shared<Owner>(Owner{st::SafetensorsCheckpoint::open(folder), {}});
  const st::SafetensorsCheckpoint& ck = owner->checkpoint;

  // Map every stored tensor.
  struct Item {
    const st::TensorInfo* t;
    Mapped m;
  };
  std::map<std::string, Item> by_gguf;
  for (const st::TensorInfo* t : ck.tensors()) {
    const std::optional<Mapped> m = map_name(t->name);
    if (!m)
      fail(
          "{}: tensor '{}' is not one kvasir knows for {} (expected model.embed_tokens, "
          "model.layers.N.{{input_layernorm, self_attn.{{q,k,v,o}}_proj, "
          "self_attn.{{q,k}}_norm, post_attention_layernorm, mlp.{{gate,up,down}}_proj}}, "
          "model.norm, lm_head)",
          ck.shard_of(t->name).path(), t->name, cfg.hf_arch);
    if (m->gguf.empty()) continue;
    if (!by_gguf.emplace(m->gguf, Item{t, *m}).second)
      fail("{}: tensors '{}' and '{}' are the same weight ({})", ck.shard_of(t->name).path(),
           by_gguf.at(m->gguf).t->name, t->name, m->gguf);
  }
  // Tied embeddings: one matrix serves as both.
  if (cfg.tied_embeddings) {
    auto out = by_gguf.find("output.weight");
    if (out != by_gguf.end()) {
      if (!by_gguf.count("token_embd.weight")) {
        Item it = out->second;
        it.m.gguf = "token_embd.weight";
        by_gguf.emplace("token_embd.weight", it);
      }
      by_gguf.erase("output.weight");
    }
  }

  const int64_t q_rows = static_cast<int64_t>(cfg.n_heads) * cfg.head_dim;
  const int64_t kv_rows = static_cast<int64_t>(cfg.n_kv_heads) * cfg.head_dim;
  // Expected tensors, in the order llama.cpp's converter writes them, with HF shapes.
  struct Want {
    std::string name;
    std::vector<int64_t> hf_shape;
  };
  std::vector<Want> want;
  want.push_back({"token_embd.weight", {cfg.vocab, cfg.hidden}});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    want.push_back({p + "attn_norm.weight", {cfg.hidden}});
    want.push_back({p + "attn_q.weight", {q_rows, cfg.hidden}});
    if (cfg.qkv_bias) want.push_back({p + "attn_q.bias", {q_rows}});
    want.push_back({p + "attn_k.weight", {kv_rows, cfg.hidden}});
    if (cfg.qkv_bias) want.push_back({p + "attn_k.bias", {kv_rows}});
    want.push_back({p + "attn_v.weight", {kv_rows, cfg.hidden}});
    if (cfg.qkv_bias) want.push_back({p + "attn_v.bias", {kv_rows}});
    if (cfg.qk_norm) {
      want.push_back({p + "attn_q_norm.weight", {cfg.head_dim}});
      want.push_back({p + "attn_k_norm.weight", {cfg.head_dim}});
    }
    want.push_back({p + "attn_output.weight", {cfg.hidden, q_rows}});
    want.push_back({p + "ffn_norm.weight", {cfg.hidden}});
    want.push_back({p + "ffn_gate.weight", {cfg.ffn, cfg.hidden}});
    want.push_back({p + "ffn_up.weight", {cfg.ffn, cfg.hidden}});
    want.push_back({p + "ffn_down.weight", {cfg.hidden, cfg.ffn}});
  }
  want.push_back({"output_norm.weight", {cfg.hidden}});
  if (!cfg.tied_embeddings) want.push_back({"output.weight", {cfg.vocab, cfg.hidden}});

  std::vector<TensorInfo> tensors;
  std::set<std::string> used;
  DType matrix_type = DType::F32;
  auto own = [&](size_t n) {
    owner->buffers.push_back(std::make_unique<std::vector<uint8_t>>(n));
    return owner->buffers.back()->data();
  };
  if (!cfg.rope_freqs.empty()) {
    TensorInfo ti;
    ti.name = "rope_freqs.weight";
    ti.type = DType::F32;
    ti.shape = {static_cast<int64_t>(cfg.rope_freqs.size())};
    ti.nbytes = cfg.rope_freqs.size() * sizeof(float);
    uint8_t* buf = own(ti.nbytes);
    std::memcpy(buf, cfg.rope_freqs.data(), ti.nbytes);
    ti.data = buf;
    tensors.push_back(std::move(ti));
  }
  for (const Want& w : want) {
    auto it = by_gguf.find(w.name);
    if (it == by_gguf.end()) {
      if (w.name == "output.weight")
        fail("{}: lm_head.weight is missing and tie_word_embeddings is false", folder);
      fail("{}: missing tensor for '{}' ({} layers in config.json)", folder, w.name, cfg.n_layers);
    }
    const st::TensorInfo& t = *it->second.t;
    const std::string& file = ck.shard_of(t.name).path();
    if (t.shape != w.hf_shape)
      fail("{}: tensor '{}' has shape {}, expected {} from config.json", file, t.name,
           shape_text(t.shape), shape_text(w.hf_shape));
    const std::optional<DType> dt = gguf_dtype(t.dtype);
    if (!dt)
      fail("{}: tensor '{}' has dtype {}, expected F32, F16 or BF16", file, t.name,
           st::dtype_name(t.dtype));
    used.insert(w.name);
    TensorInfo ti;
    ti.name = w.name;
    ti.shape.assign(w.hf_shape.rbegin(), w.hf_shape.rend());  // ggml order
    const size_t esize = dtype_info(*dt).block_bytes;
    if (it->second.m.kind == Mapped::kVector) {
      ti.type = DType::F32;
      ti.nbytes = static_cast<uint64_t>(t.n_elements()) * sizeof(float);
      uint8_t* buf = own(ti.nbytes);
      for (int64_t i = 0; i < t.n_elements(); ++i) {
        const float f = element_to_f32(*dt, t.data + i * esize);
        std::memcpy(buf + i * 4, &f, 4);
      }
      ti.data = buf;
    } else {
      ti.type = *dt;
      ti.nbytes = t.nbytes();
      if (w.name == "blk.0.ffn_down.weight") matrix_type = *dt;
      const Mapped::Role role = it->second.m.role;
      const size_t row_bytes = static_cast<size_t>(w.hf_shape[1]) * esize;
      if (cfg.permute_qk && role != Mapped::kOther) {
        uint8_t* buf = own(ti.nbytes);
        permute_rows(t.data, buf, w.hf_shape[0], row_bytes,
                     role == Mapped::kQ ? cfg.n_heads : cfg.n_kv_heads);
        ti.data = buf;
      } else if (reinterpret_cast<uintptr_t>(t.data) % esize != 0) {
        uint8_t* buf = own(ti.nbytes);  // kernels read whole elements
        std::memcpy(buf, t.data, ti.nbytes);
        ti.data = buf;
      } else {
        ti.data = t.data;  // zero-copy
      }
    }
    tensors.push_back(std::move(ti));
  }
  for (const auto& [name, item] : by_gguf)
    if (!used.count(name))
      fail("{}: tensor '{}' is not part of a {}-layer {} (config.json)",
           ck.shard_of(item.t->name).path(), item.t->name, cfg.n_layers, cfg.hf_arch);

  std::vector<std::pair<std::string, Value>> kv = std::move(cfg.metadata);
  kv.emplace_back("general.file_type", Value::u32(matrix_type == DType::F32   ? 0u
                                                  : matrix_type == DType::F16 ? 1u
                                                                              : 32u));
  Metadata tok = hf_tokenizer_metadata(folder);
  bool has_eos = false;
  for (auto& e : tok) {
    has_eos = has_eos || e.first == "tokenizer.ggml.eos_token_id";
    kv.push_back(std::move(e));
  }
  if (!has_eos && cfg.eos_id)
    kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(*cfg.eos_id)));
  pad_vocab(kv, cfg.vocab, folder);

  const uint64_t bytes = ck.total_bytes();
  return gguf::GGUFFile::from_parts(folder, std::move(kv), std::move(tensors), owner, bytes);
}

std::unique_ptr<gguf::GGUFFile> open_model_file(const std::string& path) {
  if (is_hf_folder(path)) return open_hf_folder(path);
  std::error_code ec;
  if (fs::is_directory(path, ec))
    fail("{}: a folder without config.json (expected a GGUF file or a Hugging Face model folder)",
         path);
  return std::make_unique<gguf::GGUFFile>(path);
}

}  // namespace kvasir::hf
