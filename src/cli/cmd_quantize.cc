// kvasir quantize IN OUT --type f16|bf16|q8_0|q4_0|f32
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "kvasir/quant/gguf_quantize.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::cli {

Runner add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "Convert a GGUF model's weights to another format");
  struct Opts {
    std::string in, out, type;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("input", o->in, "Input GGUF")->required();
  cmd->add_option("output", o->out, "Output GGUF")->required();
  cmd->add_option("--type", o->type, "Target type: f32, f16, bf16, q8_0, q4_0")->required();
  return [o]() {
    auto t = dtype_from_name(o->type);
    if (!t) fail("--type: unknown type '{}' (expected f32, f16, bf16, q8_0 or q4_0)", o->type);
    double t0 = now_seconds();
    QuantizeReport r = quantize_gguf(o->in, o->out, *t);
    fmt::print(stderr,
               "quantized {} -> {} ({}): {} tensors, {} converted, {} fell back to f16 (row "
               "length not a multiple of the block size); {:.2f} MiB -> {:.2f} MiB in {:.2f} s\n",
               o->in, o->out, o->type, r.n_tensors, r.n_quantized, r.n_fallback,
               r.bytes_in / 1048576.0, r.bytes_out / 1048576.0, now_seconds() - t0);
    return 0;
  };
}

}  // namespace kvasir::cli
