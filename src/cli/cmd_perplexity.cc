// kvasir perplexity -m FILE -f TEXT [--ctx N] [--chunks K] [--json]: llama.cpp-compatible
// perplexity (see eval/perplexity.h for the method).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/eval/perplexity.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model over a text file");
  struct Opts {
    KVTypeOptions kvt;
    std::string model, file;
    int ctx = 512, chunks = -1, threads = 0, batch = 512;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("-f,--file", o->file, "Text file (UTF-8)")->required();
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx, "Context length per chunk (default 512)");
  cmd->add_option("--chunks", o->chunks, "Evaluate at most this many chunks");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch,--batch-size", o->batch, "Tokens per forward step");
  add_kv_type_options(cmd, o->kvt);
  cmd->add_flag("--json", o->json, "Print one JSON object");
  return [o]() {
    // Inputs first: a binary file (e.g. -f model.gguf) is refused, not scored as text.
    check_input_file(o->model, "model");
    check_text_file(o->file, "text file");
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    const std::string text = read_input_file(o->file, "text file");
    auto model = Model::load(o->model);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    auto tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
    ThreadPool pool(o->threads);
    PerplexityOptions po;
    po.ctx = o->ctx;
    po.max_chunks = o->chunks;
    po.max_batch = o->batch;
    po.kv_type = kvt;
    po.bos_id = tok.add_bos() ? tok.bos_id() : -1;
    auto progress = [&](int c, double ppl) {
      if (!o->json) fmt::print(stderr, "[{}] {:.4f}\n", c + 1, ppl);
    };
    PerplexityResult r = perplexity(*model, pool, tokens, po, progress);
    if (o->json) {
      nlohmann::json j = {{"ppl", r.ppl},
                          {"tokens", r.scored},
                          {"chunks", r.chunks},
                          {"ctx", o->ctx},
                          {"nll", r.nll},
                          {"seconds", r.seconds},
                          {"text_tokens", tokens.size()},
                          {"model", o->model}};
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print(
          "perplexity: {:.4f} over {} scored tokens ({} chunks of {}; {} text tokens) in "
          "{:.2f} s\n",
          r.ppl, r.scored, r.chunks, o->ctx, tokens.size(), r.seconds);
    }
    return 0;
  };
}

}  // namespace kvasir::cli
