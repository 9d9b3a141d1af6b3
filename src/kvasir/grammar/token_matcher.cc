// Token-level constrained decoding: the vocabulary trie, the mask walk, the LRU mask cache and
// the per-sequence GrammarMatcher (contracts in token_matcher.h).

#include "kvasir/grammar/token_matcher.h"

#include <algorithm>
#include <bit>
#include <list>
#include <unordered_map>

#include "kvasir/grammar/grammar_impl.h"
#include "kvasir/util/error.h"

namespace kvasir::grammar {

namespace {
enum TokenKind : uint8_t { kInTrie = 0, kNever = 1, kEog = 2 };
}  // namespace

// The token byte strings in preorder: node i's subtree is nodes [i, nodes[i].end), its children
// start at i + 1, and the tokens whose bytes end at node i are tokens[nodes[i].tok_begin ..
// nodes[i + 1].tok_begin) (a sentinel node closes the array). Preorder makes the walk a forward
// scan of memory that skips whole subtrees by jumping to `end`.
struct GrammarVocab::Trie {
  struct Node {
    uint32_t end;
    uint32_t tok_begin;
    uint8_t byte;  // the edge into this node (root: unused)
  };
  std::vector<Node> nodes;  // nodes.size() - 1 real nodes, then the sentinel
  std::vector<int32_t> tokens;
  std::vector<uint8_t> kind;  // per token id: TokenKind

  uint32_t n_nodes() const { return static_cast<uint32_t>(nodes.size() - 1); }
};

namespace {

void build_trie(GrammarVocab::Trie& trie, const std::vector<std::string>& pieces,
                const std::vector<int32_t>& order, size_t lo, size_t hi, size_t depth,
                uint8_t byte) {
  const auto id = static_cast<uint32_t>(trie.nodes.size());
  trie.nodes.push_back({0, static_cast<uint32_t>(trie.tokens.size()), byte});
  size_t i = lo;
  while (i < hi && pieces[order[i]].size() == depth) trie.tokens.push_back(order[i++]);
  while (i < hi) {
    const auto b = static_cast<uint8_t>(pieces[order[i]][depth]);
    size_t j = i;
    while (j < hi && static_cast<uint8_t>(pieces[order[j]][depth]) == b) ++j;
    build_trie(trie, pieces, order, i, j, depth + 1, b);
    i = j;
  }
  trie.nodes[id].end = static_cast<uint32_t>(trie.nodes.size());
}

}  // namespace

GrammarVocab::GrammarVocab(std::vector<std::string> pieces, std::vector<bool> never,
                           std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)), trie_(std::make_unique<Trie>()) {
  const size_t n = pieces_.size();
  if (never.size() != n) {
    fail("GrammarVocab: {} pieces but {} 'never' flags (expected one flag per token)", n,
         never.size());
  }
  if (n > static_cast<size_t>(INT32_MAX)) fail("GrammarVocab: {} tokens is too many", n);
  trie_->kind.assign(n, kInTrie);
  for (size_t t = 0; t < n; ++t)
    if (never[t] || pieces_[t].empty()) trie_->kind[t] = kNever;
  for (const int32_t t : eog_) {
    if (t < 0 || static_cast<size_t>(t) >= n) {
      fail("GrammarVocab: end-of-generation id {} is outside the vocabulary of {} tokens", t, n);
    }
    trie_->kind[t] = kEog;
  }
  std::vector<int32_t> order;
  for (size_t t = 0; t < n; ++t)
    if (trie_->kind[t] == kInTrie) order.push_back(static_cast<int32_t>(t));
  std::stable_sort(order.begin(), order.end(),
                   [this](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
  build_trie(*trie_, pieces_, order, 0, order.size(), 0, 0);
  trie_->nodes.push_back({0, static_cast<uint32_t>(trie_->tokens.size()), 0});
}

GrammarVocab::~GrammarVocab() = default;
int32_t GrammarVocab::n_vocab() const {
  return static_cast<int32_t>(pieces_.size());
}
const std::vector<int32_t>& GrammarVocab::eog() const {
  return eog_;
}
const std::string& GrammarVocab::piece(int32_t t) const {
  return pieces_.at(static_cast<size_t>(t));
}

int32_t TokenMask::count() const {
  int32_t n = 0;
  for (const uint64_t w : bits) n += std::popcount(w);
  return n;
}

// --- the mask cache --------------------------------------------------------------------------

struct ConstrainedGrammar::Cache {
  struct Entry {
    uint32_t partial;
    std::vector<uint32_t> stacks;
    uint64_t hash;
    std::shared_ptr<const TokenMask> mask;
  };
  // A key points at a state's stacks: the entry's own (in the index) or the matcher's (lookup).
  struct Key {
    uint32_t partial;
    const uint32_t* stacks;
    size_t n;
    uint64_t hash;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.hash); }
  };
  struct KeyEq {
    bool operator()(const Key& a, const Key& b) const {
      return a.hash == b.hash && a.partial == b.partial && a.n == b.n &&
             std::equal(a.stacks, a.stacks + a.n, b.stacks);
    }
  };
  struct Frame {
    uint32_t end;      // one past the trie subtree this frame covers
    uint32_t set;      // its stack set (StackStore set id)
    uint32_t partial;  // its pending UTF-8 bytes
  };

  Cache(const Grammar& g, const GrammarVocab& v, size_t max_entries)
      : store(g, ConstrainedGrammar::kMaxStackNodes), vocab(v), max_entries(max_entries) {
    auto e = std::make_shared<TokenMask>();
    e->n_vocab = v.n_vocab();
    e->bits.assign((static_cast<size_t>(e->n_vocab) + 63) / 64, 0);
    empty = std::move(e);
  }

  static uint64_t hash_state(const std::vector<uint32_t>& stacks, uint32_t partial) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ partial;
    for (const uint32_t s : stacks) h = (h ^ s) * 0x100000001B3ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
  }

  std::shared_ptr<const TokenMask> get(const std::vector<uint32_t>& stacks, uint32_t partial) {
    const uint64_t h = hash_state(stacks, partial);
    const Key probe{partial, stacks.data(), stacks.size(), h};
    auto it = index.find(probe);
    if (it != index.end()) {
      ++stats.hits;
      lru.splice(lru.begin(), lru, it->second);
      return it->second->mask;
    }
    ++stats.misses;
    auto mask = std::make_shared<TokenMask>();
    compute(stacks, partial, *mask);
    if (max_entries == 0) return mask;
    if (lru.size() >= max_entries) {
      const Entry& old = lru.back();
      index.erase(Key{old.partial, old.stacks.data(), old.stacks.size(), old.hash});
      lru.pop_back();
    }
    lru.push_front(Entry{partial, stacks, h, mask});
    const Entry& e = lru.front();
    index.emplace(Key{e.partial, e.stacks.data(), e.stacks.size(), e.hash}, lru.begin());
    return mask;
  }

  // One walk of the vocabulary trie from the state (stacks, partial): a trie node is alive when
  // some stack admits its bytes (a complete code point advances the set; a partial one must be
  // admissible by some stack); a dead node's subtree is skipped. Tokens at live nodes are set.
  void compute(const std::vector<uint32_t>& stacks, uint32_t partial, TokenMask& m) {
    const GrammarVocab::Trie& trie = vocab.trie();
    m.n_vocab = vocab.n_vocab();
    m.bits.assign((static_cast<size_t>(m.n_vocab) + 63) / 64, 0);
    auto set_bit = [&m](int32_t t) {
      m.bits[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
    };
    if (partial == 0 && !stacks.empty() && stacks[0] == 0)
      for (const int32_t t : vocab.eog()) set_bit(t);
    const uint32_t n_nodes = trie.n_nodes();
    store.flush_if_large();
    frames.clear();
    frames.push_back({n_nodes, store.intern_set(stacks.data(), stacks.size()), partial});
    uint64_t visited = 0;
    for (uint32_t i = 1; i < n_nodes;) {
      while (frames.back().end <= i) frames.pop_back();
      const Frame f = frames.back();
      const GrammarVocab::Trie::Node& node = trie.nodes[i];
      uint32_t p = f.partial, cp = 0, set = f.set;
      ++visited;
      const int r = utf8::push_byte(p, node.byte, &cp);
      if (r == 1) {
        set = store.transition(f.set, cp);
      } else if (r == 2) {
        uint32_t lo, hi;
        utf8::pending_range(p, &lo, &hi);
        if (!store.set_admits_range(f.set, lo, hi)) set = kNone;
      } else {
        set = kNone;
      }
      if (set == kNone) {
        i = node.end;
        continue;
      }
      for (uint32_t k = node.tok_begin; k < trie.nodes[i + 1].tok_begin; ++k)
        set_bit(trie.tokens[k]);
      if (node.end > i + 1) frames.push_back({node.end, set, p});
      ++i;
    }
    stats.nodes_visited += visited;
  }

  StackStore store;
  const GrammarVocab& vocab;
  size_t max_entries;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash, KeyEq> index;
  MaskCacheStats stats;
  std::vector<Frame> frames;
  std::shared_ptr<const TokenMask> empty;
};

ConstrainedGrammar::ConstrainedGrammar(std::shared_ptr<const Grammar> g,
                                       std::shared_ptr<const GrammarVocab> vocab,
                                       size_t max_cached_masks)
    : grammar_(std::move(g)), vocab_(std::move(vocab)) {
  if (!grammar_ || !vocab_) fail("ConstrainedGrammar: a grammar and a vocabulary are required");
  cache_ = std::make_unique<Cache>(*grammar_, *vocab_, max_cached_masks);
}

ConstrainedGrammar::~ConstrainedGrammar() = default;

MaskCacheStats ConstrainedGrammar::cache_stats() const {
  MaskCacheStats s = cache_->stats;
  s.entries = cache_->lru.size();
  s.stack_nodes = cache_->store.size();
  return s;
}

// --- the matcher ---------------------------------------------------------------------------

struct GrammarMatcher::State {
  std::vector<uint32_t> stacks;  // sorted node ids
  uint32_t partial = 0;
  bool finished = false;
  std::shared_ptr<const TokenMask> mask;  // of this state, once asked for
  std::vector<uint32_t> next;             // scratch
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<ConstrainedGrammar> cg)
    : cg_(std::move(cg)), st_(std::make_unique<State>()) {
  if (!cg_) fail("GrammarMatcher: a ConstrainedGrammar is required");
  st_->stacks = cg_->cache_->store.initial();
}

GrammarMatcher::~GrammarMatcher() = default;

GrammarMatcher::GrammarMatcher(const GrammarMatcher& o)
    : cg_(o.cg_), st_(std::make_unique<State>(*o.st_)) {}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& o) {
  if (this != &o) {
    cg_ = o.cg_;
    *st_ = *o.st_;
  }
  return *this;
}

const TokenMask& GrammarMatcher::allowed() {
  State& s = *st_;
  if (s.finished) return *cg_->cache_->empty;
  if (!s.mask) s.mask = cg_->cache_->get(s.stacks, s.partial);
  return *s.mask;
}

bool GrammarMatcher::accept(int32_t token) {
  State& s = *st_;
  const GrammarVocab& v = *cg_->vocab_;
  if (s.finished || token < 0 || token >= v.n_vocab()) return false;
  const uint8_t kind = v.trie().kind[static_cast<size_t>(token)];
  if (kind == kEog) {
    if (!is_complete()) return false;
    s.finished = true;
    s.mask.reset();
    return true;
  }
  if (kind == kNever) return false;
  if (s.mask && !s.mask->test(token)) return false;
  uint32_t partial = 0;
  if (!cg_->cache_->store.advance(s.stacks, s.partial, v.piece(token), s.next, &partial))
    return false;
  s.stacks.swap(s.next);
  s.partial = partial;
  s.mask.reset();
  return true;
}

bool GrammarMatcher::accept_text(std::string_view utf8) {
  State& s = *st_;
  if (s.finished) return utf8.empty();
  if (utf8.empty()) return true;
  uint32_t partial = 0;
  if (!cg_->cache_->store.advance(s.stacks, s.partial, utf8, s.next, &partial)) return false;
  s.stacks.swap(s.next);
  s.partial = partial;
  s.mask.reset();
  return true;
}

bool GrammarMatcher::is_complete() const {
  return st_->partial == 0 && !st_->stacks.empty() && st_->stacks[0] == 0;
}

bool GrammarMatcher::can_continue() const {
  return !st_->finished && !st_->stacks.empty() && (st_->partial != 0 || st_->stacks.back() != 0);
}

bool GrammarMatcher::finished() const {
  return st_->finished;
}

uint32_t GrammarMatcher::min_remaining_chars() const {
  const State& s = *st_;
  if (s.finished) return 0;
  StackStore& store = cg_->cache_->store;
  uint32_t lo = 0, hi = 0;
  if (s.partial != 0) utf8::pending_range(s.partial, &lo, &hi);
  uint32_t best = kInfLen;
  for (const uint32_t n : s.stacks) {
    if (s.partial != 0 && (n == 0 || !store.top_set(n).intersects(lo, hi))) continue;
    best = std::min(best, store.min_remaining(n));
  }
  return best;
}

}  // namespace kvasir::grammar
