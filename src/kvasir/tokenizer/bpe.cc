// Byte-level BPE by merge rank (see subword.h).
#include <algorithm>
#include <queue>

#include "kvasir/tokenizer/subword.h"
#include "kvasir/tokenizer/unicode.h"

namespace kvasir {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;  // 0 once merged into its left neighbour
};

struct Bigram {
  int rank;
  int left;
  int right;
  size_t left_n;  // sizes when the bigram was made: a bigram is stale once either changed
  size_t right_n;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void bpe_tokenize(const Vocab& vocab, const std::vector<std::string>& words,
                  std::vector<TokenId>& out) {
  std::vector<Symbol> sym;
  std::vector<Bigram> storage;
  std::string buf;
  for (const std::string& w : words) {
    if (w.empty()) continue;
    const std::string_view word(w);
    if (vocab.ignore_merges) {
      const TokenId id = vocab.find(word);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    sym.clear();
    for (size_t off = 0; off < word.size();) {
      const size_t len =
          std::min(unicode::utf8_len(static_cast<uint8_t>(word[off])), word.size() - off);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, off + len == word.size() ? -1 : idx + 1, off, len});
      off += len;
    }

    storage.clear();
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue(BigramOrder{},
                                                                        std::move(storage));
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const int rank = vocab.merge_rank(word.substr(sym[left].start, sym[left].n),
                                        word.substr(sym[right].start, sym[right].n), buf);
      if (rank < 0) return;
      queue.push({rank, left, right, sym[left].n, sym[right].n});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.n != b.left_n || r.n != b.right_n || l.n == 0 || r.n == 0) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (int i = 0; i != -1; i = sym[i].next) {
      const std::string_view piece = word.substr(sym[i].start, sym[i].n);
      const TokenId id = vocab.find(piece);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
      for (char c : piece) {  // byte by byte, where a single-byte token exists
        const TokenId b = vocab.find(std::string_view(&c, 1));
        if (b != kNoToken) out.push_back(b);
      }
    }
  }
}

}  // namespace kvasir
