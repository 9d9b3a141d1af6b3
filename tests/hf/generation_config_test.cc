// generation_config.json (hf/generation_config.h): each field typed and range-checked with an
// error naming the file and the field, unknown fields ignored, do_sample false as greedy, the
// GGUF keys the folder's view carries, and every eos_token_id ending generation through the
// view's tokenizer.
#include "kvasir/hf/generation_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "hf_folder_util.h"
#include "kvasir/hf/hf_checkpoint.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::hf {
namespace {

using ::testing::HasSubstr;
using Metadata = std::vector<std::pair<std::string, gguf::Value>>;

const gguf::Value* find(const Metadata& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return &v;
  return nullptr;
}

std::string error_of(const nlohmann::json& j) {
  try {
    parse_generation_config(j, "F/generation_config.json", 100);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GenerationConfig, ReadsEveryFieldAndIgnoresUnknownOnes) {
  const nlohmann::json j = {{"do_sample", true},
                            {"temperature", 0.6},
                            {"top_p", 0.9},
                            {"top_k", 20},
                            {"min_p", 0.05},
                            {"repetition_penalty", 1.1},
                            {"max_new_tokens", 64},
                            {"max_length", 4096},
                            {"eos_token_id", {5, 7, 5}},
                            {"bos_token_id", 1},
                            {"pad_token_id", -1},
                            {"transformers_version", "4.41.2"},
                            {"num_beams", 1},
                            {"_from_model_config", true}};
  const GenerationConfig g = parse_generation_config(j, "F", 100);
  EXPECT_EQ(g.do_sample, true);
  EXPECT_DOUBLE_EQ(*g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(*g.top_p, 0.9);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_DOUBLE_EQ(*g.min_p, 0.05);
  EXPECT_DOUBLE_EQ(*g.repetition_penalty, 1.1);
  EXPECT_EQ(*g.max_new_tokens, 64);
  EXPECT_EQ(*g.max_length, 4096);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{5, 7}));  // duplicates dropped
  EXPECT_EQ(*g.bos_token_id, 1);
  EXPECT_EQ(*g.pad_token_id, -1);

  const Metadata m = generation_metadata(g);
  EXPECT_FLOAT_EQ(static_cast<float>(find(m, "general.sampling.temp")->as_float()), 0.6f);
  EXPECT_EQ(find(m, "general.sampling.top_k")->as_int(), 20);
  EXPECT_FLOAT_EQ(static_cast<float>(find(m, "general.sampling.top_p")->as_float()), 0.9f);
  EXPECT_FLOAT_EQ(static_cast<float>(find(m, "general.sampling.min_p")->as_float()), 0.05f);
  EXPECT_FLOAT_EQ(static_cast<float>(find(m, "general.sampling.penalty_repeat")->as_float()), 1.1f);
  EXPECT_EQ(find(m, "general.sampling.penalty_last_n")->as_int(), -1);
  EXPECT_EQ(find(m, "general.sampling.kvasir.max_tokens")->as_int(), 64);
  const gguf::Value* eog = find(m, "tokenizer.ggml.kvasir.eog_token_ids");
  ASSERT_NE(eog, nullptr);
  ASSERT_EQ(eog->as_array().items.size(), 2u);
  EXPECT_EQ(eog->as_array().items[0].as_int(), 5);
  EXPECT_EQ(eog->as_array().items[1].as_int(), 7);
}

TEST(GenerationConfig, DoSampleFalseIsGreedyAndDropsTheSamplingFields) {
  const nlohmann::json j = {{"do_sample", false}, {"temperature", 0.7},        {"top_p", 0.8},
                            {"top_k", 5},         {"repetition_penalty", 1.2}, {"eos_token_id", 2}};
  const Metadata m = generation_metadata(parse_generation_config(j, "F", 100));
  EXPECT_EQ(find(m, "general.sampling.temp")->as_float(), 0.0);
  EXPECT_EQ(find(m, "general.sampling.top_p"), nullptr);
  EXPECT_EQ(find(m, "general.sampling.top_k"), nullptr);
  // The repetition penalty is a logits processor: greedy decoding applies it too.
  EXPECT_FLOAT_EQ(static_cast<float>(find(m, "general.sampling.penalty_repeat")->as_float()), 1.2f);
  EXPECT_EQ(find(m, "tokenizer.ggml.kvasir.eog_token_ids")->as_array().items.size(), 1u);
}

TEST(GenerationConfig, NullsAndAbsentFieldsGiveNoKeys) {
  const nlohmann::json j = {{"temperature", nullptr}, {"eos_token_id", nullptr}};
  const GenerationConfig g = parse_generation_config(j, "F", 100);
  EXPECT_FALSE(g.temperature);
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_TRUE(generation_metadata(g).empty());
}

TEST(GenerationConfig, TheShippedTinyStoriesFileIsRead) {
  const auto g = read_generation_config(test_util::tinystories656k_dir(), 2048);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(*g->bos_token_id, 1);
  EXPECT_FALSE(g->do_sample);
  const Metadata m = generation_metadata(*g);
  ASSERT_EQ(m.size(), 1u);  // no sampling defaults: only the EOS id
  EXPECT_EQ(m[0].first, "tokenizer.ggml.kvasir.eog_token_ids");
}

TEST(GenerationConfig, ErrorsNameTheFileAndTheField) {
  EXPECT_THAT(error_of(nlohmann::json::array()),
              HasSubstr("F/generation_config.json: expected a JSON object"));
  EXPECT_THAT(error_of({{"do_sample", "yes"}}),
              HasSubstr("F/generation_config.json: field 'do_sample' = \"yes\": expected true or "
                        "false"));
  EXPECT_THAT(error_of({{"temperature", -1}}),
              HasSubstr("field 'temperature' = -1: expected a number >= 0"));
  EXPECT_THAT(error_of({{"temperature", "hot"}}),
              HasSubstr("field 'temperature' = \"hot\": expected a finite number"));
  EXPECT_THAT(error_of({{"top_p", 2}}),
              HasSubstr("field 'top_p' = 2: expected a number in (0, 1]"));
  EXPECT_THAT(error_of({{"min_p", 1.5}}), HasSubstr("field 'min_p' = 1.5: expected a number"));
  EXPECT_THAT(error_of({{"repetition_penalty", 0}}),
              HasSubstr("field 'repetition_penalty' = 0: expected a number > 0"));
  EXPECT_THAT(error_of({{"top_k", -1}}), HasSubstr("field 'top_k' = -1: expected an integer"));
  EXPECT_THAT(error_of({{"top_k", 2.5}}), HasSubstr("field 'top_k' = 2.5: expected an integer"));
  EXPECT_THAT(error_of({{"max_new_tokens", 0}}),
              HasSubstr("field 'max_new_tokens' = 0: expected an integer in 1 .."));
  EXPECT_THAT(error_of({{"max_length", "long"}}), HasSubstr("field 'max_length'"));
  EXPECT_THAT(error_of({{"bos_token_id", 100}}),
              HasSubstr("field 'bos_token_id' = 100: expected an integer in 0 .. 99"));
  EXPECT_THAT(error_of({{"eos_token_id", {2, 100}}}),
              HasSubstr("F/generation_config.json: field 'eos_token_id' = [2,100]: expected a "
                        "token id in 0 .. 99 or a list of them"));
  EXPECT_THAT(error_of({{"eos_token_id", "</s>"}}), HasSubstr("field 'eos_token_id' = \"</s>\""));
  EXPECT_THAT(error_of({{"eos_token_id", -1}}), HasSubstr("field 'eos_token_id' = -1"));
}

TEST(GenerationConfig, ReadFromAFolderWithABrokenFileNamesIt) {
  const std::string dir = test_util::temp_dir() + "/gen-broken";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/generation_config.json") << "{\"top_k\": ";
  try {
    read_generation_config(dir, 100);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir + "/generation_config.json: not valid JSON"));
  }
  EXPECT_FALSE(read_generation_config(test_util::temp_dir() + "/no-such-folder", 100));
}

// The folder's view carries every eos_token_id, and the tokenizer read from it stops on each.
TEST(GenerationConfig, EveryEosIdEndsGenerationThroughTheView) {
  const std::string dir = test_util::temp_dir() + "/gen-view";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(test_util::tinystories656k_dir(), dir,
                        std::filesystem::copy_options::recursive);
  std::ofstream(dir + "/generation_config.json")
      << R"({"eos_token_id": [2, 303, 17], "do_sample": false})";
  const auto file = open_hf_folder(dir);
  EXPECT_EQ(file->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(file->get_float("general.sampling.temp"), 0.0);
  const Tokenizer tok = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_TRUE(tok.is_eog(303));
  EXPECT_TRUE(tok.is_eog(17));
  EXPECT_FALSE(tok.is_eog(304));
  EXPECT_TRUE(std::is_sorted(tok.eog_ids().begin(), tok.eog_ids().end()));

  const Tokenizer plain = Tokenizer::from_gguf(*open_hf_folder(test_util::tinystories656k_dir()));
  EXPECT_TRUE(plain.is_eog(2));
  EXPECT_FALSE(plain.is_eog(303));
}

// A key of the wrong shape in a GGUF is an error naming it.
TEST(GenerationConfig, TheEogKeyIsChecked) {
  const auto file = open_hf_folder(test_util::tinystories656k_dir());
  Metadata kv = file->metadata();
  kv.emplace_back("tokenizer.ggml.kvasir.eog_token_ids",
                  gguf::Value::array(gguf::ValueType::UINT32, {gguf::Value::u32(99999)}));
  try {
    Tokenizer::from_metadata(kv, "X.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("X.gguf: 'tokenizer.ggml.kvasir.eog_token_ids' holds 99999: "
                                    "expected token ids in 0 .. "));
  }
  kv.back().second = gguf::Value::u32(3);
  try {
    Tokenizer::from_metadata(kv, "X.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected an array of token ids"));
  }
}

}  // namespace
}  // namespace kvasir::hf
