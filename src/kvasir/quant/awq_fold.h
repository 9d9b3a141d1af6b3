// Where AWQ's per-channel scales go in a llama-family model (quant/awq.h finds them): each scale
// s multiplies the columns of the weights that read a channel and divides whatever produces the
// channel, so the float model computes exactly the same function (up to float rounding: every
// weight is multiplied by s once and its producer divided by s once).
//
//   group (weights sharing an input)   the input is divided by s in
//   attn_q, attn_k, attn_v             attn_norm.weight   (RMSNorm: y = x / rms(x) * g, linear in
//   g) ffn_gate, ffn_up                   ffn_norm.weight attn_output attn_v's rows (and
//   attn_v.bias): softmax(QK^T) V is linear in
//                                      V per channel, so scaling V row c scales every head output
//                                      channel that reads KV head c / head_dim; with GQA a scale
//                                      is shared by the n_head / n_kv_head query heads of a KV head
//                                      (attn_output_tie() gives the constraint to the search)
//   ffn_down                           ffn_up's rows: silu(gate x) * (up x) is linear in up's rows
//
// The tensors are held as floats by name (FloatTensors), in GGUF's layout (a matrix row is an
// output channel, contiguous over the input channels); load_float_tensor() reads one from the
// file, dequantizing f16/bf16.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kvasir/model/config.h"

namespace kvasir {

namespace gguf {
class GGUFFile;
}

using FloatTensors = std::map<std::string, std::vector<float>>;

// The tensor as floats (F32, F16, BF16 or any type kvasir dequantizes). Throws kvasir::Error if
// missing.
std::vector<float> load_float_tensor(const gguf::GGUFFile& file, const std::string& name);

// "blk.N." + what
std::string layer_tensor(int layer, const std::string& what);

// For attn_output's q_dim input channels: the channel whose scale each must share (head h, dim d
// -> the first head of h's KV group, dim d).
std::vector<int64_t> attn_output_tie(const ModelConfig& c);

// The folds. `t` must hold the tensors named (load them first); s has the group's input width.
// Throws kvasir::Error for a missing tensor, a wrong length, a non-positive or non-finite scale,
// or (attention output) scales that break the GQA tie.
void fold_attn_input(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s);
void fold_ffn_input(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s);
void fold_attn_output(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s);
void fold_ffn_down(FloatTensors& t, const ModelConfig& c, int layer, std::span<const float> s);

// The tensor names each fold reads and writes (what to load first); attn_v.bias only when the
// model has Q/K/V biases.
std::vector<std::string> fold_attn_input_tensors(int layer);
std::vector<std::string> fold_ffn_input_tensors(int layer);
std::vector<std::string> fold_attn_output_tensors(const ModelConfig& c, int layer);
std::vector<std::string> fold_ffn_down_tensors(int layer);

}  // namespace kvasir
