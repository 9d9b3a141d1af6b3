// grammar/ internal: the compiled Grammar, UTF-8 helpers, and the StackStore in which parse
// stacks live while matching.
//
// Grammar: llama.cpp's layout. Every rule is a flat run of elements: alternatives of symbols
// separated by kAlt and closed by kEnd, all rules back to back in one array. A symbol is a rule
// reference (kRuleRef) or a terminal: a character set (kChar or kCharNot, then kCharAlt /
// kCharRangeUpper elements continuing it) or kCharAny. A "position" is the index of a symbol's
// first element. Per position the compiler precomputes the next symbol's position in the same
// alternative (or kNone), the terminal's CharSet, and the fewest code points that finish the
// alternative from there.
//
// Parse stacks are persistent and hash-consed: a stack is a node (parent stack, position of the
// symbol to match next), node 0 is the empty stack (the start rule fully matched), and equal
// stacks are the same node. So a state (a set of stacks) is a set of uint32 node ids, a stack's
// successor shares its tail instead of copying it, and per node the store memoizes:
//   expand(n): the stacks whose top is a terminal (or the empty stack) reachable from n by
//              expanding rule references at the top (llama.cpp's llama_grammar_advance_stack);
//   successors(s): for a terminal-topped s, expand() of s with its terminal consumed.
// After warm-up, consuming a code point from a set S is: for each s in S whose terminal admits it,
// append the memoized successors(s); deduplicate. No allocation, no hashing.
//
// On top of that, a lazy DFA: stack sets are interned (sorted ids -> set id) and transitions
// (set, code point) -> set are memoized: a 128-entry table per set for ASCII; above ASCII, the
// stacks admitting the code point are found by testing each, and the set they lead to is
// memoized per set for the last such pattern (inside a JSON string: always the same one),
// so walking the vocabulary trie or a token's bytes costs a table lookup per code point once
// the transitions have been seen (inside a JSON string every character leads back to the same
// set). This memo is only an accelerator: it is dropped whole when it outgrows its budget
// (flush_if_large(), called where no set id is live), never the stacks themselves.
// Nodes are never freed (ids are cache keys): the store grows with the distinct stacks visited,
// and refuses new nodes past max_nodes (a stack that would need one is dropped: the matcher then
// rejects that continuation). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvasir/grammar/grammar.h"

namespace kvasir::grammar {

inline constexpr uint32_t kNone = 0xFFFFFFFFu;
inline constexpr uint32_t kUnset = 0xFFFFFFFEu;
inline constexpr uint32_t kInfLen = 0x3FFFFFFFu;  // "never finishes", saturating length
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

enum class ElementType : uint8_t {
  kEnd,             // end of a rule
  kAlt,             // end of an alternative, start of the next
  kRuleRef,         // value: rule id
  kChar,            // value: code point; starts a positive set (kCharAlt / kCharRangeUpper follow)
  kCharNot,         // value: code point; starts a negated set
  kCharRangeUpper,  // value: inclusive upper bound of the range begun by the element before it
  kCharAlt,         // value: one more code point (or range start) of the current set
  kCharAny,         // `.`: any code point
};

struct Element {
  ElementType type;
  uint32_t value;
};

// A set of code points: a bitmap for ASCII and sorted disjoint inclusive ranges above it.
struct CharSet {
  uint64_t ascii[2] = {0, 0};
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // all >= 0x80

  bool matches(uint32_t c) const {
    if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1u;
    for (const auto& [lo, hi] : ranges) {
      if (c < lo) return false;
      if (c <= hi) return true;
    }
    return false;
  }
  // Whether some code point in [lo, hi] is in the set.
  bool intersects(uint32_t lo, uint32_t hi) const;
};

enum class RuleKind : uint8_t { kUser, kGroup, kRepetition };

struct Grammar {
  std::vector<Element> elements;
  std::vector<uint32_t> rule_start;  // per rule: index of its first element
  std::vector<std::string> rule_names;
  std::vector<RuleKind> rule_kind;
  std::vector<uint32_t> rule_min;  // per rule: fewest code points it derives (kInfLen: none)
  // Alternatives of rule r: alt_pos[alt_begin[r] .. alt_begin[r + 1]), each the position of the
  // alternative's first symbol or kNone for an empty alternative.
  std::vector<uint32_t> alt_begin;
  std::vector<uint32_t> alt_pos;
  uint32_t root = 0;
  // Per element index, meaningful at positions (symbol starts):
  std::vector<uint32_t> next;      // the next symbol's position in the alternative, or kNone
  std::vector<uint32_t> charset;   // terminals: index into charsets
  std::vector<uint32_t> min_tail;  // fewest code points matching this symbol and the rest
  std::vector<CharSet> charsets;

  bool is_terminal(uint32_t pos) const { return elements[pos].type != ElementType::kRuleRef; }
};

// UTF-8 (well-formed only, Unicode table 3-7). A pending partial sequence is packed in a uint32:
// bits 24..25 the number of bytes held (0: none), bits 16..23 / 8..15 / 0..7 the bytes.
namespace utf8 {

inline int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}
// The bytes allowed at index 1 (the second byte) after `lead`; later bytes: 0x80..0xBF.
inline uint8_t second_min(uint8_t lead) {
  return lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
}
inline uint8_t second_max(uint8_t lead) {
  return lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
}

inline int pending_count(uint32_t partial) {
  return static_cast<int>(partial >> 24);
}
inline uint8_t pending_byte(uint32_t partial, int i) {
  return static_cast<uint8_t>(partial >> (16 - 8 * i));
}

// Adds byte b to the pending sequence `partial`. Returns 0 if b is ill-formed here; 1 if it
// completes a code point (stored in *cp, partial reset to 0); 2 if the sequence is still
// incomplete (partial updated).
inline int push_byte(uint32_t& partial, uint8_t b, uint32_t* cp) {
  const int n = pending_count(partial);
  if (n == 0) {
    const int len = sequence_length(b);
    if (len == 1) {
      *cp = b;
      return 1;
    }
    if (len == 0) return 0;
    partial = (1u << 24) | (uint32_t{b} << 16);
    return 2;
  }
  const uint8_t lead = pending_byte(partial, 0);
  const uint8_t lo = n == 1 ? second_min(lead) : 0x80, hi = n == 1 ? second_max(lead) : 0xBF;
  if (b < lo || b > hi) return 0;
  const int len = sequence_length(lead);
  if (n + 1 == len) {
    uint32_t c = lead & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (int i = 1; i < n; ++i) c = (c << 6) | (pending_byte(partial, i) & 0x3F);
    *cp = (c << 6) | (b & 0x3F);
    partial = 0;
    return 1;
  }
  partial =
      (static_cast<uint32_t>(n + 1) << 24) | (partial & 0xFFFFFF) | (uint32_t{b} << (16 - 8 * n));
  return 2;
}

// The code points a pending (non-empty) sequence can still complete to: [*lo, *hi].
inline void pending_range(uint32_t partial, uint32_t* lo, uint32_t* hi) {
  const int n = pending_count(partial);
  const uint8_t lead = pending_byte(partial, 0);
  const int len = sequence_length(lead);
  uint32_t a = lead & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07), b = a;
  for (int i = 1; i < len; ++i) {
    uint8_t x, y;
    if (i < n) {
      x = y = pending_byte(partial, i);
    } else {
      x = i == 1 ? second_min(lead) : 0x80;
      y = i == 1 ? second_max(lead) : 0xBF;
    }
    a = (a << 6) | (x & 0x3F);
    b = (b << 6) | (y & 0x3F);
  }
  *lo = a;
  *hi = b;
}

}  // namespace utf8

class StackStore {
 public:
  explicit StackStore(const Grammar& g, size_t max_nodes = size_t{1} << 22);
  const Grammar& grammar() const { return g_; }

  // The start state: expand() of each alternative of the start rule, sorted by id.
  const std::vector<uint32_t>& initial() const { return initial_; }
  uint32_t pos(uint32_t n) const { return nodes_[n].pos; }
  uint32_t parent(uint32_t n) const { return nodes_[n].parent; }
  const CharSet& top_set(uint32_t s) const { return g_.charsets[g_.charset[nodes_[s].pos]]; }
  size_t size() const { return nodes_.size(); }

  // Appends to `out` the stacks after consuming code point c from the set src[off .. off + n)
  // (terminal-topped nodes and possibly 0), deduplicated and pruned to kGbnfMaxStacks (in
  // unspecified order). `src` may be `out` (it is read by index). Returns the number appended.
  size_t step(const std::vector<uint32_t>& src, size_t off, size_t n, uint32_t c,
              std::vector<uint32_t>& out);
  // Whether some stack in src[off .. off + n) can consume a code point in [lo, hi].
  bool admits_range(const std::vector<uint32_t>& src, size_t off, size_t n, uint32_t lo,
                    uint32_t hi) const;
  // The state after `bytes` from (in, in_partial): out (sorted by id) and *out_partial; false if
  // the grammar rejects them (out and *out_partial untouched). A byte that leaves a partial
  // character is admitted when some stack admits some completion of it. `in` must be sorted.
  bool advance(const std::vector<uint32_t>& in, uint32_t in_partial, std::string_view bytes,
               std::vector<uint32_t>& out, uint32_t* out_partial);
  // Fewest code points that complete the text from stack n (kInfLen: never).
  uint32_t min_remaining(uint32_t n);

  // The lazy DFA. Set ids are valid until the next flush_if_large().
  uint32_t intern_set(const uint32_t* sorted, size_t n);
  // The set after code point c from set `set`; kNone when no stack admits c.
  uint32_t transition(uint32_t set, uint32_t c);
  const uint32_t* set_stacks(uint32_t set) const { return set_data_.data() + sets_[set].off; }
  uint32_t set_size(uint32_t set) const { return sets_[set].n; }
  bool set_admits_range(uint32_t set, uint32_t lo, uint32_t hi) const {
    return admits_range(set_data_, sets_[set].off, sets_[set].n, lo, hi);
  }
  // Drops the DFA memo when it holds more than `budget` 4-byte entries.
  void flush_if_large(size_t budget = size_t{1} << 23);

 private:
  struct Node {
    uint32_t parent, pos;
    uint32_t depth = 0;        // stack height
    uint64_t hash = 0;         // of the stack's contents (not of node ids): the pruning order
    uint32_t next = kUnset;    // the stack after this node's terminal is consumed (lazy)
    uint32_t exp_off = kNone;  // expand(this): exp_data_[exp_off .. exp_off + exp_len)
    uint32_t exp_len = 0;
    uint32_t min_rem = kNone;  // lazy min_remaining
  };
  uint32_t intern(uint32_t parent, uint32_t pos);
  void expand(uint32_t n);  // fills nodes_[n].exp_off/len
  uint32_t next_node(uint32_t s);
  void prune(std::vector<uint32_t>& v, size_t base);
  void stamp(std::vector<uint32_t>& mark, uint32_t& epoch);
  bool prune_less(uint32_t a, uint32_t b) const;

  const Grammar& g_;
  size_t max_nodes_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> index_;  // (parent << 32 | pos) -> node
  std::vector<uint32_t> exp_data_;
  std::vector<uint32_t> initial_;
  std::vector<uint32_t> mark_step_, mark_exp_;  // dedup stamps per node
  uint32_t epoch_step_ = 0, epoch_exp_ = 0;
  std::vector<uint32_t> work_, emitted_, chain_;

  struct SetInfo {
    uint32_t off, n;
    uint32_t ascii = kNone;  // transitions for code points < 128: ascii_[ascii .. ascii + 128)
    uint32_t chain = kNone;  // next set with the same hash
    // Above ASCII: the last (stacks admitting the code point, as bits) -> next set seen.
    uint32_t wide_next = kUnset;
    uint64_t wide_pattern = 0;
    uint64_t hash = 0;
  };
  std::vector<uint32_t> set_data_;
  std::vector<SetInfo> sets_;
  std::unordered_map<uint64_t, uint32_t> set_index_;  // hash -> first set in its chain
  std::vector<uint32_t> ascii_;
  std::vector<uint32_t> dfa_tmp_;
};

}  // namespace kvasir::grammar
