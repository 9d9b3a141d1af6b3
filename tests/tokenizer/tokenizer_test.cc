// Tokenizer behaviour on small in-memory vocabs (each rule of llama.cpp's algorithms in
// isolation) and on the real stories260K vocab.
#include "kvasir/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "kvasir/tokenizer/subword.h"
#include "kvasir/tokenizer/unicode.h"
#include "kvasir/util/error.h"
#include "test_util/paths.h"
#include "vocab_builder.h"

namespace kvasir {
namespace {

using Ids = std::vector<TokenId>;
using testing::VocabBuilder;

constexpr TokenId kByte0 = 3;  // id of <0x00> after add_spm_basics()

// ---------------------------------------------------------------- SentencePiece-style (SPM)

TEST(SpmTokenizer, MergesHighestScoreFirst) {
  for (const bool ab_first : {true, false}) {
    VocabBuilder b;
    b.add_spm_basics();
    const TokenId sp = b.add("\xE2\x96\x81", TokenType::kNormal, -10);
    const TokenId a = b.add("a"), bb = b.add("b"), c = b.add("c");
    const TokenId ab = b.add("ab", TokenType::kNormal, ab_first ? -1.0f : -2.0f);
    const TokenId bc = b.add("bc", TokenType::kNormal, ab_first ? -2.0f : -1.0f);
    (void)bb;
    const Tokenizer tok = b.build();
    EXPECT_EQ(tok.encode("abc", false, false), ab_first ? (Ids{sp, ab, c}) : (Ids{sp, a, bc}));
  }
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostPairFirst) {
  VocabBuilder b;
  b.add_spm_basics();
  const TokenId sp = b.add("\xE2\x96\x81");
  const TokenId a = b.add("a");
  const TokenId aa = b.add("aa", TokenType::kNormal, -1);
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.encode("aaa", false, false), (Ids{sp, aa, a}));
}

TEST(SpmTokenizer, SpacesBecomeU2581AndTextGetsSpacePrefix) {
  VocabBuilder b;
  b.add_spm_basics();
  const TokenId sp = b.add("\xE2\x96\x81", TokenType::kNormal, -5);
  const TokenId a = b.add(
      "\xE2\x96\x81"
      "a",
      TokenType::kNormal, -1);
  const TokenId bb = b.add(
      "\xE2\x96\x81"
      "b",
      TokenType::kNormal, -1);
  const Tokenizer tok = b.build();
  EXPECT_TRUE(tok.add_space_prefix());
  EXPECT_EQ(tok.encode("a b", false, false), (Ids{a, bb}));
  EXPECT_EQ(tok.encode(" a", false, false), (Ids{sp, a}));
  EXPECT_EQ(tok.decode(Ids{a, bb}), "a b");  // the prefix space is removed again
  EXPECT_EQ(tok.token_to_piece(a, false), " a");
}

TEST(SpmTokenizer, UnknownCharactersFallBackToBytes) {
  VocabBuilder b;
  b.add_spm_basics();
  const TokenId sp = b.add("\xE2\x96\x81");
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.encode("\xC3\xA9", false, false), (Ids{sp, kByte0 + 0xC3, kByte0 + 0xA9}));
  EXPECT_EQ(tok.token_to_piece(kByte0 + 0xC3, false), "\xC3");
  EXPECT_EQ(tok.decode(Ids{sp, kByte0 + 0xC3, kByte0 + 0xA9}), "\xC3\xA9");
}

TEST(SpmTokenizer, AddSpecialAddsBosAndEosAsTheVocabSays) {
  VocabBuilder b;
  b.add_spm_basics();
  const TokenId a = b.add(
      "\xE2\x96\x81"
      "a");
  {
    const Tokenizer tok = b.build();
    EXPECT_EQ(tok.bos_id(), 1);  // llama defaults when no key names them
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.unk_id(), 0);
    EXPECT_TRUE(tok.add_bos());
    EXPECT_FALSE(tok.add_eos());
    EXPECT_EQ(tok.encode("a", true, false), (Ids{1, a}));
    EXPECT_EQ(tok.encode("", true, false), (Ids{1}));
    EXPECT_EQ(tok.encode("", false, false), Ids{});
  }
  b.extra.emplace_back("tokenizer.ggml.add_eos_token", gguf::Value::boolean(true));
  b.extra.emplace_back("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.encode("a", true, false), (Ids{a, 2}));
}

TEST(SpmTokenizer, ParseSpecialRecognisesControlTokens) {
  VocabBuilder b;
  b.add_spm_basics();
  b.add("\xE2\x96\x81");
  const TokenId a = b.add(
      "\xE2\x96\x81"
      "a");
  const Tokenizer tok = b.build();
  // The text after a special token gets the space prefix again.
  EXPECT_EQ(tok.encode("<s>a</s>", false, true), (Ids{1, a, 2}));
  // Without parse_special the control token text is just text (here: byte fallback).
  const Ids plain = tok.encode("<s>a</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok.decode(plain), "<s>a</s>");
}

TEST(SpmTokenizer, UserDefinedTokensAreSplitOutEvenWithoutParseSpecial) {
  VocabBuilder b;
  b.add_spm_basics();
  const TokenId user = b.add("<|user|>", TokenType::kUserDefined);
  const TokenId x = b.add("\xE2\x96\x81x");
  const TokenId y = b.add("\xE2\x96\x81y");
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.encode("x<|user|>y", false, false), (Ids{x, user, y}));
  EXPECT_EQ(tok.token_to_piece(user, false), "<|user|>");  // user-defined always renders
  EXPECT_EQ(tok.token_to_piece(1, false), "");             // control only when asked
  EXPECT_EQ(tok.token_to_piece(1, true), "<s>");
}

TEST(SpmTokenizer, Phi3SpecialTokensEatTheSpaceAfterThem) {
  for (const bool phi3 : {false, true}) {
    VocabBuilder b;
    b.add_spm_basics();
    const TokenId user = b.add("<|user|>", TokenType::kControl);
    const TokenId sp = b.add("\xE2\x96\x81", TokenType::kNormal, -5);
    const TokenId y = b.add("\xE2\x96\x81y", TokenType::kNormal, -1);
    if (phi3) b.extra.emplace_back("general.name", gguf::Value::str("Phi3 mini"));
    const Tokenizer tok = b.build();
    // rstrip drops " " after <|user|>; the run then gets its usual prefix space.
    EXPECT_EQ(tok.encode("<|user|> y", false, true), phi3 ? (Ids{user, y}) : (Ids{user, sp, y}));
  }
}

TEST(SpmTokenizer, DecodeFollowsLlamaCppLeadingSpaceRule) {
  VocabBuilder b;
  b.add_spm_basics();
  const TokenId hi = b.add("\xE2\x96\x81hi");
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.decode(Ids{hi}), "hi");
  // A leading BOS takes the strip (it renders as nothing), so the space stays; removing it
  // with remove_special disables the strip too. That is llama_detokenize's behaviour.
  EXPECT_EQ(tok.decode(Ids{1, hi}), " hi");
  EXPECT_EQ(tok.decode(Ids{1, hi}, /*remove_special=*/true), " hi");
  EXPECT_EQ(tok.decode(Ids{1, hi, 2}, false, /*render_special=*/true), "<s> hi</s>");
}

// ---------------------------------------------------------------- byte-level BPE

VocabBuilder bpe_vocab(std::vector<std::string> merges) {
  VocabBuilder b;
  b.model = "gpt2";
  b.pre = "gpt-2";
  for (const char* t : {"a", "b", "c", "ab", "bc", "\xC4\xA0",
                        "\xC4\xA0"
                        "a"}) {
    b.add(t);
  }
  b.merges = std::move(merges);
  return b;
}

TEST(BpeTokenizer, MergesLowestRankFirst) {
  EXPECT_EQ(bpe_vocab({"b c", "a b"}).build().encode("abc", false, false), (Ids{0, 4}));
  EXPECT_EQ(bpe_vocab({"a b", "b c"}).build().encode("abc", false, false), (Ids{3, 2}));
}

TEST(BpeTokenizer, SpacesAreByteEncodedAndMergesStopAtWords) {
  const Tokenizer tok = bpe_vocab({"\xC4\xA0 a", "a b"}).build();
  // " ab" is one word: Ġ a b -> (Ġ a) b.
  EXPECT_EQ(tok.encode(" ab", false, false), (Ids{6, 1}));
  // "ab ab": words "ab" and " ab".
  EXPECT_EQ(tok.encode("ab ab", false, false), (Ids{3, 6, 1}));
  EXPECT_EQ(tok.decode(Ids{3, 6, 1}), "ab ab");
  EXPECT_EQ(tok.token_to_piece(5, false), " ");
}

TEST(BpeTokenizer, CharactersWithoutTokensAreDroppedAsInLlamaCpp) {
  const Tokenizer tok = bpe_vocab({"a b"}).build();
  // 'é' is "Ã©" in the byte alphabet; neither character is a token, and their bytes are
  // not single-byte tokens either, so nothing is emitted for it.
  EXPECT_EQ(tok.encode("a\xC3\xA9"
                       "b",
                       false, false),
            (Ids{0, 1}));
}

TEST(BpeTokenizer, DefaultSpecialIdsAndMissingBos) {
  VocabBuilder b = bpe_vocab({"a b"});
  const Tokenizer small = b.build();
  EXPECT_EQ(small.bos_id(), kNoToken);  // the default id 11 is outside this vocab
  EXPECT_FALSE(small.add_bos());
  b.extra.emplace_back("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
  const Tokenizer asks = b.build();
  EXPECT_EQ(asks.encode("ab", false, false), (Ids{3}));
  EXPECT_THROW(asks.encode("ab", true, false), Error);
}

TEST(BpeTokenizer, EndOfGenerationTokensFoundByText) {
  VocabBuilder b = bpe_vocab({"a b"});
  const TokenId im_end = b.add("<|im_end|>");  // written as a normal token
  const TokenId eos = b.add("<|eos|>", TokenType::kControl);
  b.extra.emplace_back("tokenizer.ggml.eos_token_id", gguf::Value::u32(eos));
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.eos_id(), eos);
  EXPECT_EQ(tok.eot_id(), im_end);
  EXPECT_TRUE(tok.is_eog(eos));
  EXPECT_TRUE(tok.is_eog(im_end));
  EXPECT_TRUE(tok.is_control(im_end));  // made a control token, as llama.cpp does
  EXPECT_FALSE(tok.is_eog(0));
  EXPECT_FALSE(tok.is_eog(kNoToken));
  // So it is only recognised in text with parse_special.
  EXPECT_EQ(tok.encode("<|im_end|>", false, true), (Ids{im_end}));
}

TEST(BpeTokenizer, DecodeCleansTokenizationSpacesWhereTheVocabSaysSo) {
  for (const char* pre : {"gpt-2", "qwen2"}) {
    VocabBuilder b;
    b.model = "gpt2";
    b.pre = pre;
    for (const char* t : {"Hello", "\xC4\xA0,", "\xC4\xA0world", "\xC4\xA0'", "s"}) b.add(t);
    b.merges = {"a b"};
    const Tokenizer tok = b.build();
    const bool clean = std::string_view(pre) == "gpt-2";
    EXPECT_EQ(tok.decode(Ids{0, 1, 2, 3, 4}), clean ? "Hello, world's" : "Hello , world 's");
    // " ' " loses both spaces; llama.cpp's in-place pass then no longer sees the second one.
    EXPECT_EQ(tok.decode(Ids{4, 3, 3, 2}), clean ? "s'' world" : "s ' ' world");
  }
}

TEST(BpeTokenizer, ByteTokensOfTheFormHexRenderAsRawBytes) {
  VocabBuilder b = bpe_vocab({"a b"});
  const TokenId byte = b.add("<0xE4>", TokenType::kByte);
  EXPECT_EQ(b.build().token_to_piece(byte, false), "\xE4");
}

// ---------------------------------------------------------------- WordPiece

TEST(WpmTokenizer, NormalizesAndSplitsWords) {
  EXPECT_EQ(
      wpm_words("H\xC3\xA9llo, \xE4\xB8\x96\xE7\x95\x8C! a\tb\x01", true, true),
      (std::vector<std::string>{"hello", ",", "\xE4\xB8\x96", "\xE7\x95\x8C", "!", "a", "b"}));
  EXPECT_EQ(wpm_words("H\xC3\xA9llo", false, false), (std::vector<std::string>{"H\xC3\xA9llo"}));
}

TEST(WpmTokenizer, GreedyLongestMatchAndUnknownWords) {
  VocabBuilder b;
  b.model = "bert";
  b.add("[PAD]", TokenType::kControl);
  const TokenId unk = b.add("[UNK]", TokenType::kControl);
  const TokenId cls = b.add("[CLS]", TokenType::kControl);
  const TokenId sep = b.add("[SEP]", TokenType::kControl);
  const TokenId hello = b.add("\xE2\x96\x81hello");
  const TokenId un = b.add("\xE2\x96\x81un");
  const TokenId aff = b.add("aff");
  const TokenId affable = b.add("affable");
  const TokenId comma = b.add("\xE2\x96\x81,");
  b.extra.emplace_back("tokenizer.ggml.unknown_token_id", gguf::Value::u32(unk));
  b.extra.emplace_back("tokenizer.ggml.bos_token_id", gguf::Value::u32(cls));
  b.extra.emplace_back("tokenizer.ggml.seperator_token_id", gguf::Value::u32(sep));
  const Tokenizer tok = b.build();
  (void)aff;
  EXPECT_EQ(tok.encode("Hello, unaffable xyz", false, false),
            (Ids{hello, comma, un, affable, unk}));
  EXPECT_EQ(tok.encode("hello", true, false), (Ids{cls, hello, sep}));
  // WordPiece has no space prefix to remove: the word-start mark of the first token stays.
  EXPECT_EQ(tok.decode(Ids{hello, comma, un, affable}), " hello, unaffable");
}

// ---------------------------------------------------------------- loading errors

TEST(VocabLoad, RefusesUnknownModelsAndPreTokenizersByName) {
  VocabBuilder b = bpe_vocab({"a b"});
  b.model = "t5";
  try {
    b.build();
    FAIL() << "t5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'t5'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test-vocab"), std::string::npos) << e.what();
  }
  b.model = "gpt2";
  b.pre = "fancy-new-pre";
  try {
    b.build();
    FAIL() << "unknown pre accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fancy-new-pre'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre"), std::string::npos) << e.what();
  }
}

TEST(VocabLoad, RejectsMissingOrMistypedKeys) {
  VocabBuilder b = bpe_vocab({});  // BPE without merges
  EXPECT_THROW(b.build(), Error);

  Metadata kv = bpe_vocab({"a b"}).metadata();
  for (auto& [k, v] : kv) {
    if (k == "tokenizer.ggml.scores") v = gguf::Value::string_array({"x"});
  }
  try {
    Tokenizer::from_metadata(kv, "mistyped");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores"), std::string::npos);
  }

  VocabBuilder dup;
  dup.add_spm_basics();
  dup.add("x");
  dup.add("x");
  EXPECT_THROW(dup.build(), Error);

  EXPECT_THROW(Tokenizer::from_metadata({}, "empty"), Error);
}

TEST(VocabLoad, OutOfRangeSpecialIdKeysKeepTheDefault) {
  VocabBuilder b;
  b.add_spm_basics();
  b.extra.emplace_back("tokenizer.ggml.padding_token_id", gguf::Value::u32(4294967295u));
  b.extra.emplace_back("tokenizer.ggml.bos_token_id", gguf::Value::u32(100000));
  const Tokenizer tok = b.build();
  EXPECT_EQ(tok.pad_id(), kNoToken);
  EXPECT_EQ(tok.bos_id(), 1);
}

// ---------------------------------------------------------------- stories260K

class Stories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new Tokenizer(Tokenizer::from_file(test_util::stories260k_path()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static Tokenizer* tok_;
};
Tokenizer* Stories::tok_ = nullptr;

TEST_F(Stories, Vocab) {
  EXPECT_EQ(tok_->n_vocab(), 512);
  EXPECT_EQ(tok_->type(), VocabType::kSpm);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->sep_id(), kNoToken);  // the file says 4294967295
  EXPECT_TRUE(tok_->add_bos());
  EXPECT_TRUE(tok_->is_eog(2));
  EXPECT_FALSE(tok_->is_eog(1));
}

TEST_F(Stories, EncodeOnceUponATime) {
  // ▁Once ▁upon ▁a ▁time
  const Ids ids = tok_->encode("Once upon a time", true, false);
  EXPECT_EQ(ids, (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok_->decode(std::span(ids).subspan(1)), "Once upon a time");
  EXPECT_EQ(tok_->token_to_piece(403, false), " Once");
  EXPECT_EQ(tok_->piece_view(403, false), " Once");
  EXPECT_EQ(tok_->token_to_piece(403, false, /*lstrip=*/1), "Once");
  EXPECT_EQ(tok_->token_text(403), "\xE2\x96\x81Once");
}

TEST_F(Stories, IdsOutsideTheVocab) {
  EXPECT_EQ(tok_->token_to_piece(512, true), "");
  EXPECT_EQ(tok_->token_to_piece(-1, true), "");
  EXPECT_FALSE(tok_->is_eog(512));
  EXPECT_THROW(tok_->token_text(512), Error);
  EXPECT_THROW(tok_->token_score(-1), Error);
}

TEST_F(Stories, ParseSpecial) {
  EXPECT_EQ(tok_->encode("<s>Once upon", false, true), (Ids{1, 403, 407}));
  const Ids plain = tok_->encode("<s>Once upon", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_GT(plain.size(), 3u);
  EXPECT_EQ(tok_->decode(plain), "<s>Once upon");
}

TEST_F(Stories, RoundTripsStoryText) {
  const std::string text =
      "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad.\nThe end \xF0\x9F\xA6\x99!";
  EXPECT_EQ(tok_->decode(tok_->encode(text, false, false)), text);
}

}  // namespace
}  // namespace kvasir

namespace kvasir {
namespace {

// Arbitrary bytes (invalid UTF-8 included) never fail and only produce valid ids. Arbitrary
// valid UTF-8 comes back exactly through SentencePiece byte fallback. (Invalid UTF-8 need not:
// as in llama.cpp, spaces are escaped to U+2581 before the text is cut into characters by lead
// byte, so a bad lead byte can swallow part of an escaped space.)
TEST(ArbitraryInput, RandomBytesAndCharacters) {
  const std::string dir = test_util::models_dir() + "/vocab/";
  const Tokenizer spm = Tokenizer::from_file(dir + "ggml-vocab-llama-spm.gguf");
  const Tokenizer bpe = Tokenizer::from_file(dir + "ggml-vocab-gpt-2.gguf");
  const Tokenizer wpm = Tokenizer::from_file(dir + "ggml-vocab-bert-bge.gguf");
  std::mt19937 rng(1234);
  for (int rep = 0; rep < 300; ++rep) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? rng() % 128 : rng() % 256);
    for (const Tokenizer* tok : {&spm, &bpe, &wpm}) {
      for (const bool special : {false, true}) {
        for (TokenId id : tok->encode(bytes, special, special)) ASSERT_TRUE(tok->is_valid(id));
      }
    }
    std::string text;
    for (int n = static_cast<int>(rng() % 32); n > 0; --n) {
      static constexpr uint32_t kMax[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
      uint32_t cp = static_cast<uint32_t>(rng() % (kMax[rng() % 4] + 1));
      if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581) cp = ' ';
      unicode::append_utf8(text, cp);
    }
    EXPECT_EQ(spm.decode(spm.encode(text, false, false)), text);
  }
}

}  // namespace
}  // namespace kvasir
