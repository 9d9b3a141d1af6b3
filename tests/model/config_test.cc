// Hyperparameters from GGUF metadata (read_model_config): every integer is range-checked before
// it is narrowed to int and every float must be finite and positive, with errors naming the file,
// the key and the value. The files are crafted with the project's GGUF writer (metadata only:
// read_model_config needs no tensors).
#include "kvasir/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"

namespace kvasir {
namespace {

using gguf::Value;

// A valid small llama: dim 64, 4 heads of 16, 2 layers.
gguf::GGUFWriter base() {
  gguf::GGUFWriter w;
  w.set("general.architecture", Value::str("llama"));
  w.set("llama.embedding_length", Value::u32(64));
  w.set("llama.block_count", Value::u32(2));
  w.set("llama.attention.head_count", Value::u32(4));
  w.set("llama.attention.head_count_kv", Value::u32(2));
  w.set("llama.feed_forward_length", Value::u32(128));
  w.set("llama.context_length", Value::u32(2048));
  w.set("llama.attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  w.set("llama.rope.freq_base", Value::f32(10000.0f));
  return w;
}

std::string write(const gguf::GGUFWriter& w, const std::string& name) {
  std::string path = test_util::temp_dir() + "/" + name + ".gguf";
  w.write(path);
  return path;
}

// The error read_model_config throws for the file (a test failure if it loads).
std::string config_error(const gguf::GGUFWriter& w, const std::string& name) {
  const std::string path = write(w, name);
  try {
    gguf::GGUFFile f(path);
    ModelConfig c = read_model_config(f);
    ADD_FAILURE() << name << ": loaded (ctx_train " << c.ctx_train << ", rms_eps " << c.rms_eps
                  << ", rope_base " << c.rope_base << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.what();
  }
  return {};
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(ModelConfig, ReadsAValidFile) {
  gguf::GGUFFile f(write(base(), "config_valid"));
  ModelConfig c = read_model_config(f);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.ffn_dim, 128);
  EXPECT_EQ(c.ctx_train, 2048);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.0f);
  // The largest int is a valid context length.
  gguf::GGUFWriter w = base();
  w.set("llama.context_length", Value::u32(2147483647u));
  gguf::GGUFFile big(write(w, "config_ctx_max"));
  EXPECT_EQ(read_model_config(big).ctx_train, 2147483647);
}

// A u32 of 2^32-1 used to become -1 ("--ctx: got -1" further on).
TEST(ModelConfig, ContextLengthOutOfIntRangeIsRefused) {
  gguf::GGUFWriter w = base();
  w.set("llama.context_length", Value::u32(4294967295u));
  EXPECT_HAS(config_error(w, "config_ctx_u32max"),
             "llama.context_length = 4294967295 is out of range (1 .. 2^31-1)");
  w.set("llama.context_length", Value::u32(2147483648u));
  EXPECT_HAS(config_error(w, "config_ctx_2p31"),
             "llama.context_length = 2147483648 is out of range (1 .. 2^31-1)");
  w.set("llama.context_length", Value::u64(std::numeric_limits<uint64_t>::max()));
  EXPECT_HAS(config_error(w, "config_ctx_u64max"),
             "llama.context_length = 18446744073709551615 is out of range (1 .. 2^31-1)");
  w.set("llama.context_length", Value::i32(-1));
  EXPECT_HAS(config_error(w, "config_ctx_neg"),
             "llama.context_length = -1 is out of range (1 .. 2^31-1)");
  w.set("llama.context_length", Value::u32(0));
  EXPECT_HAS(config_error(w, "config_ctx_zero"),
             "llama.context_length = 0 is out of range (1 .. 2^31-1)");
}

TEST(ModelConfig, EveryIntegerIsRangeChecked) {
  const char* keys[] = {"llama.embedding_length",     "llama.block_count",
                        "llama.attention.head_count", "llama.attention.head_count_kv",
                        "llama.feed_forward_length",  "llama.attention.key_length",
                        "llama.rope.dimension_count"};
  for (const char* key : keys) {
    SCOPED_TRACE(key);
    gguf::GGUFWriter w = base();
    w.set(key, Value::u32(4294967295u));
    EXPECT_HAS(config_error(w, std::string("config_u32max_") + key),
               std::string(key) + " = 4294967295 is out of range (1 .. 2^31-1)");
    w.set(key, Value::i64(int64_t{1} << 40));
    EXPECT_HAS(config_error(w, std::string("config_i64_") + key),
               std::string(key) + " = 1099511627776 is out of range (1 .. 2^31-1)");
  }
  gguf::GGUFWriter w = base();
  w.set("llama.rope.scaling.type", Value::str("llama3"));
  w.set("llama.rope.scaling.original_context_length", Value::u32(4294967295u));
  EXPECT_HAS(config_error(w, "config_orig_ctx"),
             "llama.rope.scaling.original_context_length = 4294967295 is out of range");
  // head_count x key_length must fit the int q_dim().
  w = base();
  w.set("llama.attention.head_count", Value::u32(65536));
  w.set("llama.attention.head_count_kv", Value::u32(65536));
  w.set("llama.attention.key_length", Value::u32(65536));
  w.set("llama.rope.dimension_count", Value::u32(64));
  EXPECT_HAS(config_error(w, "config_qdim_overflow"), "does not fit in an int");
}

TEST(ModelConfig, FloatsMustBeFiniteAndPositive) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* key;
    Value value;
    const char* shown;
  };
  const Case cases[] = {
      {"llama.attention.layer_norm_rms_epsilon", Value::f32(nan), "nan"},
      {"llama.attention.layer_norm_rms_epsilon", Value::f32(0.0f), "0"},
      {"llama.attention.layer_norm_rms_epsilon", Value::f32(-1e-5f), "-"},
      {"llama.attention.layer_norm_rms_epsilon", Value::f32(inf), "inf"},
      {"llama.attention.layer_norm_rms_epsilon", Value::f64(1e-60), "1e-60"},  // 0 as a float
      {"llama.rope.freq_base", Value::f32(nan), "nan"},
      {"llama.rope.freq_base", Value::f32(-10000.0f), "-10000"},
      {"llama.rope.freq_base", Value::f64(1e300), "1e+300"},  // inf as a float
      {"llama.rope.freq_base", Value::i32(0), "0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = " + c.shown);
    gguf::GGUFWriter w = base();
    w.set(c.key, c.value);
    const std::string err = config_error(w, "config_float");
    EXPECT_HAS(err, std::string(c.key) + " = " + c.shown);
    EXPECT_HAS(err, "expected a finite number > 0");
  }
}

TEST(ModelConfig, RopeScalingFactorsMustBeFiniteAndPositive) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  {
    gguf::GGUFWriter w = base();
    w.set("llama.rope.scaling.type", Value::str("linear"));
    for (float bad : {nan, 0.0f, -2.0f, std::numeric_limits<float>::infinity()}) {
      w.set("llama.rope.scaling.factor", Value::f32(bad));
      EXPECT_HAS(config_error(w, "config_linear"), "llama.rope.scaling.factor = ");
    }
    w.set("llama.rope.scaling.factor", Value::f32(4.0f));
    gguf::GGUFFile f(write(w, "config_linear_ok"));
    EXPECT_FLOAT_EQ(read_model_config(f).rope_scale_factor, 4.0f);
  }
  const char* keys[] = {"llama.rope.scaling.factor", "llama.rope.scaling.low_freq_factor",
                        "llama.rope.scaling.high_freq_factor"};
  for (const char* key : keys) {
    SCOPED_TRACE(key);
    gguf::GGUFWriter w = base();
    w.set("llama.rope.scaling.type", Value::str("llama3"));
    w.set(key, Value::f32(nan));
    EXPECT_HAS(config_error(w, "config_llama3"), std::string(key) + " = nan is invalid");
    w.set(key, Value::f32(-1.0f));
    EXPECT_HAS(config_error(w, "config_llama3"), std::string(key) + " = -1 is invalid");
  }
  // The smooth interpolation divides by high - low.
  gguf::GGUFWriter w = base();
  w.set("llama.rope.scaling.type", Value::str("llama3"));
  w.set("llama.rope.scaling.low_freq_factor", Value::f32(4.0f));
  w.set("llama.rope.scaling.high_freq_factor", Value::f32(4.0f));
  EXPECT_HAS(config_error(w, "config_llama3_equal"),
             "high_freq_factor 4 must be greater than low_freq_factor 4");
  w.set("llama.rope.scaling.low_freq_factor", Value::f32(1.0f));
  gguf::GGUFFile f(write(w, "config_llama3_ok"));
  ModelConfig c = read_model_config(f);
  EXPECT_EQ(c.rope_scaling, "llama3");
  for (float x : rope_inv_freq(c)) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
}

}  // namespace
}  // namespace kvasir
