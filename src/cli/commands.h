// The `kvasir` subcommands. Each lives in its own thin file (cmd_<name>.cc) and registers itself
// on the CLI11 app; the callback runs the command and returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace kvasir::cli {

using Runner = std::function<int()>;

Runner add_run(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_template(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_serve(CLI::App& app);

}  // namespace kvasir::cli
