// kvasir quantize IN [OUT] TYPE [NTHREADS] | IN [OUT] --type TYPE: as `llama-quantize`, with the
// same mixtures (Q4_K_M, Q5_K_S, Q3_K_L, IQ4_XS, ...; names in any case, Q4_K = Q4_K_M), the same
// per-tensor type rules and the same options (--imatrix, --pure, --output-tensor-type,
// --token-embedding-type, --leave-output-tensor, --allow-requantize, --dry-run). Without OUT the
// output is ggml-model-TYPE.gguf beside the input, as llama-quantize names it. Progress goes to
// stderr; the per-tensor table (type chosen and why) and the bits per weight to stdout.
// A file whose weights are already quantized is refused unless --allow-requantize.
#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/quant/imatrix.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/quant/quantize_progress.h"
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

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quantize", "Quantize a GGUF model as llama-quantize does (Q4_K_M, Q5_K_S, Q8_0, ...)");
  struct Opts {
    std::vector<std::string> args;
    std::string type, imatrix, output_type, embd_type;
    bool allow_requantize = false, pure = false, leave_output = false, dry_run = false,
         quiet = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
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
  cmd->footer(types_footer());
  return [o]() {
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
