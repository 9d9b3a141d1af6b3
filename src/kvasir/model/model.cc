#include "kvasir/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvasir/kernels/cpu/ops.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

// Q8_0 and Q4_0 read Q8_0-quantized activations; the float types read the floats.
bool same_activation_format(DType a, DType b) {
  auto quant = [](DType t) { return t == DType::Q8_0 || t == DType::Q4_0; };
  return quant(a) == quant(b);
}

bool is_matmul_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0;
}

// The row-wise work between matmuls (norms, RoPE, residual adds, SwiGLU) runs on the pool, split
// by token rows, when a step has enough of it: it costs about a nanosecond per float, waking the
// pool a few microseconds. A row's result does not depend on how the rows are split. (The shapes
// these ops check were validated when the model was loaded, so nothing throws on a worker.)
constexpr int64_t kMinParallelRowFloats = int64_t{1} << 15;

// Row t of a buffer of rows of `width` floats.
float* row(std::vector<float>& buf, int64_t t, int64_t width) {
  return buf.data() + static_cast<size_t>(t * width);
}

template <class F>
void for_rows(ThreadPool& pool, int64_t n, int64_t floats_per_row, F&& fn) {
  if (pool.size() == 1 || n < 2 || n * floats_per_row < kMinParallelRowFloats) {
    fn(int64_t{0}, n);
  } else {
    pool.parallel_for(n, [&](int64_t t0, int64_t t1, int) { fn(t0, t1); });
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path) {
  return load(path, LoadOptions{});
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::make_unique<gguf::GGUFFile>(path);
  m->config_ = read_model_config(*m->file_);
  m->bind_weights(options.pack);
  return m;
}

void Model::bind_weights(bool pack) {
  const gguf::GGUFFile& f = *file_;
  ModelConfig& c = config_;

  auto shape_str = [](const std::vector<int64_t>& s) {
    std::string r = "{";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "}";
  };
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows) {
    const gguf::TensorInfo& t = f.tensor(name);
    if (t.shape.size() != 2 || t.shape[0] != cols || t.shape[1] != rows)
      fail("{}: tensor '{}' has shape {}, expected {{{}, {}}}", f.path(), name,
           shape_str(t.shape), cols, rows);
    if (!is_matmul_type(t.type))
      fail("{}: tensor '{}' has dtype {}, which kvasir cannot compute with yet (supported: f32, "
           "f16, bf16, q8_0, q4_0)",
           f.path(), name, dtype_name(t.type));
    return cpu::Matrix{t.type, rows, cols, t.data};
  };
  std::unique_ptr<ThreadPool> pool;
  if (pack) pool = std::make_unique<ThreadPool>(0);
  auto packed = [&](const std::string& name, int64_t cols, int64_t rows) {
    const cpu::Matrix m = matrix(name, cols, rows);
    if (!pack) return cpu::PackedMatrix();
    return cpu::PackedMatrix(m, *pool);
  };
  auto vec = [&](const std::string& name, int64_t n) -> const float* {
    const gguf::TensorInfo& t = f.tensor(name);
    if (t.n_elements() != n || t.shape[0] != n)
      fail("{}: tensor '{}' has shape {}, expected {{{}}}", f.path(), name, shape_str(t.shape), n);
    if (t.type != DType::F32)
      fail("{}: tensor '{}' has dtype {}, expected f32", f.path(), name, dtype_name(t.type));
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0)
      fail("{}: tensor '{}' is not 4-byte aligned", f.path(), name);
    return reinterpret_cast<const float*>(t.data);
  };

  const gguf::TensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.shape.size() != 2 || emb.shape[0] != c.dim)
    fail("{}: tensor 'token_embd.weight' has shape {}, expected {{{}, n_vocab}}", f.path(),
         shape_str(emb.shape), c.dim);
  c.n_vocab = static_cast<int>(emb.shape[1]);
  tok_embd_ = matrix("token_embd.weight", c.dim, c.n_vocab);
  tied_output_ = f.find_tensor("output.weight") == nullptr;
  if (!tied_output_) {
    output_ = packed("output.weight", c.dim, c.n_vocab);
  } else if (pack) {
    output_ = cpu::PackedMatrix(tok_embd_, *pool);  // tied embeddings: a packed copy
  }
  output_norm_ = vec("output_norm.weight", c.dim);

  layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = layers_[static_cast<size_t>(l)];
    L.attn_norm = vec(p + "attn_norm.weight", c.dim);
    L.wq = packed(p + "attn_q.weight", c.dim, c.q_dim());
    L.wk = packed(p + "attn_k.weight", c.dim, c.kv_dim());
    L.wv = packed(p + "attn_v.weight", c.dim, c.kv_dim());
    L.wo = packed(p + "attn_output.weight", c.q_dim(), c.dim);
    if (c.qkv_bias) {
      L.bq = vec(p + "attn_q.bias", c.q_dim());
      L.bk = vec(p + "attn_k.bias", c.kv_dim());
      L.bv = vec(p + "attn_v.bias", c.kv_dim());
    }
    L.ffn_norm = vec(p + "ffn_norm.weight", c.dim);
    L.w_gate = packed(p + "ffn_gate.weight", c.dim, c.ffn_dim);
    L.w_up = packed(p + "ffn_up.weight", c.dim, c.ffn_dim);
    L.w_down = packed(p + "ffn_down.weight", c.ffn_dim, c.dim);
  }
  weight_type_ = c.n_layers > 0 ? f.tensor("blk.0.ffn_down.weight").type : tok_embd_.type;

  inv_freq_ = rope_inv_freq(c);
  if (f.find_tensor("rope_freqs.weight")) {  // llama3-style per-frequency divisors
    const float* ff = vec("rope_freqs.weight", c.rope_dim / 2);
    for (size_t i = 0; i < inv_freq_.size(); ++i) inv_freq_[i] /= ff[i];
  }
}

size_t Model::weight_bytes() const {
  size_t total = 0;
  for (const auto& t : file_->tensors()) total += t.nbytes;
  if (tied_output_) total += cpu::packed_bytes(tok_embd_.type, tok_embd_.rows, tok_embd_.cols);
  return total;
}

KVShape Model::kv_shape(DType kv_type, int block_size) const {
  KVShape s;
  s.n_layers = config_.n_layers;
  s.n_kv_heads = config_.n_kv_heads;
  s.head_dim = config_.head_dim;
  s.block_size = block_size;
  s.type = kv_type;
  return s;
}

void Model::ensure_scratch(int64_t n, int64_t n_logits) {
  const ModelConfig& c = config_;
  if (n > cap_tokens_) {
    cap_tokens_ = n;
    x_.resize(static_cast<size_t>(n * c.dim));
    h_.resize(static_cast<size_t>(n * c.dim));
    q_.resize(static_cast<size_t>(n * c.q_dim()));
    k_.resize(static_cast<size_t>(n * c.kv_dim()));
    v_.resize(static_cast<size_t>(n * c.kv_dim()));
    att_.resize(static_cast<size_t>(n * c.q_dim()));
    gate_.resize(static_cast<size_t>(n * c.ffn_dim));
    up_.resize(static_cast<size_t>(n * c.ffn_dim));
  }
  if (static_cast<int64_t>(hl_.size()) < n_logits * c.dim)
    hl_.resize(static_cast<size_t>(n_logits * c.dim));
}

// Multiplies the same input by several matrices: one parallel region when they share an
// activation format (the usual case), else one matmul each.
void Model::project(const float* in, int64_t n, int64_t cols,
                    std::span<const cpu::MatmulOutput> outs, ThreadPool& pool) {
  bool same = true;
  for (const auto& o : outs) same = same && same_activation_format(o.w->type(), outs[0].w->type());
  if (same) {
    act_.prepare(in, n, cols, outs[0].w->type(), pool);
    cpu::matmul(outs, act_, pool);
    return;
  }
  for (const auto& o : outs) {
    act_.prepare(in, n, cols, o.w->type(), pool);
    cpu::matmul(*o.w, act_, o.y, pool);
  }
}

void Model::forward(const Batch& b, const KVStorage& kv, float* logits, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const int64_t n = b.n_tokens();
  const int64_t n_out = static_cast<int64_t>(b.logit_rows.size());
  if (n == 0) return;
  if (output_.empty()) fail("forward: the model was loaded without packed weights");
  ensure_scratch(n, n_out);
  for (int64_t t = 0; t < n; ++t) {
    int32_t tok = b.tokens[static_cast<size_t>(t)];
    if (tok < 0 || tok >= c.n_vocab) fail("token id {} out of range [0, {})", tok, c.n_vocab);
    cpu::dequantize_row(tok_embd_, tok, &x_[static_cast<size_t>(t * c.dim)]);
  }

  cpu::AttentionArgs aa;
  aa.q = q_.data();
  aa.n_tokens = n;
  aa.n_heads = c.n_heads;
  aa.positions = b.positions.data();
  aa.seq_index = b.seq_index.data();
  aa.seqs = b.seqs.data();
  aa.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  aa.out = att_.data();

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = layers_[static_cast<size_t>(l)];
    const cpu::PagedKVLayer kvl = kv.layer(l);

    // Attention block.
    for_rows(pool, n, c.dim, [&](int64_t t0, int64_t t1) {
      cpu::rms_norm(row(x_, t0, c.dim), L.attn_norm, row(h_, t0, c.dim), t1 - t0, c.dim,
                    c.rms_eps);
    });
    const cpu::MatmulOutput qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
    project(h_.data(), n, c.dim, qkv, pool);
    if (L.bq) {
      for (int64_t t = 0; t < n; ++t) {
        cpu::add(&q_[static_cast<size_t>(t * c.q_dim())], L.bq, c.q_dim());
        cpu::add(&k_[static_cast<size_t>(t * c.kv_dim())], L.bk, c.kv_dim());
        cpu::add(&v_[static_cast<size_t>(t * c.kv_dim())], L.bv, c.kv_dim());
      }
    }
    for_rows(pool, n, c.q_dim() + c.kv_dim(), [&](int64_t t0, int64_t t1) {
      const int32_t* pos = b.positions.data() + t0;
      cpu::rope(row(q_, t0, c.q_dim()), pos, t1 - t0, c.n_heads, c.head_dim, c.rope_dim,
                inv_freq_.data(), c.rope_neox);
      cpu::rope(row(k_, t0, c.kv_dim()), pos, t1 - t0, c.n_kv_heads, c.head_dim, c.rope_dim,
                inv_freq_.data(), c.rope_neox);
    });
    cpu::kv_write(kvl, k_.data(), v_.data(), b.slots.data(), n);
    cpu::attention(kvl, aa, pool);
    act_.prepare(att_.data(), n, c.q_dim(), L.wo.type(), pool);
    cpu::matmul(L.wo, act_, h_.data(), pool);
    // Residual, then the feed-forward block's norm, row by row.
    for_rows(pool, n, 2 * int64_t{c.dim}, [&](int64_t t0, int64_t t1) {
      float* x = row(x_, t0, c.dim);
      float* h = row(h_, t0, c.dim);
      cpu::add(x, h, (t1 - t0) * c.dim);
      cpu::rms_norm(x, L.ffn_norm, h, t1 - t0, c.dim, c.rms_eps);
    });

    // Feed-forward block (SwiGLU).
    const cpu::MatmulOutput gate_up[] = {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}};
    project(h_.data(), n, c.dim, gate_up, pool);
    for_rows(pool, n, c.ffn_dim, [&](int64_t t0, int64_t t1) {
      float* g = row(gate_, t0, c.ffn_dim);
      cpu::swiglu(g, row(up_, t0, c.ffn_dim), g, (t1 - t0) * c.ffn_dim);
    });
    act_.prepare(gate_.data(), n, c.ffn_dim, L.w_down.type(), pool);
    cpu::matmul(L.w_down, act_, h_.data(), pool);
    for_rows(pool, n, c.dim, [&](int64_t t0, int64_t t1) {
      cpu::add(row(x_, t0, c.dim), row(h_, t0, c.dim), (t1 - t0) * c.dim);
    });
  }

  if (n_out == 0) return;
  for (int64_t i = 0; i < n_out; ++i) {
    int32_t row = b.logit_rows[static_cast<size_t>(i)];
    std::memcpy(&hl_[static_cast<size_t>(i * c.dim)], &x_[static_cast<size_t>(row) * c.dim],
                sizeof(float) * static_cast<size_t>(c.dim));
  }
  cpu::rms_norm(hl_.data(), output_norm_, hl_.data(), n_out, c.dim, c.rms_eps);
  act_.prepare(hl_.data(), n_out, c.dim, output_.type(), pool);
  cpu::matmul(output_, act_, logits, pool);
}

}  // namespace kvasir
