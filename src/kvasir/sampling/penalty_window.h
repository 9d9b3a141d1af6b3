// PenaltyWindow: per-token counts over a request's most recent N tokens (prompt followed by
// output), kept two ways: all tokens in the window (for the repetition penalty) and output tokens
// only (for the frequency and presence penalties). last_n = -1 counts every token ever pushed,
// 0 counts nothing (push is a no-op).
//
// Memory grows with the window, not the vocabulary: a ring buffer of the window's tokens plus an
// open-addressing hash table (linear probing, backward-shift deletion) of the distinct tokens in
// it. push() is O(1) amortized; it allocates only while the window or the number of distinct
// tokens is still growing, so a full window costs no allocation in steady state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvasir {

class PenaltyWindow {
 public:
  struct Entry {
    int32_t token = -1;  // -1 marks an empty slot
    int32_t count_all = 0;
    int32_t count_output = 0;
  };

  explicit PenaltyWindow(int32_t last_n);

  // Appends a token (token >= 0; the caller checks the vocabulary range); the oldest leaves the
  // window once it holds last_n tokens.
  void push(int32_t token, bool is_output);
  void clear();

  int64_t size() const { return n_in_window_; }     // tokens currently in the window
  int32_t distinct() const { return n_distinct_; }  // distinct tokens currently in the window
  // Counts for one token (zeros when absent).
  Entry find(int32_t token) const;

  // Calls f(const Entry&) once per distinct token in the window, in unspecified order.
  template <class F>
  void for_each(F&& f) const {
    if (n_distinct_ == 0) return;
    for (const Entry& e : slots_) {
      if (e.token >= 0) f(e);
    }
  }

 private:
  uint32_t home(int32_t token) const;
  Entry& insert_or_find(int32_t token);
  void decrement(int32_t token, bool is_output);
  void rehash(size_t capacity);

  int32_t last_n_;
  std::vector<uint32_t> ring_;  // (token << 1) | is_output; grows to last_n_, then wraps
  size_t ring_head_ = 0;        // oldest entry once the ring is full
  int64_t n_in_window_ = 0;
  std::vector<Entry> slots_;  // power-of-two size, load factor <= 1/2
  uint32_t shift_ = 32;
  int32_t n_distinct_ = 0;
};

}  // namespace kvasir
