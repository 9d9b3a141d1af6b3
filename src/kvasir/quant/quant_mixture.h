// llama-quantize's quantization mixtures ("Q4_K_M", "Q5_K_S", ...): the file types it knows, the
// default tensor type of each, and the per-tensor rules that pick each weight's type, as the
// pinned llama.cpp (src/llama-quant.cpp) applies them. choose_tensor_types() is a pure function
// of the model's hyperparameters, its tensor table and the options, so a file quantized by
// `kvasir quantize` gets, tensor for tensor, the types `llama-quantize` would give it; the tests
// hold it to llama-quantize's own choices for several model shapes (tests/fixtures/quant-mixtures).
//
// The rules, in order, for each tensor:
//  1. Only 2-D and 3-D (expert) tensors whose name ends in "weight" are converted; norms, the
//     MoE router, position embeddings and a list of small special tensors stay as they are.
//  2. --token-embedding-type / --output-tensor-type, when given, decide token_embd / output.
//  3. For a quantized mixture (not f32/f16/bf16) without --pure, the mixture rules refine the
//     default type by the tensor's role (output, token_embd, attn_v, attn_k, attn_q, attn_output,
//     ffn_down, ffn_gate, ffn_up), its layer (the "more bits" layers: the first and last eighth
//     and every third layer between), the GQA ratio, the expert count and the architecture.
//     A model without output.weight (tied embeddings) quantizes token_embd as its output.
//  4. A quantized type whose block does not divide the row length (ne[0]) falls back to a type
//     with 32-element blocks (q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, q2_k/q3_k -> q4_0,
//     iq* -> iq4_nl) and, if 32 does not divide it either, to f16.
// Tensors are visited in llama.cpp's order (llama_tensor_order), which the layer counters of
// step 3 depend on; choose_tensor_types() takes them in any order and answers in that order.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/tensor/dtype.h"

namespace kvasir {

// llama.cpp's llama_ftype: the value of general.file_type.
enum class FileType : uint32_t {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  MOSTLY_Q4_0 = 2,
  MOSTLY_Q4_1 = 3,
  MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9,
  MOSTLY_Q2_K = 10,
  MOSTLY_Q3_K_S = 11,
  MOSTLY_Q3_K_M = 12,
  MOSTLY_Q3_K_L = 13,
  MOSTLY_Q4_K_S = 14,
  MOSTLY_Q4_K_M = 15,
  MOSTLY_Q5_K_S = 16,
  MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18,
  MOSTLY_IQ2_XXS = 19,
  MOSTLY_IQ2_XS = 20,
  MOSTLY_Q2_K_S = 21,
  MOSTLY_IQ3_XS = 22,
  MOSTLY_IQ3_XXS = 23,
  MOSTLY_IQ1_S = 24,
  MOSTLY_IQ4_NL = 25,
  MOSTLY_IQ3_S = 26,
  MOSTLY_IQ3_M = 27,
  MOSTLY_IQ2_S = 28,
  MOSTLY_IQ2_M = 29,
  MOSTLY_IQ4_XS = 30,
  MOSTLY_IQ1_M = 31,
  MOSTLY_BF16 = 32,
  MOSTLY_TQ1_0 = 36,
  MOSTLY_TQ2_0 = 37,
};

// One entry of llama-quantize's type list.
struct Mixture {
  std::string_view name;  // llama-quantize's spelling: "Q4_K_M"; aliases "Q4_K" -> Q4_K_M
  FileType ftype;
  std::string_view description;  // llama-quantize's: " 4.58G, +0.1754 ppl @ Llama-3-8B"
  bool alias = false;
};

// Every mixture choose_tensor_types() knows, in llama-quantize's order (aliases included).
std::span<const Mixture> all_mixtures();
// Those `kvasir quantize` can write: every type they can produce has a quantizer here.
bool mixture_is_writable(FileType t);
// By name, case-insensitively ("q4_k_m", "Q4_K", "f16"), or by llama_ftype number ("15").
std::optional<Mixture> mixture_from_name(std::string_view name);
// llama-quantize's name of t ("Q4_K_M"; never an alias).
std::string_view mixture_name(FileType t);
// The type most tensors of t get (llama_ftype_get_default_type); Q3_K for Q3_K_S/M/L, ...
DType mixture_default_type(FileType t);
// The mixture whose default type is t with nothing else changed (f32, f16, bf16, q8_0, q4_0,
// q4_1, q5_0, q5_1, q6_k, iq4_nl, iq4_xs); nullopt for other types.
std::optional<FileType> mixture_for_type(DType t);

// A ggml type by ggml's name, case-insensitively ("q8_0", "Q6_K", "f16"), as llama-quantize's
// --output-tensor-type / --token-embedding-type read it.
std::optional<DType> ggml_type_from_name(std::string_view name);

// What the rules read from the model's metadata.
struct MixtureModel {
  std::string arch = "llama";  // general.architecture
  int n_layer = 0;             // <arch>.block_count
  int n_head = 0;              // <arch>.attention.head_count (layer 0)
  int n_head_kv = 0;           // <arch>.attention.head_count_kv (layer 0; = n_head if absent)
  int n_expert = 0;            // <arch>.expert_count
  int n_gqa() const { return n_head_kv == 0 ? 0 : n_head / n_head_kv; }
  // Whether llama.cpp classifies the model as 70B (80 layers of llama with GQA, qwen2, ...):
  // its attn_v then gets q5_k where the mixture says q3_k or q4_k.
  bool is_70b() const;
};

struct MixtureTensor {
  std::string name;
  DType type = DType::F32;     // the type in the input file
  std::vector<int64_t> shape;  // ggml order: shape[0] is the row length
};

struct MixtureOptions {
  FileType ftype = FileType::MOSTLY_Q8_0;
  bool pure = false;                        // --pure: the default type everywhere (fallbacks still)
  bool has_imatrix = false;                 // an importance matrix is given (changes a few rules)
  bool leave_output_tensor = false;         // --leave-output-tensor: output.weight is copied
  std::optional<DType> output_tensor_type;  // --output-tensor-type
  std::optional<DType> token_embedding_type;  // --token-embedding-type
};

struct TensorChoice {
  DType type = DType::F32;        // the type the tensor is written in
  bool convertible = false;       // a weight llama.cpp quantizes (else copied as it is)
  bool fallback = false;          // the rules' type did not fit the row length (step 4)
  bool requires_imatrix = false;  // llama-quantize refuses to write it without an imatrix entry
  std::string reason;             // "attn_v: more bits in first/last layers", "1-D: kept f32", ...
};

// The type of every tensor of `tensors` (answers in the same order). Throws kvasir::Error for a
// file type the rules cannot express here, for a MoE model whose expert tensors do not name
// their layer, and for an --output-tensor-type / --token-embedding-type whose block does not
// divide the tensor's row length (llama.cpp would abort).
std::vector<TensorChoice> choose_tensor_types(const MixtureModel& model,
                                              const std::vector<MixtureTensor>& tensors,
                                              const MixtureOptions& options);

// The order llama.cpp keeps a model's tensors in (and llama-quantize writes them): tensors
// outside the blocks first, then block by block ("blk.N."), by name within each group. Returns
// indices into `names`.
std::vector<size_t> llama_tensor_order(const std::vector<std::string>& names);

// ggml_n_dims: the number of dimensions not counting trailing 1s (at least 1).
int ggml_n_dims(const std::vector<int64_t>& shape);

}  // namespace kvasir
