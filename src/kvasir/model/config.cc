#include "kvasir/model/config.h"

#include <cmath>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

struct ArchInfo {
  std::string_view name;
  bool rope_neox;
  bool qkv_bias;
};

// The architecture table: the same llama-style graph with per-family differences.
constexpr ArchInfo kArchs[] = {
    {"llama", false, false},
    {"mistral", false, false},
    {"qwen2", true, true},
};

}  // namespace

ModelConfig read_model_config(const gguf::GGUFFile& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  const ArchInfo* info = nullptr;
  for (const auto& a : kArchs)
    if (a.name == c.arch) info = &a;
  if (!info) {
    std::string known;
    for (const auto& a : kArchs) known += std::string(known.empty() ? "" : ", ") + std::string(a.name);
    fail("{}: unsupported model architecture '{}' (supported: {})", f.path(), c.arch, known);
  }
  c.rope_neox = info->rope_neox;
  c.qkv_bias = info->qkv_bias;
  c.name = f.get_string("general.name", "");
  const std::string p = c.arch + ".";
  auto geti = [&](const std::string& k) { return static_cast<int>(f.get_int(p + k)); };
  c.dim = geti("embedding_length");
  c.n_layers = geti("block_count");
  c.n_heads = geti("attention.head_count");
  c.n_kv_heads = static_cast<int>(f.get_int(p + "attention.head_count_kv", c.n_heads));
  c.ffn_dim = geti("feed_forward_length");
  c.ctx_train = static_cast<int>(f.get_int(p + "context_length", 2048));
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = static_cast<float>(f.get_float(p + "rope.freq_base", 10000.0));
  if (c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.ffn_dim <= 0)
    fail("{}: invalid hyperparameters (embedding_length {}, block_count {}, head_count {}, "
         "head_count_kv {}, feed_forward_length {}): all must be positive",
         f.path(), c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim);
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: {}attention.head_count {} is not a multiple of head_count_kv {}", f.path(), p,
         c.n_heads, c.n_kv_heads);
  c.head_dim = static_cast<int>(f.get_int(p + "attention.key_length", c.dim / c.n_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    fail("{}: head dimension {} must be positive and even", f.path(), c.head_dim);
  c.rope_dim = static_cast<int>(f.get_int(p + "rope.dimension_count", c.head_dim));
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    fail("{}: {}rope.dimension_count {} must be even and at most the head dimension {}", f.path(),
         p, c.rope_dim, c.head_dim);

  std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling == "none" || scaling.empty()) {
    c.rope_scaling = "none";
  } else if (scaling == "linear") {
    c.rope_scaling = "linear";
    c.rope_scale_factor = static_cast<float>(f.get_float(p + "rope.scaling.factor", 1.0));
    if (!(c.rope_scale_factor > 0))
      fail("{}: {}rope.scaling.factor must be positive", f.path(), p);
  } else if (scaling == "llama3") {
    c.rope_scaling = "llama3";
    c.rope_scale_factor = static_cast<float>(f.get_float(p + "rope.scaling.factor", 8.0));
    c.rope_low_freq_factor = static_cast<float>(f.get_float(p + "rope.scaling.low_freq_factor", 1.0));
    c.rope_high_freq_factor =
        static_cast<float>(f.get_float(p + "rope.scaling.high_freq_factor", 4.0));
    c.rope_orig_ctx =
        static_cast<int>(f.get_int(p + "rope.scaling.original_context_length", 8192));
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
