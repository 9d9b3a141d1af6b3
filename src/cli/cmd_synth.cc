// kvasir synth --shape NAME --dtype T -o FILE: a random-weight model of a real shape.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "kvasir/model/synth.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a random-weight GGUF model of a named shape");
  struct Opts {
    std::string shape, dtype = "f16", out, vocab;
    uint64_t seed = 1;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--shape", o->shape, "llama-110m | tinyllama-1.1b | llama3-8b")->required();
  cmd->add_option("--dtype", o->dtype, "f32 | f16 | bf16 | q8_0 | q4_0");
  cmd->add_option("-o,--output", o->out, "Output GGUF")->required();
  cmd->add_option("--vocab", o->vocab,
                  "Vocabulary GGUF to copy the tokenizer from (default: the llama SPM vocab in "
                  "$KVASIR_MODELS or ../shared/models/vocab)");
  cmd->add_option("--seed", o->seed, "Random seed");
  return [o]() {
    SynthSpec s = synth_shape(o->shape);
    auto t = dtype_from_name(o->dtype);
    if (!t) fail("--dtype: unknown type '{}'", o->dtype);
    s.dtype = *t;
    s.seed = o->seed;
    if (o->vocab.empty() && s.n_vocab == 32000) {
      const char* env = std::getenv("KVASIR_MODELS");
      std::string dir = env ? env : "../shared/models";
      std::string v = dir + "/vocab/ggml-vocab-llama-spm.gguf";
      if (std::filesystem::exists(v)) o->vocab = v;
    }
    s.vocab_from = o->vocab;
    write_synthetic_model(s, o->out);
    fmt::print(stderr, "wrote {} ({} {}, vocab from {})\n", o->out, o->shape, o->dtype,
               o->vocab.empty() ? "none" : o->vocab);
    return 0;
  };
}

}  // namespace kvasir::cli
