// SentencePiece-style BPE by score (see subword.h).
#include <algorithm>
#include <queue>

#include "kvasir/tokenizer/subword.h"
#include "kvasir/tokenizer/unicode.h"

namespace kvasir {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t start;  // byte offset into the text
  size_t n;      // byte length; 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of left + right when the bigram was made
};

// Highest score first; among equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

void emit_bytes(const Vocab& vocab, std::string_view piece, std::vector<TokenId>& out) {
  for (char c : piece) {
    TokenId id = vocab.byte_token(static_cast<uint8_t>(c));
    if (id == kNoToken) id = vocab.unk;  // llama.cpp would abort here
    if (id != kNoToken) out.push_back(id);
  }
}

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len =
        std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  if (sym.empty()) return;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view s = text.substr(sym[left].start, sym[left].n + sym[right].n);
    const TokenId id = vocab.find(s);
    if (id == kNoToken) return;
    queue.push({left, right, vocab.tokens[id].score, s.size()});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merged symbol is a token; a single character may not be, and then falls back to
  // bytes. (llama.cpp's re-segmentation of non-token merges can therefore never trigger.)
  for (int i = 0; i != -1; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].start, sym[i].n);
    const TokenId id = vocab.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
    } else {
      emit_bytes(vocab, piece, out);
    }
  }
}

}  // namespace kvasir
