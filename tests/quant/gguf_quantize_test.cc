// quantize_gguf's llama-quantize rules: target names in any case, and no silent requantizing of
// tensors that are already quantized (allow_requantize opts in; copying a tensor already of its
// target type is not requantizing).
#include "kvasir/quant/gguf_quantize.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

std::string tmp(const std::string& name) {
  return test_util::temp_dir("kvasir-quant") + "/" + name;
}

TEST(QuantizeTypeName, IsCaseInsensitiveAndLimitedToTheTargets) {
  EXPECT_EQ(quantize_type_from_name("q4_0"), DType::Q4_0);
  EXPECT_EQ(quantize_type_from_name("Q4_0"), DType::Q4_0);
  EXPECT_EQ(quantize_type_from_name("Q8_0"), DType::Q8_0);
  EXPECT_EQ(quantize_type_from_name("F16"), DType::F16);
  EXPECT_EQ(quantize_type_from_name("BF16"), DType::BF16);
  EXPECT_EQ(quantize_type_from_name("f32"), DType::F32);
  EXPECT_EQ(quantize_type_from_name("q4_k"), std::nullopt);  // a dtype, but no target here
  EXPECT_EQ(quantize_type_from_name("q7_9"), std::nullopt);
  EXPECT_EQ(quantize_type_from_name(""), std::nullopt);
}

TEST(QuantizeGguf, RefusesToRequantizeUnlessAllowed) {
  const std::string q4 = tmp("q4_0.gguf"), q8 = tmp("q8_0.gguf"), copy = tmp("q4_0-copy.gguf");
  quantize_gguf(test_util::stories260k_path(), q4, DType::Q4_0);

  std::filesystem::remove(q8);
  try {
    quantize_gguf(q4, q8, DType::Q8_0);
    FAIL() << "requantized q4_0 -> q8_0 without allow_requantize";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(q4), std::string::npos) << what;
    EXPECT_NE(what.find("already quantized (q4_0)"), std::string::npos) << what;
    EXPECT_NE(what.find("--allow-requantize"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(q8)) << "nothing is written before the check";
  // Dequantizing is converting a quantized tensor too (llama-quantize refuses it as well).
  EXPECT_THROW(quantize_gguf(q4, tmp("f16.gguf"), DType::F16), Error);

  QuantizeReport r = quantize_gguf(q4, q8, DType::Q8_0, {.allow_requantize = true});
  EXPECT_GT(r.n_quantized, 0);
  gguf::GGUFFile f(q8);
  for (const auto& t : f.tensors()) {
    if (t.name == "blk.0.attn_q.weight") {
      EXPECT_EQ(t.type, DType::Q8_0);
    }
  }

  // Same type again: every tensor is copied, nothing is requantized, so no refusal.
  r = quantize_gguf(q4, copy, DType::Q4_0);
  EXPECT_EQ(r.n_quantized, 0);
}

}  // namespace
}  // namespace kvasir
