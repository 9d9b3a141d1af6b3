// The `kvasir` subcommands. Each lives in its own thin file (cmd_<name>.cc) and registers itself
// on the CLI11 app; the callback runs the command and returns the process exit code.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <functional>

namespace kvasir::cli {

using Runner = std::function<int()>;

Runner add_run(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_imatrix(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_template(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_eval(CLI::App& app);
Runner add_convert(CLI::App& app);

// The warning of every command that takes --ctx, when it asks for more than the model was trained
// on (ctx_train 0: the GGUF does not say).
inline void warn_if_past_trained_context(int64_t ctx, int64_t ctx_train) {
  if (ctx_train > 0 && ctx > ctx_train)
    fmt::print(stderr,
               "warning: --ctx {} is beyond the model's training context of {} tokens; output "
               "quality there is not guaranteed\n",
               ctx, ctx_train);
}

}  // namespace kvasir::cli
