// --generation-config on `kvasir run`: a copy of the tinystories-656k folder whose
// generation_config.json says do_sample false, temperature 0 and an extra eos id. Without --temp
// the run is greedy and stops at the extra id; --generation-config none gives the built-in
// defaults (the same seeded text as the shipped folder, which has no sampling defaults); a flag
// the user gives wins over the file; `kvasir convert` carries the defaults into the GGUF, whose
// general.sampling.* keys `kvasir run` then applies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

const std::string kPrompt = "-p 'Once upon a time' -n 20";

std::string shipped() {
  return models_dir() + "/tinystories-656k";
}

// The shipped folder with generation_config.json replaced by `gen`.
std::string folder_with(const std::string& name, const std::string& gen) {
  const std::string dir = tmp(name);
  std::filesystem::remove_all(dir);
  std::filesystem::copy(shipped(), dir, std::filesystem::copy_options::recursive);
  std::ofstream(dir + "/generation_config.json") << gen;
  return dir;
}

// Token 303 is "Lily " in this vocabulary: the greedy text reads ", a little girl named Lily ...".
const char* kGreedyWithExtraEos =
    R"({"_from_model_config": true, "bos_token_id": 1, "do_sample": false, "temperature": 0,
        "eos_token_id": [2, 303], "transformers_version": "4.41.2"})";

TEST(GenerationConfigCli, RunIsGreedyAndStopsAtTheExtraEosId) {
  const std::string dir = folder_with("gen-greedy", kGreedyWithExtraEos);
  const Result greedy = kvasir("run " + q(shipped()) + " " + kPrompt + " --temp 0");
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  ASSERT_TRUE(has(greedy.out, ", a little girl named Lily")) << greedy.out;

  // Two different seeds: both greedy, both cut where token 303 would come.
  for (const char* seed : {"1", "2"}) {
    const Result r = kvasir("run " + q(dir) + " " + kPrompt + " -s " + seed);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, ", a little girl named ");
    EXPECT_TRUE(has(r.err, "stop: eos")) << r.err;
    EXPECT_TRUE(
        has(r.err, "generation defaults from " + dir + "/generation_config.json: temperature 0"))
        << r.err;
  }
  // With --ignore-eos the greedy text goes on past it, as the shipped folder's.
  const Result past = kvasir("run " + q(dir) + " " + kPrompt + " --ignore-eos");
  ASSERT_EQ(past.code, 0) << past.err;
  EXPECT_EQ(past.out, greedy.out);
}

TEST(GenerationConfigCli, NoneRestoresTheBuiltInDefaults) {
  const std::string dir = folder_with("gen-none", kGreedyWithExtraEos);
  const Result builtin = kvasir("run " + q(shipped()) + " " + kPrompt + " -s 1");
  ASSERT_EQ(builtin.code, 0) << builtin.err;
  EXPECT_TRUE(has(builtin.err, "generation defaults: built-in (none in ")) << builtin.err;
  const Result none =
      kvasir("run " + q(dir) + " " + kPrompt + " -s 1 --ignore-eos --generation-config none");
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(none.out, builtin.out);
  EXPECT_TRUE(has(none.err, "generation defaults: built-in (--generation-config none)"))
      << none.err;
  const Result bad = kvasir("run " + q(dir) + " " + kPrompt + " --generation-config vllm");
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad.err, "--generation-config")) << bad.err;
}

TEST(GenerationConfigCli, AFlagTheUserGivesWins) {
  const std::string dir =
      folder_with("gen-flag", R"({"do_sample": false, "eos_token_id": 2, "max_new_tokens": 5})");
  const Result sampled = kvasir("run " + q(dir) + " -p 'Once upon a time' -s 1 --temp 0.8");
  const Result builtin = kvasir("run " + q(shipped()) + " -p 'Once upon a time' -s 1 -n 5");
  ASSERT_EQ(sampled.code, 0) << sampled.err;
  ASSERT_EQ(builtin.code, 0) << builtin.err;
  EXPECT_EQ(sampled.out, builtin.out);  // max_new_tokens 5 gave -n; --temp its own value
  EXPECT_TRUE(has(sampled.err, "decode: 5 tokens")) << sampled.err;
  const Result more = kvasir("run " + q(dir) + " -p 'Once upon a time' -n 20 --ignore-eos");
  EXPECT_TRUE(has(more.err, "decode: 20 tokens")) << more.err;
}

TEST(GenerationConfigCli, ConvertCarriesTheDefaultsIntoTheGguf) {
  const std::string dir = folder_with("gen-convert", kGreedyWithExtraEos);
  const std::string gguf = tmp("gen-convert.gguf");
  const Result c = kvasir("convert " + q(dir) + " " + q(gguf));
  ASSERT_EQ(c.code, 0) << c.err;
  const Result r = kvasir("run " + q(gguf) + " " + kPrompt + " -s 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ", a little girl named ");
  EXPECT_TRUE(
      has(r.err, "generation defaults from " + gguf + " (general.sampling.*): temperature 0"))
      << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
