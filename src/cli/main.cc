// kvasir: one binary, git-style subcommands. Errors at the edges are printed as one line on
// stderr with exit code 1; usage errors with CLI11's message and exit code 2.
#include <cstdio>
#include <utility>
#include <vector>

#include "commands.h"
#include "kvasir/util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kvasir — LLM inference engine (version " KVASIR_VERSION ")", "kvasir"};
  app.require_subcommand(1);
  app.set_version_flag("--version", KVASIR_VERSION);
  std::vector<std::pair<CLI::App*, kvasir::cli::Runner>> cmds;
  auto reg = [&](kvasir::cli::Runner (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    kvasir::cli::Runner r = add(app);
    cmds.emplace_back(app.get_subcommands({})[before], std::move(r));
  };
  reg(kvasir::cli::add_run);
  reg(kvasir::cli::add_inspect);
  reg(kvasir::cli::add_tokenize);
  reg(kvasir::cli::add_quantize);
  reg(kvasir::cli::add_perplexity);
  reg(kvasir::cli::add_synth);
  reg(kvasir::cli::add_template);
  reg(kvasir::cli::add_bench);
  reg(kvasir::cli::add_plan);
  reg(kvasir::cli::add_serve);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : cmds)
      if (sub->parsed()) return run();
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "kvasir: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvasir: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
