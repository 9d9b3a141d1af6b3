#include "kvasir/tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <unordered_map>

#include "kvasir/tokenizer/pre_tokenizer.h"
#include "kvasir/tokenizer/unicode.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

namespace ta = token_attr;

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

// Typed access to the metadata list, with errors that name the source and the key.
class Keys {
 public:
  Keys(const Metadata& kv, const std::string& source) : source_(source) {
    for (const auto& [k, v] : kv) index_.emplace(k, &v);
  }

  const gguf::Value* find(std::string_view key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : it->second;
  }

  [[noreturn]] void bad_type(std::string_view key, const gguf::Value& v,
                             std::string_view expected) const {
    fail("{}: metadata key '{}' has type {}, expected {}", source_, key, v.type_name(), expected);
  }

  std::string string(std::string_view key, std::string def) const {
    const gguf::Value* v = find(key);
    if (!v) return def;
    if (v->type != gguf::ValueType::STRING) bad_type(key, *v, "string");
    return v->as_string();
  }

  bool boolean(std::string_view key, bool def) const {
    const gguf::Value* v = find(key);
    if (!v) return def;
    if (v->type != gguf::ValueType::BOOL && !v->is_integer()) bad_type(key, *v, "bool");
    return v->as_bool();
  }

  // An integer key; nullopt-like: returns false when absent.
  bool integer(std::string_view key, int64_t& out) const {
    const gguf::Value* v = find(key);
    if (!v) return false;
    if (!v->is_integer()) bad_type(key, *v, "an integer");
    out = v->type == gguf::ValueType::UINT64
              ? static_cast<int64_t>(std::min<uint64_t>(v->as_uint(), uint64_t{INT64_MAX}))
              : v->as_int();
    return true;
  }

  const gguf::Array* array(std::string_view key, std::string_view expected,
                           bool (*elem_ok)(gguf::ValueType)) const {
    const gguf::Value* v = find(key);
    if (!v) return nullptr;
    if (v->type != gguf::ValueType::ARRAY || !elem_ok(v->as_array().elem_type)) {
      bad_type(key, *v, expected);
    }
    return &v->as_array();
  }

  const std::string& source() const { return source_; }

 private:
  const std::string& source_;
  std::unordered_map<std::string_view, const gguf::Value*> index_;
};

bool is_string_type(gguf::ValueType t) {
  return t == gguf::ValueType::STRING;
}
bool is_number_type(gguf::ValueType t) {
  return t != gguf::ValueType::STRING && t != gguf::ValueType::ARRAY && t != gguf::ValueType::BOOL;
}
bool is_integer_type(gguf::ValueType t) {
  return is_number_type(t) && t != gguf::ValueType::FLOAT32 && t != gguf::ValueType::FLOAT64;
}

uint32_t attr_from_type(int64_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal:
      return ta::kNormal;
    case TokenType::kUnknown:
      return ta::kUnknown;
    case TokenType::kControl:
      return ta::kControl;
    case TokenType::kUserDefined:
      return ta::kUserDefined;
    case TokenType::kUnused:
      return ta::kUnused;
    case TokenType::kByte:
      return ta::kByte;
    default:
      return ta::kUndefined;
  }
}

bool one_of(std::string_view s, std::initializer_list<std::string_view> xs) {
  return std::find(xs.begin(), xs.end(), s) != xs.end();
}

bool contains_any(std::string_view s, std::initializer_list<std::string_view> xs) {
  for (auto x : xs) {
    if (s.find(x) != std::string_view::npos) return true;
  }
  return false;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// Byte-level BPE token text back to bytes; characters outside the byte alphabet are kept
// visible the way llama.cpp marks them.
std::string decode_byte_level(const std::string& text) {
  std::string out;
  for (uint32_t cp : unicode::decode_lenient(text)) {
    const int b = unicode::unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (char c : unicode::to_utf8(cp)) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
    out += text + "]";
  }
  return out;
}

std::string render_piece(const Vocab& v, TokenId id) {
  const TokenData& t = v.tokens[id];
  if (t.attr & (ta::kUnknown | ta::kControl | ta::kUserDefined)) return t.text;
  if (t.attr & ta::kNormal) {
    if (v.type == VocabType::kBpe) return decode_byte_level(t.text);
    std::string s = t.text;
    replace_all(s, kSpace, " ");
    return s;
  }
  if (t.attr & ta::kByte) return std::string(1, static_cast<char>(v.token_byte(id)));
  return {};  // unused / undefined tokens render as nothing
}

// Makes token `id` a control token.
void make_control(Vocab& v, TokenId id) {
  v.tokens[id].attr |= ta::kControl;
}

// Sets (on) or clears attribute `bit` of the token whose text is `text`, if there is one.
void set_attr(Vocab& v, std::string_view text, uint32_t bit, bool on) {
  const TokenId id = v.find(text);
  if (id == kNoToken) return;
  if (on) {
    v.tokens[id].attr |= bit;
  } else {
    v.tokens[id].attr &= ~bit;
  }
}

// Reads tokenizer.ggml.model, .pre, general.name; fills those, v.type and the default token ids.
void read_tokenizer_model(const Keys& keys, Vocab& v) {
  const std::string& source = keys.source();
  const gguf::Value* model_v = keys.find("tokenizer.ggml.model");
  if (!model_v) fail("{}: missing metadata key 'tokenizer.ggml.model' (no vocabulary)", source);
  v.model = keys.string("tokenizer.ggml.model", "");
  v.pre = keys.string("tokenizer.ggml.pre", "");
  v.general_name = keys.string("general.name", "");

  if (v.model == "llama") {
    v.type = VocabType::kSpm;
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
  } else if (v.model == "bert") {
    v.type = VocabType::kWpm;
    v.bos = 101;
    v.unk = 100;
    v.sep = 102;
    v.pad = 0;
    v.mask = 103;
    v.add_sep = true;
  } else if (v.model == "gpt2") {
    v.type = VocabType::kBpe;
    v.bos = 11;
    v.eos = 11;
  } else {
    fail(
        "{}: tokenizer model '{}' (tokenizer.ggml.model) is not supported; supported models: "
        "llama (SentencePiece), gpt2 (byte-level BPE), bert (WordPiece)",
        source, v.model);
  }
}

// Reads v.type and v.pre (BPE preset); fills the per-model flag defaults and BPE pre-tokenizer.
void apply_model_defaults(const std::string& source, Vocab& v) {
  if (v.type == VocabType::kBpe) {
    const BpePreset* preset = find_bpe_preset(v.pre);
    if (!preset) {
      std::string names;
      for (auto n : bpe_preset_names()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
      fail("{}: unknown pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}", source, v.pre,
           names);
    }
    v.pre_regexes = preset->regexes;
    v.ignore_merges = preset->ignore_merges;
    v.add_bos = preset->add_bos;
    v.clean_spaces = preset->clean_spaces;
    v.add_sep = preset->add_sep;
    if (preset->no_bos) v.bos = kNoToken;
    v.add_space_prefix = false;
  } else if (v.type == VocabType::kSpm) {
    v.add_space_prefix = true;
    v.clean_spaces = false;
    v.add_bos = true;
    v.add_eos = false;
  } else {  // WPM
    v.add_space_prefix = false;
    v.clean_spaces = true;
    v.add_bos = true;
    v.add_eos = false;
    v.add_sep = true;
  }
}

// Reads tokenizer.ggml.merges (required for BPE and for SPM with
// tokenizer.ggml.kvasir.spm_merge_by_rank, not read otherwise) and
// tokenizer.ggml.kvasir.special_eats_space; fills v.merge_ranks, v.spm_merge_by_rank and
// v.special_eats_space.
void read_bpe_merges(const Keys& keys, Vocab& v) {
  if (v.type == VocabType::kWpm) return;
  const gguf::Array* merges = keys.array("tokenizer.ggml.merges", "array[string]", is_string_type);
  if (v.type == VocabType::kSpm) {
    v.special_eats_space = keys.boolean("tokenizer.ggml.kvasir.special_eats_space", false);
    v.spm_merge_by_rank = keys.boolean("tokenizer.ggml.kvasir.spm_merge_by_rank", false);
    if (!v.spm_merge_by_rank) return;  // as llama.cpp: an SPM vocab's merges are not used
    if (!merges)
      fail("{}: tokenizer.ggml.kvasir.spm_merge_by_rank needs tokenizer.ggml.merges",
           keys.source());
  }
  if (!merges) fail("{}: missing metadata key 'tokenizer.ggml.merges' (BPE vocab)", keys.source());
  v.merge_ranks.reserve(merges->items.size());
  for (size_t i = 0; i < merges->items.size(); ++i) {
    const std::string& m = merges->items[i].as_string();
    const size_t sp = m.find(' ', 1);
    std::string key = sp == std::string::npos ? std::string(" ") : m;
    v.merge_ranks.try_emplace(std::move(key), static_cast<int32_t>(i));
  }
}

// Reads tokenizer.ggml.add_space_prefix, .remove_extra_whitespaces; fills the same-named flags.
void read_whitespace_flags(const Keys& keys, Vocab& v) {
  v.add_space_prefix = keys.boolean("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  v.remove_extra_whitespaces =
      keys.boolean("tokenizer.ggml.remove_extra_whitespaces", v.remove_extra_whitespaces);
}

// Reads the tokenizer.ggml.kvasir.normalizer, .special_normalized, .metaspace, .metaspace_split
// and .pre_regexes keys (vocab.h); fills the same-named fields (pre_regexes replaces the preset's).
void read_kvasir_text_keys(const Keys& keys, Vocab& v) {
  const std::string& source = keys.source();
  if (keys.find("tokenizer.ggml.kvasir.normalizer")) {
    v.normalizer = Normalizer::from_json_text(keys.string("tokenizer.ggml.kvasir.normalizer", ""),
                                              source, "tokenizer.ggml.kvasir.normalizer");
  }
  v.special_normalized = keys.boolean("tokenizer.ggml.kvasir.special_normalized", false);
  const std::string ms = keys.string("tokenizer.ggml.kvasir.metaspace", "");
  if (!ms.empty()) {
    if (v.type != VocabType::kSpm) {
      fail("{}: metadata key 'tokenizer.ggml.kvasir.metaspace' needs an SPM ('llama') vocab",
           source);
    }
    if (ms == "always") {
      v.metaspace = Vocab::Metaspace::kAlways;
    } else if (ms == "first") {
      v.metaspace = Vocab::Metaspace::kFirst;
    } else if (ms == "never") {
      v.metaspace = Vocab::Metaspace::kNever;
    } else {
      fail(
          "{}: metadata key 'tokenizer.ggml.kvasir.metaspace' = '{}': expected always, first or "
          "never",
          source, ms);
    }
    if (v.special_eats_space) {
      fail(
          "{}: metadata keys 'tokenizer.ggml.kvasir.metaspace' and "
          "'tokenizer.ggml.kvasir.special_eats_space' cannot be combined",
          source);
    }
  }
  v.metaspace_split = keys.boolean("tokenizer.ggml.kvasir.metaspace_split", false);
  if (v.metaspace_split && v.metaspace == Vocab::Metaspace::kNone) {
    fail(
        "{}: metadata key 'tokenizer.ggml.kvasir.metaspace_split' needs "
        "'tokenizer.ggml.kvasir.metaspace'",
        source);
  }
  if (const gguf::Array* re =
          keys.array("tokenizer.ggml.kvasir.pre_regexes", "array[string]", is_string_type)) {
    if (v.type != VocabType::kBpe) {
      fail("{}: metadata key 'tokenizer.ggml.kvasir.pre_regexes' needs a BPE ('gpt2') vocab",
           source);
    }
    v.pre_regexes.clear();
    for (const auto& item : re->items) v.pre_regexes.push_back(item.as_string());
  }
}

// Reads tokenizer.ggml.tokens, .scores, .token_type; fills v.tokens, token_to_id, max_token_len.
void read_tokens(const Keys& keys, Vocab& v) {
  const std::string& source = keys.source();
  const gguf::Array* toks = keys.array("tokenizer.ggml.tokens", "array[string]", is_string_type);
  if (!toks) fail("{}: missing metadata key 'tokenizer.ggml.tokens'", source);
  const size_t n = toks->items.size();
  if (n == 0) fail("{}: 'tokenizer.ggml.tokens' is empty", source);
  if (n > static_cast<size_t>(INT32_MAX)) fail("{}: too many tokens ({})", source, n);

  const gguf::Array* scores =
      keys.array("tokenizer.ggml.scores", "array[float32] or array[int32]", is_number_type);
  if (scores && scores->items.size() < n) {
    fail("{}: 'tokenizer.ggml.scores' has {} entries for {} tokens", source, scores->items.size(),
         n);
  }
  const gguf::Array* types =
      keys.array("tokenizer.ggml.token_type", "array[int32]", is_integer_type);
  if (types && types->items.size() < n) {
    fail("{}: 'tokenizer.ggml.token_type' has {} entries for {} tokens", source,
         types->items.size(), n);
  }

  v.tokens.resize(n);
  v.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = v.tokens[i];
    t.text = toks->items[i].as_string();
    if (t.text.empty()) t.text = fmt::format("[EMPTY_{}]", i);
    auto [it, fresh] = v.token_to_id.try_emplace(t.text, static_cast<TokenId>(i));
    if (!fresh) {
      fail("{}: token text '{}' appears twice (ids {} and {}) in 'tokenizer.ggml.tokens'", source,
           t.text, it->second, i);
    }
    v.max_token_len = std::max(v.max_token_len, t.text.size());
    t.score = scores ? static_cast<float>(scores->items[i].as_float()) : 0.0f;
    t.attr = types ? attr_from_type(types->items[i].as_int()) : ta::kNormal;
  }
}

// Reads the tokenizer.ggml.*_token_id keys; fills v.bos ... v.fim_sep (only ids inside the vocab).
void read_special_token_ids(const Keys& keys, Vocab& v) {
  const TokenId n_tok = v.n_tokens();
  struct IdKey {
    const char* key;
    TokenId* id;
  };
  const IdKey id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},
      {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},
      {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},
      {"tokenizer.ggml.seperator_token_id", &v.sep},  // sic: the GGUF key is spelled so
      {"tokenizer.ggml.padding_token_id", &v.pad},
      {"tokenizer.ggml.mask_token_id", &v.mask},
      {"tokenizer.ggml.fim_pre_token_id", &v.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &v.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &v.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &v.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &v.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &v.fim_sep},
      {"tokenizer.ggml.prefix_token_id", &v.fim_pre},  // deprecated names
      {"tokenizer.ggml.suffix_token_id", &v.fim_suf},
      {"tokenizer.ggml.middle_token_id", &v.fim_mid},
  };
  for (const auto& [key, id] : id_keys) {
    if (*id >= n_tok) *id = kNoToken;  // a default outside this vocab
    int64_t value;
    if (keys.integer(key, value) && value >= 0 && value < n_tok) *id = static_cast<TokenId>(value);
  }
}

// Reads tokenizer.ggml.add_bos_token, .add_eos_token, .add_sep_token; fills v.add_bos/eos/sep.
void read_add_special_flags(const Keys& keys, Vocab& v) {
  v.add_bos = keys.boolean("tokenizer.ggml.add_bos_token", v.add_bos);
  v.add_eos = keys.boolean("tokenizer.ggml.add_eos_token", v.add_eos);
  v.add_sep = keys.boolean("tokenizer.ggml.add_sep_token", v.add_sep);
}

// Reads tokenizer.ggml.normalizer.lowercase, .strip_accents; fills v.lowercase, v.strip_accents.
void read_normalizer_flags(const Keys& keys, Vocab& v) {
  v.lowercase = keys.boolean("tokenizer.ggml.normalizer.lowercase", true);
  v.strip_accents = keys.boolean("tokenizer.ggml.normalizer.strip_accents", v.lowercase);
}

// Reads token texts; fills unset v.eot, eom, fim_* with the first known text, made a control token.
void find_special_tokens_by_text(Vocab& v) {
  const TokenId n_tok = v.n_tokens();
  struct TextRule {
    TokenId* id;
    std::initializer_list<std::string_view> texts;
  };
  const TextRule rules[] = {
      {&v.eot,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]",
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
        "<end_of_utterance>"}},
      {&v.eom, {"<|eom_id|>"}},
      {&v.fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "begin\xEF\xBD\x9C>",
        "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"}},
      {&v.fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
        "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"}},
      {&v.fim_mid,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "end\xEF\xBD\x9C>",
        "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"}},
      {&v.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {&v.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&v.fim_sep, {"<|file_sep|>"}},
  };
  for (const TextRule& rule : rules) {
    if (*rule.id != kNoToken) continue;
    for (TokenId id = 0; id < n_tok; ++id) {
      if (one_of(v.tokens[id].text, rule.texts)) {
        *rule.id = id;
        make_control(v, id);
        break;
      }
    }
  }
}

// Reads token attrs and texts; marks the control tokens whose text contains "unused" as unused.
void mark_unused_control_tokens(Vocab& v) {
  for (TokenData& t : v.tokens) {
    if ((t.attr & ta::kControl) && t.text.find("unused") != std::string::npos) {
      t.attr |= ta::kUnused;
    }
  }
}

// Reads the flags `eog`; clears "<|end|>" (made user-defined) beside return+call or call+flush.
void unmark_message_end(Vocab& v, std::vector<bool>& eog) {
  // gpt-oss / solar-open: "<|end|>" ends a message, not the generation.
  bool has_return = false, has_call = false, has_flush = false;
  TokenId end_id = kNoToken;
  for (TokenId id = 0; id < v.n_tokens(); ++id) {
    if (!eog[id]) continue;
    const std::string& t = v.tokens[id].text;
    if (t == "<|return|>") has_return = true;
    if (t == "<|call|>" || t == "<|calls|>") has_call = true;
    if (t == "<|flush|>") has_flush = true;
    if (t == "<|end|>") end_id = id;
  }
  if (end_id != kNoToken && ((has_return && has_call) || (has_call && has_flush))) {
    eog[end_id] = false;
    v.tokens[end_id].attr = ta::kUserDefined;
  }
}

// Reads the flags `eog`; clears "</s>" (made normal) when "<|tool_response>" is flagged too.
void unmark_s_beside_tool_response(Vocab& v, std::vector<bool>& eog) {
  // gemma4 / paddleocr: "</s>" is not an end of generation when "<|tool_response>" is.
  bool has_tool_response = false;
  TokenId s_id = kNoToken;
  for (TokenId id = 0; id < v.n_tokens(); ++id) {
    if (!eog[id]) continue;
    if (v.tokens[id].text == "<|tool_response>") has_tool_response = true;
    if (v.tokens[id].text == "</s>") s_id = id;
  }
  if (has_tool_response && s_id != kNoToken) {
    eog[s_id] = false;
    v.tokens[s_id].attr = ta::kNormal;
  }
}

// Reads the special token ids and token texts; fills v.eog_tokens and fixes those tokens' attrs.
void collect_eog_tokens(Vocab& v) {
  const TokenId n_tok = v.n_tokens();
  std::vector<bool> eog(n_tok, false);
  for (TokenId id : {v.fim_pad, v.fim_rep, v.fim_sep}) {
    if (id != kNoToken) eog[id] = true;
  }
  for (TokenId id = 0; id < n_tok; ++id) {
    if (one_of(v.tokens[id].text, {"<|eot_id|>",
                                   "<|im_end|>",
                                   "<|end|>",
                                   "<|return|>",
                                   "<|call|>",
                                   "<|flush|>",
                                   "<|calls|>",
                                   "<end_of_turn>",
                                   "<|endoftext|>",
                                   "</s>",
                                   "<|eom_id|>",
                                   "<EOT>",
                                   "_<EOT>",
                                   "[EOT]",
                                   "[EOS]",
                                   "<|end_of_text|>",
                                   "<end_of_utterance>",
                                   "<eos>",
                                   "<turn|>",
                                   "<|tool_response>",
                                   "<\xEF\xBD\x9C"
                                   "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                   "[e~["})) {
      eog[id] = true;
      make_control(v, id);
    }
  }
  // gpt-oss: these always render.
  for (TokenId id = 0; id < n_tok; ++id) {
    if (one_of(v.tokens[id].text, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      v.tokens[id].attr = ta::kUserDefined;
    }
  }
  for (TokenId id : {v.eos, v.eot, v.eom}) {
    if (id != kNoToken) eog[id] = true;
  }
  unmark_message_end(v, eog);
  unmark_s_beside_tool_response(v, eog);
  for (TokenId id = 0; id < n_tok; ++id) {
    if (eog[id]) v.eog_tokens.push_back(id);
  }
}

// Reads token attrs; fills v.special_tokens: control, user-defined, unknown, longest text first.
void collect_special_tokens(Vocab& v) {
  for (TokenId id = 0; id < v.n_tokens(); ++id) {
    if (v.tokens[id].attr & (ta::kControl | ta::kUserDefined | ta::kUnknown)) {
      v.special_tokens.push_back(id);
    }
  }
  // std::sort (not stable) on ids in increasing order, as llama.cpp does, so that ties between
  // equally long tokens fall the same way.
  std::sort(v.special_tokens.begin(), v.special_tokens.end(), [&](TokenId a, TokenId b) {
    return v.tokens[a].text.size() > v.tokens[b].text.size();
  });
}

// Reads v.tokens; fills v.pieces with every token's text as token_to_piece renders it.
void render_pieces(Vocab& v) {
  v.pieces.resize(v.tokens.size());
  for (TokenId id = 0; id < v.n_tokens(); ++id) v.pieces[id] = render_piece(v, id);
}

// Reads general.architecture, v.general_name, v.pre; sets the per-model lstrip/rstrip attrs.
void apply_strip_attributes(const Keys& keys, Vocab& v) {
  std::string name = v.general_name;
  std::transform(name.begin(), name.end(), name.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  const std::string arch = keys.string("general.architecture", "");
  if (contains_any(v.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set_attr(v, "<mask>", ta::kLStrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (TokenId id : v.special_tokens) v.tokens[id].attr |= ta::kRStrip;
    set_attr(v, "</s>", ta::kRStrip, true);
    for (auto t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(v, t, ta::kRStrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set_attr(v, "[MASK]", ta::kLStrip, true);
  }
}

// tokenizer.ggml.kvasir.eog_token_ids (array of token ids, e.g. every eos_token_id of a
// Hugging Face generation_config.json): more end-of-generation tokens, added to v.eog_tokens.
void add_extra_eog_tokens(const Metadata& kv, const std::string& source, Vocab& v) {
  static constexpr std::string_view kKey = "tokenizer.ggml.kvasir.eog_token_ids";
  for (const auto& [key, value] : kv) {
    if (key != kKey) continue;
    if (value.type != gguf::ValueType::ARRAY)
      fail("{}: '{}' is {}: expected an array of token ids", source, kKey, value.type_name());
    for (const gguf::Value& item : value.as_array().items) {
      if (!item.is_integer() || item.as_int() < 0 || item.as_int() >= v.n_tokens())
        fail("{}: '{}' holds {}: expected token ids in 0 .. {}", source, kKey,
             item.is_integer() ? std::to_string(item.as_int()) : item.type_name(),
             v.n_tokens() - 1);
      v.eog_tokens.push_back(static_cast<TokenId>(item.as_int()));
    }
  }
  std::sort(v.eog_tokens.begin(), v.eog_tokens.end());
  v.eog_tokens.erase(std::unique(v.eog_tokens.begin(), v.eog_tokens.end()), v.eog_tokens.end());
}

}  // namespace

std::string_view vocab_type_name(VocabType t) {
  switch (t) {
    case VocabType::kSpm:
      return "SPM";
    case VocabType::kBpe:
      return "BPE";
    case VocabType::kWpm:
      return "WPM";
  }
  return "?";
}

int32_t Vocab::merge_rank(std::string_view left, std::string_view right, std::string& buf) const {
  buf.assign(left);
  buf.push_back(' ');
  buf.append(right);
  auto it = merge_ranks.find(std::string_view(buf));
  return it == merge_ranks.end() ? -1 : it->second;
}

TokenId Vocab::byte_token(uint8_t byte) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  TokenId id = find(std::string_view(buf, 6));
  if (id != kNoToken) return id;
  const char raw = static_cast<char>(byte);
  return find(std::string_view(&raw, 1));
}

uint8_t Vocab::token_byte(TokenId id) const {
  // "<0xXX>": the hex digits at offset 3 (up to two, as strtol would read them).
  const std::string& s = tokens[id].text;
  unsigned value = 0;
  for (size_t i = 3; i < std::min<size_t>(s.size(), 5); ++i) {
    const char c = s[i];
    if (!std::isxdigit(static_cast<unsigned char>(c))) break;
    value = value * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(c))
                                                   ? c - '0'
                                                   : std::tolower(c) - 'a' + 10);
  }
  return static_cast<uint8_t>(value);
}

bool Vocab::is_eog(TokenId id) const {
  return id != kNoToken && std::binary_search(eog_tokens.begin(), eog_tokens.end(), id);
}

Vocab load_vocab(const Metadata& kv, const std::string& source) {
  Keys keys(kv, source);
  Vocab v;
  v.source = source;

  read_tokenizer_model(keys, v);
  apply_model_defaults(source, v);
  read_bpe_merges(keys, v);
  read_whitespace_flags(keys, v);
  read_kvasir_text_keys(keys, v);

  read_tokens(keys, v);
  read_special_token_ids(keys, v);
  read_add_special_flags(keys, v);
  read_normalizer_flags(keys, v);

  find_special_tokens_by_text(v);
  mark_unused_control_tokens(v);
  collect_eog_tokens(v);
  add_extra_eog_tokens(kv, source, v);

  collect_special_tokens(v);
  render_pieces(v);
  apply_strip_attributes(keys, v);
  return v;
}

}  // namespace kvasir
