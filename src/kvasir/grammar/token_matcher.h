// Constrained decoding at the token level: which tokens of a vocabulary may come next under a
// Grammar, and advancing the grammar state by a chosen token.
//
// GrammarVocab: built once per tokenizer. Each token is its bytes (the detokenizer's piece, as
// the client will see it) or "never" (control/unknown tokens and empty pieces: never allowed
// inside a grammar); end-of-generation ids are allowed exactly when the grammar is complete. The
// token byte strings are held in a trie so that the allowed set is found by one walk of the trie
// with the grammar's stacks, pruning every subtree no stack can continue: the cost is the number
// of trie nodes the grammar admits, not the vocabulary size.
//
// ConstrainedGrammar: a Grammar bound to a GrammarVocab, plus a cache of allowed-token masks
// keyed by the matcher state (the canonical set of parse stacks, as sorted ids of hash-consed
// stacks, and any pending partial UTF-8 sequence). Grammars revisit the same states constantly
// (every character inside a JSON string is one state), so after warm-up a step costs a hash lookup.
// The cache is bounded (LRU by entries); it is not thread-safe: the matchers of one
// ConstrainedGrammar are used by one thread (the engine's step loop).
//
// GrammarMatcher: one sequence's position in the grammar. allowed() gives the mask for the next
// token; accept() advances by a token. Tokens may end inside a UTF-8 character: the matcher
// keeps the partial sequence and continues it with the next token, as llama.cpp does; a token
// ending mid-character is allowed when some stack admits some code point that starts with the
// bytes so far (the same rule decides the mask and accept(), so they always agree).
//
// Costs (grammar_impl.h explains the stack representation and the lazy DFA over stack sets;
// figures: bench/micro/grammar_bench.cc, JSON grammar following a 370-token document, one core
// of an AMD EPYC Zen 4, release build):
//  - allowed(), cache hit: hash of the state (its few stack ids), one hash-map probe, an LRU
//    splice and a shared_ptr copy. O(stacks), no allocation, no vocabulary scan. A second call in
//    the same state returns the matcher's pinned mask without touching the cache.
//  - allowed(), miss: one walk of the trie, visiting only the nodes whose bytes some stack admits
//    (an average of 14k nodes per miss with the 32k llama vocabulary, 50k with the 102k
//    deepseek one), each visit a UTF-8 step and, per completed code point, one memoized DFA
//    transition (a table lookup once seen); then one mask allocation (n_vocab / 8 bytes).
//    Measured: ~0.2 ms per miss at 32k, ~0.8 ms at 102k, the DFA built from scratch included.
//  - accept(): the token's bytes stepped through the DFA (a table lookup per ASCII character),
//    then a copy of the (few) resulting stack ids. No vocabulary scan; no allocation once the
//    matcher's scratch vector has grown and the transitions have been seen.
//  Warm (every state cached): allowed() + accept() 65-80 ns per token at both vocabulary
//  sizes, of which accept() ~42 ns.
// Memory: the cache holds at most max_cached_masks masks of n_vocab / 8 bytes each (4096 masks
// of a 128k vocabulary: 64 MiB), plus the parse-stack nodes the grammar has visited (~80 bytes
// each with their index, capped at 2^20 per ConstrainedGrammar; a stack needing a node past the
// cap is dropped, which can only reject text), plus the DFA memo (dropped and rebuilt when it
// passes 32 MiB). A ConstrainedGrammar is therefore best made per request or per (grammar,
// vocabulary) for a bounded time, not kept for the server's life.
// Masks are shared_ptr-owned: an LRU eviction never frees a mask a matcher still holds.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvasir/grammar/grammar.h"

namespace kvasir::grammar {

// A set of token ids as bits: word i holds tokens 64 i .. 64 i + 63 (bit t % 64).
struct TokenMask {
  std::vector<uint64_t> bits;
  int32_t n_vocab = 0;
  bool test(int32_t t) const { return (bits[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1u; }
  int32_t count() const;  // tokens in the set
};

class GrammarVocab {
 public:
  // pieces[t]: token t's bytes; never[t]: token t is never allowed inside the grammar (control,
  // unknown); eog: the end-of-generation ids (allowed when the grammar is complete; an id there
  // is only that, whatever its piece). Tokens with empty pieces are "never". Throws
  // kvasir::Error when never.size() != pieces.size() or an EOG id is out of range. Building the
  // trie sorts the pieces: O(n log n), ~6 ms at 32k tokens, ~22 ms at 102k; once per tokenizer.
  GrammarVocab(std::vector<std::string> pieces, std::vector<bool> never, std::vector<int32_t> eog);
  ~GrammarVocab();
  int32_t n_vocab() const;
  const std::vector<int32_t>& eog() const;
  struct Trie;  // grammar/ internal
  const Trie& trie() const { return *trie_; }
  const std::string& piece(int32_t t) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::unique_ptr<Trie> trie_;
};

struct MaskCacheStats {
  uint64_t hits = 0, misses = 0, entries = 0;
  uint64_t nodes_visited = 0;  // trie nodes walked on misses, in total
  uint64_t stack_nodes = 0;    // parse-stack nodes held (never freed; at most kMaxStackNodes)
};

class ConstrainedGrammar {
 public:
  // The parse-stack nodes one ConstrainedGrammar may hold. Nodes are never freed: a grammar kept
  // for a long time (a server's cache) should be replaced by a fresh one well before this.
  static constexpr size_t kMaxStackNodes = size_t{1} << 20;
  ConstrainedGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const GrammarVocab> vocab,
                     size_t max_cached_masks = 4096);
  ~ConstrainedGrammar();
  const Grammar& grammar() const { return *grammar_; }
  const GrammarVocab& vocab() const { return *vocab_; }
  // hits / misses: allowed() lookups in the cache (a matcher's repeated allowed() in the same
  // state is neither); entries: masks held now; nodes_visited: trie nodes walked by misses.
  MaskCacheStats cache_stats() const;

 private:
  friend class GrammarMatcher;
  struct Cache;  // grammar/ internal
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarVocab> vocab_;
  std::unique_ptr<Cache> cache_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<ConstrainedGrammar> cg);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&);  // copies the state (same ConstrainedGrammar)
  GrammarMatcher& operator=(const GrammarMatcher&);

  // The tokens that may come next: non-"never" tokens whose bytes the grammar admits from this
  // state, plus the EOG ids when the text so far is complete (and nothing once finished()).
  // Valid until the next accept() / accept_text() / assignment of this matcher, whatever other
  // matchers do (the matcher holds a reference to it). Empty only when no token can continue
  // and the text is not complete (e.g. a grammar whose next character no token spells).
  const TokenMask& allowed();
  // Advances by `token`; returns false (state unchanged) when the token is not allowed. An EOG
  // token is accepted when complete and then leaves the matcher finished.
  bool accept(int32_t token);
  // Advances by raw text (e.g. a forced prefix); false (state unchanged) if not admitted.
  bool accept_text(std::string_view utf8);
  bool is_complete() const;   // the text so far is a full sentence (EOG would be allowed)
  bool can_continue() const;  // some non-empty continuation exists
  bool finished() const;      // an EOG token was accepted
  // Fewest code points that complete the text from here (0 when complete; a pending partial
  // character counts as one; a large value (2^30 - 1) when no completion exists). O(stacks x
  // stack depth) the first time per stack, then memoized. For steering near a length limit.
  uint32_t min_remaining_chars() const;

 private:
  struct State;  // grammar/ internal
  std::shared_ptr<ConstrainedGrammar> cg_;
  std::unique_ptr<State> st_;
};

}  // namespace kvasir::grammar
