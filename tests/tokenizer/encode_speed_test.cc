// Encoding 100 KB of real text must take well under a second with every algorithm.
#include <gtest/gtest.h>

#include <chrono>

#include "kvasir/tokenizer/tokenizer.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

void check_speed(const std::string& model_path) {
  std::string text;
  ASSERT_TRUE(test_util::read_file(test_util::text_dir() + "/tinystories-eval.txt", text));
  ASSERT_GE(text.size(), 100000u);
  text.resize(100000);
  const Tokenizer tok = Tokenizer::from_file(model_path);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, true, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ speed    ] " << model_path.substr(model_path.rfind('/') + 1) << ": 100 KB -> "
            << ids.size() << " tokens in " << s * 1000 << " ms\n";
  EXPECT_GT(ids.size(), 15000u);
  EXPECT_LT(s, 1.0);
}

TEST(EncodeSpeed, Spm100KB) {
  check_speed(test_util::stories260k_path());
}
TEST(EncodeSpeed, Bpe100KB) {
  check_speed(test_util::models_dir() + "/vocab/ggml-vocab-gpt-2.gguf");
}
TEST(EncodeSpeed, Wpm100KB) {
  check_speed(test_util::models_dir() + "/vocab/ggml-vocab-bert-bge.gguf");
}

}  // namespace
}  // namespace kvasir
