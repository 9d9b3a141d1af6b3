#include "kvasir/tokenizer/incremental_detokenizer.h"

#include "kvasir/tokenizer/unicode.h"

namespace kvasir {

namespace {
const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, Options options)
    : tok_(tokenizer), opt_(options) {}

std::string IncrementalDetokenizer::push(TokenId id) {
  std::string_view piece = tok_.piece_view(id, opt_.render_special);
  if (first_ && opt_.strip_leading_space && !piece.empty() && piece.front() == ' ') {
    piece.remove_prefix(1);
  }
  first_ = false;
  pending_ += piece;
  std::string out;
  drain(out);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  drain(out);
  if (!pending_.empty()) out += kReplacement;  // an incomplete character at the very end
  pending_.clear();
  first_ = true;
  return out;
}

void IncrementalDetokenizer::drain(std::string& out) {
  const std::string_view p(pending_);
  size_t i = 0;
  while (i < p.size()) {
    const int r = unicode::utf8_scan(p.substr(i));
    if (r == 0) break;  // incomplete: wait for more bytes
    if (r > 0) {
      out.append(p.substr(i, static_cast<size_t>(r)));
      i += static_cast<size_t>(r);
    } else {
      out += kReplacement;
      i += static_cast<size_t>(-r);
    }
  }
  pending_.erase(0, i);
}

}  // namespace kvasir
