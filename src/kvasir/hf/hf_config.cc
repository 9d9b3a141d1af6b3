#include "kvasir/hf/hf_config.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "kvasir/hf/generation_config.h"
#include "kvasir/hf/json_file.h"
#include "kvasir/util/error.h"

namespace kvasir::hf {

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

struct ArchEntry {
  std::string_view hf;
  std::string_view gguf;
  bool permute_qk;
  bool qkv_bias;
  bool qk_norm;
};
constexpr ArchEntry kArchs[] = {
    {"LlamaForCausalLM", "llama", true, false, false},
    {"MistralForCausalLM", "llama", true, false, false},
    {"Qwen2ForCausalLM", "qwen2", false, true, false},
    {"Qwen3ForCausalLM", "qwen3", false, false, true},
};

using gguf::Value;

// Llama 3.1's frequency-dependent RoPE scaling as the divisor per frequency that llama.cpp's
// converter stores in rope_freqs.weight (the llama graph divides each θ_i by it).
std::vector<float> llama3_rope_freqs(double base, int dim, double factor, double low, double high,
                                     double orig_ctx) {
  std::vector<float> out;
  const double pi = 3.14159265358979323846;
  const double low_wl = orig_ctx / low, high_wl = orig_ctx / high;
  for (int i = 0; i < dim; i += 2) {
    // The converter computes the frequencies in float32 (torch.arange / dim, base ** x).
    const float freq =
        1.0f / std::pow(static_cast<float>(base), static_cast<float>(i) / static_cast<float>(dim));
    const double wavelen = 2 * pi / freq;
    double f;
    if (wavelen < high_wl) {
      f = 1;
    } else if (wavelen > low_wl) {
      f = factor;
    } else {
      const double smooth = (orig_ctx / wavelen - low) / (high - low);
      f = 1 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

}  // namespace

HfConfig read_hf_config(const std::string& folder) {
  const std::string file = (std::filesystem::path(folder) / "config.json").string();
  const nlohmann::json j = *read_json_file(file);
  if (!j.is_object()) fail("{}: expected a JSON object", file);
  HfConfig c;

  const auto archs = j.find("architectures");
  if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail("{}: field 'architectures' must be a non-empty list of names", file);
  c.hf_arch = (*archs)[0].get<std::string>();
  const ArchEntry* arch = nullptr;
  for (const auto& a : kArchs)
    if (a.hf == c.hf_arch) arch = &a;
  if (!arch) {
    std::string known;
    for (const auto& a : kArchs)
      known += std::string(known.empty() ? "" : ", ") + std::string(a.hf);
    fail("{}: architecture '{}' is not supported (supported: {})", file, c.hf_arch, known);
  }
  c.gguf_arch = std::string(arch->gguf);
  c.permute_qk = arch->permute_qk;
  c.qkv_bias = arch->qkv_bias;
  c.qk_norm = arch->qk_norm;

  // Quantized checkpoints (AWQ, GPTQ, FP8 layouts) need kernels kvasir does not have yet.
  const auto qc = j.find("quantization_config");
  if (qc != j.end() && !qc->is_null()) {
    const std::string method =
        qc->is_object() ? json_string(*qc, file + ": quantization_config", "quant_method", "?")
                        : "?";
    fail(
        "{}: quantization_config (quant_method '{}'): quantized Hugging Face checkpoints are not "
        "supported yet; convert an F32/F16/BF16 checkpoint",
        file, method);
  }

  c.hidden = static_cast<int>(json_int(j, file, "hidden_size", std::nullopt, 1, kIntMax));
  c.n_layers = static_cast<int>(json_int(j, file, "num_hidden_layers", std::nullopt, 1, kIntMax));
  c.n_heads = static_cast<int>(json_int(j, file, "num_attention_heads", std::nullopt, 1, kIntMax));
  c.n_kv_heads =
      static_cast<int>(json_int(j, file, "num_key_value_heads", c.n_heads, 1, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", file, c.n_heads,
         c.n_kv_heads);
  c.ffn = static_cast<int>(json_int(j, file, "intermediate_size", std::nullopt, 1, kIntMax));
  c.vocab = static_cast<int>(json_int(j, file, "vocab_size", std::nullopt, 1, kIntMax));
  const int default_head_dim = c.hidden / c.n_heads;
  c.head_dim = static_cast<int>(json_int(j, file, "head_dim", default_head_dim, 2, kIntMax));
  if (c.head_dim % 2 != 0)
    fail("{}: field 'head_dim' = {}: expected an even number", file, c.head_dim);
  const int ctx = static_cast<int>(json_int(j, file, "max_position_embeddings", 2048, 1, kIntMax));
  const double eps = json_float(j, file, "rms_norm_eps", 1e-6);
  const double theta = json_float(j, file, "rope_theta", 10000.0);
  if (!(eps > 0)) fail("{}: field 'rms_norm_eps' = {}: expected a number > 0", file, eps);
  if (!(theta > 0)) fail("{}: field 'rope_theta' = {}: expected a number > 0", file, theta);
  c.tied_embeddings = json_bool(j, file, "tie_word_embeddings", false);

  const std::string act = json_string(j, file, "hidden_act", "silu");
  if (act != "silu") fail("{}: field 'hidden_act' = \"{}\": only silu is supported", file, act);
  if (c.gguf_arch != "qwen2") {
    if (json_bool(j, file, "attention_bias", false))
      fail("{}: field 'attention_bias' = true is not supported for {}", file, c.hf_arch);
  }
  if (json_bool(j, file, "mlp_bias", false))
    fail("{}: field 'mlp_bias' = true is not supported", file);
  // A sliding window changes attention beyond its length; refuse it unless it is off or covers
  // the whole context.
  const bool window_on =
      c.gguf_arch == "llama" ? true : json_bool(j, file, "use_sliding_window", false);
  const int64_t window = json_int(j, file, "sliding_window", kIntMax, 0, kIntMax);
  if (window_on && window < ctx)
    fail(
        "{}: field 'sliding_window' = {} is smaller than max_position_embeddings {}: sliding "
        "window attention is not supported",
        file, window, ctx);

  const std::string p = c.gguf_arch + ".";
  auto& m = c.metadata;
  m.emplace_back("general.architecture", Value::str(c.gguf_arch));
  m.emplace_back("general.name",
                 Value::str(std::filesystem::path(folder).lexically_normal().filename().string()));
  m.emplace_back(p + "vocab_size", Value::u32(static_cast<uint32_t>(c.vocab)));
  m.emplace_back(p + "context_length", Value::u32(static_cast<uint32_t>(ctx)));
  m.emplace_back(p + "embedding_length", Value::u32(static_cast<uint32_t>(c.hidden)));
  m.emplace_back(p + "block_count", Value::u32(static_cast<uint32_t>(c.n_layers)));
  m.emplace_back(p + "feed_forward_length", Value::u32(static_cast<uint32_t>(c.ffn)));
  m.emplace_back(p + "rope.dimension_count", Value::u32(static_cast<uint32_t>(c.head_dim)));
  m.emplace_back(p + "attention.head_count", Value::u32(static_cast<uint32_t>(c.n_heads)));
  m.emplace_back(p + "attention.head_count_kv", Value::u32(static_cast<uint32_t>(c.n_kv_heads)));
  m.emplace_back(p + "rope.freq_base", Value::f32(static_cast<float>(theta)));
  m.emplace_back(p + "attention.layer_norm_rms_epsilon", Value::f32(static_cast<float>(eps)));
  if (c.head_dim != default_head_dim) {
    m.emplace_back(p + "attention.key_length", Value::u32(static_cast<uint32_t>(c.head_dim)));
    m.emplace_back(p + "attention.value_length", Value::u32(static_cast<uint32_t>(c.head_dim)));
  }

  const auto rs = j.find("rope_scaling");
  if (rs != j.end() && !rs->is_null()) {
    const std::string where = file + ": rope_scaling";
    if (!rs->is_object()) fail("{}: field 'rope_scaling' must be an object or null", file);
    std::string type = json_string(*rs, where, "rope_type", "");
    if (type.empty()) type = json_string(*rs, where, "type", "default");
    if (type == "default") {
    } else if (type == "linear") {
      const double factor = json_float(*rs, where, "factor", std::nullopt);
      if (!(factor > 0)) fail("{}: field 'factor' = {}: expected a number > 0", where, factor);
      m.emplace_back(p + "rope.scaling.type", Value::str("linear"));
      m.emplace_back(p + "rope.scaling.factor", Value::f32(static_cast<float>(factor)));
    } else if (type == "llama3") {
      const double factor = json_float(*rs, where, "factor", 8.0);
      const double low = json_float(*rs, where, "low_freq_factor", 1.0);
      const double high = json_float(*rs, where, "high_freq_factor", 4.0);
      const double orig = static_cast<double>(
          json_int(*rs, where, "original_max_position_embeddings", 8192, 1, kIntMax));
      if (!(factor > 0) || !(low > 0) || !(high > low))
        fail("{}: expected factor > 0 and high_freq_factor > low_freq_factor > 0", where);
      c.rope_freqs = llama3_rope_freqs(theta, c.head_dim, factor, low, high, orig);
    } else {
      fail("{}: rope_type '{}' is not supported (supported: default, linear, llama3)", where, type);
    }
  }

  // generation_config.json: default sampling and the end-of-generation ids.
  if (auto g = read_generation_config(folder, c.vocab)) {
    if (!g->eos_token_ids.empty()) c.eos_id = g->eos_token_ids.front();
    for (auto& kv : generation_metadata(*g)) m.push_back(std::move(kv));
  }
  return c;
}

}  // namespace kvasir::hf
