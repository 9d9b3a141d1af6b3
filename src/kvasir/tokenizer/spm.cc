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

// Hugging Face BPE semantics (see subword.h). Symbols are token ids.
struct RankedSymbol {
  TokenId id;
  int prev;
  int next;  // -1 at the end
  bool alive;
};

struct RankedMerge {
  int32_t rank;
  int left;
  TokenId result;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct RankedMergeOrder {
  bool operator()(const RankedMerge& a, const RankedMerge& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// "<0xXX>" only (Hugging Face's byte fallback never uses a raw single-byte token).
TokenId hex_byte_token(const Vocab& vocab, uint8_t byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  return vocab.find(std::string_view(buf, 6));
}

void spm_tokenize_by_rank(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  std::vector<RankedSymbol> sym;
  sym.reserve(text.size());
  auto push = [&](TokenId id) {
    const int idx = static_cast<int>(sym.size());
    if (idx > 0) sym.back().next = idx;
    sym.push_back({id, idx - 1, -1, true});
  };
  bool pending_unk = false;  // fuse_unk: a run of unknown characters becomes one <unk>
  for (size_t off = 0; off < text.size();) {
    const size_t len =
        std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const std::string_view ch = text.substr(off, len);
    off += len;
    const TokenId id = vocab.find(ch);
    if (id != kNoToken) {
      if (pending_unk) push(vocab.unk);
      pending_unk = false;
      push(id);
      continue;
    }
    bool all_bytes = true;
    for (char c : ch) all_bytes = all_bytes && hex_byte_token(vocab, static_cast<uint8_t>(c)) >= 0;
    if (all_bytes) {
      if (pending_unk) push(vocab.unk);
      pending_unk = false;
      for (char c : ch) push(hex_byte_token(vocab, static_cast<uint8_t>(c)));
      continue;
    }
    if (vocab.unk != kNoToken) pending_unk = true;  // without an unk token the character is lost
  }
  if (pending_unk) push(vocab.unk);
  if (sym.empty()) return;

  std::string key, cat;
  // The merge of `left` with its right neighbour, if the merges list that pair.
  auto lookup = [&](int left, RankedMerge& m) {
    const int right = sym[left].next;
    if (right < 0) return false;
    const std::string& l = vocab.tokens[sym[left].id].text;
    const std::string& r = vocab.tokens[sym[right].id].text;
    const int32_t rank = vocab.merge_rank(l, r, key);
    if (rank < 0) return false;
    cat.assign(l);
    cat.append(r);
    const TokenId result = vocab.find(cat);
    if (result == kNoToken) return false;  // hf_tokenizer_metadata refuses such merges
    m = {rank, left, result};
    return true;
  };
  std::priority_queue<RankedMerge, std::vector<RankedMerge>, RankedMergeOrder> queue;
  RankedMerge m;
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) {
    if (lookup(i, m)) queue.push(m);
  }
  while (!queue.empty()) {
    const RankedMerge top = queue.top();
    queue.pop();
    // Stale unless the pair at `left` still merges into the same token.
    if (!sym[top.left].alive || !lookup(top.left, m) || m.result != top.result) continue;
    RankedSymbol& l = sym[top.left];
    RankedSymbol& r = sym[l.next];
    l.id = top.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = top.left;
    if (l.prev >= 0 && lookup(l.prev, m)) queue.push(m);
    if (lookup(top.left, m)) queue.push(m);
  }
  for (int i = 0; i != -1; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  if (vocab.spm_merge_by_rank) {
    spm_tokenize_by_rank(vocab, text, out);
    return;
  }
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
