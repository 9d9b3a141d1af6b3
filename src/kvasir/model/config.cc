#include "kvasir/model/config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <variant>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

struct ArchInfo {
  std::string_view name;
  bool rope_neox;
  bool qkv_bias;
  bool qk_norm;  // per-head RMSNorm of Q and K before RoPE (attn_q_norm / attn_k_norm)
};

// The architecture table: the same llama-style graph with per-family differences.
constexpr ArchInfo kArchs[] = {
    {"llama", false, false, false},
    {"mistral", false, false, false},
    {"qwen2", true, true, false},
    {"qwen3", true, false, true},
};

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

std::string bound_text(int64_t b) {
  return b == kIntMax ? std::string("2^31-1") : std::to_string(b);
}

// An integer hyperparameter, checked to lie in [lo, hi] before it is narrowed to int. Absent:
// `def` (or the reader's "missing metadata key" error without one). Not an integer: the reader's
// type error. Out of range (unsigned values above INT64_MAX included):
//   "<path>: llama.context_length = 4294967295 is out of range (1 .. 2^31-1)".
int read_int(const gguf::GGUFFile& f, const std::string& key, std::optional<int64_t> def,
             int64_t lo, int64_t hi = kIntMax) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (def) return static_cast<int>(*def);
    fail("{}: missing metadata key '{}'", f.path(), key);
  }
  if (!v->is_integer()) f.get_int(key);  // throws the reader's type error
  int64_t value = 0;
  bool in_range = false;
  std::string shown;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) {
    in_range = hi >= 0 && *u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(*u) >= lo;
    value = in_range ? static_cast<int64_t>(*u) : 0;
    shown = std::to_string(*u);
  } else {
    value = std::get<int64_t>(v->v);
    in_range = value >= lo && value <= hi;
    shown = std::to_string(value);
  }
  if (!in_range)
    fail("{}: {} = {} is out of range ({} .. {})", f.path(), key, shown, bound_text(lo),
         bound_text(hi));
  return static_cast<int>(value);
}

// A float hyperparameter that must be finite and positive as the float the model computes with
// (so a double that overflows to inf or underflows to 0 is refused too). NaN fails the check.
float read_positive_float(const gguf::GGUFFile& f, const std::string& key, double def) {
  const double d = f.get_float(key, def);
  // Range first: narrowing a double beyond the float range is undefined.
  const bool ok = d > 0 && d <= std::numeric_limits<float>::max() && static_cast<float>(d) > 0.0f;
  if (!ok) fail("{}: {} = {} is invalid: expected a finite number > 0", f.path(), key, d);
  return static_cast<float>(d);
}

}  // namespace

ModelConfig read_model_config(const gguf::GGUFFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  const ArchInfo* info = nullptr;
  for (const auto& a : kArchs)
    if (a.name == c.arch) info = &a;
  if (!info) {
    std::string known;
    for (const auto& a : kArchs)
      known += std::string(known.empty() ? "" : ", ") + std::string(a.name);
    fail("{}: unsupported model architecture '{}' (supported: {})", f.path(), c.arch, known);
  }
  c.rope_neox = info->rope_neox;
  c.qkv_bias = info->qkv_bias;
  c.qk_norm = info->qk_norm;
  c.name = f.get_string("general.name", "");
  const std::string p = c.arch + ".";
  // Every hyperparameter is range-checked before it is narrowed to int or float, so a file
  // cannot turn a u32 of 2^32-1 into -1 or an epsilon of NaN into garbage logits.
  c.dim = read_int(f, p + "embedding_length", std::nullopt, 1);
  c.n_layers = read_int(f, p + "block_count", std::nullopt, 1);
  c.n_heads = read_int(f, p + "attention.head_count", std::nullopt, 1);
  c.n_kv_heads = read_int(f, p + "attention.head_count_kv", c.n_heads, 1);
  c.ffn_dim = read_int(f, p + "feed_forward_length", std::nullopt, 1);
  c.ctx_train = read_int(f, p + "context_length", 2048, 1);
  c.rms_eps = read_positive_float(f, p + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_base = read_positive_float(f, p + "rope.freq_base", 10000.0);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: {}attention.head_count {} is not a multiple of head_count_kv {}", f.path(), p,
         c.n_heads, c.n_kv_heads);
  c.head_dim = read_int(f, p + "attention.key_length", c.dim / c.n_heads, 1);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)  // the default, dim / head_count, may be 0
    fail("{}: head dimension {} must be positive and even", f.path(), c.head_dim);
  // q_dim() and kv_dim() are ints.
  if (static_cast<int64_t>(c.n_heads) * c.head_dim > kIntMax)
    fail("{}: {}attention.head_count {} x head dimension {} does not fit in an int", f.path(), p,
         c.n_heads, c.head_dim);
  c.rope_dim = read_int(f, p + "rope.dimension_count", c.head_dim, 1);
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    fail("{}: {}rope.dimension_count {} must be even and at most the head dimension {}", f.path(),
         p, c.rope_dim, c.head_dim);

  // Embeddings: llama.cpp's enum llama_pooling_type (0 none, 1 mean, 2 cls, 3 last, 4 rank).
  c.pooling_type = read_int(f, p + "pooling_type", -1, 0);

  std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling == "none" || scaling.empty()) {
    c.rope_scaling = "none";
  } else if (scaling == "linear") {
    c.rope_scaling = "linear";
    c.rope_scale_factor = read_positive_float(f, p + "rope.scaling.factor", 1.0);
  } else if (scaling == "llama3") {
    c.rope_scaling = "llama3";
    c.rope_scale_factor = read_positive_float(f, p + "rope.scaling.factor", 8.0);
    c.rope_low_freq_factor = read_positive_float(f, p + "rope.scaling.low_freq_factor", 1.0);
    c.rope_high_freq_factor = read_positive_float(f, p + "rope.scaling.high_freq_factor", 4.0);
    // rope_inv_freq() interpolates between the two wavelengths and divides by their difference.
    if (!(c.rope_high_freq_factor > c.rope_low_freq_factor))
      fail("{}: {}rope.scaling.high_freq_factor {} must be greater than low_freq_factor {}",
           f.path(), p, c.rope_high_freq_factor, c.rope_low_freq_factor);
    c.rope_orig_ctx = read_int(f, p + "rope.scaling.original_context_length", 8192, 1);
  } else {
    fail("{}: unsupported {}rope.scaling.type '{}' (supported: none, linear, llama3)", f.path(), p,
         scaling);
  }
  return c;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  std::vector<float> inv(static_cast<size_t>(c.rope_dim / 2));
  // θ_i = base^(-2i/d), computed as llama.cpp does: repeated float products of
  // theta_scale = base^(-2/d), so our angles round like theirs.
  const float theta_scale = std::pow(c.rope_base, -2.0f / static_cast<float>(c.rope_dim));
  float theta_i = 1.0f;
  for (int i = 0; i < c.rope_dim / 2; ++i, theta_i *= theta_scale) {
    double f = theta_i;
    if (c.rope_scaling == "linear") f /= c.rope_scale_factor;
    if (c.rope_scaling == "llama3") {
      // Llama 3.1 frequency-dependent scaling.
      const double pi = 3.14159265358979323846;
      double wavelen = 2 * pi / f;
      double low_wl = c.rope_orig_ctx / c.rope_low_freq_factor;
      double high_wl = c.rope_orig_ctx / c.rope_high_freq_factor;
      if (wavelen > low_wl) {
        f /= c.rope_scale_factor;
      } else if (wavelen >= high_wl) {
        double smooth = (c.rope_orig_ctx / wavelen - c.rope_low_freq_factor) /
                        (c.rope_high_freq_factor - c.rope_low_freq_factor);
        f = (1 - smooth) * f / c.rope_scale_factor + smooth * f;
      }
    }
    inv[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace kvasir
