// hf_tokenizer_metadata for the tokenizer.json shapes beyond the basic three: the Metaspace
// pre-tokenizer of byte-fallback BPEs, Unicode normalizers (NFC / NFD / NFKC / NFKD), the
// Digits pre-tokenizer and the Lowercase / Strip / Replace / Prepend normalizers of byte-level
// BPEs. Expected ids are derived independently of the code under test:
//  - from llama.cpp's test vectors of the shared vocabularies (ggml-vocab-*.gguf.inp/.out), read
//    through the documented Hugging Face semantics (e.g. Metaspace adds no "\u2581" to a text
//    that starts with a space, so " x" tokenizes as the vectors' "x");
//  - from the shared GGUF vocabularies (llama.cpp-exact, checked by vocab_vectors_test) on the
//    text the normalizer must produce, written out explicitly here;
//  - from the independent Hugging Face re-implementation in hf_reference_tokenizer.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "hf_reference_tokenizer.h"
#include "kvasir/format/gguf.h"
#include "kvasir/tokenizer/hf_tokenizer.h"
#include "kvasir/tokenizer/normalizer.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSp = "\xE2\x96\x81";

std::string vocab_path(const std::string& name) {
  return test_util::models_dir() + "/vocab/ggml-vocab-" + name + ".gguf";
}

const gguf::Value* find_key(const Metadata& kv, std::string_view key) {
  for (const auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string make_folder(const std::string& name, const json& tj) {
  const fs::path dir = fs::path(test_util::temp_dir("kvasir-hf-norm")) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << tj.dump();
  return dir.string();
}

Tokenizer from_json(const std::string& name, const json& tj, Metadata* kv_out = nullptr) {
  const Metadata kv = hf_tokenizer_metadata(make_folder(name, tj));
  if (kv_out) *kv_out = kv;
  return Tokenizer::from_metadata(kv, name);
}

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

void expect_error(const std::string& name, const json& tj, const std::vector<std::string>& parts) {
  try {
    hf_tokenizer_metadata(make_folder(name, tj));
    ADD_FAILURE() << "no error for " << name;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
}

// The .inp strings and .out ids of a shared vocab.
struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<TokenId>> ids;
  const std::vector<TokenId>* find(const std::string& s) const {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] == s) return &ids[i];
    }
    return nullptr;
  }
};

Vectors read_vectors(const std::string& base) {
  Vectors v;
  std::string inp, out;
  if (!test_util::read_file(base + ".inp", inp) || !test_util::read_file(base + ".out", out)) {
    return v;
  }
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    v.inputs.push_back(inp.substr(pos, hit - pos));
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<TokenId> ids;
    std::istringstream in(line);
    for (TokenId id; in >> id;) ids.push_back(id);
    v.ids.push_back(std::move(ids));
  }
  v.ids.resize(v.inputs.size());
  return v;
}

// ---- Llama SentencePiece vocab as tokenizer.json ----

// tokenizer.json of ggml-vocab-llama-spm as transformers' converter writes it: BPE with byte
// fallback, merges from the SentencePiece scores (every split of a piece into two pieces, ordered
// by the merged piece's score, as transformers' SentencePieceExtractor orders them), <unk> <s>
// </s> as special added tokens, and the given normalizer / pre-tokenizer.
json llama_tokenizer_json(const json& normalizer, const json& pre_tokenizer) {
  static const json base = []() -> json {
    const gguf::GGUFFile f(vocab_path("llama-spm"));
    const auto& toks = f.find("tokenizer.ggml.tokens")->as_array().items;
    const auto& scores = f.find("tokenizer.ggml.scores")->as_array().items;
    const auto& types = f.find("tokenizer.ggml.token_type")->as_array().items;
    std::map<std::string, size_t> id;
    json vocab = json::object();
    json added = json::array();
    for (size_t i = 0; i < toks.size(); ++i) {
      id[toks[i].as_string()] = i;
      vocab[toks[i].as_string()] = i;
      if (types[i].as_int() == static_cast<int>(TokenType::kControl) ||
          types[i].as_int() == static_cast<int>(TokenType::kUnknown)) {
        added.push_back({{"id", i},
                         {"content", toks[i].as_string()},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
      }
    }
    struct M {
      double score;
      size_t merged, left, right;
    };
    std::vector<M> ms;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (types[i].as_int() != static_cast<int>(TokenType::kNormal)) continue;
      const std::string& t = toks[i].as_string();
      for (size_t k = 1; k < t.size(); ++k) {
        if ((static_cast<uint8_t>(t[k]) & 0xC0) == 0x80) continue;  // inside a character
        auto l = id.find(t.substr(0, k));
        auto r = id.find(t.substr(k));
        if (l == id.end() || r == id.end()) continue;
        if (types[l->second].as_int() != 1 || types[r->second].as_int() != 1) continue;
        ms.push_back({scores[i].as_float(), i, l->second, r->second});
      }
    }
    std::sort(ms.begin(), ms.end(), [](const M& a, const M& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.merged != b.merged) return a.merged < b.merged;
      if (a.left != b.left) return a.left < b.left;
      return a.right < b.right;
    });
    json merges = json::array();
    for (const M& m : ms) merges.push_back({toks[m.left].as_string(), toks[m.right].as_string()});
    return {{"version", "1.0"},
            {"added_tokens", added},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single",
               {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
              {"special_tokens", json::object()}}},
            {"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"fuse_unk", true},
              {"byte_fallback", true},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  }();
  json tj = base;
  tj["normalizer"] = normalizer;
  tj["pre_tokenizer"] = pre_tokenizer;
  return tj;
}

const json kLegacyNormalizer = {
    {"type", "Sequence"},
    {"normalizers",
     {{{"type", "Prepend"}, {"prepend", kSp}},
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}}}};

json metaspace(const std::string& scheme, bool split) {
  return {
      {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", scheme}, {"split", split}};
}

class LlamaSpm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(vocab_path("llama-spm") + ".out")) GTEST_SKIP() << "no llama-spm vectors";
    vectors_ = read_vectors(vocab_path("llama-spm"));
  }
  Vectors vectors_;
};

// The merges derived from the scores reproduce llama.cpp's vectors under the legacy normalizer
// (the baseline the Metaspace expectations below are derived from).
TEST_F(LlamaSpm, LegacyNormalizerMatchesVectors) {
  const Tokenizer tok = from_json("llama-legacy", llama_tokenizer_json(kLegacyNormalizer, nullptr));
  size_t ok = 0;
  for (size_t i = 0; i < vectors_.inputs.size(); ++i) {
    const std::vector<TokenId> got = tok.encode(vectors_.inputs[i], false, false);
    EXPECT_EQ(got, vectors_.ids[i]) << "'" << vectors_.inputs[i] << "' got:" << show(got);
    ok += got == vectors_.ids[i];
  }
  std::cout << "[ hf       ] llama-spm legacy normalizer: " << ok << "/" << vectors_.inputs.size()
            << " as llama.cpp's vectors\n";
}

// Metaspace(prepend_scheme first, split false), as transformers writes Llama / Mistral today.
// Hugging Face prepends "\u2581" only where the text does not already start with one, so: a
// string that does not start with a space tokenizes as its vector says; " " + s tokenizes as the
// vector of s (" " alone is "\u2581", id 29871).
TEST_F(LlamaSpm, MetaspaceFirstMatchesVectorsReadThroughHfSemantics) {
  Metadata kv;
  const json tj = llama_tokenizer_json(nullptr, metaspace("first", false));
  const Tokenizer tok = from_json("llama-metaspace-first", tj, &kv);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.kvasir.metaspace")->as_string(), "first");
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.kvasir.metaspace_split"), nullptr);
  EXPECT_TRUE(find_key(kv, "tokenizer.ggml.add_space_prefix")->as_bool());
  const hf_ref::HfReference ref(tj);
  size_t checked = 0;
  for (const std::string& s : vectors_.inputs) {
    const std::vector<TokenId> got = tok.encode(s, false, true);
    const std::vector<int> hf = ref.encode(s, false);
    EXPECT_EQ(got, std::vector<TokenId>(hf.begin(), hf.end())) << "'" << s << "'";
    const std::vector<TokenId>* want = nullptr;
    std::vector<TokenId> one_space = {29871};
    if (!s.starts_with(' ')) {
      want = vectors_.find(s);
    } else if (s == " ") {
      want = &one_space;
    } else {
      want = vectors_.find(s.substr(1));
    }
    if (!want) continue;
    EXPECT_EQ(got, *want) << "'" << s << "' got:" << show(got);
    ++checked;
  }
  EXPECT_GT(checked, 30u);
  // Special tokens: only the run at the start of the text gets the prefix.
  EXPECT_EQ(tok.encode("<s> Hello", false, true), std::vector<TokenId>({1, 15043}));
  EXPECT_EQ(tok.encode("Hello", true, true), std::vector<TokenId>({1, 15043}));
  const std::vector<TokenId> hello_no_prefix = tok.encode("<s>Hello", false, true);
  EXPECT_EQ(hello_no_prefix.front(), 1);
  EXPECT_NE(hello_no_prefix, std::vector<TokenId>({1, 15043}));
  const std::vector<int> hf = ref.encode("<s>Hello", false);
  EXPECT_EQ(hello_no_prefix, std::vector<TokenId>(hf.begin(), hf.end()));
  // Decoding drops the prefix again.
  EXPECT_EQ(tok.decode(tok.encode("Hello world", false, true)), "Hello world");
}

// prepend_scheme always / never and split true, against the reference implementation and the
// vectors where the semantics fix the answer.
TEST_F(LlamaSpm, MetaspaceAlwaysNeverSplitAsHuggingFace) {
  const std::vector<std::string> extra = {"<s>Hello</s> world",   "a  b   c", "   ",
                                          "Hello <s>  world</s>", "x\n\n  y", kSp + "Hello"};
  for (const auto& [scheme, split] : std::vector<std::pair<std::string, bool>>{
           {"always", false}, {"always", true}, {"never", false}, {"first", true}}) {
    const std::string name = "llama-" + scheme + (split ? "-split" : "");
    const json tj = llama_tokenizer_json(nullptr, metaspace(scheme, split));
    const Tokenizer tok = from_json(name, tj);
    const hf_ref::HfReference ref(tj);
    std::vector<std::string> inputs = vectors_.inputs;
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    for (const std::string& s : inputs) {
      const std::vector<int> hf = ref.encode(s, true);
      EXPECT_EQ(tok.encode(s, true, true), std::vector<TokenId>(hf.begin(), hf.end()))
          << name << " '" << s << "'";
    }
  }
  // Explicit consequences of the semantics:
  const Tokenizer always =
      from_json("llama-always", llama_tokenizer_json(nullptr, metaspace("always", false)));
  const Tokenizer never =
      from_json("llama-never", llama_tokenizer_json(nullptr, metaspace("never", false)));
  const Tokenizer split =
      from_json("llama-split", llama_tokenizer_json(nullptr, metaspace("first", true)));
  // "always": the run after a special token gets "\u2581" too ("▁Hello" = 15043).
  EXPECT_EQ(always.encode("<s>Hello", false, true), std::vector<TokenId>({1, 15043}));
  // "never": " Hello" is "▁Hello", "Hello" has no prefix ("Hello" alone is not 15043).
  EXPECT_EQ(never.encode(" Hello", false, true), std::vector<TokenId>({15043}));
  EXPECT_NE(never.encode("Hello", false, true), std::vector<TokenId>({15043}));
  // split: "   " is three words "▁" (29871 each), not the vocab's "▁▁▁" (1678, the vectors'
  // answer for two spaces, which is "▁▁▁" with the prefix).
  EXPECT_EQ(split.encode("  ", false, true), std::vector<TokenId>({29871, 29871}));
  EXPECT_EQ(*vectors_.find("  "), std::vector<TokenId>({1678}));
}

// NFKC before the legacy normalizer: compatibility characters become what their NFKC form is,
// then tokenize as that text does (vectors-checked legacy tokenizer on the explicit form).
TEST_F(LlamaSpm, NfkcBeforeLegacyNormalizer) {
  json n = kLegacyNormalizer;
  n["normalizers"].insert(n["normalizers"].begin(), json{{"type", "NFKC"}});
  Metadata kv;
  const Tokenizer tok = from_json("llama-nfkc", llama_tokenizer_json(n, nullptr), &kv);
  const Tokenizer plain =
      from_json("llama-legacy", llama_tokenizer_json(kLegacyNormalizer, nullptr));
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.kvasir.normalizer")->as_string(),
            R"({"normalizers":[{"type":"NFKC"}],"type":"Sequence"})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xEF\xAC\x81ne", "fine"},                         // U+FB01 ﬁ ligature
      {"\xE2\x91\xA0 \xEF\xBC\x92\xEF\xBC\x93", "1 23"},  // ① and full-width 2 3
      {"a\xC2\xA0"
       "b",
       "a b"},                                      // NBSP becomes a space, then "▁"
      {"\xEF\xBC\xA8\xEF\xBD\x85llo", "Hello"},     // full-width H e
      {"e\xCC\x81t\xC3\xA9", "\xC3\xA9t\xC3\xA9"},  // e + U+0301 composes to é
      {"<s>\xEF\xAC\x81</s>", "<s>fi</s>"},         // special tokens still split out
  };
  for (const auto& [in, nfkc] : cases) {
    EXPECT_EQ(tok.encode(in, true, true), plain.encode(nfkc, true, true)) << "'" << in << "'";
  }
  // NFKC after the Replace would turn U+00A0 into a space the Replace never sees: refused.
  json late = kLegacyNormalizer;
  late["normalizers"].push_back({{"type", "NFKC"}});
  expect_error("e-late-nfkc", llama_tokenizer_json(late, nullptr),
               {"tokenizer.json", "NFKC", "after Replace"});
}

// ---- Byte-level BPE from the shared GPT-2 vocab ----

json gpt2_tokenizer_json(const json& normalizer, const json& pre_tokenizer, bool ignore_merges,
                         bool special_normalized) {
  static const json base = []() -> json {
    const gguf::GGUFFile f(vocab_path("gpt-2"));
    const auto& toks = f.find("tokenizer.ggml.tokens")->as_array().items;
    const auto& types = f.find("tokenizer.ggml.token_type")->as_array().items;
    json vocab = json::object();
    json added = json::array();
    for (size_t i = 0; i < toks.size(); ++i) {
      vocab[toks[i].as_string()] = i;
      if (types[i].as_int() == static_cast<int>(TokenType::kControl)) {
        added.push_back({{"id", i}, {"content", toks[i].as_string()}, {"special", true}});
      }
    }
    json merges = json::array();
    for (const auto& m : f.find("tokenizer.ggml.merges")->as_array().items) {
      merges.push_back(m.as_string());
    }
    return {{"added_tokens", added},
            {"model",
             {{"type", "BPE"},
              {"unk_token", nullptr},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", merges}}}};
  }();
  json tj = base;
  for (json& a : tj["added_tokens"]) a["normalized"] = special_normalized;
  tj["model"]["ignore_merges"] = ignore_merges;
  tj["normalizer"] = normalizer;
  tj["pre_tokenizer"] = pre_tokenizer;
  return tj;
}

const json kByteLevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
const json kByteLevelNoRegex = {
    {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};

class Gpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(vocab_path("gpt-2"))) GTEST_SKIP() << "no ggml-vocab-gpt-2.gguf";
    gguf_ = std::make_unique<Tokenizer>(Tokenizer::from_file(vocab_path("gpt-2")));
  }
  // The llama.cpp-exact GGUF tokenizer (no normalizer) on an explicit text.
  std::vector<TokenId> gguf(const std::string& s, bool parse_special = true) const {
    return gguf_->encode(s, false, parse_special);
  }
  std::unique_ptr<Tokenizer> gguf_;
};

// The Unicode forms, written out: what ICU (and Hugging Face's unicode-normalization) make of them.
TEST(Normalizer, UnicodeFormsAndSimpleSteps) {
  auto nf = [](const char* type, const std::string& s) {
    return Normalizer::from_json(json{{"type", type}}, "test", "normalizer").apply(s);
  };
  EXPECT_EQ(nf("NFKC", "\xEF\xAC\x81"), "fi");                           // ﬁ
  EXPECT_EQ(nf("NFKC", "\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93"), "123");  // full-width digits
  EXPECT_EQ(nf("NFKC", "\xE2\x91\xA0\xE2\x91\xA1"), "12");               // ① ②
  EXPECT_EQ(nf("NFKC", "x\xC2\xB2"), "x2");                              // superscript two
  EXPECT_EQ(nf("NFKC", "\xE3\x80\x80"), " ");                            // ideographic space
  EXPECT_EQ(nf("NFC", "\xEF\xAC\x81"), "\xEF\xAC\x81");                  // NFC keeps ﬁ
  EXPECT_EQ(nf("NFC", "e\xCC\x81"), "\xC3\xA9");                         // e + U+0301 -> é
  EXPECT_EQ(nf("NFC", "\xE2\x84\xAB"), "\xC3\x85");                      // Ångström sign -> Å
  EXPECT_EQ(nf("NFD", "\xC3\xA9"), "e\xCC\x81");                         // é -> e + U+0301
  EXPECT_EQ(nf("NFKD", "\xEF\xAC\x81\xC3\xA9"), "fie\xCC\x81");
  EXPECT_EQ(nf("NFKC", kSp), kSp);                          // U+2581 has no decomposition
  EXPECT_EQ(nf("Lowercase", "A\xCE\xA3\xCE\xA3 \xC4\xB0"),  // AΣΣ İ
            "a\xCF\x83\xCF\x83 i\xCC\x87");                 // σσ (no final ς), i̇
  const json seq = {{"type", "Sequence"},
                    {"normalizers",
                     {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                      {{"type", "Replace"}, {"pattern", {{"String", "``"}}}, {"content", "\""}},
                      {{"type", "Prepend"}, {"prepend", "> "}}}}};
  const Normalizer n = Normalizer::from_json(seq, "test", "normalizer");
  EXPECT_EQ(n.apply(" \t``a`` b\xE3\x80\x80\n"), "> \"a\" b");
  EXPECT_EQ(n.apply("  "), "");  // Prepend leaves an empty text empty
  EXPECT_EQ(Normalizer::from_json_text(n.to_json_text(), "t", "k").apply("``x ``"), "> \"x \"");
}

// Qwen 2 style: NFC + Split + ByteLevel; and NFKC / NFKD with the GPT-2 ByteLevel.
TEST_F(Gpt2, UnicodeNormalizersOnByteLevel) {
  for (const char* form : {"NFC", "NFKC", "NFD", "NFKD"}) {
    Metadata kv;
    const Tokenizer tok =
        from_json(std::string("gpt2-") + form,
                  gpt2_tokenizer_json(json{{"type", form}}, kByteLevel, false, false), &kv);
    EXPECT_EQ(find_key(kv, "tokenizer.ggml.pre")->as_string(), "gpt-2");
    EXPECT_EQ(find_key(kv, "tokenizer.ggml.kvasir.special_normalized"), nullptr);
    const std::string f = form;
    const bool compat = f == "NFKC" || f == "NFKD";
    const bool decomposed = f == "NFD" || f == "NFKD";
    // ﬁle ①２ café (é precomposed) e + U+0301
    const std::string in =
        "\xEF\xAC\x81le \xE2\x91\xA0\xEF\xBC\x92 caf\xC3\xA9 e\xCC\x81<|endoftext|>\xEF\xAC\x81";
    const std::string want_text =
        std::string(compat ? "file 12" : "\xEF\xAC\x81le \xE2\x91\xA0\xEF\xBC\x92") +
        (decomposed ? " cafe\xCC\x81 e\xCC\x81" : " caf\xC3\xA9 \xC3\xA9") + "<|endoftext|>" +
        (compat ? "fi" : "\xEF\xAC\x81");
    EXPECT_EQ(tok.encode(in, false, true), gguf(want_text)) << form;
  }
  // Special tokens marked normalized are matched after NFKC: full-width ＜｜endoftext｜＞ is the
  // special token; not normalized, it stays text (the text "<|endoftext|>" after NFKC).
  const std::string wide =
      "\xEF\xBC\x9C\xEF\xBD\x9C"
      "endoftext\xEF\xBD\x9C\xEF\xBC\x9E";
  Metadata kv;
  const Tokenizer normalized = from_json(
      "gpt2-nfkc-sn", gpt2_tokenizer_json(json{{"type", "NFKC"}}, kByteLevel, false, true), &kv);
  EXPECT_TRUE(find_key(kv, "tokenizer.ggml.kvasir.special_normalized")->as_bool());
  EXPECT_EQ(normalized.encode("a" + wide, false, true), std::vector<TokenId>({64, 50256}));
  const Tokenizer raw =
      from_json("gpt2-nfkc", gpt2_tokenizer_json(json{{"type", "NFKC"}}, kByteLevel, false, false));
  EXPECT_EQ(raw.encode("a" + wide, false, true), gguf("a<|endoftext|>", false));
}

// Lowercase / Strip / Replace / Prepend, applied to each run between special tokens.
TEST_F(Gpt2, SimpleNormalizersOnByteLevel) {
  const json n = {{"type", "Sequence"},
                  {"normalizers",
                   {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                    {{"type", "Lowercase"}},
                    {{"type", "Replace"}, {"pattern", {{"String", "``"}}}, {"content", "\""}},
                    {{"type", "Prepend"}, {"prepend", " "}}}}};
  const Tokenizer tok = from_json("gpt2-simple", gpt2_tokenizer_json(n, kByteLevel, false, false));
  EXPECT_EQ(tok.encode("  HeLLo ``World`` \xCE\xA3\xCE\x91\xCE\xA3!  ", false, true),
            gguf(" hello \"world\" \xCF\x83\xCE\xB1\xCF\x83!"));
  // Each run on its own: "  A<|endoftext|>  B  " -> " a", <|endoftext|>, " b".
  std::vector<TokenId> want = gguf(" a");
  want.push_back(50256);
  for (TokenId id : gguf(" b")) want.push_back(id);
  EXPECT_EQ(tok.encode("  A<|endoftext|>  B  ", false, true), want);
  // A token marked normalized that the normalizer changes cannot be matched as Hugging Face does.
  expect_error("e-changed", gpt2_tokenizer_json(n, kByteLevel, false, true),
               {"tokenizer.json", "added_tokens", "<|endoftext|>", "normalized"});
}

json digits(bool individual) {
  return {{"type", "Digits"}, {"individual_digits", individual}};
}

// Splits ASCII text before and after digits: each digit alone, or each run of digits.
std::vector<std::string> digit_split(const std::string& s, bool individual) {
  std::vector<std::string> out;
  std::string cur;
  bool cur_digits = false;
  for (char c : s) {
    const bool d = c >= '0' && c <= '9';
    if (!cur.empty() && (d != cur_digits || (d && individual))) {
      out.push_back(cur);
      cur.clear();
    }
    cur += c;
    cur_digits = d;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Digits before ByteLevel: the GPT-2 tokenizer on each digit-split piece, concatenated.
TEST_F(Gpt2, DigitsThenByteLevel) {
  const std::vector<std::string> inputs = {"abc 12345 x42y", "3.14159 and 2024-06-01",
                                           "no digits here", "0", " 7 77 777 7777"};
  for (bool individual : {true, false}) {
    const json pt = {{"type", "Sequence"}, {"pretokenizers", {digits(individual), kByteLevel}}};
    Metadata kv;
    const json tj = gpt2_tokenizer_json(nullptr, pt, false, false);
    const Tokenizer tok = from_json(individual ? "gpt2-digits1" : "gpt2-digits", tj, &kv);
    EXPECT_EQ(find_key(kv, "tokenizer.ggml.pre")->as_string(), "gpt-2");
    const auto& re = find_key(kv, "tokenizer.ggml.kvasir.pre_regexes")->as_array().items;
    ASSERT_EQ(re.size(), 2u);
    EXPECT_EQ(re[0].as_string(), individual ? R"(\p{N})" : R"(\p{N}+)");
    const hf_ref::HfReference ref(tj);
    for (const std::string& s : inputs) {
      std::vector<TokenId> want;
      for (const std::string& piece : digit_split(s, individual)) {
        for (TokenId id : gguf(piece)) want.push_back(id);
      }
      EXPECT_EQ(tok.encode(s, false, true), want) << individual << " '" << s << "'";
      const std::vector<int> hf = ref.encode(s, false);
      EXPECT_EQ(want, std::vector<TokenId>(hf.begin(), hf.end())) << "reference '" << s << "'";
    }
    // Non-ASCII numbers are general category N too: "٣" (Arabic-Indic three), "②".
    const std::string s = "x\xD9\xA3\xE2\x91\xA1y";
    const std::vector<int> hf = ref.encode(s, false);
    EXPECT_EQ(tok.encode(s, false, true), std::vector<TokenId>(hf.begin(), hf.end()));
  }
  // Llama 3 Split then Digits: the Split's preset with the digit regex after it.
  const char* const llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const json split = {{"type", "Split"},
                      {"pattern", {{"Regex", llama3}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const json pt = {{"type", "Sequence"},
                   {"pretokenizers", {split, digits(true), kByteLevelNoRegex}}};
  const json tj = gpt2_tokenizer_json(json{{"type", "NFC"}}, pt, true, false);
  Metadata kv;
  const Tokenizer tok = from_json("gpt2-llama3-digits", tj, &kv);
  EXPECT_EQ(find_key(kv, "tokenizer.ggml.pre")->as_string(), "llama3");
  const hf_ref::HfReference ref(tj);
  for (const std::string& s :
       std::vector<std::string>{"In 2024, 1234567 people's  items\n\n cost $3.50", "abc123def"}) {
    const std::vector<int> hf = ref.encode(s, false);
    EXPECT_EQ(tok.encode(s, false, true), std::vector<TokenId>(hf.begin(), hf.end())) << s;
  }
}

TEST_F(Gpt2, UnsupportedShapesAreRefusedByName) {
  expect_error("e-bert-norm",
               gpt2_tokenizer_json(json{{"type", "Precompiled"}}, kByteLevel, false, false),
               {"tokenizer.json", "normalizer.type", "Precompiled"});
  const json regex_replace = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "NFC"}},
        {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}}}};
  expect_error("e-regex-replace", gpt2_tokenizer_json(regex_replace, kByteLevel, false, false),
               {"tokenizer.json", "normalizer.normalizers[1].pattern", "Regex"});
  const json late_digits = {{"type", "Sequence"}, {"pretokenizers", {kByteLevel, digits(true)}}};
  expect_error("e-late-digits", gpt2_tokenizer_json(nullptr, late_digits, false, false),
               {"tokenizer.json", "pre_tokenizer.pretokenizers[0]", "ByteLevel must come last"});
  const json ws = {{"type", "Sequence"},
                   {"pretokenizers", {{{"type", "WhitespaceSplit"}}, kByteLevel}}};
  expect_error("e-ws", gpt2_tokenizer_json(nullptr, ws, false, false),
               {"tokenizer.json", "pre_tokenizer.pretokenizers[0].type", "WhitespaceSplit"});
}

TEST_F(LlamaSpm, UnsupportedMetaspaceShapesAreRefusedByName) {
  expect_error("e-ms-norm", llama_tokenizer_json(kLegacyNormalizer, metaspace("first", false)),
               {"tokenizer.json", "normalizer step Prepend", "Metaspace"});
  json bad = metaspace("sometimes", false);
  expect_error("e-ms-scheme", llama_tokenizer_json(nullptr, bad),
               {"tokenizer.json", "pre_tokenizer.prepend_scheme", "sometimes"});
  const json strip = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
                        kLegacyNormalizer["normalizers"][0],
                        kLegacyNormalizer["normalizers"][1]}}};
  expect_error("e-spm-strip", llama_tokenizer_json(strip, nullptr),
               {"tokenizer.json", "Strip", "byte-fallback"});
}

}  // namespace
}  // namespace kvasir
