#include "kvasir/quant/quant_mixture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

using FT = FileType;

// llama-quantize's list (tools/quantize/quantize.cpp), minus the types ggml has and kvasir's
// DType does not (Q1_0, Q2_0, MXFP4_MOE, NVFP4) and COPY.
constexpr Mixture kMixtures[] = {
    {"Q4_0", FT::MOSTLY_Q4_0, " 4.34G, +0.4685 ppl @ Llama-3-8B"},
    {"Q4_1", FT::MOSTLY_Q4_1, " 4.78G, +0.4511 ppl @ Llama-3-8B"},
    {"Q5_0", FT::MOSTLY_Q5_0, " 5.21G, +0.1316 ppl @ Llama-3-8B"},
    {"Q5_1", FT::MOSTLY_Q5_1, " 5.65G, +0.1062 ppl @ Llama-3-8B"},
    {"IQ2_XXS", FT::MOSTLY_IQ2_XXS, " 2.06 bpw quantization"},
    {"IQ2_XS", FT::MOSTLY_IQ2_XS, " 2.31 bpw quantization"},
    {"IQ2_S", FT::MOSTLY_IQ2_S, " 2.5  bpw quantization"},
    {"IQ2_M", FT::MOSTLY_IQ2_M, " 2.7  bpw quantization"},
    {"IQ1_S", FT::MOSTLY_IQ1_S, " 1.56 bpw quantization"},
    {"IQ1_M", FT::MOSTLY_IQ1_M, " 1.75 bpw quantization"},
    {"TQ1_0", FT::MOSTLY_TQ1_0, " 1.69 bpw ternarization"},
    {"TQ2_0", FT::MOSTLY_TQ2_0, " 2.06 bpw ternarization"},
    {"Q2_K", FT::MOSTLY_Q2_K, " 2.96G, +3.5199 ppl @ Llama-3-8B"},
    {"Q2_K_S", FT::MOSTLY_Q2_K_S, " 2.96G, +3.1836 ppl @ Llama-3-8B"},
    {"IQ3_XXS", FT::MOSTLY_IQ3_XXS, " 3.06 bpw quantization"},
    {"IQ3_S", FT::MOSTLY_IQ3_S, " 3.44 bpw quantization"},
    {"IQ3_M", FT::MOSTLY_IQ3_M, " 3.66 bpw quantization mix"},
    {"Q3_K", FT::MOSTLY_Q3_K_M, "alias for Q3_K_M", true},
    {"IQ3_XS", FT::MOSTLY_IQ3_XS, " 3.3 bpw quantization"},
    {"Q3_K_S", FT::MOSTLY_Q3_K_S, " 3.41G, +1.6321 ppl @ Llama-3-8B"},
    {"Q3_K_M", FT::MOSTLY_Q3_K_M, " 3.74G, +0.6569 ppl @ Llama-3-8B"},
    {"Q3_K_L", FT::MOSTLY_Q3_K_L, " 4.03G, +0.5562 ppl @ Llama-3-8B"},
    {"IQ4_NL", FT::MOSTLY_IQ4_NL, " 4.50 bpw non-linear quantization"},
    {"IQ4_XS", FT::MOSTLY_IQ4_XS, " 4.25 bpw non-linear quantization"},
    {"Q4_K", FT::MOSTLY_Q4_K_M, "alias for Q4_K_M", true},
    {"Q4_K_S", FT::MOSTLY_Q4_K_S, " 4.37G, +0.2689 ppl @ Llama-3-8B"},
    {"Q4_K_M", FT::MOSTLY_Q4_K_M, " 4.58G, +0.1754 ppl @ Llama-3-8B"},
    {"Q5_K", FT::MOSTLY_Q5_K_M, "alias for Q5_K_M", true},
    {"Q5_K_S", FT::MOSTLY_Q5_K_S, " 5.21G, +0.1049 ppl @ Llama-3-8B"},
    {"Q5_K_M", FT::MOSTLY_Q5_K_M, " 5.33G, +0.0569 ppl @ Llama-3-8B"},
    {"Q6_K", FT::MOSTLY_Q6_K, " 6.14G, +0.0217 ppl @ Llama-3-8B"},
    {"Q8_0", FT::MOSTLY_Q8_0, " 7.96G, +0.0026 ppl @ Llama-3-8B"},
    {"F16", FT::MOSTLY_F16, "14.00G, +0.0020 ppl @ Mistral-7B"},
    {"BF16", FT::MOSTLY_BF16, "14.00G, -0.0050 ppl @ Mistral-7B"},
    {"F32", FT::ALL_F32, "26.00G              @ 7B"},
};

std::string upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return r;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_quantized(DType t) {
  return dtype_info(t).block_size > 1;
}

int block_size(DType t) {
  return dtype_info(t).block_size;
}

std::string tname(DType t) {
  return std::string(dtype_name(t));
}

// ---- tensor roles (llama.cpp's tensor_category) ----

enum class Role {
  kTokenEmbd,
  kAttnQ,
  kAttnV,
  kAttnK,
  kAttnQkv,
  kAttnKvB,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOutput,
  kOther
};

bool is_token_embd_name(std::string_view n) {
  return n == "token_embd.weight" || n == "per_layer_token_embd.weight";
}

Role role_of(std::string_view n) {
  if (n == "output.weight") return Role::kOutput;
  if (is_token_embd_name(n)) return Role::kTokenEmbd;
  if (contains(n, "attn_qkv.weight")) return Role::kAttnQkv;
  if (contains(n, "attn_kv_b.weight")) return Role::kAttnKvB;
  if (contains(n, "attn_v.weight")) return Role::kAttnV;
  if (contains(n, "attn_k.weight")) return Role::kAttnK;
  if (contains(n, "attn_q.weight")) return Role::kAttnQ;
  if (contains(n, "attn_output.weight")) return Role::kAttnOutput;
  if (contains(n, "ffn_up")) return Role::kFfnUp;
  if (contains(n, "ffn_gate")) return Role::kFfnGate;
  if (contains(n, "ffn_down")) return Role::kFfnDown;
  return Role::kOther;
}

// attn_v and the fused tensors that contain it get attn_v's rules.
bool is_attn_v_like(Role r) {
  return r == Role::kAttnV || r == Role::kAttnQkv || r == Role::kAttnKvB;
}

// Why llama.cpp leaves a tensor as it is; empty when it converts it.
std::string why_kept(const MixtureTensor& t, const MixtureOptions& o) {
  const std::string& n = t.name;
  const std::string kept = "kept " + tname(t.type);
  if (ggml_n_dims(t.shape) < 2) return fmt::format("{}-D: {}", ggml_n_dims(t.shape), kept);
  if (!ends_with(n, "weight")) return "not a weight: " + kept;
  if (contains(n, "_norm.weight")) return "norm: " + kept;
  if (o.leave_output_tensor && n == "output.weight") return "--leave-output-tensor: " + kept;
  if (contains(n, "ffn_gate_inp.weight")) return "expert router: " + kept;
  static constexpr std::string_view kSpecial[] = {"ffn_gate_tid2eid.weight",
                                                  "altup",
                                                  "laurel",
                                                  "per_layer_model_proj",
                                                  "ssm_conv1d",
                                                  "shortconv.conv.weight",
                                                  "indexer.k_proj.weight",
                                                  "indexer.q_proj.weight",
                                                  "time_mix_first.weight",
                                                  "time_mix_w0.weight",
                                                  "time_mix_w1.weight",
                                                  "time_mix_w2.weight",
                                                  "time_mix_v0.weight",
                                                  "time_mix_v1.weight",
                                                  "time_mix_v2.weight",
                                                  "time_mix_a0.weight",
                                                  "time_mix_a1.weight",
                                                  "time_mix_a2.weight",
                                                  "time_mix_g1.weight",
                                                  "time_mix_g2.weight",
                                                  "time_mix_decay_w1.weight",
                                                  "time_mix_decay_w2.weight",
                                                  "time_mix_lerp_fused.weight",
                                                  "attn_rel_b.weight",
                                                  ".position_embd",
                                                  "sam.pos_embd",
                                                  "sam.neck.",
                                                  "sam.net_",
                                                  ".rel_pos",
                                                  ".patch_embd",
                                                  ".patch_merger",
                                                  "a.rvq.codebook",
                                                  "mm.a.code_embd"};
  for (std::string_view s : kSpecial)
    if (contains(n, s)) return "small or special tensor llama.cpp never quantizes: " + kept;
  if (n == "position_embd.weight" || n == "token_types.weight")
    return "position/token-type embedding: " + kept;
  return "";
}

bool ftype_in(FT f, std::initializer_list<FT> set) {
  return std::find(set.begin(), set.end(), f) != set.end();
}

// The rules' state: how many attn_v / ffn_* tensors have been seen, as llama.cpp counts them.
class MixtureRules {
 public:
  MixtureRules(const MixtureModel& m, const MixtureOptions& o, bool tied)
      : m_(m), o_(o), ft_(o.ftype), tied_(tied), n_expert_(std::max(1, m.n_expert)) {
    n_ffn_down_ = n_ffn_gate_ = n_ffn_up_ = m.n_layer;
  }
  void count_attn_v() { ++n_attention_wv_; }

  // Step 3: the mixture's type for a convertible tensor. `reason` is set when a rule changed
  // (or confirmed) the type.
  DType pick(const MixtureTensor& t, Role role, DType type, std::string& reason) {
    const bool big_iq = ftype_in(ft_, {FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ1_S,
                                       FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M, FT::MOSTLY_IQ1_M});
    const bool iq2s_or_m = ftype_in(ft_, {FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M});
    const int gqa = m_.n_gqa();
    auto set = [&](DType to, std::string why) {
      type = to;
      reason = std::move(why);
    };

    if (role == Role::kOutput || (tied_ && role == Role::kTokenEmbd)) {
      const std::string what =
          role == Role::kOutput ? "output tensor" : "token embedding tied to the output";
      if (o_.output_tensor_type) {
        set(*o_.output_tensor_type, what + ": --output-tensor-type");
      } else if (m_.arch == "falcon") {
        set(DType::Q8_0, what + ": falcon");
      } else if (t.shape[0] % block_size(type) != 0) {
        set(DType::Q8_0,
            fmt::format("{}: {} cols not a multiple of {}", what, t.shape[0], block_size(type)));
      } else if (ftype_in(ft_, {FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ3_XXS,
                                FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M,
                                FT::MOSTLY_IQ1_M})) {
        set(DType::Q5_K, what + ": low-bit IQ mixture");
      } else if (type != DType::Q8_0) {
        set(DType::Q6_K, what);
      } else {
        reason = what;
      }
    } else if (role == Role::kTokenEmbd) {
      if (ftype_in(ft_,
                   {FT::MOSTLY_IQ2_XXS, FT::MOSTLY_IQ2_XS, FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ1_M})) {
        set(DType::Q2_K, "token embedding: low-bit IQ mixture");
      } else if (ftype_in(ft_, {FT::MOSTLY_IQ2_S, FT::MOSTLY_IQ2_M, FT::MOSTLY_IQ3_XXS})) {
        set(DType::IQ3_S, "token embedding: low-bit IQ mixture");
      } else if (ftype_in(ft_, {FT::MOSTLY_TQ1_0, FT::MOSTLY_TQ2_0})) {
        set(DType::Q4_K, "token embedding: ternary mixture");
      } else {
        reason = "token embedding";
      }
    } else if (big_iq) {
      if (is_attn_v_like(role)) {
        if (gqa >= 4 || m_.n_expert >= 4)
          set(DType::Q4_K, "attn_v: n_gqa >= 4 or n_expert >= 4");
        else
          set(iq2s_or_m ? DType::IQ3_S : DType::Q2_K, "attn_v: low-bit IQ mixture");
        ++i_attention_wv_;
      } else if (m_.n_expert == 8 && role == Role::kAttnK) {
        set(DType::Q4_K, "attn_k: 8 experts");
      } else if (role == Role::kFfnDown) {
        if (i_ffn_down_ < n_ffn_down_ / 8)
          set(iq2s_or_m ? DType::IQ3_S : DType::Q2_K, "ffn_down: more bits in the first layers");
        ++i_ffn_down_;
      } else if (role == Role::kAttnOutput) {
        if (m_.n_expert == 8)
          set(DType::Q5_K, "attn_output: 8 experts");
        else if (ftype_in(ft_, {FT::MOSTLY_IQ1_S, FT::MOSTLY_IQ1_M}))
          set(DType::IQ2_XXS, "attn_output: IQ1 mixture");
        else if (iq2s_or_m)
          set(DType::IQ3_S, "attn_output: IQ2_S/IQ2_M mixture");
      }
    } else if (is_attn_v_like(role)) {
      attn_v(type, reason);
    } else if (role == Role::kAttnK) {
      if (m_.n_expert == 8)
        set(DType::Q8_0, "attn_k: 8 experts");
      else if (ft_ == FT::MOSTLY_IQ3_XS)
        set(DType::IQ3_XXS, "attn_k: IQ3_XS mixture");
      else if (ft_ == FT::MOSTLY_IQ3_XXS)
        set(DType::IQ2_S, "attn_k: IQ3_XXS mixture");
    } else if (role == Role::kAttnQ) {
      if (ft_ == FT::MOSTLY_IQ3_XS)
        set(DType::IQ3_XXS, "attn_q: IQ3_XS mixture");
      else if (ft_ == FT::MOSTLY_IQ3_XXS)
        set(DType::IQ2_S, "attn_q: IQ3_XXS mixture");
    } else if (role == Role::kFfnDown) {
      const auto [il, nl] = layer_of(t.name, i_ffn_down_, n_ffn_down_);
      ffn_down(il, nl, type, reason);
      ++i_ffn_down_;
    } else if (role == Role::kAttnOutput) {
      attn_output(type, reason);
    } else if (role == Role::kFfnGate || role == Role::kFfnUp) {
      int& i = role == Role::kFfnGate ? i_ffn_gate_ : i_ffn_up_;
      const auto [il, nl] = layer_of(t.name, i, role == Role::kFfnGate ? n_ffn_gate_ : n_ffn_up_);
      if (ft_ == FT::MOSTLY_IQ3_XS && il >= nl / 8 && il < 7 * nl / 8)
        set(DType::IQ3_XXS, fmt::format("{}: IQ3_XS middle layers",
                                        role == Role::kFfnGate ? "ffn_gate" : "ffn_up"));
      ++i;
    }
    return type;
  }

 private:
  static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  }

  // The layer a tensor belongs to: its position among its kind, or for MoE models (whose expert
  // tensors need not come one per layer) the number in its name.
  std::pair<int, int> layer_of(const std::string& name, int i, int n) const {
    if (n_expert_ > 1) {
      int layer = -1;
      if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1)
        fail("quantize: cannot tell the layer of tensor {} (expected a name 'blk.N....')", name);
      if (layer < 0 || layer >= n)
        fail("quantize: tensor {} is in layer {}, but the model has {} layers", name, layer, n);
      i = layer;
    }
    return {i, n};
  }

  void attn_v(DType& type, std::string& reason) {
    const int gqa = m_.n_gqa();
    auto set = [&](DType to, std::string why) {
      type = to;
      reason = std::move(why);
    };
    const int i = i_attention_wv_, n = n_attention_wv_;
    if (ft_ == FT::MOSTLY_Q2_K) {
      set(gqa >= 4 ? DType::Q4_K : DType::Q3_K,
          gqa >= 4 ? "attn_v: Q2_K mixture, n_gqa >= 4" : "attn_v: Q2_K mixture");
    } else if (ft_ == FT::MOSTLY_Q2_K_S && gqa >= 4) {
      set(DType::Q4_K, "attn_v: n_gqa >= 4");
    } else if (ft_ == FT::MOSTLY_IQ3_XXS) {
      if (gqa >= 4)
        set(DType::Q4_K, "attn_v: n_gqa >= 4");
      else
        set(o_.has_imatrix ? DType::IQ3_XXS : DType::IQ3_S,
            o_.has_imatrix ? "attn_v: IQ3_XXS mixture with imatrix"
                           : "attn_v: IQ3_XXS mixture without imatrix");
    } else if (ftype_in(ft_, {FT::MOSTLY_IQ3_XS, FT::MOSTLY_IQ3_S}) && gqa >= 4) {
      set(DType::Q4_K, "attn_v: n_gqa >= 4");
    } else if (ft_ == FT::MOSTLY_IQ3_M) {
      set(DType::Q4_K, "attn_v: IQ3_M mixture");
    } else if (ft_ == FT::MOSTLY_Q3_K_M) {
      set(i < 2 ? DType::Q5_K : DType::Q4_K,
          i < 2 ? "attn_v: more bits in the first 2 layers" : "attn_v: Q3_K_M mixture");
    } else if (ft_ == FT::MOSTLY_Q3_K_L) {
      set(DType::Q5_K, "attn_v: Q3_K_L mixture");
    } else if (ftype_in(ft_, {FT::MOSTLY_IQ4_NL, FT::MOSTLY_IQ4_XS}) && gqa >= 4) {
      set(DType::Q5_K, "attn_v: n_gqa >= 4");
    } else if (ftype_in(ft_, {FT::MOSTLY_Q4_K_M, FT::MOSTLY_Q5_K_M}) && more_bits(i, n)) {
      set(DType::Q6_K, "attn_v: more bits in first/last layers");
    } else if (ft_ == FT::MOSTLY_Q4_K_S && i < 4) {
      set(DType::Q5_K, "attn_v: more bits in the first 4 layers");
    }
    if (m_.is_70b() && (type == DType::Q3_K || type == DType::Q4_K))
      set(DType::Q5_K, "attn_v: 70B model");
    if (m_.n_expert == 8) set(DType::Q8_0, "attn_v: 8 experts");
    ++i_attention_wv_;
  }

  void ffn_down(int il, int nl, DType& type, std::string& reason) {
    auto set = [&](DType to, std::string why) {
      type = to;
      reason = std::move(why);
    };
    const bool falcon = m_.arch == "falcon";
    const bool more = more_bits(il, nl);
    if (ft_ == FT::MOSTLY_Q2_K) {
      set(DType::Q3_K, "ffn_down: Q2_K mixture");
    } else if (ft_ == FT::MOSTLY_Q2_K_S) {
      if (il < nl / 8) set(DType::Q4_K, "ffn_down: more bits in the first eighth of layers");
    } else if (ft_ == FT::MOSTLY_IQ3_XXS && !o_.has_imatrix) {
      set(il < nl / 8 ? DType::Q4_K : DType::Q3_K,
          il < nl / 8 ? "ffn_down: first eighth of layers, no imatrix"
                      : "ffn_down: IQ3_XXS without imatrix");
    } else if (ft_ == FT::MOSTLY_Q3_K_M) {
      if (il < nl / 16)
        set(DType::Q5_K, "ffn_down: more bits in the first sixteenth of layers");
      else if (!falcon || more)
        set(DType::Q4_K, "ffn_down: Q3_K_M mixture");
      else
        set(DType::Q3_K, "ffn_down: falcon");
    } else if (ft_ == FT::MOSTLY_IQ3_M &&
               (il < nl / 8 || (m_.n_expert == 8 && more_bits(il, nl)))) {
      set(DType::Q4_K, "ffn_down: more bits in first layers");
    } else if (ft_ == FT::MOSTLY_Q3_K_L) {
      set(falcon ? DType::Q4_K : DType::Q5_K, "ffn_down: Q3_K_L mixture");
    } else if (ft_ == FT::MOSTLY_Q4_K_M) {
      if (falcon) {
        if (il < nl / 16)
          set(DType::Q6_K, "ffn_down: falcon, first sixteenth of layers");
        else if (more)
          set(DType::Q5_K, "ffn_down: falcon, more bits in first/last layers");
        else
          set(DType::Q4_K, "ffn_down: falcon");
      } else if (more) {
        set(DType::Q6_K, "ffn_down: more bits in first/last layers");
      }
    } else if (il < nl / 8 && ftype_in(ft_, {FT::MOSTLY_IQ4_NL, FT::MOSTLY_IQ4_XS}) &&
               !o_.has_imatrix) {
      set(DType::Q5_K, "ffn_down: first eighth of layers, no imatrix");
    } else if (ft_ == FT::MOSTLY_Q5_K_M && more) {
      set(DType::Q6_K, "ffn_down: more bits in first/last layers");
    } else if (ft_ == FT::MOSTLY_Q4_K_S && !falcon && il < nl / 8) {
      set(DType::Q5_K, "ffn_down: more bits in the first eighth of layers");
    } else if (ftype_in(ft_, {FT::MOSTLY_Q4_0, FT::MOSTLY_Q5_0}) && o_.has_imatrix && il < nl / 8) {
      set(ft_ == FT::MOSTLY_Q4_0 ? DType::Q4_1 : DType::Q5_1,
          "ffn_down: first eighth of layers with imatrix");
    }
  }

  void attn_output(DType& type, std::string& reason) {
    auto set = [&](DType to, std::string why) {
      type = to;
      reason = std::move(why);
    };
    if (m_.arch != "falcon") {
      if (m_.n_expert == 8) {
        if (ftype_in(ft_,
                     {FT::MOSTLY_Q2_K, FT::MOSTLY_IQ3_XS, FT::MOSTLY_IQ3_XXS, FT::MOSTLY_Q3_K_S,
                      FT::MOSTLY_Q3_K_M, FT::MOSTLY_IQ4_NL, FT::MOSTLY_Q4_K_S, FT::MOSTLY_Q4_K_M,
                      FT::MOSTLY_IQ3_S, FT::MOSTLY_IQ3_M, FT::MOSTLY_IQ4_XS}))
          set(DType::Q5_K, "attn_output: 8 experts");
      } else if (ft_ == FT::MOSTLY_Q2_K) {
        set(DType::Q3_K, "attn_output: Q2_K mixture");
      } else if (ft_ == FT::MOSTLY_IQ3_XXS) {
        set(DType::IQ3_S, "attn_output: IQ3_XXS mixture");
      } else if (ft_ == FT::MOSTLY_Q3_K_M) {
        set(DType::Q4_K, "attn_output: Q3_K_M mixture");
      } else if (ft_ == FT::MOSTLY_Q3_K_L) {
        set(DType::Q5_K, "attn_output: Q3_K_L mixture");
      } else if (ft_ == FT::MOSTLY_IQ3_M) {
        set(DType::Q4_K, "attn_output: IQ3_M mixture");
      }
    } else if (ft_ == FT::MOSTLY_Q3_K_L) {
      set(DType::Q4_K, "attn_output: falcon Q3_K_L");
    }
  }

  const MixtureModel& m_;
  const MixtureOptions& o_;
  const FT ft_;
  const bool tied_;
  const int n_expert_;
  int n_attention_wv_ = 0, n_ffn_down_ = 0, n_ffn_gate_ = 0, n_ffn_up_ = 0;
  int i_attention_wv_ = 0, i_ffn_down_ = 0, i_ffn_gate_ = 0, i_ffn_up_ = 0;
};

// Step 4: a type whose blocks divide the row length.
DType fit_row_length(int64_t cols, DType t, std::string& note) {
  const int bs = block_size(t);
  if (cols % bs == 0) return t;
  DType to = t;
  switch (t) {
    case DType::IQ1_S:
    case DType::IQ1_M:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ4_XS:
      to = DType::IQ4_NL;
      break;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::TQ1_0:
    case DType::TQ2_0:
      to = DType::Q4_0;
      break;
    case DType::Q4_K:
      to = DType::Q5_0;
      break;
    case DType::Q5_K:
      to = DType::Q5_1;
      break;
    case DType::Q6_K:
      to = DType::Q8_0;
      break;
    default:
      if (bs > 32) fail("quantize: no fallback type is defined for {}", dtype_name(t));
      break;
  }
  if (cols % block_size(to) != 0) {
    note = to == t ? fmt::format("fallback: {} cols not a multiple of {} ({} -> f16)", cols, bs,
                                 dtype_name(t))
                   : fmt::format("fallback: {} cols not a multiple of {} nor of {} ({} -> f16)",
                                 cols, bs, block_size(to), dtype_name(t));
    return DType::F16;
  }
  note = fmt::format("fallback: {} cols not a multiple of {} ({} -> {})", cols, bs, dtype_name(t),
                     dtype_name(to));
  return to;
}

}  // namespace

std::span<const Mixture> all_mixtures() {
  return kMixtures;
}

bool mixture_is_writable(FileType t) {
  switch (t) {
    case FT::ALL_F32:
    case FT::MOSTLY_F16:
    case FT::MOSTLY_BF16:
    case FT::MOSTLY_Q8_0:
    case FT::MOSTLY_Q4_0:
    case FT::MOSTLY_Q4_1:
    case FT::MOSTLY_Q5_0:
    case FT::MOSTLY_Q5_1:
    case FT::MOSTLY_Q2_K:
    case FT::MOSTLY_Q2_K_S:
    case FT::MOSTLY_Q3_K_S:
    case FT::MOSTLY_Q3_K_M:
    case FT::MOSTLY_Q3_K_L:
    case FT::MOSTLY_Q4_K_S:
    case FT::MOSTLY_Q4_K_M:
    case FT::MOSTLY_Q5_K_S:
    case FT::MOSTLY_Q5_K_M:
    case FT::MOSTLY_Q6_K:
    case FT::MOSTLY_IQ4_NL:
    case FT::MOSTLY_IQ4_XS:
      return true;
    default:
      return false;
  }
}

std::optional<Mixture> mixture_from_name(std::string_view name) {
  const std::string u = upper(name);
  for (const Mixture& m : kMixtures)
    if (m.name == u) return m;
  unsigned v = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
  if (ec == std::errc() && p == name.data() + name.size() && !name.empty()) {
    for (const Mixture& m : kMixtures)
      if (!m.alias && static_cast<unsigned>(m.ftype) == v) return m;
  }
  return std::nullopt;
}

std::string_view mixture_name(FileType t) {
  for (const Mixture& m : kMixtures)
    if (m.ftype == t && !m.alias) return m.name;
  fail("unknown llama file type {}", static_cast<uint32_t>(t));
}

DType mixture_default_type(FileType t) {
  switch (t) {
    case FT::ALL_F32:
      return DType::F32;
    case FT::MOSTLY_F16:
      return DType::F16;
    case FT::MOSTLY_BF16:
      return DType::BF16;
    case FT::MOSTLY_Q4_0:
      return DType::Q4_0;
    case FT::MOSTLY_Q4_1:
      return DType::Q4_1;
    case FT::MOSTLY_Q5_0:
      return DType::Q5_0;
    case FT::MOSTLY_Q5_1:
      return DType::Q5_1;
    case FT::MOSTLY_Q8_0:
      return DType::Q8_0;
    case FT::MOSTLY_Q2_K:
    case FT::MOSTLY_Q2_K_S:
      return DType::Q2_K;
    case FT::MOSTLY_IQ3_XS:
    case FT::MOSTLY_IQ3_S:
    case FT::MOSTLY_IQ3_M:
      return DType::IQ3_S;
    case FT::MOSTLY_Q3_K_S:
    case FT::MOSTLY_Q3_K_M:
    case FT::MOSTLY_Q3_K_L:
      return DType::Q3_K;
    case FT::MOSTLY_Q4_K_S:
    case FT::MOSTLY_Q4_K_M:
      return DType::Q4_K;
    case FT::MOSTLY_Q5_K_S:
    case FT::MOSTLY_Q5_K_M:
      return DType::Q5_K;
    case FT::MOSTLY_Q6_K:
      return DType::Q6_K;
    case FT::MOSTLY_TQ1_0:
      return DType::TQ1_0;
    case FT::MOSTLY_TQ2_0:
      return DType::TQ2_0;
    case FT::MOSTLY_IQ2_XXS:
      return DType::IQ2_XXS;
    case FT::MOSTLY_IQ2_XS:
    case FT::MOSTLY_IQ2_S:
      return DType::IQ2_XS;
    case FT::MOSTLY_IQ2_M:
      return DType::IQ2_S;
    case FT::MOSTLY_IQ3_XXS:
      return DType::IQ3_XXS;
    case FT::MOSTLY_IQ1_S:
      return DType::IQ1_S;
    case FT::MOSTLY_IQ1_M:
      return DType::IQ1_M;
    case FT::MOSTLY_IQ4_NL:
      return DType::IQ4_NL;
    case FT::MOSTLY_IQ4_XS:
      return DType::IQ4_XS;
  }
  fail("unknown llama file type {}", static_cast<uint32_t>(t));
}

std::optional<FileType> mixture_for_type(DType t) {
  switch (t) {
    case DType::F32:
      return FT::ALL_F32;
    case DType::F16:
      return FT::MOSTLY_F16;
    case DType::BF16:
      return FT::MOSTLY_BF16;
    case DType::Q8_0:
      return FT::MOSTLY_Q8_0;
    case DType::Q4_0:
      return FT::MOSTLY_Q4_0;
    case DType::Q4_1:
      return FT::MOSTLY_Q4_1;
    case DType::Q5_0:
      return FT::MOSTLY_Q5_0;
    case DType::Q5_1:
      return FT::MOSTLY_Q5_1;
    case DType::Q6_K:
      return FT::MOSTLY_Q6_K;
    case DType::IQ4_NL:
      return FT::MOSTLY_IQ4_NL;
    case DType::IQ4_XS:
      return FT::MOSTLY_IQ4_XS;
    default:
      return std::nullopt;
  }
}

std::optional<DType> ggml_type_from_name(std::string_view name) {
  return dtype_from_name(lower(name));
}

bool MixtureModel::is_70b() const {
  if (arch == "llama") return n_expert != 8 && n_layer == 80 && n_head != n_head_kv;
  if (arch == "qwen2" || arch == "deci" || arch == "olmo") return n_layer == 80;
  if (arch == "jais2") return n_layer == 68;
  return false;
}

int ggml_n_dims(const std::vector<int64_t>& shape) {
  for (int i = static_cast<int>(shape.size()) - 1; i >= 1; --i)
    if (shape[static_cast<size_t>(i)] > 1) return i + 1;
  return 1;
}

std::vector<size_t> llama_tensor_order(const std::vector<std::string>& names) {
  auto layer = [](const std::string& n) {
    int l = -1;
    std::sscanf(n.c_str(), "blk.%d.", &l);
    return l;
  };
  std::vector<size_t> idx(names.size());
  std::vector<int> layers(names.size());
  for (size_t i = 0; i < names.size(); ++i) idx[i] = i, layers[i] = layer(names[i]);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (layers[a] != layers[b]) return layers[a] < layers[b];
    return names[a] < names[b];
  });
  return idx;
}

std::vector<TensorChoice> choose_tensor_types(const MixtureModel& model,
                                              const std::vector<MixtureTensor>& tensors,
                                              const MixtureOptions& options) {
  const DType def = mixture_default_type(options.ftype);
  std::vector<std::string> names;
  names.reserve(tensors.size());
  bool tied = true;
  for (const MixtureTensor& t : tensors) {
    if (t.shape.empty()) fail("quantize: tensor {} has no dimensions", t.name);
    names.push_back(t.name);
    if (role_of(t.name) == Role::kOutput) tied = false;
  }
  MixtureRules rules(model, options, tied);
  for (const MixtureTensor& t : tensors)
    if (is_attn_v_like(role_of(t.name))) rules.count_attn_v();

  // An explicit type must fit: llama.cpp applies no fallback to it (and would abort).
  auto check_fits = [](const MixtureTensor& t, DType to, const char* flag) {
    if (t.shape[0] % block_size(to) != 0)
      fail("{} {}: tensor {} has rows of {}, not a multiple of {}'s block of {}", flag,
           dtype_name(to), t.name, t.shape[0], dtype_name(to), block_size(to));
  };

  std::vector<TensorChoice> out(tensors.size());
  for (size_t i : llama_tensor_order(names)) {
    const MixtureTensor& t = tensors[i];
    TensorChoice& c = out[i];
    const Role role = role_of(t.name);
    std::string kept = why_kept(t, options);
    c.type = t.type;
    if (!kept.empty()) {
      c.reason = std::move(kept);
    } else {
      c.convertible = true;
      if (options.token_embedding_type && role == Role::kTokenEmbd) {
        check_fits(t, *options.token_embedding_type, "--token-embedding-type");
        c.type = *options.token_embedding_type;
        c.reason = "token embedding: --token-embedding-type";
      } else if (options.output_tensor_type && role == Role::kOutput) {
        check_fits(t, *options.output_tensor_type, "--output-tensor-type");
        c.type = *options.output_tensor_type;
        c.reason = "output tensor: --output-tensor-type";
      } else {
        c.type = def;
        if (is_quantized(def)) {
          std::string why;
          if (options.pure) {
            why = "--pure";
          } else {
            c.type = rules.pick(t, role, def, why);
          }
          std::string note;
          const DType fitted = fit_row_length(t.shape[0], c.type, note);
          if (fitted != c.type) {
            c.fallback = true;
            c.type = fitted;
            why = why.empty() ? note : why + "; " + note;
          }
          c.reason = why.empty() ? std::string("mixture type") : why;
        } else {
          c.reason = "mixture type";
        }
      }
    }
    // As tensor_requires_imatrix: the types that are garbage without one.
    if (!is_token_embd_name(t.name) && t.name != "output.weight") {
      switch (c.type) {
        case DType::IQ3_XXS:
        case DType::IQ2_XXS:
        case DType::IQ2_XS:
        case DType::IQ2_S:
        case DType::IQ1_M:
        case DType::IQ1_S:
          c.requires_imatrix = true;
          break;
        case DType::Q2_K:
          c.requires_imatrix = options.ftype == FT::MOSTLY_Q2_K_S;
          break;
        default:
          break;
      }
    }
  }
  return out;
}

}  // namespace kvasir
