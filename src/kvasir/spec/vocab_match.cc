#include "kvasir/spec/vocab_match.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/printable.h"

namespace kvasir {

std::optional<std::string> vocabulary_mismatch(const Tokenizer& target, const Tokenizer& draft) {
  const int32_t n = std::min(target.n_vocab(), draft.n_vocab());
  for (int32_t id = 0; id < n; ++id) {
    const std::string& a = target.token_text(id);
    const std::string& b = draft.token_text(id);
    if (a != b)
      return fmt::format(
          "the draft model's vocabulary differs from the target's: token {} is \"{}\" in the "
          "target and \"{}\" in the draft",
          id, printable(a), printable(b));
  }
  if (target.n_vocab() != draft.n_vocab()) {
    const bool target_longer = target.n_vocab() > draft.n_vocab();
    const Tokenizer& longer = target_longer ? target : draft;
    return fmt::format(
        "the draft model's vocabulary differs from the target's: the target has {} tokens and "
        "the draft {}; token {} (\"{}\") is only in the {}",
        target.n_vocab(), draft.n_vocab(), n, printable(longer.token_text(n)),
        target_longer ? "target" : "draft");
  }
  return std::nullopt;
}

}  // namespace kvasir
