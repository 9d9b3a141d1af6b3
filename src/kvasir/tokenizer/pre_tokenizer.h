// Pre-tokenizers of byte-level BPE vocabularies: the regex splits named by tokenizer.ggml.pre.
//
// A pre-tokenizer is a list of regexes applied in turn, as llama.cpp does: the first splits the
// text into pieces (matches and the unmatched text between them are both kept, in order), each
// further regex splits every piece again, looking only inside that piece. The final pieces are
// the "words" BPE merges never cross. Optionally each word is then rewritten into the GPT-2
// byte-level alphabet (see unicode.h).
//
// Regexes run in PCRE2 (a well-kept library shipped by Debian as libpcre2-dev) in UTF + UCP
// mode, JIT-compiled, over code points. Input is decoded leniently (invalid bytes become U+FFFD,
// as llama.cpp does). Before matching, every non-ASCII White_Space character is presented to
// the regex as U+000B (llama.cpp does the same) and U+180E as U+200B, so that `\s` means
// exactly Unicode White_Space, as in llama.cpp.
//
// Presets: find_bpe_preset() maps a tokenizer.ggml.pre name (and its llama.cpp aliases) to the
// regex list and the vocab flags llama.cpp ties to it. Unknown names return nullptr; the caller
// refuses the vocab by name.
//
// Thread safety: a PreTokenizer is immutable after construction; split() may be called from
// many threads at once (per-thread PCRE2 scratch space).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir {

struct BpePreset {
  std::string_view name;             // canonical name (llama.cpp's pre-type)
  std::vector<std::string> regexes;  // PCRE2 syntax
  bool ignore_merges = false;        // a word that is itself a token is emitted whole
  bool add_bos = false;              // default of add_bos_token for this family
  bool clean_spaces = true;          // decode() removes " ," " ." ... as llama.cpp does
  bool add_sep = false;
  bool no_bos = false;  // the family has no BOS by default
};

// nullptr when `pre` is not a known name. "" (key absent) and "default" give the default preset.
const BpePreset* find_bpe_preset(std::string_view pre);
// Every accepted tokenizer.ggml.pre name, for error messages and tests.
std::vector<std::string_view> bpe_preset_names();

class PreTokenizer {
 public:
  // Compiles the regexes; throws kvasir::Error naming the regex on a compile failure.
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Splits `text` into words (UTF-8). With byte_encode each word is rewritten into the GPT-2
  // byte-level alphabet. Throws kvasir::Error if the regex engine fails (e.g. resource limits).
  std::vector<std::string> split(std::string_view text, bool byte_encode) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir
