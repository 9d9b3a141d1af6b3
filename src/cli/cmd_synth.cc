// kvasir synth --shape NAME --dtype T -o FILE: a random-weight model of a real shape, with the
// tokenizer of a vocabulary GGUF (--vocab; for the 32000-token llama shapes it is found as
// ggml-vocab-llama-spm.gguf under $KVASIR_MODELS/vocab, or under shared/models/vocab next to a
// folder above the working directory or above the kvasir binary). A model without a tokenizer
// is written only on request (--no-vocab): run, serve and llama.cpp cannot use one.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/format/gguf.h"
#include "kvasir/model/synth.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {

constexpr const char* kSpmVocab = "ggml-vocab-llama-spm.gguf";

// The places a 32000-token llama vocabulary is looked for, in order.
std::vector<std::filesystem::path> vocab_candidates() {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  if (const char* env = std::getenv("KVASIR_MODELS"); env && *env)
    out.push_back(fs::path(env) / "vocab" / kSpmVocab);
  std::vector<fs::path> starts;
  std::error_code ec;
  if (fs::path cwd = fs::current_path(ec); !ec) starts.push_back(cwd);
  if (fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec)
    starts.push_back(exe.parent_path());
  for (const fs::path& start : starts)
    for (fs::path d = start; !d.empty(); d = d.parent_path()) {
      out.push_back(d / "shared" / "models" / "vocab" / kSpmVocab);
      if (d == d.parent_path()) break;
    }
  return out;
}

}  // namespace

Runner add_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a random-weight GGUF model of a named shape");
  struct Opts {
    std::string shape, dtype = "f16", out, vocab;
    uint64_t seed = 1;
    int layers = 0;
    bool no_vocab = false, resize_vocab = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option(
         "--shape", o->shape,
         "llama-tiny (tests: 256-wide, 4 layers) | llama-110m | tinyllama-1.1b | llama3-8b")
      ->required();
  cmd->add_option("--dtype", o->dtype, "f32 | f16 | bf16 | q8_0 | q4_0");
  cmd->add_option("-o,--output", o->out, "Output GGUF")->required();
  cmd->add_option("--vocab", o->vocab,
                  "Vocabulary GGUF to copy the tokenizer from (default for the 32000-token "
                  "shapes: ggml-vocab-llama-spm.gguf in $KVASIR_MODELS/vocab or in a "
                  "shared/models/vocab beside a folder above the working directory or the "
                  "binary)");
  cmd->add_flag("--resize-vocab", o->resize_vocab,
                "Give the model as many embedding and output rows as --vocab has tokens (e.g. "
                "llama-110m with a 102k vocabulary) instead of refusing a vocabulary of another "
                "size");
  cmd->add_flag("--no-vocab", o->no_vocab,
                "Write the weights without a tokenizer (only kvasir bench can run the file)");
  cmd->add_option("--seed", o->seed, "Random seed");
  cmd->add_option("--layers", o->layers,
                  "Layers instead of the shape's (e.g. a draft model of a shape: tinyllama-1.1b "
                  "with --layers 1 streams about a tenth of its weights)");
  return [o]() {
    SynthSpec s = synth_shape(o->shape);
    if (o->layers < 0 || o->layers > 1024) fail("--layers: expected 1..1024, got {}", o->layers);
    if (o->layers > 0) {
      s.n_layers = o->layers;
      s.name += fmt::format("-{}l", o->layers);
    }
    auto t = dtype_from_name(o->dtype);
    if (!t) fail("--dtype: unknown type '{}'", o->dtype);
    s.dtype = *t;
    s.seed = o->seed;
    if (o->no_vocab && !o->vocab.empty()) fail("--no-vocab and --vocab exclude each other");
    if (!o->vocab.empty()) check_input_file(o->vocab, "vocabulary");
    if (o->resize_vocab) {
      if (o->vocab.empty()) fail("--resize-vocab needs --vocab");
      const gguf::GGUFFile vf(o->vocab);
      const gguf::Value* toks = vf.find("tokenizer.ggml.tokens");
      if (!toks) fail("{}: no tokenizer.ggml.tokens: not a vocabulary GGUF", o->vocab);
      s.n_vocab = static_cast<int32_t>(toks->as_array().items.size());
    }
    if (o->vocab.empty() && !o->no_vocab) {
      std::string searched;
      if (s.n_vocab == 32000) {
        for (const auto& p : vocab_candidates()) {
          std::error_code ec;
          if (std::filesystem::is_regular_file(p, ec)) {
            o->vocab = p.string();
            break;
          }
        }
        searched = fmt::format(
            " ({} not found in $KVASIR_MODELS/vocab or a shared/models/vocab "
            "above the working directory or the binary)",
            kSpmVocab);
      }
      if (o->vocab.empty())
        fail(
            "synth: no vocabulary for shape {} ({} tokens){}: pass --vocab FILE.gguf (a GGUF "
            "with a {}-token tokenizer), set KVASIR_MODELS to the models folder, or pass "
            "--no-vocab to write a model without a tokenizer",
            o->shape, s.n_vocab, searched, s.n_vocab);
    }
    s.vocab_from = o->vocab;
    write_synthetic_model(s, o->out);
    fmt::print(stderr, "wrote {} ({} {}, vocab from {})\n", o->out, o->shape, o->dtype,
               o->vocab.empty() ? "none (--no-vocab)" : o->vocab);
    return 0;
  };
}

}  // namespace kvasir::cli
