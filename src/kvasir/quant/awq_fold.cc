#include "kvasir/quant/awq_fold.h"

#include <cmath>

#include "kvasir/format/gguf.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

std::vector<float>& get(FloatTensors& t, const std::string& name, int64_t n) {
  const auto it = t.find(name);
  if (it == t.end()) fail("awq fold: tensor {} is not loaded", name);
  if (static_cast<int64_t>(it->second.size()) != n)
    fail("awq fold: tensor {} has {} values, expected {}", name, it->second.size(), n);
  return it->second;
}

void check_scales(std::span<const float> s, int64_t n, const char* what) {
  if (static_cast<int64_t>(s.size()) != n)
    fail("awq fold: {} scales for {}, which has {} input channels", s.size(), what, n);
  for (float v : s)
    if (!(v > 0) || !std::isfinite(v)) fail("awq fold: scale {} for {} is not positive", v, what);
}

// Columns of a rows x cols matrix times s.
void scale_columns(std::vector<float>& w, int64_t cols, std::span<const float> s) {
  const int64_t rows = static_cast<int64_t>(w.size()) / cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      w[static_cast<size_t>(r * cols + j)] *= s[static_cast<size_t>(j)];
}

// Row r of a rows x cols matrix divided by s[r].
void divide_rows(std::vector<float>& w, int64_t cols, std::span<const float> s) {
  for (size_t r = 0; r < s.size(); ++r)
    for (int64_t j = 0; j < cols; ++j)
      w[r * static_cast<size_t>(cols) + static_cast<size_t>(j)] /= s[r];
}

}  // namespace

std::vector<float> load_float_tensor(const gguf::GGUFFile& file, const std::string& name) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (!t) fail("{}: tensor {} is missing", file.path(), name);
  const int64_t n = t->n_elements(), cols = t->shape[0];
  std::vector<float> out(static_cast<size_t>(n));
  const size_t rb = row_bytes(t->type, cols);
  for (int64_t r = 0; r < n / cols; ++r)
    dequantize_row(t->type, t->data + static_cast<size_t>(r) * rb, out.data() + r * cols, cols);
  return out;
}

std::string layer_tensor(int layer, const std::string& what) {
  return "blk." + std::to_string(layer) + "." + what;
}

std::vector<int64_t> attn_output_tie(const ModelConfig& c) {
  const int group = c.n_heads / c.n_kv_heads;
  std::vector<int64_t> tie(static_cast<size_t>(c.q_dim()));
  for (int h = 0; h < c.n_heads; ++h)
    for (int d = 0; d < c.head_dim; ++d)
      tie[static_cast<size_t>(h * c.head_dim + d)] = (h / group) * group * c.head_dim + d;
  return tie;
}

std::vector<std::string> fold_attn_input_tensors(int layer) {
  return {layer_tensor(layer, "attn_norm.weight"), layer_tensor(layer, "attn_q.weight"),
          layer_tensor(layer, "attn_k.weight"), layer_tensor(layer, "attn_v.weight")};
}
std::vector<std::string> fold_ffn_input_tensors(int layer) {
  return {layer_tensor(layer, "ffn_norm.weight"), layer_tensor(layer, "ffn_gate.weight"),
          layer_tensor(layer, "ffn_up.weight")};
}
std::vector<std::string> fold_attn_output_tensors(const ModelConfig& c, int layer) {
  std::vector<std::string> v{layer_tensor(layer, "attn_v.weight"),
                             layer_tensor(layer, "attn_output.weight")};
  if (c.qkv_bias) v.push_back(layer_tensor(layer, "attn_v.bias"));
  return v;
}
std::vector<std::string> fold_ffn_down_tensors(int layer) {
  return {layer_tensor(layer, "ffn_up.weight"), layer_tensor(layer, "ffn_down.weight")};
}

void fold_attn_input(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s) {
  check_scales(s, c.dim, "attn_q/k/v");
  std::vector<float>& norm = get(t, layer_tensor(layer, "attn_norm.weight"), c.dim);
  for (int j = 0; j < c.dim; ++j) norm[static_cast<size_t>(j)] /= s[static_cast<size_t>(j)];
  scale_columns(get(t, layer_tensor(layer, "attn_q.weight"), int64_t{c.q_dim()} * c.dim), c.dim, s);
  scale_columns(get(t, layer_tensor(layer, "attn_k.weight"), int64_t{c.kv_dim()} * c.dim), c.dim,
                s);
  scale_columns(get(t, layer_tensor(layer, "attn_v.weight"), int64_t{c.kv_dim()} * c.dim), c.dim,
                s);
}

void fold_ffn_input(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s) {
  check_scales(s, c.dim, "ffn_gate/up");
  std::vector<float>& norm = get(t, layer_tensor(layer, "ffn_norm.weight"), c.dim);
  for (int j = 0; j < c.dim; ++j) norm[static_cast<size_t>(j)] /= s[static_cast<size_t>(j)];
  scale_columns(get(t, layer_tensor(layer, "ffn_gate.weight"), int64_t{c.ffn_dim} * c.dim), c.dim,
                s);
  scale_columns(get(t, layer_tensor(layer, "ffn_up.weight"), int64_t{c.ffn_dim} * c.dim), c.dim, s);
}

void fold_attn_output(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s) {
  check_scales(s, c.q_dim(), "attn_output");
  const std::vector<int64_t> tie = attn_output_tie(c);
  for (size_t j = 0; j < tie.size(); ++j)
    if (s[j] != s[static_cast<size_t>(tie[j])])
      fail(
          "awq fold: attn_output scales of channel {} and {} differ, but they read the same V "
          "row (GQA: {} query heads per KV head)",
          j, tie[j], c.n_heads / c.n_kv_heads);
  // V row (kv head k, dim d) is read by query heads k * group .. : their first one's scale.
  const int group = c.n_heads / c.n_kv_heads;
  std::vector<float> sv(static_cast<size_t>(c.kv_dim()));
  for (int k = 0; k < c.n_kv_heads; ++k)
    for (int d = 0; d < c.head_dim; ++d)
      sv[static_cast<size_t>(k * c.head_dim + d)] =
          s[static_cast<size_t>(k * group * c.head_dim + d)];
  divide_rows(get(t, layer_tensor(layer, "attn_v.weight"), int64_t{c.kv_dim()} * c.dim), c.dim, sv);
  if (c.qkv_bias) divide_rows(get(t, layer_tensor(layer, "attn_v.bias"), c.kv_dim()), 1, sv);
  scale_columns(get(t, layer_tensor(layer, "attn_output.weight"), int64_t{c.dim} * c.q_dim()),
                c.q_dim(), s);
}

void fold_ffn_down(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s) {
  check_scales(s, c.ffn_dim, "ffn_down");
  divide_rows(get(t, layer_tensor(layer, "ffn_up.weight"), int64_t{c.ffn_dim} * c.dim), c.dim, s);
  scale_columns(get(t, layer_tensor(layer, "ffn_down.weight"), int64_t{c.dim} * c.ffn_dim),
                c.ffn_dim, s);
}

}  // namespace kvasir
