// kvasir convert FOLDER OUT.gguf [--type TYPE]: a Hugging Face model folder to a GGUF file that
// llama.cpp loads, as convert_hf_to_gguf.py writes it (the folder's GGUF view,
// hf/hf_checkpoint.h: metadata, vocabulary, merges, chat template, the Q/K permutation undone),
// optionally quantized on the way with any type `kvasir quantize` writes (Q8_0, Q4_K_M, ...).
// Without --type (or --type auto) the weights keep the dtype they are stored in (F32, F16 or
// BF16), so the file computes exactly what the folder does. Progress goes to stderr.
#include <fmt/format.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/quant/quant_mixture.h"
#include "kvasir/quant/quantize_progress.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "Convert a Hugging Face model folder to GGUF (optionally quantized)");
  struct Opts {
    std::string folder, out, type = "auto";
    int threads = 0;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("folder", o->folder, "Hugging Face model folder (config.json, *.safetensors)")
      ->required();
  cmd->add_option("out", o->out, "Output GGUF file")->required();
  cmd->add_option(
      "--type,--outtype", o->type,
      "auto (the stored dtype), f32, f16, bf16, or a quantize type (q8_0, q4_k_m, ...)");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress line and no per-tensor table");
  return [o]() {
    if (!hf::is_hf_folder(o->folder))
      fail("{}: not a Hugging Face model folder (no config.json)", o->folder);
    QuantizeOptions opts;
    opts.n_threads = o->threads;
    opts.pure = true;  // overridden below for mixtures
    ProgressPrinter progress(stderr, isatty(STDERR_FILENO) != 0);
    if (!o->quiet) opts.on_progress = [&progress](const QuantizeProgress& p) { progress(p); };
    QuantizeReport r;
    std::string shown;
    try {
      if (o->type == "auto") {
        // The dtype the folder stores its matrices in, kept as it is.
        const auto view = hf::open_hf_folder(o->folder);
        const uint64_t ft = view->get_int("general.file_type", 0);
        const DType t = ft == 1 ? DType::F16 : ft == 32 ? DType::BF16 : DType::F32;
        shown = std::string(dtype_name(t)) + " (as stored)";
        fmt::print(stderr, "convert: {} -> {} as {}\n", o->folder, o->out, shown);
        r = quantize_gguf(o->folder, o->out, t, opts);
      } else {
        auto m = mixture_from_name(o->type);
        if (!m || !mixture_is_writable(m->ftype))
          fail(
              "--type: unknown or unwritable type '{}' (auto, f32, f16, bf16, q8_0, q4_k_m, ...: "
              "see kvasir quantize --help)",
              o->type);
        opts.pure = false;
        shown = std::string(mixture_name(m->ftype));
        fmt::print(stderr, "convert: {} -> {} as {}\n", o->folder, o->out, shown);
        r = quantize_gguf(o->folder, o->out, m->ftype, opts);
      }
    } catch (...) {
      progress.finish();
      throw;
    }
    progress.finish();
    for (const std::string& w : r.warnings) fmt::print(stderr, "warning: {}\n", w);
    if (!o->quiet) fmt::print("{}", format_tensor_table(r));
    fmt::print(stderr, "converted {} -> {} ({}): {} tensors, {:.2f} MiB ({:.2f} bpw) in {}\n",
               o->folder, o->out, shown, r.n_tensors, r.bytes_out / 1048576.0, r.bpw_out(),
               format_duration(r.seconds));
    return 0;
  };
}

}  // namespace kvasir::cli
