#include "reference_llama.h"

#include <cmath>

#include "kvasir/model/config.h"
#include "kvasir/tensor/quantize.h"

namespace kvasir::testing {

namespace {

using Mat = std::vector<float>;  // rows x cols, row-major

Mat load(const gguf::GGUFFile& f, const std::string& name) {
  const gguf::TensorInfo& t = f.tensor(name);
  int64_t n = t.n_elements();
  Mat out(static_cast<size_t>(n));
  dequantize_row(t.type, t.data, out.data(), n);
  return out;
}

// y[r] = sum_c W[r][c] * x[c], in double.
std::vector<double> matvec(const Mat& w, const std::vector<double>& x, int64_t rows) {
  int64_t cols = static_cast<int64_t>(x.size());
  std::vector<double> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(w[static_cast<size_t>(r * cols + c)]) * x[c];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const Mat& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  double scale = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
  return y;
}

void rope(std::vector<double>& v, int n_heads, int head_dim, int rope_dim, int pos,
          const std::vector<double>& inv_freq, bool neox) {
  for (int h = 0; h < n_heads; ++h) {
    double* x = &v[static_cast<size_t>(h * head_dim)];
    for (int i = 0; i < rope_dim / 2; ++i) {
      double th = pos * inv_freq[static_cast<size_t>(i)];
      double cs = std::cos(th), sn = std::sin(th);
      int a = neox ? i : 2 * i;
      int b = neox ? i + rope_dim / 2 : 2 * i + 1;
      double x0 = x[a], x1 = x[b];
      x[a] = x0 * cs - x1 * sn;
      x[b] = x0 * sn + x1 * cs;
    }
  }
}

}  // namespace

std::vector<std::vector<float>> reference_logits(const gguf::GGUFFile& f,
                                                 const std::vector<int32_t>& tokens) {
  const ModelConfig c = read_model_config(f);
  const Mat emb = load(f, "token_embd.weight");
  const int64_t n_vocab = f.tensor("token_embd.weight").shape[1];
  const Mat out_w = f.find_tensor("output.weight") ? load(f, "output.weight") : emb;
  const Mat out_norm = load(f, "output_norm.weight");
  std::vector<double> inv_freq(static_cast<size_t>(c.rope_dim / 2));
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    double fr = std::pow(double(c.rope_base), -2.0 * i / c.rope_dim);
    if (c.rope_scaling == "linear") fr /= c.rope_scale_factor;
    inv_freq[static_cast<size_t>(i)] = fr;
  }
  if (f.find_tensor("rope_freqs.weight")) {
    Mat ff = load(f, "rope_freqs.weight");
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] /= ff[i];
  }

  const size_t T = tokens.size();
  std::vector<std::vector<double>> x(T);
  for (size_t t = 0; t < T; ++t) {
    x[t].resize(static_cast<size_t>(c.dim));
    for (int i = 0; i < c.dim; ++i) x[t][i] = emb[static_cast<size_t>(tokens[t]) * c.dim + i];
  }
  const int group = c.n_heads / c.n_kv_heads;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Mat an = load(f, p + "attn_norm.weight"), wq = load(f, p + "attn_q.weight"),
        wk = load(f, p + "attn_k.weight"), wv = load(f, p + "attn_v.weight"),
        wo = load(f, p + "attn_output.weight"), fn = load(f, p + "ffn_norm.weight"),
        wg = load(f, p + "ffn_gate.weight"), wu = load(f, p + "ffn_up.weight"),
        wd = load(f, p + "ffn_down.weight");
    Mat bq, bk, bv, qn, kn;
    if (c.qk_norm) {
      qn = load(f, p + "attn_q_norm.weight");
      kn = load(f, p + "attn_k_norm.weight");
    }
    if (c.qkv_bias) {
      bq = load(f, p + "attn_q.bias");
      bk = load(f, p + "attn_k.bias");
      bv = load(f, p + "attn_v.bias");
    }
    std::vector<std::vector<double>> Q(T), K(T), V(T);
    for (size_t t = 0; t < T; ++t) {
      auto h = rmsnorm(x[t], an, c.rms_eps);
      Q[t] = matvec(wq, h, c.q_dim());
      K[t] = matvec(wk, h, c.kv_dim());
      V[t] = matvec(wv, h, c.kv_dim());
      if (c.qkv_bias) {
        for (int i = 0; i < c.q_dim(); ++i) Q[t][i] += bq[i];
        for (int i = 0; i < c.kv_dim(); ++i) K[t][i] += bk[i], V[t][i] += bv[i];
      }
      if (c.qk_norm) {  // qwen3: RMSNorm over each head on its own
        auto norm_heads = [&](std::vector<double>& v, int heads, const Mat& w) {
          for (int h = 0; h < heads; ++h) {
            const auto b = v.begin() + h * c.head_dim;
            const auto y = rmsnorm(std::vector<double>(b, b + c.head_dim), w, c.rms_eps);
            std::copy(y.begin(), y.end(), b);
          }
        };
        norm_heads(Q[t], c.n_heads, qn);
        norm_heads(K[t], c.n_kv_heads, kn);
      }
      rope(Q[t], c.n_heads, c.head_dim, c.rope_dim, int(t), inv_freq, c.rope_neox);
      rope(K[t], c.n_kv_heads, c.head_dim, c.rope_dim, int(t), inv_freq, c.rope_neox);
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(static_cast<size_t>(c.q_dim()), 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        int kvh = h / group;
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < c.head_dim; ++i)
            d += Q[t][h * c.head_dim + i] * K[j][kvh * c.head_dim + i];
          s[j] = d / std::sqrt(double(c.head_dim));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (size_t j = 0; j <= t; ++j)
          for (int i = 0; i < c.head_dim; ++i)
            att[h * c.head_dim + i] += s[j] / sum * V[j][kvh * c.head_dim + i];
      }
      auto o = matvec(wo, att, c.dim);
      for (int i = 0; i < c.dim; ++i) x[t][i] += o[i];
      auto h2 = rmsnorm(x[t], fn, c.rms_eps);
      auto g = matvec(wg, h2, c.ffn_dim), u = matvec(wu, h2, c.ffn_dim);
      for (int i = 0; i < c.ffn_dim; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto d = matvec(wd, g, c.dim);
      for (int i = 0; i < c.dim; ++i) x[t][i] += d[i];
    }
  }
  std::vector<std::vector<float>> logits(T);
  for (size_t t = 0; t < T; ++t) {
    auto h = rmsnorm(x[t], out_norm, c.rms_eps);
    auto lg = matvec(out_w, h, n_vocab);
    logits[t].assign(lg.begin(), lg.end());
  }
  return logits;
}

}  // namespace kvasir::testing
