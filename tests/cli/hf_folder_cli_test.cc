// The commands on a Hugging Face folder (../shared/models/tinystories-656k): run it directly,
// inspect it, convert it to GGUF (as stored and quantized) and run the result.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

std::string folder() {
  return models_dir() + "/tinystories-656k";
}

const char* kStart = "Once upon a time, there was a little girl named Lily. She had a toy car";

TEST(CliHfFolder, RunsDirectlyWithItsGreedyContinuation) {
  Result r = kvasir("run -m " + q(folder()) + " -p '' -n 40 --temp 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(kStart, 0), 0u) << r.out;
  // A prompt is tokenized with the folder's tokenizer.json; the continuation follows it.
  r = kvasir("run -m " + q(folder()) + " -p 'Once upon a time' -n 12 --temp 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(",", 0), 0u) << r.out;
}

TEST(CliHfFolder, InspectShowsShardsStoredTensorsAndTheGgufView) {
  Result r = kvasir("inspect " + q(folder()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "(Hugging Face model, 1 safetensors shard")) << r.out;
  EXPECT_TRUE(has(r.out, "model.layers.0.self_attn.q_proj.weight")) << r.out;
  EXPECT_TRUE(has(r.out, "[128, 128]")) << r.out;
  EXPECT_TRUE(has(r.out, "blk.0.attn_q.weight")) << r.out;
  EXPECT_TRUE(has(r.out, "architecture: llama  dim 128  layers 2  heads 8/4")) << r.out;
}

TEST(CliHfFolder, ConvertedFileRunsTheSame) {
  const std::string out = tmp("ts656k.gguf"), q8 = tmp("ts656k-q8_0.gguf");
  Result c = kvasir("convert " + q(folder()) + " " + q(out) + " -q");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(has(c.err, "as f32 (as stored)")) << c.err;
  Result a = kvasir("run -m " + q(folder()) + " -p '' -n 60 --temp 0");
  Result b = kvasir("run -m " + q(out) + " -p '' -n 60 --temp 0");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  c = kvasir("convert " + q(folder()) + " " + q(q8) + " --type q8_0");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(has(c.out, "q8_0")) << c.out;  // the per-tensor table
  EXPECT_LT(std::filesystem::file_size(q8), std::filesystem::file_size(out) / 2);
  Result r = kvasir("run -m " + q(q8) + " -p '' -n 20 --temp 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
}

TEST(CliHfFolder, ErrorsAreClear) {
  const std::string empty = tmp("not-a-model");
  std::filesystem::create_directories(empty);
  Result r = kvasir("run -m " + q(empty) + " -p hi");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has(r.err, "a folder without config.json")) << r.err;
  r = kvasir("convert " + q(empty) + " " + q(tmp("x.gguf")));
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has(r.err, "not a Hugging Face model folder")) << r.err;
  r = kvasir("convert " + q(folder()) + " " + q(tmp("y.gguf")) + " --type q9_9");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(has(r.err, "unknown or unwritable type 'q9_9'")) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
