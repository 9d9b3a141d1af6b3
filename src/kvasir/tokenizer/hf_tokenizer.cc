#include "kvasir/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "kvasir/tokenizer/normalizer.h"
#include "kvasir/tokenizer/pre_tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kSpace = "\xE2\x96\x81";  // U+2581

// The GPT-2 regex (ByteLevel's built-in one), and the Split patterns of the published
// tokenizer.json files, each with the tokenizer.ggml.pre preset that implements it.
const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
struct KnownRegex {
  const char* pattern;
  const char* pre;
};
const KnownRegex kKnownRegexes[] = {
    {kGpt2Regex, "gpt-2"},
    // Llama 3 (meta-llama/Meta-Llama-3-8B tokenizer.json).
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama3"},
    // Qwen 2 (Qwen/Qwen2-7B tokenizer.json): single digits.
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2"},
};

// More than one UTF-8 character.
bool unicode_length_gt1(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n > 1;
}

std::optional<json> read_json(const std::string& path, bool required) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    if (required) fail("{}: not found (a Hugging Face tokenizer folder needs this file)", path);
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot be opened", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

std::string show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// j[name] when j is an object that has it and it is not null.
const json* field(const json& j, const char* name) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string get_string(const json& j, const std::string& file, const std::string& path,
                       const char* name) {
  const json* f = field(j, name);
  if (!f) fail("{}: missing field '{}.{}'", file, path, name);
  if (!f->is_string())
    fail("{}: field '{}.{}' = {}: expected a string", file, path, name, show(*f));
  return f->get<std::string>();
}

bool get_bool(const json& j, const std::string& file, const std::string& path, const char* name,
              bool def) {
  const json* f = field(j, name);
  if (!f) return def;
  if (!f->is_boolean())
    fail("{}: field '{}.{}' = {}: expected true or false", file, path, name, show(*f));
  return f->get<bool>();
}

// A field that must be absent or null (an option Kvasir does not implement).
void require_null(const json& j, const std::string& file, const std::string& path,
                  const char* name) {
  const json* f = field(j, name);
  if (!f) return;
  if (f->is_number() && f->get<double>() == 0.0) return;  // dropout 0
  if (f->is_string() && f->get<std::string>().empty()) return;
  fail("{}: field '{}.{}' = {} is not supported (expected null)", file, path, name, show(*f));
}

struct AddedToken {
  int64_t id;
  std::string content;
  bool special;
  bool normalized;
};

std::string type_of(const json& j) {
  const json* t = field(j, "type");
  return t && t->is_string() ? t->get<std::string>() : std::string("?");
}

// ---- Shape detection ----

enum class Shape { kSpm, kByteLevel, kWordPiece };

// The normalizer of a byte-fallback (SentencePiece-style) BPE without a Metaspace
// pre-tokenizer: Prepend "▁" (optional) and Replace " " -> "▁" (required), the space prefix and
// escape Kvasir's SPM path applies itself, plus the steps that commute with them (Unicode forms,
// Lowercase), which are returned as the residual normalizer.
struct SpmNormalizer {
  bool prepend = false;
  Normalizer residual;
};

SpmNormalizer spm_normalizer(const json* n, const std::string& file) {
  const char* const kSupported =
      "supported for a byte-fallback BPE without pre-tokenizer: Sequence [Prepend \"\\u2581\" "
      "(optional), Replace \" \" -> \"\\u2581\"] with NFC, NFD, NFKC, NFKD or Lowercase around "
      "them (NFKC / NFKD only before the Replace)";
  if (!n) fail("{}: normalizer = null is not supported ({})", file, kSupported);
  const Normalizer all = Normalizer::from_json(*n, file, "normalizer");
  SpmNormalizer out;
  bool replaced = false;
  std::vector<NormalizerStep> residual;
  for (const NormalizerStep& st : all.steps()) {
    using K = NormalizerStep::Kind;
    switch (st.kind) {
      case K::kPrepend:
        if (st.from != kSpace || out.prepend) {
          fail("{}: normalizer step Prepend \"{}\" is not supported ({})", file, st.from,
               kSupported);
        }
        out.prepend = true;
        break;
      case K::kReplace:
        if (st.from != " " || st.to != kSpace || replaced) {
          fail("{}: normalizer step Replace \"{}\" -> \"{}\" is not supported ({})", file, st.from,
               st.to, kSupported);
        }
        replaced = true;
        break;
      case K::kNfkc:
      case K::kNfkd:
        // They can make spaces (U+00A0, U+3000, ...), which the Replace must still see.
        if (replaced) {
          fail("{}: normalizer step {} after Replace \" \" -> \"\\u2581\" is not supported ({})",
               file, normalizer_step_name(st.kind), kSupported);
        }
        residual.push_back(st);
        break;
      case K::kNfc:
      case K::kNfd:
      case K::kLowercase:
        residual.push_back(st);
        break;
      case K::kStrip:
        fail("{}: normalizer step Strip is not supported ({})", file, kSupported);
    }
  }
  if (!replaced) {
    fail("{}: normalizer = {} is not supported: no Replace \" \" -> \"\\u2581\" ({})", file,
         show(*n), kSupported);
  }
  out.residual = Normalizer(std::move(residual));
  return out;
}

// The normalizer of a byte-fallback BPE with a Metaspace pre-tokenizer: Unicode forms and
// Lowercase only (the Metaspace does the space escape).
Normalizer metaspace_normalizer(const json* n, const std::string& file) {
  if (!n) return Normalizer();
  const Normalizer all = Normalizer::from_json(*n, file, "normalizer");
  for (const NormalizerStep& st : all.steps()) {
    using K = NormalizerStep::Kind;
    if (st.kind == K::kReplace || st.kind == K::kPrepend || st.kind == K::kStrip) {
      fail(
          "{}: normalizer step {} is not supported with a Metaspace pre-tokenizer (supported: "
          "NFC, NFD, NFKC, NFKD, Lowercase)",
          file, normalizer_step_name(st.kind));
    }
  }
  return all;
}

// The Metaspace pre-tokenizer of a byte-fallback BPE: its prepend scheme and split flag.
struct MetaspaceOptions {
  std::string scheme;
  bool split;
};

MetaspaceOptions metaspace_options(const json& pt, const std::string& file) {
  const std::string path = "pre_tokenizer";
  const std::string rep = get_string(pt, file, path, "replacement");
  if (rep != kSpace) {
    fail("{}: field 'pre_tokenizer.replacement' = '{}' is not supported (expected \"\\u2581\")",
         file, rep);
  }
  MetaspaceOptions o;
  o.scheme = field(pt, "prepend_scheme") ? get_string(pt, file, path, "prepend_scheme") : "always";
  if (o.scheme != "always" && o.scheme != "first" && o.scheme != "never") {
    fail("{}: field 'pre_tokenizer.prepend_scheme' = '{}': expected always, first or never", file,
         o.scheme);
  }
  // Older files: add_prefix_space false means "never" (Hugging Face refuses any other scheme).
  if (field(pt, "add_prefix_space") && !get_bool(pt, file, path, "add_prefix_space", true)) {
    if (field(pt, "prepend_scheme") && o.scheme != "never") {
      fail("{}: field 'pre_tokenizer.add_prefix_space' = false does not match prepend_scheme '{}'",
           file, o.scheme);
    }
    o.scheme = "never";
  }
  o.split = get_bool(pt, file, path, "split", true);
  return o;
}

// Checks the ByteLevel pre-tokenizer options; returns use_regex.
bool check_byte_level(const json& b, const std::string& file, const std::string& path) {
  if (get_bool(b, file, path, "add_prefix_space", false)) {
    fail(
        "{}: field '{}.add_prefix_space' = true is not supported (Kvasir's byte-level BPE adds no "
        "space prefix)",
        file, path);
  }
  return get_bool(b, file, path, "use_regex", true);
}

// A byte-level tokenizer.json pre_tokenizer as a tokenizer.ggml.pre preset (which gives the
// flags) and the regex list that splits as it does (pre_tokenizer.h).
struct ByteLevelPre {
  std::string pre;
  std::vector<std::string> regexes;
};

// The known Split regex `sp` names, as its preset.
std::string known_split(const json& split, const std::string& file, const std::string& sp) {
  const std::string behavior = get_string(split, file, sp, "behavior");
  if (behavior != "Isolated") {
    fail("{}: field '{}.behavior' = '{}' is not supported (expected Isolated)", file, sp, behavior);
  }
  if (get_bool(split, file, sp, "invert", false)) {
    fail("{}: field '{}.invert' = true is not supported", file, sp);
  }
  const json* pattern = field(split, "pattern");
  const json* regex = pattern ? field(*pattern, "Regex") : nullptr;
  if (!regex || !regex->is_string()) {
    fail("{}: field '{}.pattern' = {}: expected {{\"Regex\": ...}}", file, sp,
         show(pattern ? *pattern : json()));
  }
  const std::string re = regex->get<std::string>();  // JSON escapes already decoded
  for (const KnownRegex& k : kKnownRegexes) {
    if (re == k.pattern) return k.pre;
  }
  fail(
      "{}: field '{}.pattern.Regex' = '{}' is not a known pre-tokenizer regex (known: GPT-2, "
      "Llama 3, Qwen 2)",
      file, sp, re);
}

ByteLevelPre byte_level_pre(const json& pt, const std::string& file) {
  const char* const kSupported =
      "supported: ByteLevel, or Sequence [Split (a known Regex, Isolated) and Digits, in any "
      "order, at most one Split, then ByteLevel]";
  std::vector<std::pair<const json*, std::string>> items;  // (pre-tokenizer, field path)
  const std::string type = type_of(pt);
  if (type == "Sequence") {
    const json* seq = field(pt, "pretokenizers");
    if (!seq || !seq->is_array() || seq->empty()) {
      fail("{}: field 'pre_tokenizer.pretokenizers' = {}: expected a non-empty array", file,
           show(seq ? *seq : json()));
    }
    for (size_t i = 0; i < seq->size(); ++i) {
      items.emplace_back(&(*seq)[i], fmt::format("pre_tokenizer.pretokenizers[{}]", i));
    }
  } else if (type == "ByteLevel") {
    items.emplace_back(&pt, "pre_tokenizer");
  } else {
    fail("{}: pre_tokenizer.type '{}' is not supported for byte-level BPE ({})", file, type,
         kSupported);
  }
  ByteLevelPre out;
  std::string split_pre;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [j, path] = items[i];
    const std::string t = type_of(*j);
    const bool last = i + 1 == items.size();
    if (t == "ByteLevel") {
      if (!last) fail("{}: field '{}': ByteLevel must come last ({})", file, path, kSupported);
      if (check_byte_level(*j, file, path)) out.regexes.push_back(kGpt2Regex);
    } else if (last) {
      fail("{}: field '{}.type' = '{}': the sequence must end with ByteLevel ({})", file, path, t,
           kSupported);
    } else if (t == "Split") {
      if (!split_pre.empty()) {
        fail("{}: field '{}': a second Split is not supported ({})", file, path, kSupported);
      }
      split_pre = known_split(*j, file, path);
      const std::vector<std::string>& re = find_bpe_preset(split_pre)->regexes;
      out.regexes.insert(out.regexes.end(), re.begin(), re.end());
    } else if (t == "Digits") {
      // Rust's char::is_numeric is the general category N; Isolated (each digit a word) or
      // Contiguous (each run of digits a word).
      out.regexes.push_back(get_bool(*j, file, path, "individual_digits", false) ? R"(\p{N})"
                                                                                 : R"(\p{N}+)");
    } else {
      fail("{}: field '{}.type' = '{}' is not supported for byte-level BPE ({})", file, path, t,
           kSupported);
    }
  }
  out.pre = split_pre.empty() ? "gpt-2" : split_pre;
  return out;
}

// ---- Special tokens from tokenizer_config.json / special_tokens_map.json ----

// The content of tokenizer_config.json's "<typ>_token" (a string or {"content": ...}).
std::optional<std::string> special_content(const json* cfg, const json* map, const char* key) {
  for (const json* j : {cfg, map}) {
    if (!j) continue;
    const json* e = field(*j, key);
    if (!e) continue;
    if (e->is_string()) return e->get<std::string>();
    if (e->is_object() && field(*e, "content") && field(*e, "content")->is_string()) {
      return field(*e, "content")->get<std::string>();
    }
  }
  return std::nullopt;
}

}  // namespace

Metadata hf_tokenizer_metadata(const std::string& folder) {
  const std::string tok_file = (fs::path(folder) / "tokenizer.json").string();
  const std::string cfg_file = (fs::path(folder) / "tokenizer_config.json").string();
  const std::string map_file = (fs::path(folder) / "special_tokens_map.json").string();
  const json tj = *read_json(tok_file, true);
  const std::optional<json> cfg = read_json(cfg_file, false);
  const std::optional<json> smap = read_json(map_file, false);
  if (!tj.is_object()) fail("{}: expected a JSON object at the top level", tok_file);
  if (cfg && !cfg->is_object()) fail("{}: expected a JSON object at the top level", cfg_file);
  if (smap && !smap->is_object()) fail("{}: expected a JSON object at the top level", map_file);

  const json* model = field(tj, "model");
  if (!model || !model->is_object()) fail("{}: missing field 'model' (an object)", tok_file);
  const std::string mtype = field(*model, "type")
                                ? get_string(*model, tok_file, "model", "type")
                                : std::string(field(*model, "merges") ? "BPE" : "?");
  const json* normalizer = field(tj, "normalizer");
  const json* pre_tok = field(tj, "pre_tokenizer");

  // ---- Which shape ----
  Shape shape;
  std::string pre = "default";
  std::optional<MetaspaceOptions> metaspace;  // byte-fallback BPE with a Metaspace pre-tokenizer
  bool spm_prepend = false;                   // ... with a Prepend "\u2581" normalizer
  Normalizer residual;                        // the normalizer steps Kvasir applies as such
  std::optional<std::vector<std::string>> pre_regexes;  // byte-level: when the preset's differ
  if (mtype == "BPE") {
    require_null(*model, tok_file, "model", "dropout");
    require_null(*model, tok_file, "model", "continuing_subword_prefix");
    require_null(*model, tok_file, "model", "end_of_word_suffix");
    const bool byte_fallback = get_bool(*model, tok_file, "model", "byte_fallback", false);
    if (byte_fallback) {
      shape = Shape::kSpm;
      if (pre_tok && type_of(*pre_tok) == "Metaspace") {
        metaspace = metaspace_options(*pre_tok, tok_file);
        residual = metaspace_normalizer(normalizer, tok_file);
      } else if (pre_tok) {
        fail(
            "{}: pre_tokenizer.type '{}' is not supported for a byte-fallback BPE (supported: "
            "null with normalizer Sequence [Prepend \"\\u2581\", Replace \" \" -> \"\\u2581\"], or "
            "Metaspace)",
            tok_file, type_of(*pre_tok));
      } else {
        const SpmNormalizer sn = spm_normalizer(normalizer, tok_file);
        spm_prepend = sn.prepend;
        residual = sn.residual;
      }
      if (!get_bool(*model, tok_file, "model", "fuse_unk", false)) {
        fail("{}: field 'model.fuse_unk' = false is not supported (expected true)", tok_file);
      }
      if (get_bool(*model, tok_file, "model", "ignore_merges", false)) {
        fail("{}: field 'model.ignore_merges' = true is not supported with byte_fallback",
             tok_file);
      }
    } else {
      shape = Shape::kByteLevel;
      if (normalizer) residual = Normalizer::from_json(*normalizer, tok_file, "normalizer");
      if (!pre_tok) fail("{}: missing field 'pre_tokenizer' (byte-level BPE)", tok_file);
      const ByteLevelPre blp = byte_level_pre(*pre_tok, tok_file);
      pre = blp.pre;
      const bool ignore = get_bool(*model, tok_file, "model", "ignore_merges", false);
      const BpePreset* preset = find_bpe_preset(pre);
      if (!preset || preset->ignore_merges != ignore) {
        fail(
            "{}: field 'model.ignore_merges' = {} does not match pre-tokenizer '{}' (which has "
            "ignore_merges {})",
            tok_file, ignore, pre, preset ? preset->ignore_merges : false);
      }
      if (blp.regexes != preset->regexes) pre_regexes = blp.regexes;
      if (field(*model, "unk_token")) {
        fail(
            "{}: field 'model.unk_token' = {} is not supported for byte-level BPE (expected "
            "null)",
            tok_file, show(*field(*model, "unk_token")));
      }
    }
  } else if (mtype == "WordPiece") {
    shape = Shape::kWordPiece;
    pre = "default";
    if (!normalizer || type_of(*normalizer) != "BertNormalizer") {
      fail("{}: normalizer = {} is not supported for WordPiece (expected BertNormalizer)", tok_file,
           show(normalizer ? *normalizer : json()));
    }
    if (!pre_tok || type_of(*pre_tok) != "BertPreTokenizer") {
      fail("{}: pre_tokenizer = {} is not supported for WordPiece (expected BertPreTokenizer)",
           tok_file, show(pre_tok ? *pre_tok : json()));
    }
    const json* prefix = field(*model, "continuing_subword_prefix");
    if (prefix && *prefix != "##") {
      fail("{}: field 'model.continuing_subword_prefix' = {} is not supported (expected \"##\")",
           tok_file, show(*prefix));
    }
  } else {
    fail("{}: model.type '{}' is not supported (supported: BPE, WordPiece)", tok_file, mtype);
  }

  // ---- Tokens: the model vocab, then the added tokens ----
  const json* vocab = field(*model, "vocab");
  if (!vocab || !vocab->is_object()) fail("{}: missing field 'model.vocab' (an object)", tok_file);
  std::map<int64_t, std::string> by_id;
  for (const auto& [text, idv] : vocab->items()) {
    if (!idv.is_number_integer() || idv.get<int64_t>() < 0 || idv.get<int64_t>() >= INT32_MAX) {
      fail("{}: field 'model.vocab' entry '{}' = {}: expected a token id", tok_file, text,
           show(idv));
    }
    auto [it, fresh] = by_id.emplace(idv.get<int64_t>(), text);
    if (!fresh) {
      fail("{}: field 'model.vocab': id {} is given to both '{}' and '{}'", tok_file, it->first,
           it->second, text);
    }
  }
  const int64_t n_model = by_id.empty() ? 0 : by_id.rbegin()->first + 1;

  std::vector<AddedToken> added;
  if (const json* at = field(tj, "added_tokens")) {
    if (!at->is_array())
      fail("{}: field 'added_tokens' = {}: expected an array", tok_file, show(*at));
    for (size_t i = 0; i < at->size(); ++i) {
      const json& t = (*at)[i];
      const std::string path = fmt::format("added_tokens[{}]", i);
      const json* idv = field(t, "id");
      if (!idv || !idv->is_number_integer() || idv->get<int64_t>() < 0 ||
          idv->get<int64_t>() >= INT32_MAX) {
        fail("{}: field '{}.id' = {}: expected a token id", tok_file, path,
             show(idv ? *idv : json()));
      }
      AddedToken a{idv->get<int64_t>(), get_string(t, tok_file, path, "content"),
                   get_bool(t, tok_file, path, "special", false),
                   get_bool(t, tok_file, path, "normalized", true)};
      if (get_bool(t, tok_file, path, "single_word", false) ||
          get_bool(t, tok_file, path, "lstrip", false) ||
          get_bool(t, tok_file, path, "rstrip", false)) {
        fail("{}: field '{}' ('{}'): single_word / lstrip / rstrip are not supported", tok_file,
             path, a.content);
      }
      auto it = by_id.find(a.id);
      if (it != by_id.end() && it->second != a.content) {
        fail("{}: field '{}.id' = {}: the model vocab has '{}' at that id, not '{}'", tok_file,
             path, a.id, it->second, a.content);
      }
      by_id[a.id] = a.content;
      added.push_back(std::move(a));
    }
  }
  const int64_t n_tokens = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (n_tokens == 0) fail("{}: field 'model.vocab' is empty", tok_file);
  if (static_cast<int64_t>(by_id.size()) != n_tokens) {
    int64_t hole = 0;
    while (by_id.count(hole)) ++hole;
    fail(
        "{}: token ids have a hole: no token has id {} (model.vocab has ids below {}, "
        "added_tokens up to {})",
        tok_file, hole, n_model, n_tokens - 1);
  }

  std::vector<std::string> tokens(n_tokens);
  for (auto& [id, text] : by_id) tokens[id] = text;
  std::vector<int32_t> types(n_tokens, static_cast<int32_t>(TokenType::kNormal));
  if (shape == Shape::kSpm) {
    for (int64_t id = 0; id < n_tokens; ++id) {
      const std::string& t = tokens[id];
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        types[id] = static_cast<int32_t>(TokenType::kByte);
      }
    }
  }
  bool any_normalized = false, any_raw = false;
  for (const AddedToken& a : added) {
    types[a.id] = static_cast<int32_t>(a.special ? TokenType::kControl : TokenType::kUserDefined);
    (a.normalized ? any_normalized : any_raw) = true;
  }
  if (((shape == Shape::kSpm && !metaspace) || !residual.empty()) && any_normalized && any_raw) {
    fail(
        "{}: field 'added_tokens': a mix of normalized and non-normalized added tokens is not "
        "supported with this normalizer",
        tok_file);
  }
  // Normalized added tokens match their normalized form in the normalized text: under
  // Prepend("\u2581") that is special_eats_space (vocab.h); the other steps must leave the
  // token as it is, and then the whole text is normalized before matching (special_normalized).
  const bool eats_space = shape == Shape::kSpm && spm_prepend && any_normalized;
  const bool special_normalized = !residual.empty() && any_normalized && !eats_space;
  if (!residual.empty() && any_normalized) {
    for (const AddedToken& a : added) {
      if (a.normalized && residual.apply(a.content) != a.content) {
        fail(
            "{}: field 'added_tokens' ('{}'): a token marked normalized that the normalizer "
            "changes is not supported",
            tok_file, a.content);
      }
    }
  }

  // ---- Merges ----
  std::vector<std::string> merges;
  std::vector<float> scores;
  if (shape != Shape::kWordPiece) {
    const json* mj = field(*model, "merges");
    if (!mj || !mj->is_array()) fail("{}: missing field 'model.merges' (an array)", tok_file);
    StringMap<TokenId> index;
    for (int64_t id = 0; id < n_tokens; ++id) index.emplace(tokens[id], static_cast<TokenId>(id));
    std::vector<int64_t> made_by(n_tokens, -1);  // rank of the first merge that makes a token
    StringMap<size_t> seen;
    merges.reserve(mj->size());
    for (size_t i = 0; i < mj->size(); ++i) {
      const json& m = (*mj)[i];
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          fail("{}: field 'model.merges[{}]' = {}: expected \"left right\"", tok_file, i, show(m));
        }
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
        if (left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) {
          fail("{}: field 'model.merges[{}]' = {}: a space inside a merge part is not supported",
               tok_file, i, show(m));
        }
      } else {
        fail("{}: field 'model.merges[{}]' = {}: expected \"left right\" or [left, right]",
             tok_file, i, show(m));
      }
      auto cat = index.find(left + right);
      if (!index.count(left) || !index.count(right) || cat == index.end()) {
        fail(
            "{}: field 'model.merges[{}]' = {}: '{}', '{}' or their concatenation is not in "
            "model.vocab",
            tok_file, i, show(m), left, right);
      }
      std::string key = left + " " + right;
      if (auto [it, fresh] = seen.try_emplace(key, i); !fresh) {
        fail("{}: field 'model.merges[{}]' = {} repeats model.merges[{}]", tok_file, i, show(m),
             it->second);
      }
      if (made_by[cat->second] < 0) made_by[cat->second] = static_cast<int64_t>(i);
      merges.push_back(std::move(key));
    }
    if (shape == Shape::kSpm) {
      // Score = -(rank of the merge that makes the token), so that llama.cpp's merge-by-score
      // prefers low ranks; single characters and added tokens 0; multi-character tokens no merge
      // makes below every merge.
      const float below_all = -static_cast<float>(merges.size() + 1);
      scores.assign(n_tokens, 0.0f);
      for (int64_t id = 0; id < n_tokens; ++id) {
        if (made_by[id] >= 0) {
          scores[id] = -static_cast<float>(made_by[id] + 1);
        } else if (types[id] == static_cast<int32_t>(TokenType::kNormal) &&
                   unicode_length_gt1(tokens[id])) {
          scores[id] = below_all;
        }
      }
    }
  }

  // ---- WordPiece token texts, as llama.cpp's BERT converter writes them ----
  bool lowercase = true, strip_accents = true;
  if (shape == Shape::kWordPiece) {
    lowercase = get_bool(*normalizer, tok_file, "normalizer", "lowercase", true);
    const json* sa = field(*normalizer, "strip_accents");
    strip_accents =
        sa ? get_bool(*normalizer, tok_file, "normalizer", "strip_accents", true) : lowercase;
    for (int64_t id = 0; id < n_tokens; ++id) {
      if (types[id] != static_cast<int32_t>(TokenType::kNormal)) continue;
      std::string& t = tokens[id];
      t = t.starts_with("##") ? t.substr(2) : kSpace + t;
    }
  }

  // ---- Special token ids ----
  const json* cfgp = cfg ? &*cfg : nullptr;
  const json* mapp = smap ? &*smap : nullptr;
  auto find_id = [&](const std::string& content) -> std::optional<int64_t> {
    for (const AddedToken& a : added) {
      if (a.content == content) return a.id;
    }
    for (int64_t id = 0; id < n_tokens; ++id) {
      if (tokens[id] == content) return id;
    }
    return std::nullopt;
  };
  auto resolve = [&](const char* key, const std::optional<std::string>& content) {
    if (!content) return std::optional<int64_t>();
    std::optional<int64_t> id = find_id(*content);
    if (!id) {
      fail("{}: field '{}' = '{}' is not a token of {}", cfgp ? cfg_file : map_file, key, *content,
           tok_file);
    }
    return id;
  };
  std::optional<std::string> bos_c = special_content(cfgp, mapp, "bos_token");
  std::optional<std::string> eos_c = special_content(cfgp, mapp, "eos_token");
  std::optional<std::string> unk_c = special_content(cfgp, mapp, "unk_token");
  std::optional<std::string> sep_c = special_content(cfgp, mapp, "sep_token");
  std::optional<std::string> pad_c = special_content(cfgp, mapp, "pad_token");
  std::optional<std::string> cls_c = special_content(cfgp, mapp, "cls_token");
  std::optional<std::string> mask_c = special_content(cfgp, mapp, "mask_token");
  if (!unk_c && field(*model, "unk_token") && field(*model, "unk_token")->is_string()) {
    unk_c = field(*model, "unk_token")->get<std::string>();
  }
  if (!bos_c && cls_c) bos_c = cls_c;
  if (!eos_c && sep_c) eos_c = sep_c;

  // What the post-processor adds around a single sequence.
  std::optional<std::string> tmpl_first, tmpl_last;
  bool has_template = false;
  if (const json* pp = field(tj, "post_processor")) {
    std::vector<const json*> procs;
    if (type_of(*pp) == "Sequence" && field(*pp, "processors") &&
        field(*pp, "processors")->is_array()) {
      for (const json& p : *field(*pp, "processors")) procs.push_back(&p);
    } else {
      procs.push_back(pp);
    }
    for (const json* p : procs) {
      const std::string t = type_of(*p);
      if (t == "ByteLevel") continue;
      if (t == "BertProcessing" || t == "RobertaProcessing") {
        has_template = true;
        const json* c = field(*p, "cls");
        const json* s = field(*p, "sep");
        if (c && c->is_array() && !c->empty() && (*c)[0].is_string()) tmpl_first = (*c)[0];
        if (s && s->is_array() && !s->empty() && (*s)[0].is_string()) tmpl_last = (*s)[0];
        continue;
      }
      if (t != "TemplateProcessing") {
        fail(
            "{}: post_processor.type '{}' is not supported (supported: TemplateProcessing, "
            "ByteLevel, BertProcessing, RobertaProcessing, Sequence)",
            tok_file, t);
      }
      has_template = true;
      const json* single = field(*p, "single");
      if (!single || !single->is_array()) {
        fail("{}: field 'post_processor.single' = {}: expected an array", tok_file,
             show(single ? *single : json()));
      }
      size_t n_seq = 0;
      for (size_t i = 0; i < single->size(); ++i) {
        const json& e = (*single)[i];
        if (field(e, "Sequence")) {
          ++n_seq;
          continue;
        }
        const json* st = field(e, "SpecialToken");
        const json* id = st ? field(*st, "id") : nullptr;
        if (!id || !id->is_string()) {
          fail("{}: field 'post_processor.single[{}]' = {}: expected a SpecialToken or Sequence",
               tok_file, i, show(e));
        }
        if (i == 0) {
          tmpl_first = id->get<std::string>();
        } else if (i + 1 == single->size()) {
          tmpl_last = id->get<std::string>();
        } else {
          fail(
              "{}: field 'post_processor.single[{}]': a special token in the middle of the "
              "template is not supported",
              tok_file, i);
        }
      }
      if (n_seq != 1) {
        fail("{}: field 'post_processor.single': expected exactly one Sequence, found {}", tok_file,
             n_seq);
      }
    }
  }
  if (!bos_c && tmpl_first) bos_c = tmpl_first;
  if (!eos_c && tmpl_last) eos_c = tmpl_last;
  const std::optional<int64_t> bos = resolve("bos_token", bos_c);
  const std::optional<int64_t> eos = resolve("eos_token", eos_c);
  const std::optional<int64_t> unk = resolve("unk_token", unk_c);
  const std::optional<int64_t> sep = resolve("sep_token", sep_c);
  const std::optional<int64_t> pad = resolve("pad_token", pad_c);
  const std::optional<int64_t> cls = resolve("cls_token", cls_c);
  const std::optional<int64_t> mask = resolve("mask_token", mask_c);

  // add_bos / add_eos: tokenizer_config.json, else what the template adds.
  auto flag = [&](const char* key, bool def) {
    return cfgp ? get_bool(*cfgp, cfg_file, "", key, def) : def;
  };
  const bool tmpl_bos = has_template && tmpl_first && bos_c && *tmpl_first == *bos_c;
  const bool tmpl_eos = has_template && tmpl_last && eos_c && *tmpl_last == *eos_c;
  if (has_template && tmpl_first && !tmpl_bos) {
    fail("{}: field 'post_processor.single[0]' = '{}' is not the BOS token", tok_file, *tmpl_first);
  }
  if (has_template && tmpl_last && !tmpl_eos) {
    fail("{}: field 'post_processor.single': trailing special token '{}' is not the EOS token",
         tok_file, *tmpl_last);
  }
  const bool add_bos = flag("add_bos_token", tmpl_bos);
  const bool add_eos = flag("add_eos_token", tmpl_eos);

  // ---- Chat template ----
  std::optional<std::string> chat_template;
  std::vector<std::pair<std::string, std::string>> named_templates;
  if (cfgp && field(*cfgp, "chat_template")) {
    const json& ct = *field(*cfgp, "chat_template");
    if (ct.is_string()) {
      chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (size_t i = 0; i < ct.size(); ++i) {
        const std::string path = fmt::format("chat_template[{}]", i);
        const std::string name = get_string(ct[i], cfg_file, path, "name");
        const std::string tmpl = get_string(ct[i], cfg_file, path, "template");
        if (name == "default") {
          chat_template = tmpl;
        } else {
          named_templates.emplace_back(name, tmpl);
        }
      }
    } else {
      fail("{}: field 'chat_template' = {}: expected a string or a list of {{name, template}}",
           cfg_file, show(ct));
    }
  } else {
    const std::string jinja = (fs::path(folder) / "chat_template.jinja").string();
    std::error_code ec;
    if (fs::is_regular_file(jinja, ec)) {
      std::ifstream in(jinja, std::ios::binary);
      if (!in) fail("{}: cannot be opened", jinja);
      std::ostringstream ss;
      ss << in.rdbuf();
      chat_template = ss.str();
    }
  }

  // ---- The metadata ----
  Metadata kv;
  auto put = [&](std::string key, gguf::Value v) { kv.emplace_back(std::move(key), std::move(v)); };
  put("tokenizer.ggml.model", gguf::Value::str(shape == Shape::kSpm         ? "llama"
                                               : shape == Shape::kByteLevel ? "gpt2"
                                                                            : "bert"));
  put("tokenizer.ggml.pre", gguf::Value::str(pre));
  put("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  if (shape == Shape::kSpm) put("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  put("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  if (!merges.empty() || shape != Shape::kWordPiece) {
    put("tokenizer.ggml.merges", gguf::Value::string_array(merges));
  }
  // Kvasir merges an SPM vocab by rank only when told so (vocab.h): llama.cpp's own conversions
  // of such tokenizers also carry merges, and those files must tokenize as llama.cpp does.
  if (shape == Shape::kSpm)
    put("tokenizer.ggml.kvasir.spm_merge_by_rank", gguf::Value::boolean(true));
  auto put_id = [&](const char* key, const std::optional<int64_t>& id) {
    if (id) put(key, gguf::Value::u32(static_cast<uint32_t>(*id)));
  };
  put_id("tokenizer.ggml.bos_token_id", bos);
  put_id("tokenizer.ggml.eos_token_id", eos);
  put_id("tokenizer.ggml.unknown_token_id", unk);
  put_id("tokenizer.ggml.seperator_token_id", sep);  // sic: the GGUF key is spelled so
  put_id("tokenizer.ggml.padding_token_id", pad);
  put_id("tokenizer.ggml.cls_token_id", cls);
  put_id("tokenizer.ggml.mask_token_id", mask);
  put("tokenizer.ggml.add_bos_token", gguf::Value::boolean(add_bos));
  put("tokenizer.ggml.add_eos_token", gguf::Value::boolean(add_eos));
  if (shape == Shape::kSpm) {
    put("tokenizer.ggml.add_space_prefix",
        gguf::Value::boolean(metaspace ? metaspace->scheme != "never" : spm_prepend));
    if (eats_space) put("tokenizer.ggml.kvasir.special_eats_space", gguf::Value::boolean(true));
    if (metaspace) {
      put("tokenizer.ggml.kvasir.metaspace", gguf::Value::str(metaspace->scheme));
      if (metaspace->split) {
        put("tokenizer.ggml.kvasir.metaspace_split", gguf::Value::boolean(true));
      }
    }
  }
  if (!residual.empty()) {
    put("tokenizer.ggml.kvasir.normalizer", gguf::Value::str(residual.to_json_text()));
  }
  if (special_normalized) {
    put("tokenizer.ggml.kvasir.special_normalized", gguf::Value::boolean(true));
  }
  if (pre_regexes) {
    put("tokenizer.ggml.kvasir.pre_regexes", gguf::Value::string_array(*pre_regexes));
  }
  if (shape == Shape::kWordPiece) {
    put("tokenizer.ggml.normalizer.lowercase", gguf::Value::boolean(lowercase));
    put("tokenizer.ggml.normalizer.strip_accents", gguf::Value::boolean(strip_accents));
  }
  if (chat_template) put("tokenizer.chat_template", gguf::Value::str(*chat_template));
  if (!named_templates.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, tmpl] : named_templates) {
      put("tokenizer.chat_template." + name, gguf::Value::str(tmpl));
      names.push_back(name);
    }
    put("tokenizer.chat_templates", gguf::Value::string_array(names));
  }
  return kv;
}

}  // namespace kvasir
