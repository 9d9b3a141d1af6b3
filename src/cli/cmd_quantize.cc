// kvasir quantize IN [OUT] TYPE [NTHREADS] | IN [OUT] --type TYPE: as `llama-quantize`, with the
// same mixtures (Q4_K_M, Q5_K_S, Q3_K_L, IQ4_XS, ...; names in any case, Q4_K = Q4_K_M), the same
// per-tensor type rules and the same options (--imatrix, --pure, --output-tensor-type,
// --token-embedding-type, --leave-output-tensor, --allow-requantize, --dry-run). Without OUT the
// output is ggml-model-TYPE.gguf beside the input, as llama-quantize names it. Progress goes to
// stderr; the per-tensor table (type chosen and why) and the bits per weight to stdout.
// A file whose weights are already quantized is refused unless --allow-requantize.
//
// Calibrated types (quant/calibrated_quantize.h): --type gptq4 | awq4 with --calib TEXT write the
// Q4_1 mixture with the layers' linear weights quantized by GPTQ or AWQ on activations from the
// calibration text, one progress line per weight with its output error beside plain rounding's.
// Their options (--calib, --calib-tokens, --calib-ctx, --group-size, --act-order, --damp,
// --no-clip, --grid-search) are refused with the llama-quantize types, and those that do not apply
// to the other method (--act-order, --damp, --grid-search with awq4; --no-clip with gptq4) are
// refused by name.
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/format/gguf.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/quant/calibrated_quantize.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/quant/imatrix.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/quant/quantize_progress.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

std::string writable_types() {
  std::string s;
  for (const Mixture& m : all_mixtures())
    if (mixture_is_writable(m.ftype)) s += (s.empty() ? "" : ", ") + std::string(m.name);
  return s;
}

std::string types_footer() {
  std::string s = "Types (llama-quantize's; any case, or the llama_ftype number):\n";
  for (const Mixture& m : all_mixtures()) {
    if (!mixture_is_writable(m.ftype)) continue;
    s += m.alias ? fmt::format("{:10}{:<7} : {}\n", "", m.name, m.description)
                 : fmt::format("  {:>2}  or  {:<7} : {}\n", static_cast<uint32_t>(m.ftype), m.name,
                               m.description);
  }
  return s;
}

// A dry run takes every mixture the rules know (it only shows the plan).
FileType parse_type(const std::string& name, bool dry_run) {
  auto m = mixture_from_name(name);
  if (!m) fail("--type: unknown type '{}' (kvasir writes {})", name, writable_types());
  if (!mixture_is_writable(m->ftype) && !dry_run)
    fail(
        "--type: {} is a llama-quantize type kvasir cannot write yet (its quantizers are "
        "missing); kvasir writes {}",
        m->name, writable_types());
  return m->ftype;
}

std::optional<DType> parse_ggml_type(const std::string& flag, const std::string& name) {
  if (name.empty()) return std::nullopt;
  auto t = ggml_type_from_name(name);
  if (!t) fail("{}: unknown ggml type '{}' (e.g. q8_0, q6_k, f16)", flag, name);
  return t;
}

bool parse_int(const std::string& s, int& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

std::optional<CalibratedMethod> calibrated_method(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "gptq4") return CalibratedMethod::kGptq;
  if (name == "awq4") return CalibratedMethod::kAwq;
  return std::nullopt;
}

struct QuantizeOpts {
  std::vector<std::string> args;
  std::string type, imatrix, output_type, embd_type;
  bool allow_requantize = false, pure = false, leave_output = false, dry_run = false, quiet = false;
  int threads = 0;
  // Calibrated types.
  std::string calib;
  int64_t calib_tokens = 0;
  int calib_ctx = 512;
  int group_size = 32;
  bool act_order = false, no_clip = false, grid_search = false;
  double damp = 0.01;
};

// kvasir quantize IN OUT --type gptq4|awq4 --calib TEXT [...]
int run_calibrated(const QuantizeOpts& o, CalibratedMethod m,
                   const std::vector<CLI::Option*>& calib_opts) {
  const std::string_view name = calibrated_method_name(m);
  const size_t want_args = o.type.empty() ? 3 : 2;
  if (o.args.size() != want_args)
    fail("quantize: {} takes IN OUT (kvasir quantize IN OUT --type {} --calib TEXT)", name, name);
  const std::string in = o.args[0], out = o.args[1];
  auto given = [&](std::string_view flag) {
    for (const CLI::Option* opt : calib_opts)
      if (opt->get_name() == flag) return opt->count() > 0;
    return false;
  };
  if (m == CalibratedMethod::kAwq && given("--act-order"))
    fail("quantize: --act-order applies to gptq4 only (AWQ has no column order)");
  if (m == CalibratedMethod::kAwq && given("--damp"))
    fail("quantize: --damp applies to gptq4 only (AWQ inverts no Hessian)");
  if (m == CalibratedMethod::kAwq && given("--grid-search"))
    fail("quantize: --grid-search applies to gptq4 only (awq4 has its clip search)");
  if (m == CalibratedMethod::kGptq && given("--no-clip"))
    fail("quantize: --no-clip applies to awq4 only (GPTQ has no clip search)");
  if (!o.imatrix.empty())
    fail("quantize: --imatrix does not apply to {} (it calibrates on --calib itself)", name);
  if (o.dry_run) fail("quantize: --dry-run is not supported with {}", name);
  if (o.allow_requantize)
    fail("quantize: --allow-requantize is not supported with {}: start from f32/f16/bf16", name);
  if (o.calib.empty()) fail("quantize: {} needs calibration text: --calib FILE", name);
  if (o.calib_ctx < 16) fail("--calib-ctx: chunks need at least 16 tokens, got {}", o.calib_ctx);
  if (o.calib_tokens < 0) fail("--calib-tokens: must be >= 0, got {}", o.calib_tokens);
  if (!(o.damp >= 0)) fail("--damp: must be >= 0, got {}", o.damp);
  check_model_path(in, "input model");
  std::string text = read_input_file(o.calib, "calibration text");
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const std::unique_ptr<gguf::GGUFFile> f = hf::open_model_file(in);
  const Tokenizer tok = Tokenizer::from_gguf(*f);
  const std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/true, false);

  CalibratedOptions co;
  co.method = m;
  co.group_size = o.group_size;
  co.act_order = o.act_order;
  co.damp = o.damp;
  co.grid_search = o.grid_search;
  co.clip = !o.no_clip;
  co.calib.ctx = o.calib_ctx;
  co.calib.max_tokens = o.calib_tokens;
  co.calib.bos_id = tok.add_bos() ? tok.bos_id() : -1;
  co.file.pure = o.pure;
  co.file.leave_output_tensor = o.leave_output;
  co.file.output_tensor_type = parse_ggml_type("--output-tensor-type", o.output_type);
  co.file.token_embedding_type = parse_ggml_type("--token-embedding-type", o.embd_type);
  co.file.n_threads = o.threads;
  const bool quiet = o.quiet;
  co.on_calib = [quiet](int64_t done, int64_t total) {
    if (!quiet && done == total) fmt::print(stderr, "calibration: {} tokens\n", total);
  };
  co.on_layer = [quiet](const LayerQuantReport& r) {
    if (quiet) return;
    std::string extra;
    if (r.alpha >= 0) extra += fmt::format("  alpha {:.2f}", r.alpha);
    if (r.clipped) extra += "  clip";
    fmt::print(stderr,
               "[{:>3}/{}] {:<24} {:>5}x{:<5} err {:.4f}  rtn {:.4f} ({:+.1f}%){}  {:.2f} s\n",
               r.index, r.count, r.name, r.rows, r.cols, r.err, r.err_rtn,
               r.err_rtn > 0 ? 100.0 * (r.err / r.err_rtn - 1) : 0.0, extra, r.seconds);
  };
  fmt::print(stderr, "quantize: {} -> {} as {} (Q4_1 blocks), calibration {} ({} tokens{})\n", in,
             out, name, o.calib, tokens.size(),
             o.calib_tokens > 0 ? fmt::format(", using {}", o.calib_tokens) : "");
  const CalibratedReport r = quantize_calibrated(in, out, tokens, co);
  for (const std::string& n : r.notes)
    if (!quiet) fmt::print(stderr, "note: {}\n", n);
  for (const std::string& w : r.file.warnings) fmt::print(stderr, "warning: {}\n", w);
  if (!quiet) fmt::print("{}", format_tensor_table(r.file));
  double e = 0, e_rtn = 0;
  for (const LayerQuantReport& l : r.layers) {
    e += l.err;
    e_rtn += l.err_rtn;
  }
  const double n = r.layers.empty() ? 1.0 : static_cast<double>(r.layers.size());
  fmt::print(stderr,
             "quantized {} -> {} ({}): {} weights calibrated on {} tokens, mean output error "
             "{:.4f} (round-to-nearest {:.4f}); {:.2f} MiB -> {:.2f} MiB ({:.2f} bpw) in {}\n",
             in, out, name, r.layers.size(), r.calib_tokens, e / n, e_rtn / n,
             r.file.bytes_in / 1048576.0, r.file.bytes_out / 1048576.0, r.file.bpw_out(),
             format_duration(r.file.seconds));
  return 0;
}
}  // namespace

Runner add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quantize", "Quantize a GGUF model as llama-quantize does (Q4_K_M, Q5_K_S, Q8_0, ...)");
  auto o = std::make_shared<QuantizeOpts>();
  cmd->add_option("args", o->args,
                  "IN [OUT] TYPE [NTHREADS] as llama-quantize (TYPE may be given as --type; "
                  "without OUT: ggml-model-TYPE.gguf beside IN)")
      ->required()
      ->expected(1, 4);
  cmd->add_option("--type", o->type, "Target type, e.g. Q4_K_M, q8_0 (see the list below)");
  cmd->add_option("--imatrix", o->imatrix,
                  "Importance matrix from llama-imatrix (GGUF or legacy .dat)");
  cmd->add_flag("--pure", o->pure,
                "No mixture: every weight gets the type's default type (fallbacks still apply)");
  cmd->add_option("--output-tensor-type", o->output_type,
                  "ggml type for output.weight (e.g. q8_0)");
  cmd->add_option("--token-embedding-type", o->embd_type,
                  "ggml type for token_embd.weight (e.g. q8_0)");
  cmd->add_flag("--leave-output-tensor", o->leave_output, "Copy output.weight unchanged");
  cmd->add_flag("--allow-requantize", o->allow_requantize,
                "Convert tensors that are already quantized (quality suffers; as llama-quantize)");
  cmd->add_flag("--dry-run", o->dry_run,
                "Show the types and sizes the file would get, without writing it");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress line and no per-tensor table");
  auto* calib = cmd->add_option("--calib", o->calib,
                                "gptq4/awq4: calibration text (e.g. tinystories-calib.txt)");
  auto* calib_tokens =
      cmd->add_option("--calib-tokens", o->calib_tokens,
                      "gptq4/awq4: use at most N tokens of the calibration text (default: all)");
  auto* calib_ctx = cmd->add_option("--calib-ctx", o->calib_ctx,
                                    "gptq4/awq4: tokens per calibration chunk (default 512)");
  auto* group = cmd->add_option("--group-size", o->group_size,
                                "gptq4/awq4: weights per quantization group (GGUF Q4_1: 32)");
  auto* act_order = cmd->add_flag("--act-order", o->act_order,
                                  "gptq4: quantize columns by descending activation energy");
  auto* damp = cmd->add_option("--damp", o->damp,
                               "gptq4: dampening, a fraction of the mean Hessian diagonal (0.01)");
  auto* no_clip = cmd->add_flag("--no-clip", o->no_clip, "awq4: skip the clip search");
  auto* grid_search =
      cmd->add_flag("--grid-search", o->grid_search,
                    "gptq4: search each group's range by its output error (not min/max)");
  cmd->footer(types_footer());
  const std::vector<CLI::Option*> calib_opts{calib,     calib_tokens, calib_ctx, group,
                                             act_order, damp,         no_clip,   grid_search};
  return [o, calib_opts]() {
    const std::string first_type = !o->type.empty()      ? o->type
                                   : o->args.size() >= 3 ? o->args[2]
                                   : o->args.size() == 2 ? o->args[1]
                                                         : std::string();
    const std::optional<CalibratedMethod> cm = calibrated_method(first_type);
    if (!cm)
      for (const CLI::Option* opt : calib_opts)
        if (opt->count() > 0)
          fail("quantize: {} applies to the calibrated types gptq4 and awq4 only", opt->get_name());
    if (cm) return run_calibrated(*o, *cm, calib_opts);
    // llama-quantize's positional forms: IN TYPE [N], IN OUT TYPE [N]; or IN [OUT] --type TYPE.
    const std::vector<std::string>& a = o->args;
    std::string in = a[0], out, type = o->type;
    size_t next = 1;
    if (type.empty()) {
      if (a.size() >= 2 && mixture_from_name(a[1])) {
        type = a[1];
        next = 2;
      } else if (a.size() >= 3) {
        out = a[1];
        type = a[2];
        next = 3;
      } else {
        fail("quantize: no type given (kvasir quantize IN [OUT] TYPE, or --type TYPE)");
      }
    } else if (a.size() >= 2) {
      out = a[1];
      next = 2;
    }
    int threads = o->threads;
    if (next < a.size()) {
      if (next + 1 < a.size() || !parse_int(a[next], threads) || threads < 0)
        fail("quantize: unexpected argument '{}' (expected IN [OUT] TYPE [NTHREADS])", a[next]);
    }
    const FileType ft = parse_type(type, o->dry_run);
    if (out.empty() && !o->dry_run) {
      const auto slash = in.find_last_of('/');
      out = (slash == std::string::npos ? std::string() : in.substr(0, slash + 1)) + "ggml-model-" +
            std::string(mixture_name(ft)) + ".gguf";
    }
    check_model_path(in, "input model");

    QuantizeOptions opts;
    opts.allow_requantize = o->allow_requantize;
    opts.pure = o->pure;
    opts.leave_output_tensor = o->leave_output;
    opts.dry_run = o->dry_run;
    opts.output_tensor_type = parse_ggml_type("--output-tensor-type", o->output_type);
    opts.token_embedding_type = parse_ggml_type("--token-embedding-type", o->embd_type);
    opts.n_threads = threads;
    Imatrix im;
    if (!o->imatrix.empty()) {
      check_input_file(o->imatrix, "imatrix");
      im = read_imatrix(o->imatrix);
      std::string ds;
      for (const std::string& d : im.datasets) ds += (ds.empty() ? "" : ", ") + d;
      fmt::print(stderr, "imatrix {}: {} entries{}{}\n", o->imatrix, im.importance.size(),
                 im.chunk_count > 0 ? fmt::format(", {} chunks", im.chunk_count) : "",
                 ds.empty() ? "" : " of " + ds);
      opts.imatrix = &im;
    }
    ProgressPrinter progress(stderr, isatty(STDERR_FILENO) != 0);
    if (!o->quiet) opts.on_progress = [&progress](const QuantizeProgress& p) { progress(p); };
    if (o->dry_run)
      fmt::print(stderr, "quantize: sizes of {} as {} (dry run, nothing written)\n", in,
                 mixture_name(ft));
    else
      fmt::print(stderr, "quantize: {} -> {} as {}\n", in, out, mixture_name(ft));
    QuantizeReport r;
    try {
      r = quantize_gguf(in, out, ft, opts);
    } catch (...) {
      progress.finish();
      throw;
    }
    progress.finish();
    for (const std::string& w : r.warnings) fmt::print(stderr, "warning: {}\n", w);
    if (!o->quiet) fmt::print("{}", format_tensor_table(r));
    fmt::print(stderr,
               "quantized {} -> {} ({}): {} tensors, {} converted, {} fell back (row length not "
               "a multiple of the block size); {:.2f} MiB ({:.2f} bpw) -> {:.2f} MiB ({:.2f} "
               "bpw) in {}\n",
               in, o->dry_run ? "(dry run)" : out, mixture_name(ft), r.n_tensors, r.n_quantized,
               r.n_fallback, r.bytes_in / 1048576.0, r.bpw_in(), r.bytes_out / 1048576.0,
               r.bpw_out(), format_duration(r.seconds));
    return 0;
  };
}

}  // namespace kvasir::cli
