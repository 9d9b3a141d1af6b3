// Reads the real GGUF files in the shared test data: the stories260K model and the vocab files.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "gguf_test_util.h"
#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "test_util/paths.h"

namespace kvasir::gguf {
namespace {

using test_util::models_dir;
using test_util::stories260k_path;

TEST(GGUFReader, Stories260KHeaderAndMetadata) {
  GGUFFile f(stories260k_path());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);

  std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").size(), 512u);
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), 512u);

  // Metadata keeps file order and the index agrees with it.
  ASSERT_FALSE(f.metadata().empty());
  for (const auto& [key, v] : f.metadata()) EXPECT_EQ(f.find(key), &v) << key;
  EXPECT_EQ(f.find("no.such.key"), nullptr);
  EXPECT_EQ(f.get_int("no.such.key", 7), 7);
  EXPECT_EQ(f.get_string("no.such.key", "x"), "x");
}

TEST(GGUFReader, Stories260KTensors) {
  GGUFFile f(stories260k_path());
  const TensorInfo& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.type, DType::F32);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb.n_elements(), 64 * 512);
  EXPECT_EQ(emb.nbytes, 64u * 512u * 4u);
  const auto* first = reinterpret_cast<const float*>(emb.data);
  ASSERT_NE(first, nullptr);
  float v0;
  std::memcpy(&v0, first, 4);
  EXPECT_TRUE(std::isfinite(v0));

  // Five blocks with GQA: K/V project 64 -> 4 heads * 8 dims.
  for (int l = 0; l < 5; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(f.tensor(p + "attn_q.weight").shape, (std::vector<int64_t>{64, 64}));
    EXPECT_EQ(f.tensor(p + "attn_k.weight").shape, (std::vector<int64_t>{64, 32}));
    EXPECT_EQ(f.tensor(p + "attn_v.weight").shape, (std::vector<int64_t>{64, 32}));
    EXPECT_EQ(f.tensor(p + "ffn_gate.weight").shape, (std::vector<int64_t>{64, 172}));
    EXPECT_EQ(f.tensor(p + "ffn_down.weight").shape, (std::vector<int64_t>{172, 64}));
    EXPECT_EQ(f.tensor(p + "attn_norm.weight").shape, (std::vector<int64_t>{64}));
  }
  EXPECT_EQ(f.find_tensor("blk.5.attn_q.weight"), nullptr);

  // Every tensor lies inside the file, aligned, and they do not overlap.
  uint64_t total = 0;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_EQ(t.data, emb.data - emb.offset + t.offset) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.file_size()) << t.name;
    EXPECT_EQ(t.nbytes, static_cast<uint64_t>(t.n_elements()) * 4) << t.name;
    total += t.nbytes;
  }
  EXPECT_LE(f.data_offset() + total, f.file_size());

  try {
    f.tensor("nope.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), stories260k_path() + ": missing tensor 'nope.weight'");
  }
}

TEST(GGUFReader, TypedGetterErrorsNameFileAndKey) {
  GGUFFile f(stories260k_path());
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { f.get_int("general.architecture"); }),
            stories260k_path() +
                ": metadata key 'general.architecture' has type string, expected "
                "an integer");
  EXPECT_EQ(
      message([&] { f.get_string("llama.block_count"); }),
      stories260k_path() + ": metadata key 'llama.block_count' has type uint32, expected string");
  EXPECT_EQ(message([&] { f.get_string("missing.key"); }),
            stories260k_path() + ": missing metadata key 'missing.key'");
  EXPECT_EQ(message([&] { f.get_string_array("tokenizer.ggml.scores"); }),
            stories260k_path() +
                ": metadata key 'tokenizer.ggml.scores' has type array[float32], "
                "expected array[string]");
  EXPECT_EQ(
      message([&] { f.get_bool("general.architecture", false); }),
      stories260k_path() + ": metadata key 'general.architecture' has type string, expected bool");
  EXPECT_NE(message([&] { f.get_int_array("tokenizer.ggml.tokens"); }).find("expected an array of"),
            std::string::npos);
}

TEST(GGUFReader, OpenErrorsNameThePath) {
  std::string p = models_dir() + "/does-not-exist.gguf";
  try {
    GGUFFile f(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

struct VocabCase {
  const char* file;
  const char* model;
};

TEST(GGUFReader, VocabFilesParse) {
  const VocabCase cases[] = {
      {"ggml-vocab-llama-spm", "llama"},   {"ggml-vocab-phi-3", "llama"},
      {"ggml-vocab-baichuan", "llama"},    {"ggml-vocab-gpt-2", "gpt2"},
      {"ggml-vocab-falcon", "gpt2"},       {"ggml-vocab-mpt", "gpt2"},
      {"ggml-vocab-gpt-neox", "gpt2"},     {"ggml-vocab-starcoder", "gpt2"},
      {"ggml-vocab-refact", "gpt2"},       {"ggml-vocab-deepseek-coder", "gpt2"},
      {"ggml-vocab-deepseek-llm", "gpt2"}, {"ggml-vocab-bert-bge", "bert"},
  };
  for (const auto& c : cases) {
    std::string p = models_dir() + "/vocab/" + c.file + ".gguf";
    SCOPED_TRACE(p);
    auto t0 = std::chrono::steady_clock::now();
    GGUFFile f(p);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), c.model);
    std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
    EXPECT_GT(tokens.size(), 1000u);
    // Linear-time parsing: even ~100k-token vocabularies take milliseconds. The bound is
    // loose (shared, loaded 2-core machine) but catches quadratic behaviour.
    EXPECT_LT(secs, 2.0);
    if (std::string(c.model) == "gpt2") {
      EXPECT_FALSE(f.get_string_array("tokenizer.ggml.merges").empty());
    }
    // Display form works on every value.
    for (const auto& [key, v] : f.metadata()) EXPECT_FALSE(v.to_display().empty()) << key;
  }
}

}  // namespace
}  // namespace kvasir::gguf
