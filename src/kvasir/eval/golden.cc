#include "kvasir/eval/golden.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

int argmax(std::span<const float> row) {
  int best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[static_cast<size_t>(best)]) best = static_cast<int>(i);
  return best;
}

std::string snippet(const std::string& s, size_t at) {
  return at < s.size() ? s.substr(at, 16) : std::string();
}

}  // namespace

std::vector<GoldenCase> read_golden_set(const std::string& path, bool need_answer) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot read the golden set", path);
  std::vector<GoldenCase> cases;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail("{}:{}: not valid JSON ({})", path, n, e.what());
    }
    if (!j.is_object()) fail("{}:{}: expected a JSON object, got {}", path, n, j.type_name());
    GoldenCase c;
    c.line = n;
    c.id = "line " + std::to_string(n);
    for (const auto& [key, value] : j.items()) {
      auto str = [&]() {
        if (!value.is_string())
          fail("{}:{}: field '{}': expected a string, got {}", path, n, key, value.type_name());
        return value.get<std::string>();
      };
      if (key == "prompt") {
        c.prompt = str();
      } else if (key == "expected") {
        c.expected = str();
      } else if (key == "contains") {
        c.contains = str();
      } else if (key == "id") {
        c.id = str();
      } else if (key == "max_tokens") {
        if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 65536)
          fail("{}:{}: field 'max_tokens': expected an integer in 1..65536, got {}", path, n,
               value.dump());
        c.max_tokens = value.get<int>();
      } else {
        fail("{}:{}: unknown field '{}' (a case has prompt, expected or contains, id, max_tokens)",
             path, n, key);
      }
    }
    if (!j.contains("prompt")) fail("{}:{}: field 'prompt' is missing", path, n);
    if (c.expected && c.contains) fail("{}:{}: give 'expected' or 'contains', not both", path, n);
    if (need_answer && !c.expected && !c.contains)
      fail("{}:{}: neither 'expected' nor 'contains' (record them with --record)", path, n);
    if (c.contains && c.contains->empty()) fail("{}:{}: field 'contains' is empty", path, n);
    cases.push_back(std::move(c));
  }
  if (cases.empty()) fail("{}: no cases", path);
  return cases;
}

std::vector<GoldenResult> run_golden_set(const Model& model, const Tokenizer& tok, ThreadPool& pool,
                                         const std::vector<GoldenCase>& cases,
                                         const GoldenOptions& opt) {
  std::vector<GoldenResult> results;
  for (const GoldenCase& c : cases) {
    GoldenResult r;
    r.id = c.id;
    const std::vector<int32_t> prompt = tok.encode(c.prompt, /*add_special=*/true, false);
    if (prompt.empty()) fail("golden case '{}': the prompt has no tokens", c.id);
    int max_tokens = c.max_tokens;
    if (max_tokens == 0) {
      // Enough for the expected text (a token holds at least one character of it, or one byte
      // of a character), plus 16 to show a divergence; 64 for "contains" and recording.
      max_tokens = c.expected ? static_cast<int>(c.expected->size()) + 16 : 64;
    }
    SequenceRunnerOptions so;
    so.kv_type = opt.kv_type;
    so.key_transform = opt.key_transform;
    so.max_ctx = static_cast<int>(prompt.size()) + max_tokens + 1;
    SequenceRunner runner(model, pool, so);
    std::vector<int32_t> out;
    std::vector<size_t> ends;  // text length after each generated token
    std::span<const float> logits = runner.feed(prompt);
    std::string text;
    for (int i = 0; i < max_tokens; ++i) {
      const int32_t t = argmax(logits);
      if (tok.is_eog(t)) break;
      out.push_back(t);
      text = tok.decode(out, /*remove_special=*/true);
      ends.push_back(text.size());
      if (c.expected) {
        const std::string& want = *c.expected;
        size_t k = 0;
        while (k < want.size() && k < text.size() && want[k] == text[k]) ++k;
        if (k == want.size()) break;                          // matched
        if (k < text.size() && text.size() >= k + 16) break;  // diverged: 16 characters to show
      }
      if (c.contains && text.find(*c.contains) != std::string::npos) break;
      if (i + 1 < max_tokens) logits = runner.feed(std::span(&t, 1));
    }
    r.output = text;
    r.tokens = static_cast<int>(out.size());
    if (c.expected) {
      const std::string& want = *c.expected;
      size_t k = 0;
      while (k < want.size() && k < text.size() && want[k] == text[k]) ++k;
      r.pass = k == want.size();
      if (!r.pass) {
        r.diverged_char = static_cast<int>(k);
        const auto it = std::upper_bound(ends.begin(), ends.end(), k);
        r.diverged_token = static_cast<int>(it - ends.begin());
        r.want_at = snippet(want, k);
        r.got_at = snippet(text, k);
      }
    } else if (c.contains) {
      r.pass = text.find(*c.contains) != std::string::npos;
    } else {
      r.pass = true;  // recording
    }
    results.push_back(std::move(r));
  }
  return results;
}

std::string golden_set_jsonl(const std::vector<GoldenCase>& cases,
                             const std::vector<GoldenResult>& results) {
  std::string s;
  for (size_t i = 0; i < cases.size() && i < results.size(); ++i) {
    nlohmann::json j = {{"id", cases[i].id}, {"prompt", cases[i].prompt}};
    j["expected"] = results[i].output;
    if (cases[i].max_tokens > 0) j["max_tokens"] = cases[i].max_tokens;
    s += j.dump() + "\n";
  }
  return s;
}

}  // namespace kvasir
