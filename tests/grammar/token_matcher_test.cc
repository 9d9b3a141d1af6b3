// Token-level constrained decoding on real vocabularies (llama SPM 32k with byte tokens, and
// stories260K's 512): masks against a brute-force per-token check, constrained random generation
// checked by the independent recognizers of test_grammars.h, cache accounting, partial UTF-8
// across tokens, and refusals that leave the state unchanged.
#include "kvasir/grammar/token_matcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvasir/grammar/grammar.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_grammars.h"
#include "test_util/paths.h"

namespace kvasir::grammar {
namespace {

// A tokenizer and its GrammarVocab as the engine builds it: each token's piece as the client sees
// it; control, unknown and unused tokens never; the tokenizer's EOG ids.
struct LoadedVocab {
  explicit LoadedVocab(const std::string& path) : tok(Tokenizer::from_file(path)) {
    const int32_t n = tok.n_vocab();
    std::vector<std::string> pieces(n);
    std::vector<bool> never(n);
    for (int32_t t = 0; t < n; ++t) {
      pieces[t] = tok.token_to_piece(t, false);
      never[t] = (tok.token_attr(t) &
                  (token_attr::kControl | token_attr::kUnknown | token_attr::kUnused)) != 0;
      if (pieces[t].size() == 1) single_byte.push_back(t);
    }
    vocab = std::make_shared<GrammarVocab>(pieces, never, tok.eog_ids());
  }
  Tokenizer tok;
  std::shared_ptr<const GrammarVocab> vocab;
  std::vector<int32_t> single_byte;  // tokens whose piece is one byte
};

const LoadedVocab& spm() {
  static const LoadedVocab v(test_util::models_dir() + "/vocab/ggml-vocab-llama-spm.gguf");
  return v;
}
const LoadedVocab& stories() {
  static const LoadedVocab v(test_util::stories260k_path());
  return v;
}

std::shared_ptr<ConstrainedGrammar> make(const std::string& gbnf, const LoadedVocab& v,
                                         size_t cache = 4096) {
  return std::make_shared<ConstrainedGrammar>(parse_gbnf(gbnf), v.vocab, cache);
}

bool is_eog(const GrammarVocab& v, int32_t t) {
  for (const int32_t e : v.eog())
    if (e == t) return true;
  return false;
}

// The mask by definition, token by token, without the trie or the cache: an EOG id iff the text
// is complete; otherwise whether the token's bytes can follow (accept_text on a copy).
std::vector<int32_t> brute_force(const GrammarMatcher& m, const LoadedVocab& lv) {
  std::vector<int32_t> out;
  const GrammarVocab& v = *lv.vocab;
  GrammarMatcher probe(m);
  for (int32_t t = 0; t < v.n_vocab(); ++t) {
    if (is_eog(v, t)) {
      if (m.is_complete()) out.push_back(t);
      continue;
    }
    const uint32_t attr = lv.tok.token_attr(t);
    if ((attr & (token_attr::kControl | token_attr::kUnknown | token_attr::kUnused)) ||
        v.piece(t).empty())
      continue;
    if (probe.accept_text(v.piece(t))) {
      out.push_back(t);
      probe = m;
    }
  }
  return out;
}

std::vector<int32_t> members(const TokenMask& mask) {
  std::vector<int32_t> out;
  for (int32_t t = 0; t < mask.n_vocab; ++t)
    if (mask.test(t)) out.push_back(t);
  return out;
}

int32_t pick(const TokenMask& mask, std::mt19937_64& rng, bool allow_eog, const GrammarVocab& v) {
  std::vector<int32_t> c;
  for (const int32_t t : members(mask))
    if (allow_eog || !is_eog(v, t)) c.push_back(t);
  if (c.empty()) return -1;
  return c[rng() % c.size()];
}

// (a) Along random walks (uniform over allowed tokens), the mask equals the brute force.
TEST(TokenMatcher, MasksEqualBruteForceAlongRandomWalks) {
  struct Run {
    const LoadedVocab* v;
    int walks, steps, check_every;
  };
  for (const Run& run : {Run{&stories(), 3, 40, 2}, Run{&spm(), 2, 24, 6}}) {
    for (const auto& tg : test::test_grammars()) {
      auto cg = make(tg.gbnf, *run.v);
      std::mt19937_64 rng(7);
      int checked = 0;
      for (int w = 0; w < run.walks; ++w) {
        GrammarMatcher m(cg);
        for (int s = 0; s < run.steps; ++s) {
          const TokenMask& mask = m.allowed();
          if (s % run.check_every == 0) {
            ASSERT_EQ(members(mask), brute_force(m, *run.v))
                << tg.name << " walk " << w << " step " << s;
            ++checked;
          }
          const int32_t t = pick(mask, rng, false, *run.v->vocab);
          if (t < 0) break;
          ASSERT_TRUE(m.accept(t));
        }
      }
      EXPECT_GE(checked, run.walks * 3) << tg.name;
    }
  }
}

// (b) Constrained random generation ends with EOG and yields only strings the independent
// recognizers accept. Tokens are uniform over the allowed set (EOG taken with probability 1/4
// when allowed) for a budget, then steered to an end: EOG when allowed, else the candidate (64
// random allowed tokens plus every allowed single-byte token) with the fewest code points left.
TEST(TokenMatcher, GenerationYieldsOnlyRecognizedStrings) {
  for (const LoadedVocab* lv : {&stories(), &spm()}) {
    for (const auto& tg : test::test_grammars()) {
      auto cg = make(tg.gbnf, *lv);
      const GrammarVocab& v = *lv->vocab;
      const int n_samples = lv == &spm() ? 6 : 12;
      for (int sample = 0; sample < n_samples; ++sample) {
        std::mt19937_64 rng(1000 + sample);
        GrammarMatcher m(cg);
        std::string text;
        const int budget = 3 + static_cast<int>(rng() % 40);
        for (int step = 0; step < budget + 400 && !m.finished(); ++step) {
          const TokenMask& mask = m.allowed();
          ASSERT_GT(mask.count(), 0) << tg.name << ": " << text;
          int32_t t = -1;
          const bool eog_ok = m.is_complete();
          if (eog_ok && (step >= budget || rng() % 4 == 0)) {
            t = v.eog()[0];
          } else if (step < budget) {
            t = pick(mask, rng, false, v);
          } else {
            std::vector<int32_t> cand;
            for (int k = 0; k < 64; ++k) cand.push_back(pick(mask, rng, false, v));
            for (const int32_t b : lv->single_byte)
              if (mask.test(b)) cand.push_back(b);
            uint32_t best = ~0u;
            for (const int32_t c : cand) {
              if (c < 0) continue;
              GrammarMatcher probe(m);
              ASSERT_TRUE(probe.accept(c));
              if (probe.min_remaining_chars() < best) {
                best = probe.min_remaining_chars();
                t = c;
              }
            }
          }
          ASSERT_GE(t, 0);
          ASSERT_TRUE(m.accept(t)) << tg.name << " token " << t;
          if (!m.finished()) text += v.piece(t);
        }
        ASSERT_TRUE(m.finished()) << tg.name << " did not end: " << text;
        EXPECT_TRUE(tg.recognizer(text)) << tg.name << " generated: " << text;
        EXPECT_TRUE(grammar_accepts(cg->grammar(), text)) << tg.name << " generated: " << text;
      }
    }
  }
}

// (c) Cache accounting: misses walk the trie, hits do not; a matcher's repeated allowed() in
// one state does not touch the cache; the LRU bound holds and an evicted mask stays valid for
// the matcher holding it.
TEST(TokenMatcher, CacheHitsAndMisses) {
  const LoadedVocab& lv = spm();
  auto cg = make(test::kJsonGbnf, lv);
  EXPECT_EQ(cg->cache_stats().misses, 0u);
  GrammarMatcher a(cg), b(cg);
  const TokenMask& m0 = a.allowed();
  MaskCacheStats s = cg->cache_stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.entries, 1u);
  const uint64_t walked = s.nodes_visited;
  EXPECT_GT(walked, 100u);
  EXPECT_EQ(&a.allowed(), &m0);  // pinned, no lookup
  EXPECT_EQ(cg->cache_stats().hits, 0u);
  EXPECT_EQ(&b.allowed(), &m0);  // same state, same mask
  EXPECT_EQ(cg->cache_stats().hits, 1u);
  EXPECT_EQ(cg->cache_stats().nodes_visited, walked);

  // Following a document: the second pass is all hits.
  const std::vector<TokenId> doc =
      lv.tok.encode("{\"name\": \"Ada\", \"tags\": [\"x\", \"y\"], \"n\": 12}", false, false);
  auto follow = [&] {
    GrammarMatcher m(cg);
    for (const TokenId t : doc) {
      ASSERT_TRUE(m.allowed().test(t));
      ASSERT_TRUE(m.accept(t));
    }
    EXPECT_TRUE(m.is_complete());
  };
  follow();
  s = cg->cache_stats();
  follow();
  EXPECT_EQ(cg->cache_stats().misses, s.misses);
  EXPECT_EQ(cg->cache_stats().hits, s.hits + doc.size());
  EXPECT_EQ(cg->cache_stats().nodes_visited, s.nodes_visited);
  EXPECT_LT(s.misses, doc.size() + 1);  // states repeat inside the document

  // LRU bound 2: three states evict the first; the first matcher's pinned mask stays intact.
  auto small = make(test::kJsonGbnf, lv, 2);
  GrammarMatcher x(small);
  const std::vector<int32_t> first = members(x.allowed());
  GrammarMatcher y(small), z(small);
  ASSERT_TRUE(y.accept_text("["));
  ASSERT_TRUE(z.accept_text("\""));
  y.allowed();
  z.allowed();
  EXPECT_EQ(small->cache_stats().entries, 2u);
  EXPECT_EQ(small->cache_stats().misses, 3u);
  EXPECT_EQ(members(x.allowed()), first);
  GrammarMatcher w(small);
  EXPECT_EQ(members(w.allowed()), first);
  EXPECT_EQ(small->cache_stats().misses, 4u);  // evicted, walked again

  // No cache at all: every lookup walks.
  auto none = make(test::kIdentsGbnf, lv, 0);
  GrammarMatcher p(none), q(none);
  EXPECT_EQ(members(p.allowed()), members(q.allowed()));
  EXPECT_EQ(none->cache_stats().misses, 2u);
  EXPECT_EQ(none->cache_stats().entries, 0u);
}

int32_t byte_token(const LoadedVocab& lv, int b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  const TokenId t = lv.tok.find_token(name);
  EXPECT_GE(t, 0) << name;
  return t;
}

// (d) Tokens that end inside a UTF-8 character: SPM byte tokens spell a character over several
// tokens; a lead byte is allowed only when some completion of it is admitted, continuation bytes
// only within the admitted range.
TEST(TokenMatcher, PartialUtf8AcrossTokens) {
  const LoadedVocab& lv = spm();
  // é = C3 A9; € = E2 82 AC; α..γ = CE B1 .. CE B3; 😀 = F0 9F 98 80.
  auto cg = make(
      "root ::= \"\xC3\xA9\" | \"\xE2\x82\xAC\" \"x\" | [\xCE\xB1-\xCE\xB3]+ | "
      "\"\xF0\x9F\x98\x80\"",
      lv);
  GrammarMatcher m(cg);
  const TokenMask& m0 = m.allowed();
  EXPECT_EQ(members(m0), brute_force(m, lv));
  for (int b : {0xC3, 0xE2, 0xCE, 0xF0}) EXPECT_TRUE(m0.test(byte_token(lv, b))) << b;
  for (int b : {0xC4, 0xE3, 0xCF, 0xF1, 0x80, 0xA9, int{'x'}})
    EXPECT_FALSE(m0.test(byte_token(lv, b))) << b;

  GrammarMatcher euro(m);
  ASSERT_TRUE(euro.accept(byte_token(lv, 0xE2)));
  EXPECT_FALSE(euro.is_complete());
  EXPECT_TRUE(euro.can_continue());
  EXPECT_EQ(members(euro.allowed()), brute_force(euro, lv));
  EXPECT_EQ(members(euro.allowed()), std::vector<int32_t>{byte_token(lv, 0x82)});
  EXPECT_FALSE(euro.accept(byte_token(lv, 0x83)));
  ASSERT_TRUE(euro.accept(byte_token(lv, 0x82)));
  EXPECT_EQ(members(euro.allowed()), std::vector<int32_t>{byte_token(lv, 0xAC)});
  ASSERT_TRUE(euro.accept(byte_token(lv, 0xAC)));
  EXPECT_FALSE(euro.is_complete());
  EXPECT_EQ(members(euro.allowed()), brute_force(euro, lv));
  EXPECT_TRUE(euro.allowed().test(byte_token(lv, 'x')));
  ASSERT_TRUE(euro.accept_text("x"));
  EXPECT_TRUE(euro.is_complete());

  GrammarMatcher greek(m);
  ASSERT_TRUE(greek.accept(byte_token(lv, 0xCE)));
  EXPECT_EQ(members(greek.allowed()), brute_force(greek, lv));
  EXPECT_EQ(
      members(greek.allowed()),
      (std::vector<int32_t>{byte_token(lv, 0xB1), byte_token(lv, 0xB2), byte_token(lv, 0xB3)}));
  ASSERT_TRUE(greek.accept(byte_token(lv, 0xB2)));
  EXPECT_TRUE(greek.is_complete());
  EXPECT_EQ(members(greek.allowed()), brute_force(greek, lv));
  // Whole-character tokens mix with byte tokens: "α" as one token if the vocab has it.
  const TokenId alpha = lv.tok.find_token("\xCE\xB1");
  if (alpha >= 0) {
    EXPECT_TRUE(greek.allowed().test(alpha));
    ASSERT_TRUE(greek.accept(alpha));
  }

  GrammarMatcher emoji(m);
  ASSERT_TRUE(emoji.accept(byte_token(lv, 0xF0)));
  const std::vector<int32_t> after_f0 = members(emoji.allowed());
  EXPECT_EQ(after_f0, brute_force(emoji, lv));
  EXPECT_EQ(after_f0, std::vector<int32_t>{byte_token(lv, 0x9F)});
  ASSERT_TRUE(emoji.accept_text("\x9F\x98"));
  EXPECT_EQ(emoji.min_remaining_chars(), 1u);
  ASSERT_TRUE(emoji.accept(byte_token(lv, 0x80)));
  EXPECT_TRUE(emoji.is_complete());
  EXPECT_FALSE(emoji.can_continue());
  EXPECT_EQ(members(emoji.allowed()), lv.tok.eog_ids());

  // "." admits any well-formed character: after F0 only 90..BF may follow (not 80..8F).
  auto any = make("root ::= .", lv);
  GrammarMatcher d(any);
  ASSERT_TRUE(d.accept(byte_token(lv, 0xF0)));
  EXPECT_EQ(members(d.allowed()), brute_force(d, lv));
  EXPECT_FALSE(d.allowed().test(byte_token(lv, 0x8F)));
  EXPECT_TRUE(d.allowed().test(byte_token(lv, 0x90)));
  EXPECT_TRUE(d.allowed().test(byte_token(lv, 0xBF)));
}

// (e) A token that is not allowed is refused and changes nothing, with or without a mask.
TEST(TokenMatcher, RefusedTokensLeaveTheStateUnchanged) {
  const LoadedVocab& lv = spm();
  auto cg = make(test::kArithGbnf, lv);
  GrammarMatcher m(cg);
  ASSERT_TRUE(m.accept_text("(1 +"));
  GrammarMatcher unmasked(m);  // has not computed its mask
  const std::vector<int32_t> before = members(m.allowed());
  const uint32_t rem = m.min_remaining_chars();
  const TokenId close = lv.tok.find_token(")");
  const TokenId letter = lv.tok.find_token("a");
  ASSERT_GE(close, 0);
  ASSERT_GE(letter, 0);
  for (GrammarMatcher* g : {&m, &unmasked}) {
    for (const int32_t bad :
         {close, letter, lv.tok.bos_id(), lv.tok.eos_id(), -1, lv.tok.n_vocab()}) {
      EXPECT_FALSE(g->accept(bad)) << bad;
    }
    EXPECT_FALSE(g->accept_text("+"));
    EXPECT_FALSE(g->is_complete());
    EXPECT_EQ(g->min_remaining_chars(), rem);
    EXPECT_EQ(members(g->allowed()), before);
  }
  const TokenId two = lv.tok.find_token("2");
  ASSERT_TRUE(m.accept(two));
  EXPECT_TRUE(m.accept(close));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.accept(lv.tok.eos_id()));
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(m.allowed().count(), 0);
  EXPECT_FALSE(m.accept(two));
  EXPECT_FALSE(m.accept(lv.tok.eos_id()));
}

TEST(TokenMatcher, VocabValidation) {
  EXPECT_THROW(GrammarVocab({"a", "b"}, {false}, {}), Error);
  EXPECT_THROW(GrammarVocab({"a", "b"}, {false, false}, {2}), Error);
  // Tiny vocab: duplicate pieces are both allowed, empty pieces never, EOG only when complete.
  auto v = std::make_shared<GrammarVocab>(
      std::vector<std::string>{"a", "a", "", "ab", "b", "</s>"},
      std::vector<bool>{false, false, false, false, true, false}, std::vector<int32_t>{5});
  auto cg = std::make_shared<ConstrainedGrammar>(parse_gbnf("root ::= \"a\" \"b\"?"), v);
  GrammarMatcher m(cg);
  EXPECT_EQ(members(m.allowed()), (std::vector<int32_t>{0, 1, 3}));
  ASSERT_TRUE(m.accept(1));
  EXPECT_EQ(members(m.allowed()), (std::vector<int32_t>{5}));  // "b" is never
  EXPECT_FALSE(m.accept(4));
  EXPECT_TRUE(m.accept_text("b"));
  EXPECT_EQ(members(m.allowed()), (std::vector<int32_t>{5}));
}

}  // namespace
}  // namespace kvasir::grammar
