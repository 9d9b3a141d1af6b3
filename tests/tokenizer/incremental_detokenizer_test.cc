#include "kvasir/tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include "kvasir/tokenizer/unicode.h"
#include "test_util/paths.h"
#include "vocab_builder.h"

namespace kvasir {
namespace {

constexpr TokenId kByte0 = 3;  // <0x00> in VocabBuilder::add_spm_basics()
TokenId byte(uint8_t b) {
  return kByte0 + b;
}

const char kFFFD[] = "\xEF\xBF\xBD";

Tokenizer byte_vocab() {
  testing::VocabBuilder b;
  b.add_spm_basics();
  b.add("\xE2\x96\x81hi");  // 259
  b.add("a");               // 260
  return b.build();
}

TEST(IncrementalDetokenizer, HoldsBackSplitCharacters) {
  const Tokenizer tok = byte_vocab();
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(259), " hi");
  // é = C3 A9
  EXPECT_EQ(d.push(byte(0xC3)), "");
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push(byte(0xA9)), "\xC3\xA9");
  // 🦙 = F0 9F A6 99, one byte token each
  EXPECT_EQ(d.push(byte(0xF0)), "");
  EXPECT_EQ(d.push(byte(0x9F)), "");
  EXPECT_EQ(d.push(byte(0xA6)), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(byte(0x99)), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");
}

TEST(IncrementalDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer tok = byte_vocab();
  IncrementalDetokenizer d(tok);
  EXPECT_EQ(d.push(byte(0xFF)), kFFFD);  // can never start a character: released at once
  EXPECT_EQ(d.push(byte(0xE4)), "");
  EXPECT_EQ(d.push(260), std::string(kFFFD) + "a");  // E4 then 'a': ill-formed, then 'a'
  EXPECT_EQ(d.push(byte(0xE4)), "");
  EXPECT_EQ(d.push(byte(0xBD)), "");
  EXPECT_EQ(d.flush(), kFFFD);  // incomplete at the end of the stream
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST(IncrementalDetokenizer, OptionsForSpecialTokensAndLeadingSpace) {
  const Tokenizer tok = byte_vocab();
  IncrementalDetokenizer plain(tok);
  EXPECT_EQ(plain.push(1), "");
  IncrementalDetokenizer special(tok, {.render_special = true, .strip_leading_space = true});
  EXPECT_EQ(special.push(259), "hi");  // first token loses its space
  EXPECT_EQ(special.push(1), "<s>");
  EXPECT_EQ(special.push(259), " hi");
}

// Streaming a real vocab's tokens gives the same text as decoding them at once, and every chunk
// is valid UTF-8 (multi-byte characters arrive split across byte-level tokens).
void check_stream_matches(const std::string& vocab, bool strip) {
  const Tokenizer tok = Tokenizer::from_file(test_util::models_dir() + "/vocab/" + vocab);
  const std::string text =
      "Gr\xC3\xBC\xC3\x9F"
      "e \xF0\x9F\xA6\x99\xF0\x9F\x98\x80 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C "
      "\xE1\x9E\x80\xE1\x9E\xB6 end";
  const auto ids = tok.encode(text, false, false);
  IncrementalDetokenizer d(tok, {.render_special = false, .strip_leading_space = strip});
  std::string streamed;
  size_t held_back = 0;
  for (TokenId id : ids) {
    const std::string chunk = d.push(id);
    for (size_t i = 0; i < chunk.size();) {  // each chunk is whole, valid characters
      const int n = unicode::utf8_scan(std::string_view(chunk).substr(i));
      ASSERT_GT(n, 0) << vocab;
      i += static_cast<size_t>(n);
    }
    held_back += d.pending_bytes() > 0;
    streamed += chunk;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, text) << vocab;
  EXPECT_GT(held_back, 0u) << vocab << ": no character was split across tokens";
}

TEST(IncrementalDetokenizer, MatchesDecodeOnRealVocabs) {
  check_stream_matches("ggml-vocab-gpt-2.gguf", false);
  check_stream_matches("ggml-vocab-llama-spm.gguf", true);
}

}  // namespace
}  // namespace kvasir
