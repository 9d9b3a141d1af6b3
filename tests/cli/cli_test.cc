// End-to-end tests of the `kvasir` binary (path in $KVASIR_BIN): the acceptance behaviours of
// run / inspect / tokenize / quantize / perplexity, and clear errors on bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

// The model authors' greedy sample, as published in models/README.md.
std::string published_sample() {
  std::string readme = read_file(models_dir() + "/README.md");
  const std::string marker = "generates (256 tokens) exactly:\n\n```\n";
  auto b = readme.find(marker);
  EXPECT_NE(b, std::string::npos);
  b += marker.size();
  auto e = readme.find("\n```", b);
  return readme.substr(b, e - b);
}

TEST(Cli, RunReproducesThePublishedGreedySample) {
  Result r = kvasir("run -m " + q(stories()) + " -p '' -n 256 --temp 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, published_sample());
  // Timings go to stderr only.
  EXPECT_NE(r.err.find("decode: 256 tokens"), std::string::npos) << r.err;
}

TEST(Cli, RunIsReproducibleForASeed) {
  std::string a =
      "run -m " + q(stories()) + " -p 'Once upon a time' -n 48 --temp 0.9 --top-p 0.95 ";
  Result r1 = kvasir(a + "--seed 7"), r2 = kvasir(a + "--seed 7"), r3 = kvasir(a + "--seed 8");
  ASSERT_EQ(r1.code, 0) << r1.err;
  EXPECT_EQ(r1.out, r2.out);
  EXPECT_NE(r1.out, r3.out);
  EXPECT_FALSE(r1.out.empty());
}

TEST(Cli, RunStopsAtStopString) {
  Result r = kvasir("run -m " + q(stories()) + " -p '' -n 256 --temp 0 --stop 'Lily.'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time, there was a little girl named ");
}

TEST(Cli, InspectShowsArchitectureAndTensors) {
  Result r = kvasir("inspect " + q(stories()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: llama  dim 64  layers 5  heads 8/4"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(r.out.find("64 x 512"), std::string::npos);
  EXPECT_NE(r.out.find("tokenizer.ggml.model"), std::string::npos);
}

TEST(Cli, TokenizeAndDetokenize) {
  Result r = kvasir("tokenize -m " + q(stories()) + " 'Once upon a time'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[403,407,261,378]\n");
  r = kvasir("tokenize -m " + q(stories()) + " --add-special 'Once upon a time'");
  EXPECT_EQ(r.out, "[1,403,407,261,378]\n");
  r = kvasir("tokenize -m " + q(stories()) + " --parse-special '<s>'");
  EXPECT_EQ(r.out.substr(0, 3), "[1]");
  r = kvasir("tokenize -m " + q(stories()) + " '<s>'");
  EXPECT_NE(r.out.substr(0, 3), "[1]") << "special text must not be parsed by default";
  r = kvasir("tokenize -m " + q(stories()) + " --detok '[403,407,261,378]'");
  EXPECT_EQ(r.out, "Once upon a time");
  r = kvasir("tokenize -m " + q(stories()) + " --detok '[403, 99999]'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("99999"), std::string::npos) << r.err;
}

TEST(Cli, QuantizedModelsRunAndShrink) {
  for (const char* t : {"f16", "q8_0", "q4_0"}) {
    std::string out = tmp(std::string("stories-") + t + ".gguf");
    Result r = kvasir("quantize " + q(stories()) + " " + q(out) + " --type " + t);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_LT(std::filesystem::file_size(out), std::filesystem::file_size(stories()));
    Result i = kvasir("inspect " + q(out));
    auto at = i.out.find("  blk.0.attn_q.weight ");
    ASSERT_NE(at, std::string::npos) << i.out;
    std::string line = i.out.substr(at, i.out.find('\n', at) - at);
    EXPECT_NE(line.find(std::string(" ") + t + " "), std::string::npos) << line;
    Result g = kvasir("run -m " + q(out) + " -p '' -n 32 --temp 0");
    ASSERT_EQ(g.code, 0) << g.err;
    EXPECT_EQ(g.out.substr(0, 20), "Once upon a time, th") << t;
  }
}

TEST(Cli, PerplexityJson) {
  Result r =
      kvasir("perplexity -m " + q(stories()) + " -f " +
             q(test_util::text_dir() + "/tinystories-eval.txt") + " --ctx 128 --chunks 8 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].get<int>(), 8 * (128 / 2 - 1));
  // stories260K is a real model on in-domain text: a few nats of uncertainty, far from the
  // uniform 512.
  EXPECT_GT(j["ppl"].get<double>(), 2.0);
  EXPECT_LT(j["ppl"].get<double>(), 10.0);
}

// bench spec with the engine's low-acceptance fallback on (--spec-warn-acceptance) measures
// what is left of plain speed: with every proposal wrong the engine stops proposing after its
// window (64 proposals) and probes rarely, where without the fallback it proposes every step.
TEST(Cli, BenchSpecMeasuresTheLowAcceptanceFallback) {
  const std::string cmd = "bench spec -m " + q(stories()) +
                          " --spec-k 4 -n 400 --reps 1 --passes 1 --replay-corrupt 1 -t 1 --json";
  Result off = kvasir(cmd);
  ASSERT_EQ(off.code, 0) << off.err;
  Result on = kvasir(cmd + " --spec-warn-acceptance 0.6");
  ASSERT_EQ(on.code, 0) << on.err;
  const auto a = nlohmann::json::parse(off.out), b = nlohmann::json::parse(on.out);
  EXPECT_EQ(a["acceptance"].get<double>(), 0.0);
  // One pass per token; the engine counts a proposal's tokens up to its first rejected one.
  EXPECT_GT(a["judged_per_token"].get<double>(), 0.9) << off.out;
  EXPECT_EQ(b["warn_acceptance"].get<double>(), 0.6);
  // The warm-up run already fell back; the timed run only probes (16 proposals per 512 steps).
  EXPECT_LT(b["judged_per_token"].get<double>(), 0.2) << on.out;
  Result bad = kvasir(cmd + " --spec-warn-acceptance 2");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--spec-warn-acceptance"), std::string::npos) << bad.err;
}

TEST(Cli, ErrorsAreClear) {
  Result r = kvasir("run -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;

  std::string junk = tmp("junk.gguf");
  std::ofstream(junk) << "this is not a gguf file at all";
  r = kvasir("inspect " + q(junk));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("magic"), std::string::npos) << r.err;

  r = kvasir("run -m " + q(stories()) + " -p 'Once upon a time there was' --ctx 4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("prompt has"), std::string::npos) << r.err;

  // Longer than the model's trained context (stories260K: 2048) with no --ctx: refused by name.
  std::string lng;
  for (int i = 0; i < 2100; ++i) lng += " hello";
  r = kvasir("run -m " + q(stories()) + " -p '" + lng + "' -n 4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("llama.context_length"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Asked for explicitly, a longer context runs, with the same warning as plan and serve give.
  r = kvasir("run -m " + q(stories()) + " -p 'Once' -n 4 --ctx 4096");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("beyond the model's training context of 2048"), std::string::npos) << r.err;

  r = kvasir("run -m " + q(stories()) + " -p hi --temp -1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("temperature"), std::string::npos) << r.err;

  r = kvasir("quantize " + q(stories()) + " " + q(tmp("x.gguf")) + " --type q7_9");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("q7_9"), std::string::npos) << r.err;

  r = kvasir("frobnicate");
  EXPECT_NE(r.code, 0);
}

}  // namespace
}  // namespace kvasir::cli_test
