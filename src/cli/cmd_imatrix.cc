// kvasir imatrix -m MODEL -f TEXT [-o imatrix.gguf] [-c 512] [--chunks N] [--output-format
// gguf|dat] [--process-output] [--no-ppl] [-b N] [-t N]: llama-imatrix's importance matrix (see
// quant/imatrix_collect.h for the method), for `kvasir quantize --imatrix` and llama-quantize.
// The dataset recorded in the file is the -f argument as given, as llama-imatrix records it.
// Without --output-format the format follows the output's name (.dat: legacy, else GGUF).
// Progress (chunk i of n, the perplexity so far, ETA) goes to stderr; the summary to stdout.
// Unlike llama-imatrix: one chunk of text is enough (it asks for two), the file is written once
// at the end (no --output-frequency / --save-frequency), and there is no --in-file merging or
// --show-statistics.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/quant/imatrix.h"
#include "kvasir/quant/imatrix_collect.h"
#include "kvasir/quant/quantize_progress.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

// Refuses, before any work, an output whose folder is missing or not writable.
void check_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail("-o {}: is a directory", path);
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) fail("-o {}: the folder {} does not exist", path, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    fail("-o {}: the folder {} is not writable", path, dir.string());
}

}  // namespace

Runner add_imatrix(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "imatrix", "Importance matrix of a model over calibration text (as llama-imatrix)");
  struct Opts {
    KVTypeOptions kvt;
    std::string model, file, out = "imatrix.gguf", format;
    int ctx = 512, chunks = -1, threads = 0, batch = 512;
    bool process_output = false, no_ppl = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("-f,--file", o->file, "Calibration text file (UTF-8)")->required();
  cmd->add_option("-o,--output,--output-file", o->out, "Output file (default imatrix.gguf)");
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx, "Tokens per chunk (default 512)");
  cmd->add_option("--chunks", o->chunks, "Process at most this many chunks");
  cmd->add_option("--output-format", o->format,
                  "gguf or dat (llama.cpp's legacy format; default: from the output's name)")
      ->check(CLI::IsMember({"gguf", "dat"}));
  cmd->add_flag("--process-output", o->process_output, "Also collect output.weight");
  cmd->add_flag("--no-ppl", o->no_ppl, "Do not compute the perplexity");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch,--batch-size", o->batch,
                  "Tokens per forward step (llama.cpp's --ubatch-size; default 512)");
  add_kv_type_options(cmd, o->kvt);
  return [o]() {
    check_model_path(o->model, "model");
    check_text_file(o->file, "text file");
    check_output_path(o->out);
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    if (o->ctx < 4) fail("-c/--ctx-size: a chunk needs at least 4 tokens, got {}", o->ctx);
    if (o->batch <= 0) fail("-b/--batch-size: must be positive, got {}", o->batch);
    if (o->chunks == 0) fail("--chunks: 0 chunks leave nothing to compute");
    const bool dat = o->format.empty() ? o->out.ends_with(".dat") : o->format == "dat";

    std::string text = read_input_file(o->file, "text file");
    if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama.cpp reads -f
    auto model = Model::load(o->model);
    warn_if_past_trained_context(o->ctx, model->config().ctx_train);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    const auto tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
    if (tokens.size() < static_cast<size_t>(o->ctx))
      fail("{}: the text tokenizes to {} tokens, fewer than one chunk of {} (-c)", o->file,
           tokens.size(), o->ctx);

    ThreadPool pool(o->threads);
    ImatrixCollectOptions co;
    co.ctx = o->ctx;
    co.max_chunks = o->chunks;
    co.bos_id = tok.add_bos() ? tok.bos_id() : -1;
    co.process_output = o->process_output;
    co.compute_ppl = !o->no_ppl;
    co.ubatch = o->batch;
    co.kv_type = kvt;
    const int n_chunks = static_cast<int>(
        std::min<size_t>(tokens.size() / static_cast<size_t>(o->ctx),
                         o->chunks > 0 ? static_cast<size_t>(o->chunks) : SIZE_MAX));
    fmt::print(stderr, "imatrix: {} tokens, {} chunk{} of {}, {} threads\n", tokens.size(),
               n_chunks, n_chunks == 1 ? "" : "s", o->ctx, pool.size());

    const bool tty = isatty(STDERR_FILENO) != 0;
    bool showing = false;
    auto progress = [&](const ImatrixCollectProgress& p) {
      const double eta =
          p.elapsed_s / p.chunks_done * static_cast<double>(p.n_chunks - p.chunks_done);
      const int w = static_cast<int>(std::to_string(p.n_chunks).size());
      std::string line = fmt::format("chunk {:>{}}/{}", p.chunks_done, w, p.n_chunks);
      if (co.compute_ppl) line += fmt::format(" | ppl {:.4f}", p.ppl);
      line += fmt::format(" | {}, ETA {}", format_duration(p.elapsed_s), format_duration(eta));
      if (tty) {
        fmt::print(stderr, "\r\033[K{}", line);
        showing = true;
      } else {
        fmt::print(stderr, "{}\n", line);
      }
      std::fflush(stderr);
    };
    ImatrixCollectResult r = collect_imatrix(*model, pool, tokens, co, progress);
    if (showing) fmt::print(stderr, "\n");

    const ImatrixMeta meta{{o->file}, r.chunk_count, r.chunk_size};
    if (dat)
      write_imatrix_dat(o->out, r.stats, meta);
    else
      write_imatrix_gguf(o->out, r.stats, meta);
    if (co.compute_ppl)
      fmt::print("perplexity: {:.4f} +/- {:.5f} over {} scored tokens\n", r.ppl, r.ppl_error,
                 r.scored);
    fmt::print("imatrix: {} entries over {} chunk{} of {} tokens in {} -> {} ({})\n",
               r.stats.size(), r.chunk_count, r.chunk_count == 1 ? "" : "s", r.chunk_size,
               format_duration(r.seconds), o->out, dat ? "dat" : "gguf");
    return 0;
  };
}

}  // namespace kvasir::cli
