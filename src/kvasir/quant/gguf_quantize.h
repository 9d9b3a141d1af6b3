// Quantization of a whole GGUF model as llama-quantize does it: a mixture (quant_mixture.h)
// picks every tensor's type, an optional importance matrix (imatrix.h) steers the quantizers,
// and the file is written as llama-quantize writes it: tensors in llama.cpp's order, the input's
// metadata with general.quantization_version = 2 and general.file_type = the mixture appended
// (split.* keys dropped), and with an imatrix the quantize.imatrix.file, .dataset (the first),
// .entries_count and .chunks_count keys. For the deterministic types the tensor data is
// byte-identical to llama-quantize's (tests/fixtures/quant-mixtures holds its hashes).
//
// Before any work: the types are chosen, an imatrix is required where llama-quantize requires
// one (Q2_K tensors of a Q2_K_S file, the IQ1/IQ2/IQ3_XXS types) and its entries checked (a
// required entry missing, or an entry whose length is not the tensor's row length times its
// experts, is an error; a missing optional entry only a warning), every type chosen is probed
// once with its quantizer, and a tensor that is already quantized is not converted again unless
// allow_requantize (quantizing twice compounds the error: start from the f32/f16/bf16 file). A
// tensor already of its target type is copied as it is, which is not requantizing. Source
// tensors of any type kvasir can dequantize are converted to floats row by row.
//
// A dry run (options.dry_run) reports the plan and sizes without converting or writing; what
// would stop the real run for want of an imatrix or of a quantizer is a warning there, as in
// `llama-quantize --dry-run`.
//
// Rows are quantized in parallel on a ThreadPool (rows are independent, so the bytes do not
// depend on the thread count). The output is assembled in memory and written atomically.
//
// Overrides (options.overrides): tensors whose bytes the caller computed, e.g. the calibrated
// quantizers' (quant/calibrated_quantize.h: GPTQ/AWQ weights, RMSNorm weights with AWQ scales
// folded in). Each is written as given in place of the mixture's conversion or copy; its type
// must be the one the mixture chose for the tensor and its size that type's size of the shape.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/quant/imatrix.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/tensor/dtype.h"

namespace kvasir {

namespace gguf {
class GGUFFile;
}

// Where a run is; sent before each tensor and after each slab of rows.
struct QuantizeProgress {
  int index = 0;     // 1-based tensor being worked on
  int count = 0;     // tensors in the file
  std::string name;  // the tensor's (a copy: the callback may keep it)
  DType from = DType::F32, to = DType::F32;
  uint64_t bytes_done = 0, bytes_total = 0;        // input bytes of the tensors done
  uint64_t elements_done = 0, elements_total = 0;  // of the tensors converted (for an ETA)
  double elapsed_s = 0;
};

// A tensor's bytes computed by the caller (see overrides above).
struct TensorOverride {
  DType type = DType::F32;
  std::vector<uint8_t> bytes;
  std::string reason;  // shown in the report's reason column, e.g. "gptq"
};

struct QuantizeOptions {
  bool allow_requantize = false;
  bool pure = false;                          // --pure
  bool leave_output_tensor = false;           // --leave-output-tensor
  bool dry_run = false;                       // choose and report, write nothing
  std::optional<DType> output_tensor_type;    // --output-tensor-type
  std::optional<DType> token_embedding_type;  // --token-embedding-type
  const Imatrix* imatrix = nullptr;           // --imatrix (read_imatrix)
  // Tensors written as given (by name); see the header comment. Must outlive the call.
  const std::map<std::string, TensorOverride>* overrides = nullptr;
  // Metadata set after llama-quantize's keys (e.g. the calibrated method's description).
  std::vector<std::pair<std::string, std::string>> extra_metadata;
  int n_threads = 0;  // <= 0: all cores
  std::function<void(const QuantizeProgress&)> on_progress;
};

struct TensorReport {
  std::string name;
  std::vector<int64_t> shape;
  DType from = DType::F32, to = DType::F32;
  std::string reason;  // choose_tensor_types' reason
  uint64_t bytes_in = 0, bytes_out = 0;
  bool converted = false;     // quantized or converted (not copied)
  bool fallback = false;      // the rules' type did not fit the row length
  bool used_imatrix = false;  // quantized with an imatrix entry
};

struct QuantizeReport {
  FileType ftype = FileType::MOSTLY_Q8_0;
  int n_tensors = 0;
  int n_quantized = 0;  // tensors converted
  int n_fallback = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  uint64_t n_elements = 0;
  std::vector<TensorReport> tensors;  // in the order written
  std::vector<std::string> warnings;  // e.g. "no imatrix entry for blk.0.attn_q.weight"
  double seconds = 0;
  double bpw_in() const {
    return n_elements ? 8.0 * static_cast<double>(bytes_in) / n_elements : 0;
  }
  double bpw_out() const {
    return n_elements ? 8.0 * static_cast<double>(bytes_out) / n_elements : 0;
  }
};

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path,
                             FileType ftype, const QuantizeOptions& options = {});

// A pure file of one type (as `llama-quantize --pure`): every convertible weight becomes
// `target` (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q6_k, iq4_nl, iq4_xs), or its fallback
// where the row length does not fit; 1-D tensors stay as they are.
QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, DType target,
                             const QuantizeOptions& options = {});

// The hyperparameters the mixture rules read, from a model's metadata.
MixtureModel mixture_model(const gguf::GGUFFile& f);

}  // namespace kvasir
