#include "kvasir/sampling/penalty_window.h"

#include <bit>

namespace kvasir {

namespace {
constexpr size_t kMinCapacity = 16;
}

PenaltyWindow::PenaltyWindow(int32_t last_n) : last_n_(last_n) {}

void PenaltyWindow::clear() {
  ring_.clear();
  ring_head_ = 0;
  n_in_window_ = 0;
  for (Entry& e : slots_) e = Entry{};
  n_distinct_ = 0;
}

uint32_t PenaltyWindow::home(int32_t token) const {
  // Fibonacci hashing: the top bits of token * 2^32/phi.
  const uint32_t h = static_cast<uint32_t>(token) * 2654435769u;
  return shift_ >= 32 ? 0 : h >> shift_;
}

void PenaltyWindow::rehash(size_t capacity) {
  std::vector<Entry> old;
  old.swap(slots_);
  slots_.assign(capacity, Entry{});
  shift_ = 32 - static_cast<uint32_t>(std::countr_zero(capacity));
  const size_t mask = capacity - 1;
  for (const Entry& e : old) {
    if (e.token < 0) continue;
    size_t i = home(e.token);
    while (slots_[i].token >= 0) i = (i + 1) & mask;
    slots_[i] = e;
  }
}

PenaltyWindow::Entry& PenaltyWindow::insert_or_find(int32_t token) {
  if (slots_.empty()) rehash(kMinCapacity);
  size_t mask = slots_.size() - 1;
  size_t i = home(token);
  while (slots_[i].token >= 0) {
    if (slots_[i].token == token) return slots_[i];
    i = (i + 1) & mask;
  }
  // Not present: insert, growing first if that would push the load factor above 1/2.
  if (2 * static_cast<size_t>(n_distinct_ + 1) > slots_.size()) {
    rehash(slots_.size() * 2);
    mask = slots_.size() - 1;
    i = home(token);
    while (slots_[i].token >= 0) i = (i + 1) & mask;
  }
  slots_[i].token = token;
  ++n_distinct_;
  return slots_[i];
}

PenaltyWindow::Entry PenaltyWindow::find(int32_t token) const {
  if (slots_.empty() || token < 0) return Entry{token, 0, 0};
  const size_t mask = slots_.size() - 1;
  for (size_t i = home(token); slots_[i].token >= 0; i = (i + 1) & mask) {
    if (slots_[i].token == token) return slots_[i];
  }
  return Entry{token, 0, 0};
}

void PenaltyWindow::decrement(int32_t token, bool is_output) {
  const size_t mask = slots_.size() - 1;
  size_t i = home(token);
  while (slots_[i].token != token) i = (i + 1) & mask;  // present: it is in the window
  Entry& e = slots_[i];
  --e.count_all;
  if (is_output) --e.count_output;
  if (e.count_all > 0) return;
  // Remove slot i by shifting later members of its probe run back into the hole, so lookups never
  // stop early at an empty slot.
  --n_distinct_;
  size_t hole = i;
  for (size_t j = (hole + 1) & mask; slots_[j].token >= 0; j = (j + 1) & mask) {
    const size_t h = home(slots_[j].token);
    // Entry j may move to the hole iff its home is not cyclically within (hole, j].
    const bool home_in_range = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
    if (!home_in_range) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = Entry{};
}

void PenaltyWindow::push(int32_t token, bool is_output) {
  if (last_n_ == 0 || token < 0) return;
  Entry& e = insert_or_find(token);
  ++e.count_all;
  if (is_output) ++e.count_output;
  if (last_n_ < 0) {  // unbounded: nothing ever leaves, no ring needed
    ++n_in_window_;
    return;
  }
  const uint32_t packed = (static_cast<uint32_t>(token) << 1) | (is_output ? 1u : 0u);
  if (ring_.size() < static_cast<size_t>(last_n_)) {
    ring_.push_back(packed);
    ++n_in_window_;
    return;
  }
  const uint32_t old = ring_[ring_head_];
  ring_[ring_head_] = packed;
  ring_head_ = (ring_head_ + 1) % ring_.size();
  decrement(static_cast<int32_t>(old >> 1), (old & 1u) != 0);
}

}  // namespace kvasir
