// The deployment gate of `kvasir eval gate`: a model is measured the way a stored baseline says
// (perplexity and KL divergence against saved reference logits, a golden set, a short throughput
// benchmark) and each figure is compared with the baseline's under a tolerance. Every check is
// optional; a baseline configures at least one. The measuring reuses eval/perplexity.h,
// eval/kl_divergence.h, eval/golden.h and bench/model_bench.h; compare() is pure.
//
// Baseline file (JSON, "format": "kvasir-gate/1"), as write_baseline() writes it:
//   {
//     "format": "kvasir-gate/1",
//     "run": {                          what to run (paths relative to the baseline's folder,
//       "text": "eval.txt",             or absolute); each of text / kl_base / golden_set may be
//       "kl_base": null,                null or absent; text and kl_base exclude each other
//       "golden_set": "golden.jsonl",   (the logits file carries its text)
//       "ctx": 256, "chunks": 8,        perplexity chunking (ctx 0 with kl_base: the file's;
//                                       chunks -1: all)
//       "tg": 32, "pp": 64, "reps": 3,  throughput: tg<T> and pp<P> tok/s, median of reps (0: off)
//       "threads": 0,                   0: all cores
//       "kv_dtype": "f16",              KV cache dtype, or "k=int8,v=f16"
//       "text_sha256": "...", "kl_base_sha256": null, "golden_set_sha256": "..."
//     },                                the inputs' digests when the baseline was measured: a
//                                       changed input is refused, not compared
//     "model": {"path": "q8.gguf", "sha256": "...", "weight_type": "q8_0", "file_bytes": 367104},
//     "environment": {"kvasir_version": "0.1.0", "kvasir_commit": "abc1234",
//                     "backend": "cpu (AVX3_ZEN4, 2 threads)", "cpu": "AMD EPYC 9654 ...",
//                     "threads": 2, "created": "2025-01-31T12:00:00Z"},
//                                       where and with what the figures were measured (for the
//                                       reader; "cpu" is /proc/cpuinfo's model name, may be "")
//     "metrics": {"ppl": 3.887, "ppl_tokens": 504, "mean_kld": 0.00079, "top1_agreement": 0.978,
//                 "golden_pass_rate": 1.0, "golden_passed": 2, "golden_cases": 2,
//                 "tg_tok_s": 5123.4, "pp_tok_s": 20456.7},
//                                       a metric is present exactly when run configures it
//                                       (ppl: text or kl_base; mean_kld, top1_agreement: kl_base;
//                                       golden_*: golden_set; tg_tok_s: tg > 0; pp_tok_s: pp > 0)
//     "tolerances": {"ppl_rise_pct": 1.0, "kld_rise": 0.01, "top1_drop_points": 1.0,
//                    "golden_drop_points": 0.0, "throughput_drop_pct": 10.0}
//   }                                   each optional (the defaults shown), each >= 0
// read_baseline() refuses an unknown field, a wrong type or a missing required field with
// kvasir::Error "PATH: field 'run.ctx': expected ..." (a typo in a tolerance must not silently
// fall back to its default).
//
// Tolerances, "now" passing when it is no worse than the limit (equal passes; a slack of 1e-9
// relative absorbs the decimal rounding of the JSON file):
//   PPL               now <= base x (1 + ppl_rise_pct/100)
//   mean KLD          now <= base + kld_rise. Absolute, not a ratio: KLD is already a divergence
//                     from the reference, and a baseline close to it (Q8_0: ~1e-3; the reference
//                     itself: 0) would make any ratio fail on noise. 0.01 nats is well inside
//                     Q8_0 -> Q4_0 (stories260K: 0.0008 -> 0.094).
//   top-1 agreement   now >= base - top1_drop_points/100 (fractions; the points are percent)
//   golden pass rate  now >= base - golden_drop_points/100 (default 0: may not drop)
//   tg/pp tok/s       now >= base x (1 - throughput_drop_pct/100)
// A metric measured as NaN or infinite fails. Throughput checks can be skipped (noisy machines):
// their rows then say "skipped".
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/tensor/kv_quant.h"

namespace kvasir::gate {

inline constexpr const char* kFormat = "kvasir-gate/1";

struct Run {
  std::string text;        // perplexity text ("" = none)
  std::string kl_base;     // reference logits (kvasir perplexity --save-logits; "" = none)
  std::string golden_set;  // eval/golden.h set ("" = none)
  int ctx = 0;             // tokens per chunk (0 with kl_base: the file's)
  int chunks = -1;         // at most this many chunks (-1: all)
  int tg = 0, pp = 0;      // throughput figures (0: none)
  int reps = 3;            // throughput repetitions (median)
  int threads = 0;         // 0: all cores
  KVCacheType kv{};
  // The inputs' SHA-256 when the baseline was measured ("" = not recorded: not checked).
  std::string text_sha256, kl_base_sha256, golden_set_sha256;

  bool perplexity() const { return !text.empty() || !kl_base.empty(); }
  bool throughput() const { return tg > 0 || pp > 0; }
};

struct Tolerances {
  double ppl_rise_pct = 1.0;
  double kld_rise = 0.01;
  double top1_drop_points = 1.0;
  double golden_drop_points = 0.0;
  double throughput_drop_pct = 10.0;
};

struct ModelInfo {
  std::string path;
  std::string sha256;       // sha256_model_path (util/sha256.h)
  std::string weight_type;  // the type most matrix weights are in, e.g. "q8_0"
  int64_t file_bytes = 0;   // 0 for a Hugging Face folder
};

struct Environment {
  std::string kvasir_version, kvasir_commit;  // util/build_info.h
  std::string backend;                        // the backend's description(): ISA and threads
  std::string cpu;                            // /proc/cpuinfo "model name" ("" = unknown)
  int threads = 0;                            // threads used
  std::string created;                        // UTC, ISO 8601
};

struct Metrics {
  std::optional<double> ppl, mean_kld, top1_agreement, golden_pass_rate, tg_tok_s, pp_tok_s;
  int64_t ppl_tokens = 0;  // tokens scored
  int golden_passed = 0, golden_cases = 0;
  std::vector<std::string> golden_failed;  // ids of failing cases (not stored)
};

struct Baseline {
  Run run;
  ModelInfo model;
  Environment env;
  Metrics metrics;
  Tolerances tol;
};

// ---- the file ----

// Throws kvasir::Error "PATH: ..." when the file cannot be read, is not JSON, or fails the
// checks of parse_baseline.
Baseline read_baseline(const std::string& path);
// `where` names the source in errors (the file's path). Checks the format, every field's type,
// unknown fields, tolerances >= 0 (throughput_drop_pct <= 100), and the rules of validate_run()
// and of the metrics above.
Baseline parse_baseline(const nlohmann::json& j, const std::string& where);
// Throws kvasir::Error "WHERE: field 'run.X': ..." for a run that cannot be measured: no check
// configured, text with kl_base, ctx < 4 with text (or < 0), chunks < -1 or 0, tg/pp < 0,
// reps < 1, threads < 0.
void validate_run(const Run& run, const std::string& where);
nlohmann::ordered_json baseline_json(const Baseline& b);  // fields in the order above
// Validates, then writes `path` atomically (util/atomic_file.h).
void write_baseline(const std::string& path, const Baseline& b);

// A path stored in the baseline at `baseline_path`, as the file system sees it: absolute paths
// as they are, relative ones from the baseline's folder.
std::string resolve_path(const std::string& baseline_path, const std::string& stored);
// The reverse, for a path given on the command line (relative to the working directory): an
// absolute path is kept, a relative one is made relative to the baseline's folder.
std::string path_for_baseline(const std::string& baseline_path, const std::string& given);

// ---- measuring ----

struct MeasureOptions {
  bool throughput = true;  // false: tg/pp are not measured (their metrics stay empty)
  // true: an input whose digest the run records and that no longer matches is refused (kvasir::
  // Error naming the field and the file); false: digests are only computed (recording).
  bool verify_inputs = true;
  std::function<void(const std::string&)> progress;  // a line as each part completes
};

struct Measurement {
  ModelInfo model;
  Environment env;
  Metrics metrics;
  std::string text_sha256, kl_base_sha256, golden_set_sha256;  // of the inputs used ("" = none)
  int ctx = 0;  // tokens per perplexity chunk used (0: no perplexity)
};

// Loads `model_path` and runs what `run` configures, its paths resolved from `baseline_path`.
// Throws kvasir::Error naming the file for an unreadable input, a logits file of another
// vocabulary or ctx, a text too short for one chunk.
Measurement measure(const Run& run, const std::string& baseline_path, const std::string& model_path,
                    const MeasureOptions& opt = {});

// ---- comparing (pure) ----

enum class Verdict { kPass, kFail, kSkipped };

struct Check {
  std::string metric;   // the metrics key: "ppl", "mean_kld", ..., "tg_tok_s"
  std::string label;    // "PPL", "tg32 tok/s"
  double baseline = 0;  // the baseline's value
  std::optional<double> now;
  double limit = 0;                                     // the worst value that still passes
  std::string baseline_text, now_text, tolerance_text;  // for the table
  Verdict verdict = Verdict::kSkipped;
};

struct Report {
  std::vector<Check> checks;                // in the order ppl, mean_kld, top1, golden, tg, pp
  bool pass() const;                        // no check failed
  std::vector<std::string> failed() const;  // labels of the failing checks
};

// One check per metric the baseline has. A throughput check is kSkipped when !check_throughput
// or `now` lacks it; another metric missing from `now` fails.
Report compare(const Baseline& base, const Metrics& now, const Tolerances& tol,
               bool check_throughput = true);

// The table (Markdown, columns padded): metric | baseline | now | tolerance | verdict.
std::string report_table(const Report& r);
// "PASS: all 5 checks within tolerance" or "FAIL: 2 of 5 checks regressed: PPL, mean KLD"
// (skipped checks are counted apart).
std::string verdict_line(const Report& r);
// {"pass", "failed": [labels], "checks": [{metric, label, baseline, now, limit, tolerance,
// verdict}]}
nlohmann::ordered_json report_json(const Report& r);

// The table of a baseline's own values (metric | value), for --update-baseline.
std::string values_table(const Baseline& b);

}  // namespace kvasir::gate
