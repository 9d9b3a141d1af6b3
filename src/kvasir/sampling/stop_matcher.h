// StopMatcher: finds stop strings in streamed text. push() takes each newly decoded piece of text
// and returns the part that is safe to emit now: everything except a held-back suffix that could
// still be the beginning of a stop string (so a stop string split across several tokens is still
// caught, and its first bytes are never streamed to the client). When a stop string completes,
// the text before it is emitted, the stop string and anything after it are dropped, and the
// matcher is finished: later pushes emit nothing. When generation ends for another reason (EOS,
// max_tokens), flush() releases the held-back text.
//
// The first stop string to complete ends the text (generation stops then, so a longer one that
// started earlier but has not completed yet cannot win); if several complete within the same
// push, the one starting earliest wins, then the one listed first. Matching is on bytes; for valid
// UTF-8 input and stop strings, held-back and emitted parts always split at character boundaries.
// Returned views point into the matcher and stay valid until the next call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir {

class StopMatcher {
 public:
  struct Result {
    std::string_view text;    // safe to emit now
    int32_t stop_index = -1;  // index of the stop string that matched, -1 if none (yet)
    bool stopped() const { return stop_index >= 0; }
  };

  // Throws kvasir::Error if a stop string is empty.
  explicit StopMatcher(std::vector<std::string> stop_strings);

  Result push(std::string_view new_text);
  // Emits whatever is held back (nothing once a stop string matched).
  std::string_view flush();

  bool stopped() const { return stop_index_ >= 0; }
  int32_t stop_index() const { return stop_index_; }
  const std::vector<std::string>& stop_strings() const { return stops_; }
  size_t held_back() const { return buf_.size() - emitted_; }

 private:
  // Drops the text returned by the previous call from the front of buf_.
  void discard_emitted();
  // Length of the longest suffix of buf_ that is a proper prefix of some stop string.
  size_t partial_match_length() const;

  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string buf_;     // held-back text (plus, until the next call, the text last returned)
  size_t emitted_ = 0;  // bytes at the front of buf_ already returned
  int32_t stop_index_ = -1;
};

}  // namespace kvasir
