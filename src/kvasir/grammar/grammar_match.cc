// Matching text against a Grammar: hash-consed parse stacks and the lazy DFA over stack sets
// (StackStore, grammar_impl.h), and grammar_accepts().

#include <algorithm>

#include "kvasir/grammar/grammar_impl.h"

namespace kvasir::grammar {
namespace {

// Bound on the work of one expansion (rule references expanded at the top of one stack). A
// grammar without left recursion expands in finitely many steps, but a pathological one can
// take exponentially many; past this the expansion keeps what it found so far.
constexpr size_t kMaxExpandSteps = size_t{1} << 16;

}  // namespace

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 127); ++c)
    if ((ascii[c >> 6] >> (c & 63)) & 1u) return true;
  for (const auto& [a, b] : ranges) {
    if (a > hi) return false;
    if (b >= lo) return true;
  }
  return false;
}

StackStore::StackStore(const Grammar& g, size_t max_nodes) : g_(g), max_nodes_(max_nodes) {
  Node empty{0, kNone};
  empty.exp_off = 0;
  empty.exp_len = 1;
  empty.min_rem = 0;
  nodes_.push_back(empty);
  exp_data_.push_back(0);
  std::vector<uint32_t> seeds;
  for (uint32_t k = g_.alt_begin[g_.root]; k < g_.alt_begin[g_.root + 1]; ++k) {
    const uint32_t a = g_.alt_pos[k];
    seeds.push_back(a == kNone ? 0 : intern(0, a));
  }
  for (uint32_t n : seeds) {
    if (n == kNone) continue;
    expand(n);
    const Node& x = nodes_[n];
    initial_.insert(initial_.end(), exp_data_.begin() + x.exp_off,
                    exp_data_.begin() + x.exp_off + x.exp_len);
  }
  std::sort(initial_.begin(), initial_.end());
  initial_.erase(std::unique(initial_.begin(), initial_.end()), initial_.end());
  if (initial_.size() > kGbnfMaxStacks) {
    prune(initial_, 0);
    std::sort(initial_.begin(), initial_.end());
  }
}

uint32_t StackStore::intern(uint32_t parent, uint32_t pos) {
  const uint64_t key = (uint64_t{parent} << 32) | pos;
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  if (nodes_.size() >= max_nodes_) return kNone;
  const auto id = static_cast<uint32_t>(nodes_.size());
  Node n{parent, pos};
  n.depth = nodes_[parent].depth + 1;
  uint64_t h =
      (nodes_[parent].hash ^ (uint64_t{pos} + 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  n.hash = h ^ (h >> 31);
  nodes_.push_back(n);
  index_.emplace(key, id);
  return id;
}

void StackStore::stamp(std::vector<uint32_t>& mark, uint32_t& epoch) {
  if (mark.size() < nodes_.size()) mark.resize(nodes_.size() + nodes_.size() / 2 + 16, 0);
  if (++epoch == 0) {
    std::fill(mark.begin(), mark.end(), 0);
    epoch = 1;
  }
}

// The order in which pruning keeps stacks: shallower first (fewer open rules, closer to
// completion), then by a hash of the contents. A function of the stacks' contents only, never of
// node ids (which depend on what else the store has seen), so pruning is reproducible.
bool StackStore::prune_less(uint32_t a, uint32_t b) const {
  const Node &x = nodes_[a], &y = nodes_[b];
  if (x.depth != y.depth) return x.depth < y.depth;
  if (x.hash != y.hash) return x.hash < y.hash;
  // Equal hashes of distinct stacks: compare the contents from the top.
  while (a != b) {
    if (nodes_[a].pos != nodes_[b].pos) return nodes_[a].pos < nodes_[b].pos;
    a = nodes_[a].parent;
    b = nodes_[b].parent;
  }
  return false;
}

void StackStore::prune(std::vector<uint32_t>& v, size_t base) {
  auto less = [this](uint32_t a, uint32_t b) { return prune_less(a, b); };
  const auto first = v.begin() + static_cast<ptrdiff_t>(base);
  std::nth_element(first, first + kGbnfMaxStacks, v.end(), less);
  v.resize(base + kGbnfMaxStacks);
}

// llama.cpp's llama_grammar_advance_stack, iteratively and memoized per node.
void StackStore::expand(uint32_t n) {
  if (nodes_[n].exp_off != kNone) return;
  stamp(mark_exp_, epoch_exp_);
  work_.clear();
  emitted_.clear();
  work_.push_back(n);
  auto emit = [this](uint32_t y) {
    if (y >= mark_exp_.size()) mark_exp_.resize(nodes_.size() + nodes_.size() / 2 + 16, 0);
    if (mark_exp_[y] == epoch_exp_) return;
    mark_exp_[y] = epoch_exp_;
    emitted_.push_back(y);
  };
  for (size_t steps = 0; !work_.empty() && steps < kMaxExpandSteps; ++steps) {
    const uint32_t x = work_.back();
    work_.pop_back();
    if (x == kNone) continue;
    if (x == 0 || g_.is_terminal(nodes_[x].pos)) {
      emit(x);
      continue;
    }
    if (x != n && nodes_[x].exp_off != kNone) {
      const uint32_t off = nodes_[x].exp_off, len = nodes_[x].exp_len;
      for (uint32_t j = 0; j < len; ++j) emit(exp_data_[off + j]);
      continue;
    }
    const uint32_t p = nodes_[x].pos, parent = nodes_[x].parent;
    const uint32_t r = g_.elements[p].value;
    const uint32_t base = g_.next[p] == kNone ? parent : intern(parent, g_.next[p]);
    for (uint32_t k = g_.alt_begin[r + 1]; k-- > g_.alt_begin[r];) {
      const uint32_t a = g_.alt_pos[k];
      work_.push_back(a == kNone || base == kNone ? base : intern(base, a));
    }
  }
  if (emitted_.size() > kGbnfMaxStacks) prune(emitted_, 0);
  nodes_[n].exp_off = static_cast<uint32_t>(exp_data_.size());
  nodes_[n].exp_len = static_cast<uint32_t>(emitted_.size());
  exp_data_.insert(exp_data_.end(), emitted_.begin(), emitted_.end());
}

uint32_t StackStore::next_node(uint32_t s) {
  if (nodes_[s].next != kUnset) return nodes_[s].next;
  const uint32_t p = nodes_[s].pos, parent = nodes_[s].parent;
  const uint32_t nn = g_.next[p] == kNone ? parent : intern(parent, g_.next[p]);
  if (nn != kNone) expand(nn);
  nodes_[s].next = nn;
  return nn;
}

size_t StackStore::step(const std::vector<uint32_t>& src, size_t off, size_t n, uint32_t c,
                        std::vector<uint32_t>& out) {
  const size_t base = out.size();
  stamp(mark_step_, epoch_step_);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = src[off + i];
    if (s == 0 || !top_set(s).matches(c)) continue;
    const uint32_t nn = next_node(s);
    if (nn == kNone) continue;
    const uint32_t eo = nodes_[nn].exp_off, el = nodes_[nn].exp_len;
    if (mark_step_.size() < nodes_.size()) mark_step_.resize(nodes_.size() + nodes_.size() / 2, 0);
    for (uint32_t j = 0; j < el; ++j) {
      const uint32_t y = exp_data_[eo + j];
      if (mark_step_[y] == epoch_step_) continue;
      mark_step_[y] = epoch_step_;
      out.push_back(y);
    }
  }
  if (out.size() - base > kGbnfMaxStacks) prune(out, base);
  return out.size() - base;
}

bool StackStore::admits_range(const std::vector<uint32_t>& src, size_t off, size_t n, uint32_t lo,
                              uint32_t hi) const {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = src[off + i];
    if (s != 0 && top_set(s).intersects(lo, hi)) return true;
  }
  return false;
}

bool StackStore::advance(const std::vector<uint32_t>& in, uint32_t in_partial,
                         std::string_view bytes, std::vector<uint32_t>& out,
                         uint32_t* out_partial) {
  flush_if_large();
  uint32_t set = intern_set(in.data(), in.size());
  uint32_t partial = in_partial;
  for (const char ch : bytes) {
    uint32_t cp = 0;
    const int r = utf8::push_byte(partial, static_cast<uint8_t>(ch), &cp);
    if (r == 0) return false;
    if (r == 2) {
      uint32_t lo, hi;
      utf8::pending_range(partial, &lo, &hi);
      if (!set_admits_range(set, lo, hi)) return false;
      continue;
    }
    set = transition(set, cp);
    if (set == kNone) return false;
  }
  out.assign(set_stacks(set), set_stacks(set) + set_size(set));
  *out_partial = partial;
  return true;
}

uint32_t StackStore::intern_set(const uint32_t* sorted, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ sorted[i]) * 0x100000001B3ull;
  h ^= h >> 29;
  auto it = set_index_.find(h);
  if (it != set_index_.end()) {
    for (uint32_t id = it->second; id != kNone; id = sets_[id].chain) {
      const SetInfo& si = sets_[id];
      if (si.n == n && std::equal(sorted, sorted + n, set_data_.begin() + si.off)) return id;
    }
  }
  const auto id = static_cast<uint32_t>(sets_.size());
  SetInfo si{static_cast<uint32_t>(set_data_.size()), static_cast<uint32_t>(n)};
  si.hash = h;
  if (it != set_index_.end()) {
    si.chain = it->second;
    it->second = id;
  } else {
    set_index_.emplace(h, id);
  }
  set_data_.insert(set_data_.end(), sorted, sorted + n);
  sets_.push_back(si);
  return id;
}

uint32_t StackStore::transition(uint32_t set, uint32_t c) {
  if (c < 128) {
    if (sets_[set].ascii != kNone) {
      const uint32_t v = ascii_[sets_[set].ascii + c];
      if (v != kUnset) return v;
    }
  } else {
    // Which stacks admit c, as bits (sets of up to 64 stacks): the next set depends on that only.
    const uint32_t off = sets_[set].off, n = sets_[set].n;
    uint64_t pattern = 0;
    bool any = false;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t s = set_data_[off + i];
      if (s != 0 && top_set(s).matches(c)) {
        any = true;
        if (i < 64) pattern |= uint64_t{1} << i;
      }
    }
    if (!any) return kNone;
    const bool memo = n <= 64;
    if (memo && sets_[set].wide_next != kUnset && sets_[set].wide_pattern == pattern)
      return sets_[set].wide_next;
    dfa_tmp_.clear();
    step(set_data_, off, n, c, dfa_tmp_);
    std::sort(dfa_tmp_.begin(), dfa_tmp_.end());
    const uint32_t next = intern_set(dfa_tmp_.data(), dfa_tmp_.size());
    if (memo) {
      sets_[set].wide_pattern = pattern;
      sets_[set].wide_next = next;
    }
    return next;
  }
  dfa_tmp_.clear();
  uint32_t next = kNone;
  if (step(set_data_, sets_[set].off, sets_[set].n, c, dfa_tmp_) > 0) {
    std::sort(dfa_tmp_.begin(), dfa_tmp_.end());
    next = intern_set(dfa_tmp_.data(), dfa_tmp_.size());
  }
  if (sets_[set].ascii == kNone) {
    sets_[set].ascii = static_cast<uint32_t>(ascii_.size());
    ascii_.resize(ascii_.size() + 128, kUnset);
  }
  ascii_[sets_[set].ascii + c] = next;
  return next;
}

void StackStore::flush_if_large(size_t budget) {
  // A hash-map entry counts ~4 words (key, value, bucket, node overhead).
  const size_t used = set_data_.size() + sets_.size() * 8 + ascii_.size() + set_index_.size() * 4;
  if (used <= budget) return;
  set_data_.clear();
  sets_.clear();
  set_index_.clear();
  ascii_.clear();
}

uint32_t StackStore::min_remaining(uint32_t n) {
  chain_.clear();
  uint32_t x = n;
  while (nodes_[x].min_rem == kNone) {
    chain_.push_back(x);
    x = nodes_[x].parent;
  }
  uint32_t acc = nodes_[x].min_rem;
  for (size_t i = chain_.size(); i-- > 0;) {
    const uint32_t y = chain_[i];
    acc = std::min<uint32_t>(kInfLen, acc + g_.min_tail[nodes_[y].pos]);
    nodes_[y].min_rem = acc;
  }
  return nodes_[n].min_rem;
}

bool grammar_accepts(const Grammar& g, std::string_view utf8) {
  StackStore store(g);
  std::vector<uint32_t> out;
  uint32_t partial = 0;
  if (!store.advance(store.initial(), 0, utf8, out, &partial)) return false;
  return partial == 0 && !out.empty() && out[0] == 0;
}

}  // namespace kvasir::grammar
