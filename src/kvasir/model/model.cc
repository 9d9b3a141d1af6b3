#include "kvasir/model/model.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <string_view>

#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/model/forward_state.h"
#include "kvasir/model/matmul_observer.h"
#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

namespace {

// The matrix dtypes a backend can compute with (the CPU backend: cpu/packed_matrix.h).
bool is_matmul_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0 || has_reference_quantizer(t);
}

// Shows the state's MatmulObserver, if it has one, the input x of the matmul by each weight.
void observe(const ForwardState& s, std::initializer_list<std::string_view> weights, const float* x,
             int64_t n_rows, int64_t cols) {
  if (s.matmul_observer == nullptr) return;
  for (std::string_view w : weights) s.matmul_observer->on_matmul(w, x, n_rows, cols);
}

}  // namespace

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
  return load(path, LoadOptions{});
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = hf::open_model_file(path);  // a GGUF file or a Hugging Face folder
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
      fail("{}: tensor '{}' has shape {}, expected {{{}, {}}}", f.path(), name, shape_str(t.shape),
           cols, rows);
    if (!is_matmul_type(t.type))
      fail(
          "{}: tensor '{}' has dtype {}, which kvasir cannot compute with yet (supported: f32, "
          "f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, "
          "iq4_xs)",
          f.path(), name, dtype_name(t.type));
    return MatrixView{t.type, rows, cols, t.data};
  };
  // Conversion runs on all cores; without it the backend only answers size questions.
  ThreadPool pool(pack ? 0 : 1);
  const std::unique_ptr<Backend> backend = make_backend(backend_kind_, pool);
  auto packed = [&](const std::string& name, int64_t cols, int64_t rows) {
    const MatrixView m = matrix(name, cols, rows);
    return pack ? backend->load_matrix(m) : nullptr;
  };
  auto vec = [&](const std::string& name, int64_t n) -> const float* {
    const gguf::TensorInfo& t = f.tensor(name);
    if (t.n_elements() != n || t.shape[0] != n)
      fail("{}: tensor '{}' has shape {}, expected {{{}}}", f.path(), name, shape_str(t.shape), n);
    if (t.type != DType::F32)
      fail("{}: tensor '{}' has dtype {}, expected f32", f.path(), name, dtype_name(t.type));
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0)
      fail("{}: tensor '{}' is not 4-byte aligned", f.path(), name);
    vectors_.push_back(backend->load_vector(reinterpret_cast<const float*>(t.data), n));
    return static_cast<const float*>(vectors_.back()->data());
  };

  const gguf::TensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.shape.size() != 2 || emb.shape[0] != c.dim)
    fail("{}: tensor 'token_embd.weight' has shape {}, expected {{{}, n_vocab}}", f.path(),
         shape_str(emb.shape), c.dim);
  c.n_vocab = static_cast<int>(emb.shape[1]);
  tok_embd_ = matrix("token_embd.weight", c.dim, c.n_vocab);
  if (f.find_tensor("output.weight") != nullptr) {
    output_name_ = "output.weight";
    output_ = packed(output_name_, c.dim, c.n_vocab);
  } else {  // tied embeddings: the backend's own copy of the table
    output_name_ = "token_embd.weight";
    tied_output_bytes_ = backend->matrix_bytes(tok_embd_.type, tok_embd_.rows, tok_embd_.cols);
    if (pack) output_ = backend->load_matrix(tok_embd_);
  }
  output_norm_ = vec("output_norm.weight", c.dim);

  layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = layers_[static_cast<size_t>(l)];
    L.names = {p + "attn_q.weight",      p + "attn_k.weight",   p + "attn_v.weight",
               p + "attn_output.weight", p + "ffn_gate.weight", p + "ffn_up.weight",
               p + "ffn_down.weight"};
    L.attn_norm = vec(p + "attn_norm.weight", c.dim);
    L.wq = packed(L.names.wq, c.dim, c.q_dim());
    L.wk = packed(L.names.wk, c.dim, c.kv_dim());
    L.wv = packed(L.names.wv, c.dim, c.kv_dim());
    L.wo = packed(L.names.wo, c.q_dim(), c.dim);
    if (c.qkv_bias) {
      L.bq = vec(p + "attn_q.bias", c.q_dim());
      L.bk = vec(p + "attn_k.bias", c.kv_dim());
      L.bv = vec(p + "attn_v.bias", c.kv_dim());
    }
    if (c.qk_norm) {
      L.q_norm = vec(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = vec(p + "attn_k_norm.weight", c.head_dim);
    }
    L.ffn_norm = vec(p + "ffn_norm.weight", c.dim);
    L.w_gate = packed(L.names.w_gate, c.dim, c.ffn_dim);
    L.w_up = packed(L.names.w_up, c.dim, c.ffn_dim);
    L.w_down = packed(L.names.w_down, c.ffn_dim, c.dim);
  }
  weight_type_ = c.n_layers > 0 ? f.tensor("blk.0.ffn_down.weight").type : tok_embd_.type;

  inv_freq_host_ = rope_inv_freq(c);
  if (f.find_tensor("rope_freqs.weight")) {  // llama3-style per-frequency divisors
    const float* ff = vec("rope_freqs.weight", c.rope_dim / 2);
    for (size_t i = 0; i < inv_freq_host_.size(); ++i) inv_freq_host_[i] /= ff[i];
  }
  vectors_.push_back(
      backend->load_vector(inv_freq_host_.data(), static_cast<int64_t>(inv_freq_host_.size())));
  inv_freq_ = static_cast<const float*>(vectors_.back()->data());
}

size_t Model::weight_bytes() const {
  size_t total = 0;
  for (const auto& t : file_->tensors()) total += t.nbytes;
  return total + tied_output_bytes_;
}

KVShape Model::kv_shape(KVCacheType kv_type, int block_size) const {
  KVShape s;
  s.n_layers = config_.n_layers;
  s.n_kv_heads = config_.n_kv_heads;
  s.head_dim = config_.head_dim;
  s.block_size = block_size;
  s.type = kv_type;
  return s;
}

void Model::forward(const Batch& b, const KVStorage& kv, ForwardState& s, float* logits,
                    float* hidden) const {
  const ModelConfig& c = config_;
  const int64_t n = b.n_tokens();
  const int64_t n_out = static_cast<int64_t>(b.logit_rows.size());
  const int64_t n_hidden = static_cast<int64_t>(b.hidden_rows.size());
  if (n == 0) return;
  if (!output_) fail("forward: the model was loaded without its compute weights");
  if (&s.model() != this) fail("forward: the forward state was made for another model");
  if (n > s.max_tokens() || n_out > s.max_logit_rows())
    fail(
        "forward: a batch of {} tokens and {} logit rows exceeds the forward state ({} tokens, "
        "{} rows)",
        n, n_out, s.max_tokens(), s.max_logit_rows());
  for (int32_t tok : b.tokens)
    if (tok < 0 || tok >= c.n_vocab) fail("token id {} out of range [0, {})", tok, c.n_vocab);
  for (int32_t r : b.logit_rows)
    if (r < 0 || r >= n) fail("forward: logit row {} is not a token of the batch ({})", r, n);
  if (n_hidden > 0) {
    if (n_hidden > s.max_hidden_rows())
      fail("forward: a batch of {} hidden rows exceeds the forward state ({} rows)", n_hidden,
           s.max_hidden_rows());
    if (hidden == nullptr)
      fail("forward: the batch asks for hidden rows but has nowhere to put them");
    for (int32_t r : b.hidden_rows)
      if (r < 0 || r >= n) fail("forward: hidden row {} is not a token of the batch ({})", r, n);
  }
  Backend& be = s.backend();
  BackendScratch& scratch = s.scratch();

  AttentionArgs aa;
  aa.q = s.q;
  aa.n_tokens = n;
  aa.n_heads = c.n_heads;
  aa.positions = b.positions.data();
  aa.seq_index = b.seq_index.data();
  aa.seqs = b.seqs.data();
  aa.n_seqs = static_cast<int32_t>(b.seqs.size());
  aa.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  aa.out = s.att;

  be.embed(tok_embd_, b.tokens, s.x);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = layers_[static_cast<size_t>(l)];
    const PagedKVLayer kvl = kv.layer(l);

    // Attention block.
    be.rms_norm(s.x, L.attn_norm, s.h, n, c.dim, c.rms_eps);
    observe(s, {L.names.wq, L.names.wk, L.names.wv}, s.h, n, c.dim);
    const MatmulTarget qkv[] = {{L.wq.get(), s.q}, {L.wk.get(), s.k}, {L.wv.get(), s.v}};
    be.matmul(s.h, n, c.dim, qkv, scratch);
    if (L.bq) {
      be.add_bias(s.q, L.bq, n, c.q_dim());
      be.add_bias(s.k, L.bk, n, c.kv_dim());
      be.add_bias(s.v, L.bv, n, c.kv_dim());
    }
    if (L.q_norm) {  // qwen3: each head of Q and K normalized on its own
      be.rms_norm(s.q, L.q_norm, s.q, n * c.n_heads, c.head_dim, c.rms_eps);
      be.rms_norm(s.k, L.k_norm, s.k, n * c.n_kv_heads, c.head_dim, c.rms_eps);
    }
    be.rope(s.q, b.positions.data(), n, c.n_heads, c.head_dim, c.rope_dim, inv_freq_, c.rope_neox);
    be.rope(s.k, b.positions.data(), n, c.n_kv_heads, c.head_dim, c.rope_dim, inv_freq_,
            c.rope_neox);
    be.kv_write(kvl, s.k, s.v, b.slots.data(), b.positions.data(), n);
    be.attention(kvl, aa);
    observe(s, {L.names.wo}, s.att, n, c.q_dim());
    const MatmulTarget wo[] = {{L.wo.get(), s.h}};
    be.matmul(s.att, n, c.q_dim(), wo, scratch);
    be.add(s.x, s.h, n * c.dim);

    // Feed-forward block (SwiGLU).
    be.rms_norm(s.x, L.ffn_norm, s.h, n, c.dim, c.rms_eps);
    observe(s, {L.names.w_gate, L.names.w_up}, s.h, n, c.dim);
    const MatmulTarget gate_up[] = {{L.w_gate.get(), s.gate}, {L.w_up.get(), s.up}};
    be.matmul(s.h, n, c.dim, gate_up, scratch);
    be.swiglu(s.gate, s.up, s.gate, n * c.ffn_dim);
    observe(s, {L.names.w_down}, s.gate, n, c.ffn_dim);
    const MatmulTarget down[] = {{L.w_down.get(), s.h}};
    be.matmul(s.gate, n, c.ffn_dim, down, scratch);
    be.add(s.x, s.h, n * c.dim);
  }

  // Final-norm hidden rows (embeddings) of the rows that asked for them: the same gather and norm
  // as the logits' rows below, so a token's hidden row is what its logits are computed from.
  if (n_hidden > 0) {
    float* h = s.hidden != nullptr ? s.hidden : hidden;
    be.gather_rows(s.x, b.hidden_rows, c.dim, h);
    be.rms_norm(h, output_norm_, h, n_hidden, c.dim, c.rms_eps);
    if (h != hidden)
      be.copy_to_host(hidden, h, static_cast<size_t>(n_hidden) * c.dim * sizeof(float));
  }

  // Logits of the rows that asked for them.
  if (n_out == 0) return;
  be.gather_rows(s.x, b.logit_rows, c.dim, s.hl);
  be.rms_norm(s.hl, output_norm_, s.hl, n_out, c.dim, c.rms_eps);
  observe(s, {output_name_}, s.hl, n_out, c.dim);
  float* out = s.logits != nullptr ? s.logits : logits;
  const MatmulTarget lm_head[] = {{output_.get(), out}};
  be.matmul(s.hl, n_out, c.dim, lm_head, scratch);
  if (out != logits)
    be.copy_to_host(logits, out, static_cast<size_t>(n_out) * c.n_vocab * sizeof(float));
}

DType Model::predominant_weight_type() const {
  std::map<DType, int64_t> elems;
  for (const auto& t : file_->tensors())
    if (t.shape.size() >= 2) elems[t.type] += t.n_elements();
  DType best = weight_type_;
  int64_t most = 0;
  for (const auto& [type, n] : elems)
    if (n > most) {
      most = n;
      best = type;
    }
  return best;
}

}  // namespace kvasir
