// Constrained decoding in the engine (GenerateRequest::grammar) on stories260K, a model that knows
// no JSON or arithmetic: whatever it would say, the grammar alone must make the output a sentence
// of the grammar, checked by recognizers written here independently of grammar/ (nlohmann's JSON
// parser, hand-written scanners). Also: constrained requests batched with unconstrained ones give
// what each gives alone (batch invariance), under speculation too (constrained requests do not
// speculate; the others stay exact), the request stops once the grammar is complete, a bad
// grammar is refused at submit, and the mask cache is counted.
#include <gtest/gtest.h>

#include <cctype>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_util/models.h"

namespace kvasir {
namespace {

test_util::Stories260K& fx() {
  return test_util::Stories260K::get();
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  RequestOutput last;
};

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Result> out;
  int done = 0;
  OutputSink sink() {
    return [this](const RequestOutput& o) {
      std::lock_guard lk(mu);
      Result& r = out[o.id];
      for (const auto& t : o.tokens) r.tokens.push_back(t.token);
      r.text += o.text;
      if (o.finished) {
        r.last = o;
        ++done;
        cv.notify_all();
      }
    };
  }
  void wait(int n) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done >= n; });
  }
};

// ---- Independent recognizers -------------------------------------------------------------------

// expr ::= term (("+" | "-") term)* ; term ::= factor (("*" | "/") factor)* ;
// factor ::= number | "(" expr ")" ; number ::= [0-9]+
struct Arith {
  const std::string& s;
  size_t i = 0;
  bool number() {
    size_t b = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i > b;
  }
  bool factor() {
    if (i < s.size() && s[i] == '(') {
      ++i;
      if (!expr() || i >= s.size() || s[i] != ')') return false;
      ++i;
      return true;
    }
    return number();
  }
  bool term() {
    if (!factor()) return false;
    while (i < s.size() && (s[i] == '*' || s[i] == '/')) {
      ++i;
      if (!factor()) return false;
    }
    return true;
  }
  bool expr() {
    if (!term()) return false;
    while (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
      if (!term()) return false;
    }
    return true;
  }
};
bool is_arith(const std::string& s) {
  Arith a{s};
  return a.expr() && a.i == s.size();
}

// 1 to 3 lines of comma-separated fields of [a-z0-9 ] (at least one character each), each line
// ending in "\n".
bool is_csv(const std::string& s) {
  if (s.empty() || s.back() != '\n') return false;
  size_t lines = 0, i = 0;
  while (i < s.size()) {
    size_t fields = 0;
    for (;;) {
      size_t b = i;
      while (i < s.size() && (std::islower(static_cast<unsigned char>(s[i])) ||
                              std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == ' '))
        ++i;
      if (i == b) return false;
      ++fields;
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      break;
    }
    if (i >= s.size() || s[i] != '\n') return false;
    ++i;
    ++lines;
  }
  return lines >= 1 && lines <= 3;
}

// A C-like identifier list: ident ("," " "? ident)* ";" with ident = [A-Za-z_][A-Za-z0-9_]{0,15}
bool is_ident_list(const std::string& s) {
  size_t i = 0;
  for (;;) {
    if (i >= s.size() || !(std::isalpha(static_cast<unsigned char>(s[i])) || s[i] == '_'))
      return false;
    size_t b = i++;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
    if (i - b > 16) return false;
    if (i < s.size() && s[i] == ',') {
      ++i;
      if (i < s.size() && s[i] == ' ') ++i;
      continue;
    }
    return i + 1 == s.size() && s[i] == ';';
  }
}

bool is_json_object(const std::string& s) {
  const auto j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && j.is_object();
}

struct Case {
  const char* name;
  const char* gbnf;
  bool (*recognize)(const std::string&);
};

// Every repetition is bounded, so every generation ends by the grammar's own end well within
// the token limit of the tests (the longest sentence of each is under 140 bytes): a run cut by
// max_tokens would leave its recognizer unused, so the tests require none.
const Case kCases[] = {
    {"arithmetic",
     R"G(root ::= expr
expr ::= term (("+" | "-") term){0,2}
term ::= factor (("*" | "/") factor){0,1}
factor ::= number | "(" inner ")"
inner ::= number (("+" | "-" | "*" | "/") number){0,2}
number ::= [0-9]{1,3})G",
     is_arith},
    {"csv",
     R"G(root ::= line{1,3}
line ::= field ("," field){0,2} "\n"
field ::= [a-z0-9 ]{1,8})G",
     is_csv},
    {"identifiers",
     R"G(root ::= ident ("," " "? ident){0,4} ";"
ident ::= [A-Za-z_] [A-Za-z0-9_]{0,7})G",
     is_ident_list},
    {"json",
     R"G(root ::= "{" ws member ("," ws member)? "}"
member ::= string ":" ws value
value ::= leaf | "{" ws ( string ":" ws leaf ("," ws string ":" ws leaf)? )? "}"
leaf ::= string | number | "true" | "false" | "null"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) ){0,8} "\""
number ::= "-"? [0-9]{1,4} ("." [0-9]{1,3})?
ws ::= " "?)G",
     is_json_object},
};

EngineConfig small_config() {
  EngineConfig c;
  c.max_seqs = 32;
  c.max_batched_tokens = 256;
  c.threads = 1;
  return c;
}

GenerateRequest request(const std::vector<int32_t>& prompt, const std::string& gbnf, float temp,
                        uint64_t seed, int max_tokens) {
  GenerateRequest r;
  r.prompt = prompt;
  r.grammar = gbnf;
  r.params.temperature = temp;
  r.params.seed = seed;
  r.params.max_tokens = max_tokens;
  return r;
}

std::vector<int32_t> prompt_of(const std::string& text) {
  return fx().tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
}

TEST(GrammarEngine, OutputsAreSentencesOfTheGrammarGreedyAndSampled) {
  Engine engine(*fx().model, fx().tok, small_config());
  const std::vector<std::string> prompts = {"Once upon a time", "Lily said", "The dog"};
  for (const Case& c : kCases) {
    Collector col;
    std::vector<uint64_t> ids;
    int n = 0;
    for (const std::string& p : prompts) {
      for (float temp : {0.0f, 1.0f}) {
        for (uint64_t seed : {1u, 2u, 3u}) {
          if (temp == 0.0f && seed > 1) continue;
          ids.push_back(engine.submit(request(prompt_of(p), c.gbnf, temp, seed, 200), col.sink()));
          ++n;
        }
      }
    }
    col.wait(n);
    for (uint64_t id : ids) {
      const Result& r = col.out[id];
      ASSERT_TRUE(r.last.error.empty()) << c.name << ": " << r.last.error;
      EXPECT_EQ(r.last.finish_reason, FinishReason::kStop) << c.name << ": " << r.text;
      EXPECT_TRUE(c.recognize(r.text)) << c.name << " produced " << r.text;
    }
  }
  const EngineStats st = engine.stats();
  EXPECT_GT(st.grammar_masks_computed, 0u);
  EXPECT_GT(st.grammar_mask_cache_hits, 0u);
}

TEST(GrammarEngine, ConstrainedRequestsAreBatchInvariantAmongUnconstrainedOnes) {
  const std::vector<std::string> texts = {"Once upon a time", "Lily said", "The dog ran", "One day",
                                          "Tom and Sam"};
  // Alone: each constrained request in an engine of its own.
  std::vector<Result> alone;
  for (size_t i = 0; i < texts.size(); ++i) {
    Engine e(*fx().model, fx().tok, small_config());
    Collector col;
    const Case& c = kCases[i % std::size(kCases)];
    const uint64_t id = e.submit(request(prompt_of(texts[i]), c.gbnf, 0.8f, 7 + i, 64), col.sink());
    col.wait(1);
    alone.push_back(col.out[id]);
  }
  // Together, mixed with unconstrained requests, in a small token budget (chunked prefills).
  EngineConfig cfg = small_config();
  cfg.max_batched_tokens = 24;
  Engine e(*fx().model, fx().tok, cfg);
  Collector col;
  std::vector<uint64_t> ids;
  int n = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    GenerateRequest plain = request(prompt_of(texts[i]), "", 0.8f, 100 + i, 40);
    e.submit(plain, col.sink());
    const Case& c = kCases[i % std::size(kCases)];
    ids.push_back(e.submit(request(prompt_of(texts[i]), c.gbnf, 0.8f, 7 + i, 64), col.sink()));
    n += 2;
  }
  col.wait(n);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(col.out[ids[i]].tokens, alone[i].tokens) << texts[i];
    EXPECT_EQ(col.out[ids[i]].text, alone[i].text);
  }
}

TEST(GrammarEngine, SpeculationLeavesConstrainedAndPlainRequestsExact) {
  auto run = [&](bool speculate) {
    EngineConfig cfg = small_config();
    if (speculate) {
      cfg.spec.method = SpecMethod::kNgram;
      cfg.spec.k = 3;
    }
    Engine e(*fx().model, fx().tok, cfg);
    Collector col;
    std::vector<uint64_t> ids;
    for (int i = 0; i < 4; ++i) {
      GenerateRequest plain = request(prompt_of("Once upon a time"), "", 0.0f, 1, 48);
      ids.push_back(e.submit(plain, col.sink()));
      ids.push_back(
          e.submit(request(prompt_of("Lily said"), kCases[i].gbnf, 0.0f, 1, 48), col.sink()));
    }
    col.wait(static_cast<int>(ids.size()));
    std::vector<std::vector<int32_t>> out;
    for (uint64_t id : ids) out.push_back(col.out[id].tokens);
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(GrammarEngine, StopsWhenTheGrammarIsCompleteEvenWithIgnoreEos) {
  Engine e(*fx().model, fx().tok, small_config());
  Collector col;
  GenerateRequest r =
      request(prompt_of("Once upon a time"), R"(root ::= "yes" | "no")", 0.0f, 1, 50);
  r.params.ignore_eos = true;
  const uint64_t id = e.submit(r, col.sink());
  col.wait(1);
  const Result& res = col.out[id];
  EXPECT_EQ(res.last.finish_reason, FinishReason::kStop);
  EXPECT_TRUE(res.text == "yes" || res.text == "no") << res.text;
  EXPECT_LE(res.tokens.size(), 3u);
}

TEST(GrammarEngine, ForcedLiteralIsWrittenExactly) {
  Engine e(*fx().model, fx().tok, small_config());
  Collector col;
  const std::string want = "The answer is 42, said the little robot.";
  const uint64_t id = e.submit(
      request(prompt_of("Once upon a time"), "root ::= \"" + want + "\"", 1.0f, 3, 60), col.sink());
  col.wait(1);
  EXPECT_EQ(col.out[id].text, want);
  EXPECT_EQ(col.out[id].last.finish_reason, FinishReason::kStop);
}

// A request that renders control tokens may have them written where the grammar admits their
// text (a tool-call marker is the model's one token, not a spelling of its text); one that does
// not render them never gets them. A bias makes BOS (a control token, text "<s>") the model's
// first choice.
TEST(GrammarEngine, ControlTokensOnlyWhenTheRequestRendersThem) {
  const int32_t bos = fx().tok.bos_id();
  ASSERT_TRUE(fx().tok.is_control(bos));
  for (bool special : {true, false}) {
    Engine e(*fx().model, fx().tok, small_config());
    Collector col;
    GenerateRequest r = request(prompt_of("Once"), R"G(root ::= "<s>")G", 0.0f, 1, 20);
    r.render_special = special;
    r.params.logit_bias[bos] = 100;
    const uint64_t id = e.submit(r, col.sink());
    col.wait(1);
    const Result& res = col.out[id];
    EXPECT_EQ(res.text, "<s>") << special;
    EXPECT_EQ(res.last.finish_reason, FinishReason::kStop);
    if (special) {
      EXPECT_EQ(res.tokens, std::vector<int32_t>{bos});
    } else {
      EXPECT_GT(res.tokens.size(), 1u);  // spelled from ordinary tokens
      for (int32_t t : res.tokens) EXPECT_NE(t, bos);
    }
  }
}

TEST(GrammarEngine, AnUnparsableGrammarIsRefusedAtSubmit) {
  Engine e(*fx().model, fx().tok, small_config());
  try {
    e.submit(request(prompt_of("Once"), "root ::= \"abc", 0.0f, 1, 8), nullptr);
    FAIL() << "expected a refusal";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("grammar"), std::string::npos) << err.what();
  }
  try {
    e.submit(request(prompt_of("Once"), "root ::= missing", 0.0f, 1, 8), nullptr);
    FAIL() << "expected a refusal";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("missing"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace kvasir
