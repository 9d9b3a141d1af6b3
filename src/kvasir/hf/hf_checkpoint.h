// A Hugging Face model folder (config.json, safetensors weights, tokenizer files) seen as the
// GGUF file `kvasir convert` writes for it, so that everything that reads a model (the model
// binder, the tokenizer, the chat template, inspect, quantize) reads a folder unchanged.
//
// The view is built as llama.cpp's convert_hf_to_gguf.py builds its file:
//  - metadata: hf_config.h (architecture, hyperparameters, RoPE scaling, default sampling) and
//    tokenizer/hf_tokenizer.h (the vocabulary, special tokens, chat template), the token list
//    padded with "[PAD<id>]" (unused) tokens up to config.json's vocab_size when the tokenizer
//    has fewer;
//  - tensors renamed (model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight, ...),
//    shapes reversed into ggml order, F32/F16/BF16 matrices kept in their dtype and read from
//    the mapping without a copy; norms and biases converted to F32 (the GGUF convention); the
//    Q and K rows of Llama-family models permuted from rotate-half order back to the adjacent
//    pairs llama.cpp's llama graph rotates (the converter's permute(): within each head, row
//    j * head_dim/2 + i moves to 2i + j), copied once at open;
//  - tied embeddings: the one stored matrix (model.embed_tokens.weight, or lm_head.weight when
//    only that was saved) becomes token_embd.weight and no output.weight is written;
//  - rotary_emb.inv_freq buffers are skipped (the model recomputes them); any other tensor the
//    mapping does not know, a missing one, a shape that disagrees with config.json or a dtype
//    other than F32/F16/BF16 is an error naming the safetensors file and the Hugging Face tensor
//    name (quantized checkpoints: refused naming their quantization_config for now).
#pragma once

#include <memory>
#include <string>

#include "kvasir/format/gguf.h"

namespace kvasir::hf {

// True when `path` is a directory holding config.json.
bool is_hf_folder(const std::string& path);

// Throws kvasir::Error naming the folder's file and field on any problem.
std::unique_ptr<gguf::GGUFFile> open_hf_folder(const std::string& folder);

// A model path as every command takes it: a Hugging Face folder, else a GGUF file.
std::unique_ptr<gguf::GGUFFile> open_model_file(const std::string& path);

}  // namespace kvasir::hf
