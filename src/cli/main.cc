// kvasir: one binary, git-style subcommands. Errors at the edges are printed as one line on
// stderr with exit status 1; usage errors (an unknown command or option, a llama.cpp-only flag,
// a bad value for an option, a bad config file) name what was wrong and exit with status 2.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/kernels/backend.h"
#include "kvasir/util/build_info.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"

namespace {

// `kvasir --version`: the build facts, and the kernels' instruction set chosen on this machine.
std::string version_text() {
  const kvasir::BuildInfo& b = kvasir::build_info();
  std::string isa;
  try {
    kvasir::ThreadPool pool(1);
    isa = kvasir::make_backend(kvasir::BackendKind::kCpu, pool)->description();
    // "cpu (AVX2, 1 threads)": the thread count is this probe's, not a setting; drop it.
    if (size_t comma = isa.find(", "); comma != std::string::npos && isa.back() == ')')
      isa = isa.substr(0, comma) + ")";
  } catch (const std::exception& e) {
    isa = std::string("unavailable: ") + e.what();
  }
  return fmt::format(
      "kvasir {}\ncommit:   {}\nbuild:    {}\ncompiler: {}\nflags:    {}\nkernels:  {}, chosen at "
      "run time",
      b.version, b.commit, b.build_type, b.compiler, b.build_flags, isa);
}

int usage_error(const std::string& command, const std::string& msg) {
  const std::string who = command.empty() ? "kvasir" : "kvasir " + command;
  fmt::print(stderr, "{}: error: {}\n", who, msg);
  if (msg.empty() || msg.back() != '\n')
    fmt::print(stderr, "Run '{} --help' for the options.\n", who);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvasir — LLM inference engine (version " KVASIR_VERSION ")", "kvasir"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(version_text));
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
  reg(kvasir::cli::add_convert);
  reg(kvasir::cli::add_perplexity);
  reg(kvasir::cli::add_imatrix);
  reg(kvasir::cli::add_synth);
  reg(kvasir::cli::add_template);
  reg(kvasir::cli::add_bench);
  reg(kvasir::cli::add_plan);
  reg(kvasir::cli::add_serve);
  reg(kvasir::cli::add_eval);
  kvasir::cli::add_env_and_config(app);

  kvasir::cli::PreparedArgs prepared;
  try {
    prepared = kvasir::cli::prepare_args(app, argc, argv);
  } catch (const kvasir::cli::UsageError& e) {
    return usage_error(e.command(), e.what());
  }
  try {
    std::vector<std::string> reversed(prepared.args.rbegin(), prepared.args.rend());
    app.parse(reversed);  // CLI11 takes the arguments last first
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string msg = e.what();
    if (!prepared.from_env.empty())
      msg += fmt::format(" (options from the environment: {})", fmt::join(prepared.from_env, ", "));
    if (!prepared.config_file.empty())
      msg += fmt::format(" (options from --config {})", prepared.config_file);
    return usage_error(prepared.command, msg);
  }
  try {
    for (auto& [sub, run] : cmds)
      if (sub->parsed()) return run();
  } catch (const kvasir::cli::UsageError& e) {
    return usage_error(e.command().empty() ? prepared.command : e.command(), e.what());
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "kvasir: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvasir: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
