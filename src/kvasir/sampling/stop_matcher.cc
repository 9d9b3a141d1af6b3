#include "kvasir/sampling/stop_matcher.h"

#include <algorithm>

#include "kvasir/util/error.h"

namespace kvasir {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) fail("stop[{}]: stop strings must not be empty", i);
    max_len_ = std::max(max_len_, stops_[i].size());
  }
}

void StopMatcher::discard_emitted() {
  buf_.erase(0, emitted_);
  emitted_ = 0;
}

size_t StopMatcher::partial_match_length() const {
  const std::string_view text(buf_);
  for (size_t len = std::min(text.size(), max_len_ - 1); len > 0; --len) {
    const std::string_view suffix = text.substr(text.size() - len);
    for (const std::string& s : stops_) {
      if (s.size() > len && std::string_view(s).substr(0, len) == suffix) return len;
    }
  }
  return 0;
}

StopMatcher::Result StopMatcher::push(std::string_view new_text) {
  if (stopped()) return Result{{}, stop_index_};
  discard_emitted();
  const size_t old_size = buf_.size();
  buf_.append(new_text);
  if (stops_.empty()) {
    emitted_ = buf_.size();
    return Result{std::string_view(buf_), -1};
  }
  // buf_[0, old_size) held no complete stop string, so a match must end in the new text: start
  // each search at most len - 1 bytes before it.
  size_t best_pos = std::string::npos;
  int32_t best = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t pos = buf_.find(s, from);
    if (pos < best_pos) {
      best_pos = pos;
      best = static_cast<int32_t>(i);
    }
  }
  if (best >= 0) {
    stop_index_ = best;
    buf_.resize(best_pos);
    emitted_ = buf_.size();
    return Result{std::string_view(buf_), best};
  }
  emitted_ = buf_.size() - partial_match_length();
  return Result{std::string_view(buf_).substr(0, emitted_), -1};
}

std::string_view StopMatcher::flush() {
  if (stopped()) return {};
  discard_emitted();
  emitted_ = buf_.size();
  return std::string_view(buf_);
}

}  // namespace kvasir
