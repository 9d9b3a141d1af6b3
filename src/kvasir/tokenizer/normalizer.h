// Text normalizer: the subset of Hugging Face `tokenizers` normalizers that Kvasir applies to
// input text before pre-tokenization, each exactly as tokenizers/src/normalizers/ defines it.
//
// A Normalizer is a list of steps applied in order (a tokenizer.json "Sequence" is flattened):
//  - NFC, NFD, NFKC, NFKD: Unicode normalization forms (ICU's Normalizer2; Hugging Face uses the
//    unicode-normalization crate: the two agree except on characters one Unicode version has
//    and the other lacks).
//  - Lowercase: every code point replaced by its full lowercase mapping, one code point at a
//    time (no context: "Σ" is always "σ"; "İ" becomes "i̇"), as Rust's char::to_lowercase.
//  - Strip {strip_left, strip_right}: leading / trailing White_Space code points removed.
//  - Replace {pattern: {String: p}, content: c}: every non-overlapping occurrence of p, left to
//    right, replaced by c (an empty p replaces nothing). Regex patterns are not supported.
//  - Prepend {prepend: p}: p put before a non-empty text.
// Anything else (BertNormalizer, Precompiled, Nmt, StripAccents, ByteLevel, Replace with a Regex)
// is refused by from_json() with a kvasir::Error naming the source and the field.
//
// Input text is UTF-8; when a step has to decode it, ill-formed bytes become U+FFFD (Hugging
// Face only ever sees valid UTF-8). A Normalizer is immutable after construction and may be
// used from many threads at once.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir {

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend };
  Kind kind = Kind::kNfc;
  bool left = false;   // Strip
  bool right = false;  // Strip
  std::string from;    // Replace pattern, Prepend text
  std::string to;      // Replace content
};

class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}

  // Parses a tokenizer.json normalizer object (null gives an empty normalizer). Errors read
  // "<source>: field '<path>.type' = ...": `path` names where `j` sits ("normalizer").
  static Normalizer from_json(const nlohmann::json& j, const std::string& source,
                              const std::string& path);
  // The same from JSON text (the tokenizer.ggml.kvasir.normalizer metadata value).
  static Normalizer from_json_text(std::string_view text, const std::string& source,
                                   const std::string& path);
  // JSON text from_json_text() reads back as this normalizer (a Sequence of the steps).
  std::string to_json_text() const;

  bool empty() const { return steps_.empty(); }
  const std::vector<NormalizerStep>& steps() const { return steps_; }
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

// The name tokenizer.json uses for a step kind ("NFKC", "Lowercase", ...).
std::string_view normalizer_step_name(NormalizerStep::Kind kind);

}  // namespace kvasir
