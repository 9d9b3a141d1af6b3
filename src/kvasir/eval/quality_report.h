// The quality report of `kvasir eval report`: one table over model files (a reference and its
// quantized variants) x KV cache dtypes, each row measured the same way:
//   format, KV dtype, bits per weight, file size, KV bytes per token (scales included),
//   PPL and ΔPPL % against the reference with an f16 KV cache (eval/perplexity.h),
//   mean KLD ± error and top-1 agreement against that reference's distributions
//   (eval/kl_divergence.h), the golden set's pass rate (eval/golden.h, when a set is given),
//   and tg128 tok/s (bench/model_bench.h, when asked).
// Markdown for notes and READMEs, JSON for scripts.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

struct ReportOptions {
  std::string reference;              // the model every row is compared with (f16 KV)
  std::vector<std::string> variants;  // other model files (may be empty)
  std::vector<KVCacheType> kv_types{KVCacheType{}};
  std::string text;  // perplexity text (UTF-8)
  int ctx = 256;
  int chunks = -1;         // -1: all
  std::string golden_set;  // "" = no golden column
  int tg = 0;              // > 0: measure tg<tg> tok/s (3 repetitions)
  int threads = 0;
  // Quantized keys are stored through the key transform calibrated on the built-in text
  // (engine/key_calibration.h), as kvasir's commands do by default; false: as they are.
  bool calibrate_keys = true;
  std::string scratch_dir;  // where the reference distributions are kept meanwhile ("" = TMPDIR)
};

struct ReportRow {
  std::string model;   // path
  std::string key_transform = "none";  // where the keys' transform came from
  std::string format;  // the type most of the file's matrix weights are in, e.g. "q4_0"
  KVCacheType kv;
  double bits_per_weight = 0;
  int64_t file_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  double ppl = 0, dppl_pct = 0;
  double kld = 0, kld_err = 0, top1 = 0;
  std::optional<double> golden_pass_rate;
  std::optional<double> tg_tok_s;
};

// Throws kvasir::Error naming the file for a model that cannot be read or whose vocabulary is
// not the reference's. `progress` gets a line as each row completes.
std::vector<ReportRow> run_quality_report(
    const ReportOptions& opt, const std::function<void(const std::string&)>& progress = {});

std::string report_markdown(const std::vector<ReportRow>& rows, int tg);
nlohmann::json report_json(const std::vector<ReportRow>& rows);

}  // namespace kvasir
