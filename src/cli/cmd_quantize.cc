// kvasir quantize IN OUT [--type] f16|bf16|q8_0|q4_0|f32 [--allow-requantize]: as
// `llama-quantize IN OUT TYPE` (the type may be the third argument, in any case: Q4_0 = q4_0).
// A file whose weights are already quantized is refused unless --allow-requantize.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::cli {

Runner add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "Convert a GGUF model's weights to another format");
  struct Opts {
    std::string in, out, type;
    bool allow_requantize = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("input", o->in, "Input GGUF")->required();
  cmd->add_option("output", o->out, "Output GGUF")->required();
  cmd->add_option("type,--type", o->type,
                  "Target type: f32, f16, bf16, q8_0, q4_0 (any case; also as the third argument)")
      ->required();
  cmd->add_flag("--allow-requantize", o->allow_requantize,
                "Convert tensors that are already quantized (quality suffers; as llama-quantize)");
  return [o]() {
    auto t = quantize_type_from_name(o->type);
    if (!t) fail("--type: unknown type '{}' (expected f32, f16, bf16, q8_0 or q4_0)", o->type);
    check_input_file(o->in, "input model");
    double t0 = now_seconds();
    QuantizeReport r = quantize_gguf(o->in, o->out, *t, {.allow_requantize = o->allow_requantize});
    fmt::print(stderr,
               "quantized {} -> {} ({}): {} tensors, {} converted, {} fell back to f16 (row "
               "length not a multiple of the block size); {:.2f} MiB -> {:.2f} MiB in {:.2f} s\n",
               o->in, o->out, dtype_name(*t), r.n_tensors, r.n_quantized, r.n_fallback,
               r.bytes_in / 1048576.0, r.bytes_out / 1048576.0, now_seconds() - t0);
    return 0;
  };
}

}  // namespace kvasir::cli
