// Constrained decoding cost per token: GrammarMatcher::allowed() + accept() for a JSON grammar
// following a fixed JSON document token by token (its own tokenization), with a 32k vocabulary
// (ggml-vocab-llama-spm) and a 100k one (ggml-vocab-deepseek-llm).
//   Cold: a new ConstrainedGrammar per pass (every new state walks the vocabulary trie).
//   Warm: one ConstrainedGrammar whose mask cache already holds the document's states.
//   AcceptOnly: the warm pass without allowed(), to split the two costs.
//   VocabBuild: GrammarVocab construction (the trie), once per tokenizer.
// Counter "per_token": time per token. Vocabularies come from $KVASIR_MODELS or the shared models
// folder next to the source tree.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvasir/grammar/grammar.h"
#include "kvasir/grammar/token_matcher.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::grammar {
namespace {

// JSON (RFC 8259 white space and values), numbers bounded as llama.cpp's json.gbnf.
constexpr const char* kJson = R"GBNF(root   ::= ws value
value  ::= (object | array | string | number | "true" | "false" | "null") ws
object ::= "{" ws ( member ("," ws member)* )? "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ("," ws value)* )? "]"
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
ws     ::= [ \t\n\r]*
)GBNF";

constexpr const char* kDocument = R"DOC({
  "id": "chatcmpl-7QyqpwdfhqwajicIEznoc6Q47XAyW",
  "model": "llama-3.1-8b-instruct",
  "created": 1718031234,
  "user": {"name": "Ada Lovelace", "email": "ada@example.com", "age": 36, "verified": true},
  "items": [
    {"sku": "A-1001", "title": "Analytical Engine manual", "price": 12.5, "qty": 2, "tags": ["book", "history"]},
    {"sku": "B-2002", "title": "Difference Engine gears", "price": 199.99, "qty": 1, "tags": []},
    {"sku": "C-3003", "title": "Punch cards (box of 500)", "price": 7.25, "qty": 10, "tags": ["supplies"]}
  ],
  "shipping": {"address": "12 St James's Square, London", "country": "GB", "express": false},
  "notes": "Deliver after 5 p.m.; ring twice. Fragile \u2014 handle with care!",
  "discount": null,
  "scores": [0.91, 0.87, -1.5e-3, 42]
})DOC";

std::string models_dir() {
  if (const char* env = std::getenv("KVASIR_MODELS"); env && *env) return env;
  return (std::filesystem::path(__FILE__).parent_path() / "../../../shared/models").string();
}

struct Setup {
  explicit Setup(const std::string& file)
      : tok(Tokenizer::from_file(models_dir() + "/vocab/" + file)) {
    const int32_t n = tok.n_vocab();
    std::vector<std::string> pieces(n);
    std::vector<bool> never(n);
    for (int32_t t = 0; t < n; ++t) {
      pieces[t] = tok.token_to_piece(t, false);
      never[t] = (tok.token_attr(t) &
                  (token_attr::kControl | token_attr::kUnknown | token_attr::kUnused)) != 0;
    }
    vocab = std::make_shared<GrammarVocab>(std::move(pieces), std::move(never), tok.eog_ids());
    grammar = parse_gbnf(kJson);
    doc = tok.encode(kDocument, false, false);
    doc.push_back(tok.eos_id());
  }
  Tokenizer tok;
  std::shared_ptr<const GrammarVocab> vocab;
  std::shared_ptr<const Grammar> grammar;
  std::vector<TokenId> doc;
};

Setup* setup(int which) {
  static std::unique_ptr<Setup> s[2];
  static const char* files[2] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-deepseek-llm.gguf"};
  if (!s[which]) s[which] = std::make_unique<Setup>(files[which]);
  return s[which].get();
}

// Follows the document; false if some token is refused (the benchmark is then invalid).
bool follow(const std::shared_ptr<ConstrainedGrammar>& cg, const std::vector<TokenId>& doc,
            bool with_allowed) {
  GrammarMatcher m(cg);
  for (const TokenId t : doc) {
    if (with_allowed) {
      const TokenMask& mask = m.allowed();
      benchmark::DoNotOptimize(&mask);
      if (!mask.test(t)) return false;
    }
    if (!m.accept(t)) return false;
  }
  return m.finished();
}

void report(benchmark::State& state, const Setup& s) {
  state.counters["tokens"] = static_cast<double>(s.doc.size());
  state.counters["n_vocab"] = s.tok.n_vocab();
  state.counters["per_token"] = benchmark::Counter(
      static_cast<double>(s.doc.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_JsonCold(benchmark::State& state) {
  Setup* s = setup(static_cast<int>(state.range(0)));
  uint64_t misses = 0, visited = 0;
  for (auto _ : state) {
    auto cg = std::make_shared<ConstrainedGrammar>(s->grammar, s->vocab);
    if (!follow(cg, s->doc, true)) state.SkipWithError("the document was refused");
    misses = cg->cache_stats().misses;
    visited = cg->cache_stats().nodes_visited;
  }
  report(state, *s);
  state.counters["misses"] = static_cast<double>(misses);
  state.counters["nodes_per_miss"] = misses ? static_cast<double>(visited) / misses : 0;
}
BENCHMARK(BM_JsonCold)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_JsonWarm(benchmark::State& state) {
  Setup* s = setup(static_cast<int>(state.range(0)));
  auto cg = std::make_shared<ConstrainedGrammar>(s->grammar, s->vocab);
  if (!follow(cg, s->doc, true)) state.SkipWithError("the document was refused");
  for (auto _ : state) follow(cg, s->doc, true);
  report(state, *s);
}
BENCHMARK(BM_JsonWarm)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_JsonAcceptOnly(benchmark::State& state) {
  Setup* s = setup(static_cast<int>(state.range(0)));
  auto cg = std::make_shared<ConstrainedGrammar>(s->grammar, s->vocab);
  if (!follow(cg, s->doc, true)) state.SkipWithError("the document was refused");
  for (auto _ : state) follow(cg, s->doc, false);
  report(state, *s);
}
BENCHMARK(BM_JsonAcceptOnly)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Building a GrammarVocab (the trie) from a tokenizer's pieces: once per tokenizer.
void BM_VocabBuild(benchmark::State& state) {
  Setup* s = setup(static_cast<int>(state.range(0)));
  const int32_t n = s->tok.n_vocab();
  std::vector<std::string> pieces(n);
  for (int32_t t = 0; t < n; ++t) pieces[t] = s->vocab->piece(t);
  for (auto _ : state) {
    GrammarVocab v(pieces, std::vector<bool>(n, false), s->tok.eog_ids());
    benchmark::DoNotOptimize(&v);
  }
}
BENCHMARK(BM_VocabBuild)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvasir::grammar
