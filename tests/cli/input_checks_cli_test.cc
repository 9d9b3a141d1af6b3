// Inputs are checked before any work, and wrong ones are refused by name: serve's key and
// template files before the memory plan, perplexity's text file before it is scored as text,
// synth's vocabulary before a model without a tokenizer is written, quantize's already quantized
// weights before they are quantized twice.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

TEST(CliInputs, ServeChecksItsFilesBeforeLoadingOrPlanning) {
  const std::string serve = "serve -m " + q(stories()) + " --memory 256MiB --port 0 ";
  Result r = kvasir(serve + "--api-key-file /nonexistent/keys.txt");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "/nonexistent/keys.txt")) << r.err;
  EXPECT_FALSE(has(r.err, "KV bytes per token")) << "the plan came before the error:\n" << r.err;

  r = kvasir(serve + "--chat-template /nonexistent/template.jinja");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "/nonexistent/template.jinja")) << r.err;
  EXPECT_TRUE(has(r.err, "chatml")) << r.err;  // the built-in names are listed
  EXPECT_FALSE(has(r.err, "KV bytes per token")) << r.err;

  const std::string broken = tmp("broken.jinja");
  std::ofstream(broken) << "{% for m in messages %}{{ m['content'] }";
  r = kvasir(serve + "--chat-template " + q(broken));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, broken)) << r.err;
  EXPECT_FALSE(has(r.err, "KV bytes per token")) << r.err;

  r = kvasir(serve + "--api-key ''");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "--api-key")) << r.err;
  EXPECT_FALSE(has(r.err, "KV bytes per token")) << r.err;
}

TEST(CliInputs, PerplexityRefusesAFileThatIsNotText) {
  const std::string ppl = "perplexity -m " + q(stories()) + " --ctx 128 --chunks 1 -f ";
  Result r = kvasir(ppl + q(stories()));  // the model itself: binary
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, stories())) << r.err;
  EXPECT_TRUE(has(r.err, "not UTF-8 text")) << r.err;
  EXPECT_FALSE(has(r.out, "perplexity:")) << r.out;

  const std::string latin1 = tmp("latin1.txt");
  std::ofstream(latin1, std::ios::binary) << "Once upon a time, caf\xe9 ...";
  r = kvasir(ppl + q(latin1));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "invalid UTF-8")) << r.err;
  EXPECT_TRUE(has(r.err, "at byte 21")) << r.err;

  // UTF-8 text, multi-byte characters included, is fine.
  const std::string utf8 = tmp("utf8.txt");
  {
    std::ofstream out(utf8, std::ios::binary);
    for (int i = 0; i < 40; ++i)
      out << "Once upon a time, Lily saw a caf\xc3\xa9 \xe2\x80\x94 and ran. ";
  }
  r = kvasir(ppl + q(utf8));
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(CliInputs, RunRefusesABinaryPromptFile) {
  Result r = kvasir("run -m " + q(stories()) + " -f " + q(stories()));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "not UTF-8 text")) << r.err;
}

// True when synth's upward search from `dir` would find the SPM vocabulary.
bool shared_vocab_above(const std::filesystem::path& dir) {
  for (std::filesystem::path d = dir; !d.empty(); d = d.parent_path()) {
    std::error_code ec;
    if (std::filesystem::exists(d / "shared" / "models" / "vocab" / "ggml-vocab-llama-spm.gguf",
                                ec))
      return true;
    if (d == d.parent_path()) break;
  }
  return false;
}

// A new, empty folder from which synth's upward search finds no vocabulary; "" when none.
std::string folder_without_shared_vocab_above() {
  std::vector<std::string> bases = {test_util::temp_dir("kvasir-cli"), "/var/tmp", "/dev/shm"};
  if (const char* home = std::getenv("HOME"); home && *home) bases.emplace_back(home);
  for (const std::string& base : bases) {
    std::error_code ec;
    if (!std::filesystem::is_directory(base, ec) || shared_vocab_above(base)) continue;
    std::string tmpl = base + "/kvasir-synth-elsewhere-XXXXXX";
    if (::mkdtemp(tmpl.data())) return tmpl;
  }
  return "";
}

TEST(CliInputs, SynthNeverWritesAModelWithoutATokenizerUnasked) {
  // A copy of the binary in a folder with no shared/models above it, run there with no
  // KVASIR_MODELS: the vocabulary cannot be found, and synth refuses, naming what to pass.
  // Before, it wrote a model without a tokenizer and said nothing. The scratch folder may itself
  // lie below a shared/models (CI keeps shared/ in /tmp), so the first scratch base with none
  // above it is taken.
  const std::string dir = folder_without_shared_vocab_above();
  if (dir.empty())
    GTEST_SKIP() << "every scratch base (the test temp dir, /var/tmp, /dev/shm, $HOME) has a "
                    "shared/models/vocab above it";
  const std::string copy = dir + "/kvasir";
  std::filesystem::copy_file(bin(), copy, std::filesystem::copy_options::overwrite_existing);
  const std::string out = dir + "/m.gguf";
  std::filesystem::remove(out);
  auto synth = [&](const std::string& env, const std::string& args) {
    const std::string o = tmp("synth.out"), e = tmp("synth.err");
    const std::string cmd = "cd '" + dir + "' && env " + env +
                            " ./kvasir synth --shape llama-110m " + "--dtype q4_0 -o m.gguf " +
                            args + " > " + o + " 2> " + e;
    const int rc = std::system(cmd.c_str());
    return Result{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(o), read_file(e)};
  };
  Result r = synth("-u KVASIR_MODELS", "");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "--vocab")) << r.err;
  EXPECT_TRUE(has(r.err, "KVASIR_MODELS")) << r.err;
  EXPECT_TRUE(has(r.err, "--no-vocab")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove(out);

  // KVASIR_MODELS finds it from anywhere.
  r = synth("KVASIR_MODELS=" + q(models_dir()), "");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(kvasir("inspect " + q(out)).out, "tokenizer.ggml.tokens"));
  std::filesystem::remove(out);

  // Without a tokenizer only when asked.
  r = synth("-u KVASIR_MODELS", "--no-vocab");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(has(kvasir("inspect " + q(out)).out, "tokenizer.ggml.tokens"));
  std::filesystem::remove_all(dir);
}

TEST(CliInputs, QuantizeTakesTypesInAnyCaseAndRefusesToRequantize) {
  const std::string q4 = tmp("stories-Q4_0.gguf"), q8 = tmp("stories-requant-q8_0.gguf");
  // llama-quantize's spelling: the type in capitals, as the third argument.
  Result r = kvasir("quantize " + q(stories()) + " " + q(q4) + " Q4_0");
  ASSERT_EQ(r.code, 0) << r.err;
  r = kvasir("quantize " + q(stories()) + " " + q(tmp("stories-F16.gguf")) + " --type F16");
  ASSERT_EQ(r.code, 0) << r.err;

  std::filesystem::remove(q8);
  r = kvasir("quantize " + q(q4) + " " + q(q8) + " --type q8_0");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "already quantized (q4_0)")) << r.err;
  EXPECT_TRUE(has(r.err, "--allow-requantize")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(q8));

  r = kvasir("quantize " + q(q4) + " " + q(q8) + " --type q8_0 --allow-requantize");
  ASSERT_EQ(r.code, 0) << r.err;
  Result g = kvasir("run -m " + q(q8) + " -p '' -n 8 --temp 0 -q");
  EXPECT_EQ(g.code, 0) << g.err;
}

}  // namespace
}  // namespace kvasir::cli_test
