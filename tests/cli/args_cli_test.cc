// How `kvasir` reads its command line: llama.cpp / vLLM habits (multi-letter single-dash flags,
// positional models, their option names) get either the same meaning or an error that names the
// flag; unknown commands and options are named; usage errors exit with status 2; every option
// also comes from KVASIR_* variables and --config files, the command line beating the
// environment beating the file; --version says what was built.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

TEST(CliArgs, LlamaCppShortFlagsAreNamedWithAHint) {
  const std::string m = "run -m " + q(stories()) + " ";
  // CLI11 alone read -fa as "-f a" (a prompt file called a).
  Result r = kvasir(m + "-fa -p hi");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "-fa/--flash-attn: attention is always flash-style here; drop the flag"))
      << r.err;
  EXPECT_FALSE(has(r.err, "prompt file")) << r.err;
  // ... -ngl 99 as "-n gl".
  r = kvasir(m + "-ngl 99 -p hi");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "-ngl/--n-gpu-layers: no GPU offload in this build (CPU only)")) << r.err;
  EXPECT_FALSE(has(r.err, "Could not convert")) << r.err;
  r = kvasir(m + "--n-gpu-layers 99 -p hi");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "no GPU offload")) << r.err;
  // ... and -hf x as "-h -f x": the help, and exit status 0.
  r = kvasir("run -hf ggml-org/gemma-3-1b-it-GGUF");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "-hf: downloading from Hugging Face is not supported; pass -m PATH"))
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // The serving ones.
  for (const char* flag : {"-np 4", "-cb", "-ctkd f16", "-fa on", "-ub 512"}) {
    r = kvasir("serve -m " + q(stories()) + " " + flag);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.err;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_TRUE(has(r.err, name)) << flag << ": " << r.err;
  }
}

TEST(CliArgs, NoShortFlagGroupingOnlyANumberMayBeAttached) {
  // -qp would be -q -p to CLI11; here a single dash takes one letter, so it is named.
  Result r = kvasir("run -m " + q(stories()) + " -qp hi");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "unknown option '-qp'")) << r.err;
  // "-ctx" names the long option it looks like.
  r = kvasir("run -m " + q(stories()) + " -ctx 64 -p hi");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "did you mean --ctx?")) << r.err;
  // A number attached to a one-letter option still works.
  r = kvasir("run -m " + q(stories()) + " -p '' -n8 --temp 0 -q");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
}

TEST(CliArgs, UnknownCommandsAndOptionsAreNamed) {
  Result r = kvasir("foo");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "unknown command 'foo'")) << r.err;
  for (const char* c : {"run", "serve", "quantize", "perplexity", "plan", "bench"})
    EXPECT_TRUE(has(r.err, c)) << r.err;
  r = kvasir("serv");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "did you mean 'serve'?")) << r.err;
  r = kvasir("--bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "unknown option '--bogus'")) << r.err;
  EXPECT_FALSE(has(r.err, "A subcommand is required")) << r.err;
  r = kvasir("");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "serve")) << r.err;
  r = kvasir("run -m " + q(stories()) + " --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "unknown option '--bogus' for 'kvasir run'")) << r.err;
  r = kvasir("run -m " + q(stories()) + " --temprature 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "did you mean --temperature?")) << r.err;
}

TEST(CliArgs, UsageErrorsExitWithStatus2) {
  Result r = kvasir("run -p hi");  // no model
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "model")) << r.err;
  r = kvasir("run -m " + q(stories()) + " -p hi -n abc");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "abc")) << r.err;
  EXPECT_TRUE(has(r.err, "kvasir run --help")) << r.err;
  // Help and version are not errors.
  EXPECT_EQ(kvasir("run --help").code, 0);
  EXPECT_EQ(kvasir("help serve").code, 0);
}

TEST(CliArgs, LlamaCppAndVllmSpellingsMeanTheSame) {
  const std::string want = kvasir("run -m " + q(stories()) + " -p '' -n 24 --temp 0 -c 64 -q").out;
  ASSERT_FALSE(want.empty());
  // Positional model, --predict, --temperature, --ctx-size, --batch-size, -s, --threads.
  Result r = kvasir("run " + q(stories()) +
                    " -p '' --predict 24 --temperature 0 --ctx-size 64 --batch-size 16 -s 3 "
                    "--threads 1 -q");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, want);
  const std::string plan = "plan -m " + q(stories()) + " --memory 128MiB ";
  const std::string a = kvasir(plan + "--ctx 256 --max-seqs 8").out;
  EXPECT_TRUE(has(a, "8 sequences of 256 tokens")) << a;
  EXPECT_EQ(kvasir(plan + "--ctx-size 256 --max-num-seqs 8").out, a);
  EXPECT_EQ(kvasir(plan + "--max-model-len 256 --max-seqs 8").out, a);
}

TEST(CliArgs, EnvironmentAndConfigFileWithCommandLineFirst) {
  const std::string cfg = tmp("plan.toml");
  std::ofstream(cfg) << "# kvasir plan options\n[plan]\nctx = 256\nmax-seqs = 8\nmemory = "
                        "\"128MiB\"\n[serve]\nport = 9999\n";
  const std::string model_env = "KVASIR_MODEL=" + q(stories());
  // The file alone (and the model from the environment).
  Result r = kvasir_in("", model_env, "plan --config " + q(cfg));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "8 sequences of 256 tokens")) << r.out;
  // The environment beats the file ...
  r = kvasir_in("", model_env + " KVASIR_CTX=128 KVASIR_CONFIG=" + q(cfg), "plan");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "8 sequences of 128 tokens")) << r.out;
  // ... and the command line beats both.
  r = kvasir_in("", model_env + " KVASIR_CTX=128", "plan --config " + q(cfg) + " --ctx 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "8 sequences of 64 tokens")) << r.out;
  // Top-level keys (INI style, '_' for '-') apply to the command too.
  const std::string ini = tmp("plan.ini");
  std::ofstream(ini) << "; plan\nctx=128\nmax_seqs=4\nmemory=128MiB\n";
  r = kvasir_in("", model_env, "plan --config " + q(ini));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "4 sequences of 128 tokens")) << r.out;
  // A key that is no option, and a missing file, are usage errors that name them.
  const std::string bad = tmp("bad.toml");
  std::ofstream(bad) << "max-sqes = 3\n";
  r = kvasir_in("", model_env, "plan --config " + q(bad));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "'max-sqes' is not an option of 'kvasir plan'")) << r.err;
  EXPECT_TRUE(has(r.err, "did you mean max-seqs?")) << r.err;
  r = kvasir("plan --config /nonexistent/kvasir.toml");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "/nonexistent/kvasir.toml")) << r.err;
  // A bad value from the environment says where it came from (not the value: it may be a key).
  r = kvasir_in("", model_env + " KVASIR_MAX_SEQS=many", "plan --memory 128MiB");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "KVASIR_MAX_SEQS")) << r.err;
}

TEST(CliArgs, ServeHelpDocumentsTheVariablesAndThePrecedence) {
  Result r = kvasir("serve --help");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s :
       {"KVASIR_PORT", "KVASIR_MODEL", "KVASIR_API_KEY_FILE", "KVASIR_API_KEY", "--config",
        "the command line beats the environment, which beats the "
        "config file"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
}

TEST(CliArgs, VersionSaysWhatWasBuilt) {
  Result r = kvasir("--version");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("kvasir 0.", 0), 0u) << r.out;
  for (const char* s :
       {"\ncommit:   ", "\nbuild:    ", "\ncompiler: ", "\nflags:    -", "\nkernels:  cpu ("})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  EXPECT_FALSE(has(r.out, "threads")) << r.out;  // the ISA, not the probe's thread count
  EXPECT_FALSE(has(r.out, "commit:   \n")) << r.out;
  EXPECT_TRUE(has(r.out, "-ffp-contract=off")) << r.out;  // the project's own compile options
}

}  // namespace
}  // namespace kvasir::cli_test
