// config.json read into GGUF metadata (hf/hf_config.h): what each supported architecture maps
// to, Llama-3 RoPE scaling as the converter's rope_freqs tensor (checked against the model's own
// llama3 scaling formula), and a named error for each field a folder can get wrong.
#include "kvasir/hf/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hf_folder_util.h"
#include "kvasir/model/config.h"
#include "kvasir/util/error.h"

namespace kvasir::hf {
namespace {

using ::testing::HasSubstr;

std::string config_folder(const std::string& name, const nlohmann::json& cfg,
                          const nlohmann::json& gen = nullptr) {
  const std::string dir = test_util::temp_dir() + "/cfg-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << cfg.dump();
  if (!gen.is_null()) std::ofstream(dir + "/generation_config.json") << gen.dump();
  return dir;
}

nlohmann::json base() {
  return test_util::tiny_hf_config({});
}

std::string error_of(const nlohmann::json& cfg) {
  try {
    read_hf_config(config_folder("err", cfg));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const gguf::Value* find(const HfConfig& c, std::string_view key) {
  for (const auto& [k, v] : c.metadata)
    if (k == key) return &v;
  return nullptr;
}

TEST(HfConfig, TinyStoriesConfig) {
  const HfConfig c = read_hf_config(test_util::tinystories656k_dir());
  EXPECT_EQ(c.gguf_arch, "llama");
  EXPECT_TRUE(c.permute_qk);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(find(c, "general.name")->as_string(), "tinystories-656k");
  EXPECT_EQ(find(c, "llama.rope.dimension_count")->as_int(), 16);
  EXPECT_EQ(find(c, "llama.attention.key_length"), nullptr);  // the default
  EXPECT_EQ(c.eos_id, 2);
}

TEST(HfConfig, MistralIsLlamaAndQwen2KeepsItsRowsAndBiases) {
  nlohmann::json m = base();
  m["architectures"] = {"MistralForCausalLM"};
  m["sliding_window"] = nullptr;
  HfConfig c = read_hf_config(config_folder("mistral", m));
  EXPECT_EQ(c.gguf_arch, "llama");
  EXPECT_TRUE(c.permute_qk);
  nlohmann::json q = base();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q["use_sliding_window"] = false;
  q["sliding_window"] = 64;
  c = read_hf_config(config_folder("qwen2", q));
  EXPECT_EQ(c.gguf_arch, "qwen2");
  EXPECT_FALSE(c.permute_qk);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_NE(find(c, "qwen2.embedding_length"), nullptr);
}

TEST(HfConfig, ExplicitHeadDimIsWritten) {
  nlohmann::json j = base();
  j["head_dim"] = 4;
  const HfConfig c = read_hf_config(config_folder("head-dim", j));
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(find(c, "llama.attention.key_length")->as_int(), 4);
}

TEST(HfConfig, LinearRopeScaling) {
  nlohmann::json j = base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  const HfConfig c = read_hf_config(config_folder("linear", j));
  EXPECT_EQ(find(c, "llama.rope.scaling.type")->as_string(), "linear");
  EXPECT_EQ(find(c, "llama.rope.scaling.factor")->as_float(), 4.0);
}

// The converter's rope_freqs divisors give the frequencies of the model's own Llama-3.1 scaling
// (config.h rope_inv_freq with rope_scaling "llama3"): both compute 2*pi/freq against the same
// wavelength thresholds. Tolerance: the converter computes the base frequencies in float32 from
// base ** (i/dim), we by repeated float products (llama.cpp's theta_scale loop); the two differ
// by a few float ulps, 1e-5 relative covers that with room.
TEST(HfConfig, Llama3RopeScalingBecomesTheRopeFreqsTensor) {
  nlohmann::json j = base();
  j["hidden_size"] = 256;
  j["num_attention_heads"] = 2;  // head_dim 128, as Llama 3.1
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const HfConfig c = read_hf_config(config_folder("llama3", j));
  ASSERT_EQ(c.rope_freqs.size(), 64u);
  EXPECT_EQ(find(c, "llama.rope.scaling.type"), nullptr);
  ModelConfig plain;
  plain.rope_dim = 128;
  plain.rope_base = 500000.0f;
  ModelConfig scaled = plain;
  scaled.rope_scaling = "llama3";
  scaled.rope_scale_factor = 8;
  scaled.rope_low_freq_factor = 1;
  scaled.rope_high_freq_factor = 4;
  scaled.rope_orig_ctx = 8192;
  const auto base_f = rope_inv_freq(plain), want = rope_inv_freq(scaled);
  int scaled_count = 0;
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_NEAR(base_f[i] / c.rope_freqs[i], want[i], 1e-5 * want[i]) << i;
    scaled_count += c.rope_freqs[i] != 1.0f;
  }
  EXPECT_GT(scaled_count, 10);  // the test exercises the scaled and the smooth ranges
}

TEST(HfConfig, GenerationConfigGivesSamplingAndTheFirstEos) {
  const nlohmann::json gen = {{"do_sample", true},
                              {"temperature", 0.6},
                              {"top_p", 0.9},
                              {"top_k", 20},
                              {"eos_token_id", {5, 7}}};
  const HfConfig c = read_hf_config(config_folder("gen", base(), gen));
  EXPECT_FLOAT_EQ(static_cast<float>(find(c, "general.sampling.temp")->as_float()), 0.6f);
  EXPECT_FLOAT_EQ(static_cast<float>(find(c, "general.sampling.top_p")->as_float()), 0.9f);
  EXPECT_EQ(find(c, "general.sampling.top_k")->as_int(), 20);
  EXPECT_EQ(c.eos_id, 5);
}

TEST(HfConfig, ErrorsNameTheFileAndTheField) {
  nlohmann::json j = base();
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_THAT(error_of(j), HasSubstr("config.json: architecture 'GPT2LMHeadModel' is not "
                                     "supported (supported: LlamaForCausalLM"));
  j = base();
  j.erase("hidden_size");
  EXPECT_THAT(error_of(j), HasSubstr("config.json: missing field 'hidden_size'"));
  j = base();
  j["num_attention_heads"] = -2;
  EXPECT_THAT(error_of(j), HasSubstr("field 'num_attention_heads' = -2: expected an integer"));
  j = base();
  j["num_key_value_heads"] = 3;
  j["num_attention_heads"] = 4;
  EXPECT_THAT(error_of(j), HasSubstr("is not a multiple of num_key_value_heads 3"));
  j = base();
  j["intermediate_size"] = 3.5;
  EXPECT_THAT(error_of(j), HasSubstr("field 'intermediate_size' = 3.5"));
  j = base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(error_of(j), HasSubstr("rope_type 'yarn' is not supported"));
  j = base();
  j["hidden_act"] = "gelu";
  EXPECT_THAT(error_of(j), HasSubstr("field 'hidden_act' = \"gelu\""));
  j = base();
  j["attention_bias"] = true;
  EXPECT_THAT(error_of(j), HasSubstr("field 'attention_bias' = true is not supported"));
  j = base();
  j["sliding_window"] = 128;
  EXPECT_THAT(error_of(j), HasSubstr("sliding window attention is not supported"));
  j = base();
  j["rms_norm_eps"] = "small";
  EXPECT_THAT(error_of(j), HasSubstr("field 'rms_norm_eps' = \"small\": expected a finite number"));
  const std::string bad = test_util::temp_dir() + "/cfg-badjson";
  std::filesystem::create_directories(bad);
  std::ofstream(bad + "/config.json") << "{\"hidden_size\": 12,";
  try {
    read_hf_config(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("config.json: not valid JSON"));
  }
}

}  // namespace
}  // namespace kvasir::hf
