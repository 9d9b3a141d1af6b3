// `kvasir quantize IN OUT --type gptq4|awq4 --calib TEXT`: a GGUF file whose linear layer weights
// are quantized with a calibrated method (GPTQ: quant/gptq.h; AWQ: quant/awq.h, quant/awq_fold.h)
// into Q4_1 blocks, which llama.cpp loads as it loads its own Q4_1 files.
//
// The file is llama-quantize's Q4_1 mixture (quant/gguf_quantize.h): every tensor gets the type
// the Q4_1 rules give it, and the tensors outside the layers' linear weights (token_embd,
// output, norms, and any linear weight the rules do not make Q4_1, e.g. a row length that 32
// does not divide falls back to f16) are converted exactly as `kvasir quantize IN OUT Q4_1`
// converts them. So the method's file and the round-to-nearest Q4_1 file differ only in the
// blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down} weights (and, for AWQ, the
// attn_norm / ffn_norm weights and attn_v / ffn_up rows its scales are folded into).
//
// Steps: load the model; run it over the calibration tokens to collect each input group's Gram
// matrix and mean |x| (quant/calib_capture.h: activations of the unquantized model, all layers in
// one pass); quantize each target weight (GPTQ) or each group (AWQ: scale search, fold, clip
// search, Q4_1), reporting each weight's ||WX - W'X|| / ||WX|| on the calibration activations
// beside round-to-nearest Q4_1's; then write the file through quantize_gguf's overrides.
//
// Group size: GGUF Q4_1 stores groups of 32. Other group sizes (64, 128) need the GPTQ / AutoAWQ
// Hugging Face layouts (qweight/qzeros/scales/g_idx), which this does not write: they are refused
// by name.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvasir/quant/awq.h"
#include "kvasir/quant/calib_capture.h"
#include "kvasir/quant/gguf_quantize.h"

namespace kvasir {

enum class CalibratedMethod { kGptq, kAwq };

// One weight done.
struct LayerQuantReport {
  int index = 0, count = 0;  // 1-based, of the target weights
  std::string name;
  int64_t rows = 0, cols = 0;
  double err = 0;        // ||WX - W'X|| / ||WX|| of the method, W' what the file decodes to
  double err_rtn = 0;    // the same for round-to-nearest Q4_1 (ggml's quantize_row_q4_1_ref)
  double alpha = -1;     // AWQ: the group's scale exponent (-1: not scaled)
  bool clipped = false;  // AWQ: the clip search ran
  double damp = 0;       // GPTQ: the dampening used
  double seconds = 0;
};

struct CalibratedOptions {
  CalibratedMethod method = CalibratedMethod::kGptq;
  int group_size = 32;
  bool act_order = false;    // GPTQ
  double damp = 0.01;        // GPTQ
  bool grid_search = false;  // GPTQ: Hessian-weighted range search per group (gptq.h)
  bool clip = true;          // AWQ: the clip search (never on attn_q / attn_k, as AutoAWQ)
  AwqOptions awq;
  CalibOptions calib;
  // For the rest of the file (pure, output/token-embedding types, threads, the file stage's
  // progress); overrides and extra_metadata are set here.
  QuantizeOptions file;
  std::function<void(int64_t done, int64_t total)> on_calib;
  std::function<void(const LayerQuantReport&)> on_layer;
};

struct CalibratedReport {
  QuantizeReport file;
  std::vector<LayerQuantReport> layers;
  int64_t calib_tokens = 0;
  int calib_chunks = 0;
  double calib_seconds = 0;
  std::vector<std::string> notes;  // e.g. "blk.0.ffn_down.weight: f16 in the Q4_1 mixture, kept"
};

// "gptq4" / "awq4"
std::string_view calibrated_method_name(CalibratedMethod m);

// Throws kvasir::Error (before any work where it can) for a group size other than 32, an input
// whose linear weights are already quantized, an architecture without the llama layer names, too
// few calibration tokens, and the errors of the steps.
CalibratedReport quantize_calibrated(const std::string& in_path, const std::string& out_path,
                                     std::span<const int32_t> calib_tokens,
                                     const CalibratedOptions& options);

}  // namespace kvasir
