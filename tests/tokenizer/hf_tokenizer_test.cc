// hf_tokenizer_metadata: a Hugging Face tokenizer folder -> GGUF vocab metadata, checked against
// an independent re-implementation of Hugging Face `tokenizers` (hf_reference_tokenizer.h):
//  - tinystories-656k (SentencePiece-style BPE with byte fallback): every line of the shared
//    evaluation text and the whole text, with BOS, tokenize as Hugging Face does; also special
//    token text, unknown characters and the decode round trip;
//  - byte-level BPE tokenizer.json files written from the shared GPT-2 vocab with the GPT-2,
//    Llama 3 and Qwen 2 pre-tokenizers: the right model / pre, and llama.cpp's GPT-2 vectors;
//  - every refusal names the file and the field.
#include "kvasir/tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "hf_reference_tokenizer.h"
#include "kvasir/format/gguf.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string tinystories_dir() {
  return test_util::models_dir() + "/tinystories-656k";
}

json read_json(const std::string& path) {
  std::string s;
  if (!test_util::read_file(path, s)) return json();
  return json::parse(s);
}

const gguf::Value* find_key(const Metadata& kv, std::string_view key) {
  for (const auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

Metadata without(Metadata kv, std::string_view key) {
  std::erase_if(kv, [&](const auto& e) { return e.first == key; });
  return kv;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> vector_inputs(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> parts;
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    parts.push_back(inp.substr(pos, hit - pos));
  }
  return parts;
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// A scratch folder holding the given files.
std::string make_folder(const std::string& name,
                        const std::vector<std::pair<std::string, std::string>>& files) {
  const fs::path dir = fs::path(test_util::temp_dir("kvasir-hf-tok")) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [file, text] : files) std::ofstream(dir / file, std::ios::binary) << text;
  return dir.string();
}

// ---- tinystories-656k ----

class TinyStories : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(tinystories_dir() + "/tokenizer.json")) {
      GTEST_SKIP() << "no " << tinystories_dir();
    }
  }
};

TEST_F(TinyStories, MetadataIsALlamaVocabWithMerges) {
  const Metadata kv = hf_tokenizer_metadata(tinystories_dir());
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.model")->as_string(), "llama");
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.tokens")->as_array().items.size(), 2048u);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.scores")->as_array().items.size(), 2048u);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.merges")->as_array().items.size(), 1967u);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.bos_token_id")->as_int(), 1);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.eos_token_id")->as_int(), 2);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.unknown_token_id")->as_int(), 0);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.padding_token_id")->as_int(), 0);
  EXPECT_TRUE(find_key(kv, "tokenizer.ggml.add_bos_token")->as_bool());
  EXPECT_FALSE(find_key(kv, "tokenizer.ggml.add_eos_token")->as_bool());
  EXPECT_TRUE(find_key(kv, "tokenizer.ggml.add_space_prefix")->as_bool());
  EXPECT_EQ(find_key(kv, "tokenizer.chat_template"), nullptr);

  const Tokenizer tok = Tokenizer::from_metadata(kv, "tinystories-656k");
  EXPECT_TRUE(tok.vocab().spm_merge_by_rank);
  EXPECT_TRUE(tok.vocab().special_eats_space);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.is_control(1));
  EXPECT_TRUE(tok.is_eog(2));
  // The scores order the merges: the first merge "e ▁" scores highest.
  EXPECT_EQ(tok.token_score(tok.find_token("e\xE2\x96\x81")), -1.0f);
}

TEST_F(TinyStories, EvalTextTokenizesAsHuggingFace) {
  std::string text;
  ASSERT_TRUE(test_util::read_file(test_util::text_dir() + "/tinystories-eval.txt", text));
  const hf_ref::HfReference ref(read_json(tinystories_dir() + "/tokenizer.json"));
  const Metadata kv = hf_tokenizer_metadata(tinystories_dir());
  const Tokenizer tok = Tokenizer::from_metadata(kv, "tinystories-656k");
  // llama.cpp's reading of the same metadata (merges kept, kvasir keys dropped): by score.
  const Tokenizer by_score =
      Tokenizer::from_metadata(without(without(kv, "tokenizer.ggml.kvasir.spm_merge_by_rank"),
                                       "tokenizer.ggml.kvasir.special_eats_space"),
                               "tinystories-656k (by score)");
  ASSERT_FALSE(by_score.vocab().spm_merge_by_rank);
  // The kvasir key without the merges it asks for is refused, not read as by-score.
  EXPECT_THROW(Tokenizer::from_metadata(without(kv, "tokenizer.ggml.merges"), "no merges"), Error);

  const std::vector<std::string> lines = lines_of(text);
  ASSERT_GT(lines.size(), 2000u);
  size_t same = 0, score_wrong = 0, nonempty = 0;
  for (const std::string& line : lines) {
    const std::vector<int> want = ref.encode(line, /*add_special=*/true);
    const std::vector<TokenId> got = tok.encode(line, /*add_special=*/true, /*parse_special=*/true);
    ASSERT_EQ(want.front(), 1);
    EXPECT_EQ(got, want) << "line '" << line << "'\n  got:" << show(got)
                         << "\n  hf: " << show(want);
    same += got == want;
    nonempty += !line.empty();
    score_wrong += by_score.encode(line, true, true) != want;
    // Decode round trip (without the BOS, whose removal keeps the space, as llama.cpp does).
    const std::vector<TokenId> plain = tok.encode(line, false, true);
    EXPECT_EQ(tok.decode(plain), line);
  }
  std::cout << "[ hf       ] tinystories-eval: " << same << "/" << lines.size()
            << " lines identical to Hugging Face; merging by score alone (llama.cpp) gets "
            << score_wrong << " of the " << nonempty << " non-empty lines wrong\n";

  const std::vector<int> want = ref.encode(text, true);
  const std::vector<TokenId> got = tok.encode(text, true, true);
  EXPECT_EQ(got, want) << "whole text: " << got.size() << " vs " << want.size() << " tokens";
  const std::vector<TokenId> got_score = by_score.encode(text, true, true);
  size_t diff = 0;
  while (diff < got_score.size() && diff < want.size() && got_score[diff] == want[diff]) ++diff;
  std::cout << "[ hf       ] whole text: " << want.size() << " tokens, "
            << (got == want ? "identical" : "DIFFERENT") << "; by score: " << got_score.size()
            << " tokens, first difference at token " << diff << "\n";
  EXPECT_EQ(tok.decode(tok.encode(text, false, true)), text);
}

TEST_F(TinyStories, SpecialTokensAndUnknownCharactersAsHuggingFace) {
  const hf_ref::HfReference ref(read_json(tinystories_dir() + "/tokenizer.json"));
  const Tokenizer tok =
      Tokenizer::from_metadata(hf_tokenizer_metadata(tinystories_dir()), "tinystories-656k");
  const std::vector<std::string> cases = {
      "<|start_story|>Once upon a time",
      "Once upon a time.<|end_story|>",
      "The end. <|end_story|> <|start_story|> Once there was a cat.",
      "no space before<|end_story|>after",
      "  <|end_story|>  two spaces",
      "<unk> and <|end_story|><|start_story|>",
      "Tom said \"hi\" \n\n and left\n",
      "caf\xC3\xA9 na\xC3\xAFve \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80!",  // unknown characters
      "~~~ {weird} [chars] ###",
      "",
      " ",
      "a",
  };
  for (const std::string& s : cases) {
    for (bool add_special : {false, true}) {
      const std::vector<int> want = ref.encode(s, add_special);
      const std::vector<TokenId> got = tok.encode(s, add_special, /*parse_special=*/true);
      EXPECT_EQ(got, want) << "'" << s << "' add_special " << add_special << "\n  got:" << show(got)
                           << "\n  hf: " << show(want);
    }
  }
  // Consecutive unknown characters fuse into one <unk>.
  EXPECT_EQ(tok.encode("\xE4\xBD\xA0\xE5\xA5\xBD", false, true),
            std::vector<TokenId>({tok.find_token("\xE2\x96\x81"), 0}));
}

// Random text over the characters of the vocab (and a few it lacks): merging by rank stays
// identical to Hugging Face; merging by score (llama.cpp) is counted, to show where it differs.
TEST_F(TinyStories, RandomTextTokenizesAsHuggingFace) {
  const hf_ref::HfReference ref(read_json(tinystories_dir() + "/tokenizer.json"));
  const Metadata kv = hf_tokenizer_metadata(tinystories_dir());
  const Tokenizer tok = Tokenizer::from_metadata(kv, "tinystories-656k");
  const Tokenizer by_score =
      Tokenizer::from_metadata(without(without(kv, "tokenizer.ggml.kvasir.spm_merge_by_rank"),
                                       "tokenizer.ggml.kvasir.special_eats_space"),
                               "tinystories-656k (by score)");
  const std::string alphabet = "abcdeefghiijklmnoopqrstuuvwxyz      ..,,'\"!?\nTSL\xC3\xA9";
  std::mt19937 rng(656);
  const int n = 3000;
  int score_wrong = 0, score_wrong_ascii = 0;
  for (int i = 0; i < n; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 40);
    bool ascii = true;
    for (int k = 0; k < len; ++k) {
      const char c = alphabet[rng() % alphabet.size()];
      if (static_cast<uint8_t>(c) >= 0x80) {  // the two bytes of "é", which the vocab lacks
        s += "\xC3\xA9";
        ascii = false;
      } else {
        s += c;
      }
    }
    const std::vector<int> want = ref.encode(s, true);
    EXPECT_EQ(tok.encode(s, true, true), want) << "'" << s << "'";
    const bool wrong = by_score.encode(s, true, true) != want;
    score_wrong += wrong;
    score_wrong_ascii += wrong && ascii;
  }
  std::cout << "[ hf       ] random text: merging by score gets " << score_wrong << " of " << n
            << " strings wrong (" << score_wrong_ascii << " of them without unknown characters)\n";
}

// Where merging by score cannot equal merging by rank: "ab" + "c" makes the token "abc", but the
// merges only list "a bc". Hugging Face stops at [ab, c]; a score order merges on to [abc].
TEST(HfSpm, UnlistedPairsNeverMerge) {
  const std::string sp = "\xE2\x96\x81";
  const json tj = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", sp}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab",
         {{"<unk>", 0}, {sp, 1}, {"a", 2}, {"b", 3}, {"c", 4}, {"ab", 5}, {"bc", 6}, {"abc", 7}}},
        {"merges", {"a b", "b c", "a bc"}}}}};
  const Metadata kv =
      hf_tokenizer_metadata(make_folder("unlisted", {{"tokenizer.json", tj.dump()}}));
  const Tokenizer tok = Tokenizer::from_metadata(kv, "unlisted");
  const Tokenizer by_score =
      Tokenizer::from_metadata(without(kv, "tokenizer.ggml.kvasir.spm_merge_by_rank"), "s");
  const hf_ref::HfReference ref(tj);
  EXPECT_EQ(ref.encode("abc", false), std::vector<int>({1, 5, 4}));
  EXPECT_EQ(tok.encode("abc", false, true), std::vector<TokenId>({1, 5, 4}));
  EXPECT_EQ(by_score.encode("abc", false, true), std::vector<TokenId>({1, 7}));
  EXPECT_FALSE(find_key(kv, "tokenizer.ggml.add_bos_token")->as_bool());
}

// ---- Byte-level BPE from the shared GPT-2 vocab ----

struct Gpt2Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

const Gpt2Vocab* gpt2_vocab() {
  static const Gpt2Vocab* v = []() -> Gpt2Vocab* {
    const std::string path = test_util::models_dir() + "/vocab/ggml-vocab-gpt-2.gguf";
    if (!fs::exists(path)) return nullptr;
    const gguf::GGUFFile f(path);
    auto* g = new Gpt2Vocab;
    for (const auto& t : f.find("tokenizer.ggml.tokens")->as_array().items) {
      g->tokens.push_back(t.as_string());
    }
    for (const auto& t : f.find("tokenizer.ggml.token_type")->as_array().items) {
      g->types.push_back(static_cast<int32_t>(t.as_int()));
    }
    for (const auto& m : f.find("tokenizer.ggml.merges")->as_array().items) {
      g->merges.push_back(m.as_string());
    }
    return g;
  }();
  return v;
}

// tokenizer.json for the GPT-2 vocab with the given pre-tokenizer.
json gpt2_tokenizer_json(const json& pre_tokenizer, bool ignore_merges) {
  const Gpt2Vocab& g = *gpt2_vocab();
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    vocab[g.tokens[i]] = i;
    if (g.types[i] == static_cast<int32_t>(TokenType::kControl)) {
      added.push_back({{"id", i},
                       {"content", g.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", g.merges}}}};
}

json split_then_byte_level(const std::string& regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
}

const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct ByteLevelCase {
  const char* name;
  const char* pre;
  json pre_tokenizer;
  bool ignore_merges;
};

class ByteLevel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpt2_vocab()) GTEST_SKIP() << "no ggml-vocab-gpt-2.gguf";
  }
};

TEST_F(ByteLevel, Gpt2Llama3Qwen2MatchVectorsAndHuggingFace) {
  const std::string base = test_util::models_dir() + "/vocab/ggml-vocab-gpt-2.gguf";
  std::string inp, out;
  ASSERT_TRUE(test_util::read_file(base + ".inp", inp));
  ASSERT_TRUE(test_util::read_file(base + ".out", out));
  const std::vector<std::string> inputs = vector_inputs(inp);
  const std::vector<std::string> expected_lines = lines_of(out);
  ASSERT_EQ(inputs.size(), expected_lines.size());

  const ByteLevelCase cases[] = {
      {"gpt2",
       "gpt-2",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}},
       false},
      {"gpt2-split", "gpt-2",
       split_then_byte_level(
           R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"),
       false},
      {"llama3", "llama3", split_then_byte_level(kLlama3Regex), true},
      {"qwen2", "qwen2", split_then_byte_level(kQwen2Regex), false},
  };
  for (const ByteLevelCase& c : cases) {
    const json tj = gpt2_tokenizer_json(c.pre_tokenizer, c.ignore_merges);
    const std::string dir = make_folder(c.name, {{"tokenizer.json", tj.dump()}});
    const Metadata kv = hf_tokenizer_metadata(dir);
    EXPECT_EQ(find_key(kv, "tokenizer.ggml.model")->as_string(), "gpt2") << c.name;
    EXPECT_EQ(find_key(kv, "tokenizer.ggml.pre")->as_string(), c.pre) << c.name;
    EXPECT_FALSE(find_key(kv, "tokenizer.ggml.add_bos_token")->as_bool()) << c.name;
    const Tokenizer tok = Tokenizer::from_metadata(kv, c.name);
    const hf_ref::HfReference ref(tj);
    size_t vec_ok = 0, hf_ok = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::vector<TokenId> got = tok.encode(inputs[i], false, false);
      const std::vector<int> hf = ref.encode(inputs[i], false);
      EXPECT_EQ(got, hf) << c.name << " string " << i << " '" << inputs[i]
                         << "'\n  got:" << show(got) << "\n  hf: " << show(hf);
      hf_ok += got == hf;
      if (std::string(c.pre) == "gpt-2") {
        std::vector<TokenId> want;
        std::istringstream ids(expected_lines[i]);
        for (TokenId id; ids >> id;) want.push_back(id);
        EXPECT_EQ(got, want) << c.name << " vector " << i;
        vec_ok += got == want;
      }
    }
    std::cout << "[ hf       ] " << c.name << ": " << hf_ok << "/" << inputs.size()
              << " as Hugging Face";
    if (std::string(c.pre) == "gpt-2") std::cout << ", " << vec_ok << " as llama.cpp's vectors";
    std::cout << "\n";
  }
}

// WordPiece: a BERT tokenizer.json written from the shared bert-bge vocab (its GGUF texts turned
// back into Hugging Face's: "\u2581x" -> "x", "x" -> "##x") reproduces llama.cpp's vectors.
TEST(HfWordPiece, BertBgeMatchesVectors) {
  const std::string base = test_util::models_dir() + "/vocab/ggml-vocab-bert-bge.gguf";
  std::string inp, out;
  if (!test_util::read_file(base + ".inp", inp) || !test_util::read_file(base + ".out", out)) {
    GTEST_SKIP() << "no " << base;
  }
  const gguf::GGUFFile f(base);
  const auto& toks = f.find("tokenizer.ggml.tokens")->as_array().items;
  const auto& types = f.find("tokenizer.ggml.token_type")->as_array().items;
  const std::string sp = "\xE2\x96\x81";
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < toks.size(); ++i) {
    std::string t = toks[i].as_string();
    if (types[i].as_int() == static_cast<int>(TokenType::kNormal)) {
      t = t.starts_with(sp) ? t.substr(sp.size()) : "##" + t;
    } else {
      added.push_back({{"id", i}, {"content", t}, {"special", true}, {"normalized", false}});
    }
    vocab[t] = i;
  }
  const json tj = {{"added_tokens", added},
                   {"normalizer",
                    {{"type", "BertNormalizer"},
                     {"clean_text", true},
                     {"handle_chinese_chars", true},
                     {"strip_accents", nullptr},
                     {"lowercase", true}}},
                   {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                   {"model",
                    {{"type", "WordPiece"},
                     {"unk_token", "[UNK]"},
                     {"continuing_subword_prefix", "##"},
                     {"max_input_chars_per_word", 100},
                     {"vocab", vocab}}}};
  const json cfg = {{"cls_token", "[CLS]"},
                    {"sep_token", "[SEP]"},
                    {"unk_token", "[UNK]"},
                    {"pad_token", "[PAD]"},
                    {"mask_token", "[MASK]"}};
  const Metadata kv = hf_tokenizer_metadata(
      make_folder("bert", {{"tokenizer.json", tj.dump()}, {"tokenizer_config.json", cfg.dump()}}));
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.model")->as_string(), "bert");
  const Tokenizer tok = Tokenizer::from_metadata(kv, "bert");
  EXPECT_EQ(tok.bos_id(),
            f.find("tokenizer.ggml.bos_token_id")
                ? static_cast<TokenId>(f.find("tokenizer.ggml.bos_token_id")->as_int())
                : 101);
  const std::vector<std::string> inputs = vector_inputs(inp);
  const std::vector<std::string> lines = lines_of(out);
  ASSERT_EQ(inputs.size(), lines.size());
  size_t ok = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<TokenId> want;
    std::istringstream ids(lines[i]);
    for (TokenId id; ids >> id;) want.push_back(id);
    const std::vector<TokenId> got = tok.encode(inputs[i], false, false);
    EXPECT_EQ(got, want) << "string " << i << " '" << inputs[i] << "'";
    ok += got == want;
  }
  std::cout << "[ hf       ] bert-bge WordPiece: " << ok << "/" << inputs.size()
            << " as llama.cpp's vectors\n";
}

// ---- Other metadata ----

TEST_F(TinyStories, ChatTemplateFromConfigOrJinjaFile) {
  const std::string tj = read_json(tinystories_dir() + "/tokenizer.json").dump();
  {
    const json cfg = {{"chat_template", json::array({{{"name", "default"}, {"template", "D"}},
                                                     {{"name", "tool_use"}, {"template", "T"}}})}};
    const Metadata kv = hf_tokenizer_metadata(
        make_folder("ct-list", {{"tokenizer.json", tj}, {"tokenizer_config.json", cfg.dump()}}));
    EXPECT_EQ(find_key(kv, "tokenizer.chat_template")->as_string(), "D");
    EXPECT_EQ(find_key(kv, "tokenizer.chat_template.tool_use")->as_string(), "T");
  }
  {
    const Metadata kv = hf_tokenizer_metadata(make_folder(
        "ct-jinja", {{"tokenizer.json", tj}, {"chat_template.jinja", "{{ messages }}"}}));
    EXPECT_EQ(find_key(kv, "tokenizer.chat_template")->as_string(), "{{ messages }}");
    // Without tokenizer_config.json the template still says BOS.
    EXPECT_TRUE(find_key(kv, "tokenizer.ggml.add_bos_token")->as_bool());
    EXPECT_EQ(find_key(kv, "tokenizer.ggml.bos_token_id")->as_int(), 1);
  }
}

// ---- Errors name the file and the field ----

void expect_error(const std::string& dir, const std::vector<std::string>& parts) {
  try {
    hf_tokenizer_metadata(dir);
    ADD_FAILURE() << "no error for " << dir;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
}

TEST_F(TinyStories, ErrorsNameFileAndField) {
  json tj = read_json(tinystories_dir() + "/tokenizer.json");

  json unigram = tj;
  unigram["model"]["type"] = "Unigram";
  expect_error(make_folder("e-unigram", {{"tokenizer.json", unigram.dump()}}),
               {"tokenizer.json", "model.type", "Unigram", "BPE"});

  expect_error(make_folder("e-missing", {{"tokenizer_config.json", "{}"}}),
               {"tokenizer.json", "not found"});

  expect_error(make_folder("e-malformed", {{"tokenizer.json", "{\"model\": {"}}),
               {"tokenizer.json", "not valid JSON"});

  json hole = tj;
  hole["added_tokens"].push_back({{"id", 2100},
                                  {"content", "<extra>"},
                                  {"special", true},
                                  {"normalized", true},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"single_word", false}});
  expect_error(make_folder("e-hole", {{"tokenizer.json", hole.dump()}}),
               {"tokenizer.json", "hole", "2048"});

  const json bad_ct = {{"chat_template", 42}};
  expect_error(make_folder("e-ct", {{"tokenizer.json", tj.dump()},
                                    {"tokenizer_config.json", bad_ct.dump()}}),
               {"tokenizer_config.json", "chat_template"});

  json metaspace = tj;
  metaspace["normalizer"] = nullptr;
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  expect_error(make_folder("e-metaspace", {{"tokenizer.json", metaspace.dump()}}),
               {"tokenizer.json", "pre_tokenizer.replacement", "_"});
}

TEST_F(ByteLevel, UnknownRegexIsRefusedByName) {
  const json tj = gpt2_tokenizer_json(split_then_byte_level(R"(\p{L}+|\s+)"), false);
  expect_error(make_folder("e-regex", {{"tokenizer.json", tj.dump()}}),
               {"tokenizer.json", "pre_tokenizer.pretokenizers[0].pattern.Regex", "\\p{L}+|\\s+"});
  const json tj2 = gpt2_tokenizer_json(split_then_byte_level(kLlama3Regex), false);
  expect_error(make_folder("e-ignore", {{"tokenizer.json", tj2.dump()}}),
               {"tokenizer.json", "model.ignore_merges", "llama3"});
}

}  // namespace
}  // namespace kvasir
