#include "kvasir/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include <utility>

#include "kvasir/tokenizer/unicode.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

// ---- The regexes (the published pre-tokenizer patterns of each model family) ----

// GPT-2. llama.cpp's string for it lacks the final "|\s+" but the splitter it actually runs
// has that branch; with it the regex describes the same split.
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

#define KV_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"

// Llama 3 (tokenizer.json has "(?i:'s|...)", written here without the inline flag).
const char* const kLlama3 = KV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 2: as Llama 3 but every digit is its own word.
const char* const kQwen2 = KV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 3.5: letters runs also take combining marks.
const char* const kQwen35 = KV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kSeedCoder = KV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kBailing =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

const char* const kExaoneMoe = KV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)";

const char* const kMiniCpm5 = KV_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Tekken and GPT-4o split camel case: upper-case run then lower-case run, ASCII case only
// (llama.cpp's rewrite of the published \p{Lu}/\p{Ll} form, which it cannot express).
#define KV_UPPER R"(((?=[\p{L}])([^a-z])))"
#define KV_LOWER R"(((?=[\p{L}])([^A-Z])))"
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?)" KV_UPPER "*" KV_LOWER R"(+|[^\r\n\p{L}\p{N}]?)" KV_UPPER "+" KV_LOWER
    R"(*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt4o = R"([^\r\n\p{L}\p{N}]?)" KV_UPPER "*" KV_LOWER "+" KV_CONTRACTIONS
                           R"(?|[^\r\n\p{L}\p{N}]?)" KV_UPPER "+" KV_LOWER "*" KV_CONTRACTIONS
                           R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kDeepseek3Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Anything but white space and a few sentence punctuation marks (… 。 ， 、 । ۔ ،).
const char* const kPoro = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";

// CJK ideographs, U+0800..U+4E00 and Hangul, as DeepSeek's tokenizers group them.
const char* const kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// DeepSeek LLM's letter class: Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic,
// Coptic, ... letters with case (code point ranges from its tokenizer.json).
std::string deepseek_llm_letters() {
  static constexpr std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
      {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
      {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
      {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
      {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
      {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
      {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
      {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
      {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
      {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
      {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
      {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
      {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
      {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
      {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
      {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
      {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
      {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
      {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
      {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
      {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
  };
  std::string s = R"(\s?[)";
  for (auto [lo, hi] : kRanges) {
    s += fmt::format("\\x{{{:X}}}", lo);
    if (hi != lo) s += fmt::format("-\\x{{{:X}}}", hi);
  }
  s += "]+";
  return s;
}

std::vector<BpePreset> make_presets() {
  std::vector<BpePreset> p;
  // Default: what llama.cpp uses when tokenizer.ggml.pre is absent or "default".
  p.push_back({"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}});
  p.push_back({"gpt-2", {kGpt2}});
  p.push_back({"gpt-2-sep", {kGpt2}, false, false, true, /*add_sep=*/true});
  p.push_back({"gpt-2-noclean", {kGpt2}, false, false, /*clean_spaces=*/false});
  p.push_back({"llama3", {kLlama3}, /*ignore_merges=*/true, /*add_bos=*/true});
  p.push_back({"dbrx", {kLlama3}});
  p.push_back({"chatglm4", {kLlama3}, false, false, true, false, /*no_bos=*/true});
  p.push_back({"qwen2", {kQwen2}, false, false, /*clean_spaces=*/false});
  p.push_back({"stablelm2", {kQwen2}});
  p.push_back({"qwen35", {kQwen35}, false, false, false});
  p.push_back({"starcoder", {R"(\p{N})", kGpt2}});
  p.push_back({"starcoder-noclean", {R"(\p{N})", kGpt2}, false, false, false});
  p.push_back({"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}});
  p.push_back({"deepseek-coder",
               {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"},
               false,
               false,
               false});
  p.push_back(
      {"deepseek-llm",
       {R"([\r\n])", deepseek_llm_letters(),
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"},
       false,
       false,
       false});
  p.push_back({"deepseek-v3",
               {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
                kDeepseek3Main},
               false,
               false,
               false});
  p.push_back({"poro", {kPoro}, false, false, false});
  p.push_back({"bloom", {kPoro}});
  p.push_back({"viking", {kPoro, R"(\p{N})"}, false, false, false});
  p.push_back({"tekken", {kTekken}, true, true, false});
  p.push_back({"gpt-4o", {kGpt4o}, false, false, false});
  p.push_back({"seed-coder", {kSeedCoder}, false, false, false});
  p.push_back({"bailingmoe", {kBailing}, false, false, false});
  p.push_back({"exaone-moe", {kExaoneMoe}});
  p.push_back({"minicpm5", {R"(\p{N}{1,3})", kMiniCpm5}, true});
  p.push_back({"chameleon",
               {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"(([\t\n]|    |  ))",
                R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2},
               false,
               true,
               false});
  return p;
}

// tokenizer.ggml.pre name -> preset name (llama.cpp's alias lists).
constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
    {"", "default"},
    {"default", "default"},
    {"gpt-2", "gpt-2"},
    {"phi-2", "gpt-2"},
    {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"},
    {"gigachat", "gpt-2"},
    {"jina-v2-es", "gpt-2"},
    {"jina-v2-de", "gpt-2"},
    {"a.x-4.0", "gpt-2"},
    {"mellum", "gpt-2"},
    {"modern-bert", "gpt-2"},
    {"mpt", "gpt-2"},
    {"olmo", "gpt-2"},
    {"jais", "gpt-2"},
    {"exaone4", "gpt-2"},
    {"trillion", "gpt-2-noclean"},
    {"granite-docling", "gpt-2-noclean"},
    {"jina-v1-en", "gpt-2-sep"},
    {"jina-v2-code", "gpt-2-sep"},
    {"roberta-bpe", "gpt-2-sep"},
    {"llama3", "llama3"},
    {"llama-v3", "llama3"},
    {"llama-bpe", "llama3"},
    {"falcon3", "llama3"},
    {"falcon-h1", "llama3"},
    {"pixtral", "llama3"},
    {"midm-2.0", "llama3"},
    {"lfm2", "llama3"},
    {"jina-v5-nano", "llama3"},
    {"dbrx", "dbrx"},
    {"smaug-bpe", "dbrx"},
    {"glm4", "chatglm4"},
    {"chatglm-bpe", "chatglm4"},
    {"qwen2", "qwen2"},
    {"deepseek-r1-qwen", "qwen2"},
    {"kormo", "qwen2"},
    {"f2llmv2", "qwen2"},
    {"hunyuan", "qwen2"},
    {"solar-open", "qwen2"},
    {"grok-2", "qwen2"},
    {"stablelm2", "stablelm2"},
    {"megrez", "stablelm2"},
    {"qwen35", "qwen35"},
    {"starcoder", "starcoder"},
    {"refact", "starcoder"},
    {"codeshell", "starcoder"},
    {"exaone", "starcoder"},
    {"minerva-7b", "starcoder"},
    {"mellum2", "starcoder"},
    {"command-r", "starcoder-noclean"},
    {"smollm", "starcoder-noclean"},
    {"falcon", "falcon"},
    {"deepseek-coder", "deepseek-coder"},
    {"deepseek-llm", "deepseek-llm"},
    {"deepseek-v3", "deepseek-v3"},
    {"hunyuan-dense", "deepseek-v3"},
    {"joyai-llm", "deepseek-v3"},
    {"poro-chat", "poro"},
    {"bloom", "bloom"},
    {"gpt3-finnish", "bloom"},
    {"viking", "viking"},
    {"tekken", "tekken"},
    {"gpt-4o", "gpt-4o"},
    {"llama4", "gpt-4o"},
    {"kanana2", "gpt-4o"},
    {"talkie", "gpt-4o"},
    {"minimax-m2", "gpt-4o"},
    {"seed-coder", "seed-coder"},
    {"bailingmoe", "bailingmoe"},
    {"bailingmoe2", "bailingmoe"},
    {"llada-moe", "bailingmoe"},
    {"exaone-moe", "exaone-moe"},
    {"minicpm5", "minicpm5"},
    {"chameleon", "chameleon"},
};

const std::vector<BpePreset>& presets() {
  static const std::vector<BpePreset> p = make_presets();
  return p;
}

// ---- PCRE2 plumbing ----

std::string pcre2_message(int code) {
  PCRE2_UCHAR32 buf[256];
  const int n = pcre2_get_error_message(code, buf, 256);
  std::string s;
  for (int i = 0; i < n; ++i) unicode::append_utf8(s, buf[i]);
  return s;
}

// Per-thread match scratch: match data (one ovector pair is enough; rc 0 then still means a
// match) and a JIT stack large enough for the nested-group patterns on long words.
struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit = nullptr;

  MatchScratch() {
    md = pcre2_match_data_create(1, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jit = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (mctx && jit) pcre2_jit_stack_assign(mctx, nullptr, jit);
    if (!md || !mctx) fail("pre-tokenizer: out of memory creating PCRE2 match data");
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit);
    pcre2_match_context_free(mctx);
    pcre2_match_data_free(md);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

// The code point the regexes see in place of `cp` (see the header comment).
uint32_t match_view(uint32_t cp) {
  if (cp < 0x80) return cp;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0xE000;  // surrogate -> private use (both "other")
  if (cp > 0x10FFFF) return 0x10FFFF;               // -> unassigned
  if (unicode::is_whitespace(cp)) return 0x0B;
  // PCRE2 10.42 still counts U+180E (a space in Unicode < 6.3, a format character since) as \s;
  // llama.cpp does not. Present it as another format character.
  if (cp == 0x180E) return 0x200B;
  return cp;
}

}  // namespace

const BpePreset* find_bpe_preset(std::string_view pre) {
  for (const auto& [alias, name] : kAliases) {
    if (alias != pre) continue;
    for (const auto& p : presets()) {
      if (p.name == name) return &p;
    }
  }
  return nullptr;
}

std::vector<std::string_view> bpe_preset_names() {
  std::vector<std::string_view> names;
  for (const auto& a : kAliases) {
    if (!a.first.empty()) names.push_back(a.first);
  }
  return names;
}

struct PreTokenizer::Impl {
  std::vector<pcre2_code*> codes;
  std::vector<std::string> sources;

  ~Impl() {
    for (auto* c : codes) pcre2_code_free(c);
  }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes)
    : impl_(std::make_unique<Impl>()) {
  for (const auto& re : regexes) {
    const std::vector<uint32_t> pat = unicode::decode_lenient(re);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (code == nullptr) {
      fail("pre-tokenizer regex '{}' does not compile at offset {}: {}", re, err_off,
           pcre2_message(err));
    }
    // JIT is an optimisation: if it is unavailable the interpreter runs the same pattern.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    impl_->codes.push_back(code);
    impl_->sources.push_back(re);
  }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::split(std::string_view text, bool byte_encode) const {
  const std::vector<uint32_t> cpts = unicode::decode_lenient(text);
  std::vector<uint32_t> view(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) view[i] = match_view(cpts[i]);

  // Pieces as (start, length) in code points.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!cpts.empty()) pieces.emplace_back(0, cpts.size());

  MatchScratch& ms = scratch();
  std::vector<std::pair<size_t, size_t>> next;
  for (size_t r = 0; r < impl_->codes.size(); ++r) {
    pcre2_code* code = impl_->codes[r];
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [start, len] : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(view.data() + start);
      size_t pos = 0;      // where the next search starts
      size_t emitted = 0;  // end of what has been emitted
      while (pos < len) {
        const int rc = pcre2_match(code, subject, len, pos, PCRE2_NO_UTF_CHECK, ms.md, ms.mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          fail("pre-tokenizer regex '{}' failed on the input: {}", impl_->sources[r],
               pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.md);
        const size_t mb = ov[0], me = ov[1];
        if (me <= mb) {  // empty match: contributes no word; step past it
          pos = mb + 1;
          continue;
        }
        if (mb > emitted) next.emplace_back(start + emitted, mb - emitted);
        next.emplace_back(start + mb, me - mb);
        emitted = pos = me;
      }
      if (emitted < len) next.emplace_back(start + emitted, len - emitted);
    }
    pieces.swap(next);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  std::string utf8;
  for (const auto& [start, len] : pieces) {
    utf8.clear();
    for (size_t i = start; i < start + len; ++i) unicode::append_utf8(utf8, cpts[i]);
    if (!byte_encode) {
      words.push_back(utf8);
      continue;
    }
    std::string enc;
    enc.reserve(utf8.size() * 2);
    for (char c : utf8) enc += unicode::byte_to_unicode(static_cast<uint8_t>(c));
    words.push_back(std::move(enc));
  }
  return words;
}

}  // namespace kvasir
