// Tool calls (server/tool_calls.h): family detection on the shared real chat templates, parsing
// each family's output (well-formed, parallel, malformed, truncated), the streaming parser against
// the whole parse at every split of the text, and the grammar that forces a call checked with the
// grammar module's own recognizer.
#include "kvasir/server/tool_calls.h"

#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <set>

#include "kvasir/grammar/grammar.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir::server {
namespace {

using OJson = nlohmann::ordered_json;

// ---- Detection --------------------------------------------------------------------------------

TEST(ToolFamily, DetectedFromTheSharedTemplates) {
  const std::vector<std::pair<std::string, ToolFamily>> cases = {
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolFamily::kHermes},
      {"Qwen-QwQ-32B.jinja", ToolFamily::kHermes},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFamily::kLlama3},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFamily::kMistralV11},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ToolFamily::kDeepSeek},
      // Granite 4.0 writes Hermes' <tool_call> (Granite 3.x used <|tool_call|>).
      {"ibm-granite-granite-4.0.jinja", ToolFamily::kHermes},
      // LFM2.5 lists the tools but neither says how to write a call nor renders one back.
      {"LFM2.5-Instruct.jinja", ToolFamily::kNone},
  };
  for (const auto& [file, family] : cases) {
    const std::string src = test_util::read_file(test_util::shared_templates_dir() + "/" + file);
    ASSERT_FALSE(src.empty()) << file;
    EXPECT_EQ(detect_tool_family(src), family)
        << file << ": got " << tool_family_name(detect_tool_family(src)) << ", expected "
        << tool_family_name(family);
  }
}

TEST(ToolFamily, DetectedFromMarkers) {
  EXPECT_EQ(detect_tool_family("{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' }}"),
            ToolFamily::kGranite);
  EXPECT_EQ(detect_tool_family("{{- '[TOOL_CALLS] ' + tool_calls|tojson }}"), ToolFamily::kMistral);
  EXPECT_EQ(detect_tool_family("{{- '[TOOL_CALLS]' + name + '[ARGS]' + args }}"),
            ToolFamily::kMistralV11);
  EXPECT_EQ(detect_tool_family("{{ '<|python_tag|>' + x }}"), ToolFamily::kLlama3);
  EXPECT_EQ(detect_tool_family("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                               "{{ m.content }}<|im_end|>\n{% endfor %}"),
            ToolFamily::kNone);
  EXPECT_EQ(detect_tool_family(""), ToolFamily::kNone);
  EXPECT_STREQ(tool_family_name(ToolFamily::kMistralV11), "mistral-v11");
  EXPECT_STREQ(tool_family_name(ToolFamily::kNone), "none");
}

// ---- Whole parse ------------------------------------------------------------------------------

struct Call {
  std::string name, arguments;
};
struct Case {
  ToolFamily family;
  std::string text;
  std::string content;  // expected
  std::vector<Call> calls;
};

bool all_alnum(std::string_view s) {
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return true;
}
// "call_" + 24 alphanumerics, as OpenAI writes ids.
bool is_openai_id(const std::string& id) {
  return id.size() == 29 && id.starts_with("call_") && all_alnum(std::string_view(id).substr(5));
}
// 9 alphanumerics: the only ids Mistral's templates accept back.
bool is_mistral_id(const std::string& id) {
  return id.size() == 9 && all_alnum(id);
}

void expect_parse(const Case& c) {
  SCOPED_TRACE(std::string(tool_family_name(c.family)) + ": " + c.text);
  const ParsedOutput p = parse_tool_calls(c.family, c.text);
  EXPECT_EQ(p.content, c.content);
  ASSERT_EQ(p.calls.size(), c.calls.size());
  std::set<std::string> ids;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, c.calls[i].name);
    EXPECT_EQ(p.calls[i].arguments, c.calls[i].arguments);
    const bool mistral = c.family == ToolFamily::kMistral || c.family == ToolFamily::kMistralV11;
    EXPECT_TRUE(mistral ? is_mistral_id(p.calls[i].id) : is_openai_id(p.calls[i].id))
        << p.calls[i].id;
    EXPECT_TRUE(ids.insert(p.calls[i].id).second) << "duplicate id " << p.calls[i].id;
  }
}

const ToolFamily H = ToolFamily::kHermes, L = ToolFamily::kLlama3, M = ToolFamily::kMistral,
                 V = ToolFamily::kMistralV11, G = ToolFamily::kGranite, D = ToolFamily::kDeepSeek;

// Realistic outputs of each family, well-formed and not; the streaming test reuses them all.
std::vector<Case> hermes_cases() {
  return {
      {H,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"celsius\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}}},
      // Parallel calls after some text; the blank lines around calls are not content.
      {H,
       "I'll check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
       "\"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>",
       "I'll check both cities.",
       {{"get_weather", R"({"city":"Paris"})"}, {"get_weather", R"({"city":"Tokyo"})"}}},
      // QwQ: reasoning first (content to this module), then the call.
      {H,
       "<think>\nThe user wants the time.\n</think>\n\n<tool_call>\n{\"name\": \"get_time\", "
       "\"arguments\": {}}\n</tool_call>",
       "<think>\nThe user wants the time.\n</think>",
       {{"get_time", "{}"}}},
      // Key order kept, nested values, numbers and literals re-serialized compactly; UTF-8.
      {H,
       "<tool_call>{\"name\":\"search\",\"arguments\":{\"q\":\"Zürich 東京 ☀️\",\"filters\":"
       "[{\"k\": \"a\", \"v\": [1, 2.5, -300, true, null]}], \"a\": {}}}</tool_call>",
       "",
       {{"search",
         R"({"q":"Zürich 東京 ☀️","filters":[{"k":"a","v":[1,2.5,-300,true,null]}],"a":{}})"}}},
      // Arguments as a JSON string holding an object; "parameters" instead of "arguments";
      // no arguments at all ({}); extra keys ignored.
      {H,
       R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)",
       "",
       {{"f", R"({"a":1})"}}},
      {H,
       R"(<tool_call>{"name": "f", "parameters": {"b": [true]}}</tool_call>)",
       "",
       {{"f", R"({"b":[true]})"}}},
      {H, R"(<tool_call>{"name": "ping", "id": 7}</tool_call>)", "", {{"ping", "{}"}}},
      // Text after a call.
      {H,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\nDone.",
       "Done.",
       {{"f", "{}"}}},
      // The closing tag cut off at the very end is tolerated; half a closing tag is not.
      {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", "", {{"f", R"({"a":1})"}}},
      {H,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_",
       {}},
      // Malformed: missing brace, no name, empty name, arguments not an object, bad string
      // arguments, truncated JSON, text instead of JSON: all stays content, verbatim.
      {H,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>",
       {}},
      {H,
       "<tool_call>\n{\"arguments\": {\"x\": 1}}\n</tool_call>",
       "<tool_call>\n{\"arguments\": {\"x\": 1}}\n</tool_call>",
       {}},
      {H,
       R"(<tool_call>{"name": "", "arguments": {}}</tool_call>)",
       R"(<tool_call>{"name": "", "arguments": {}}</tool_call>)",
       {}},
      {H,
       R"(<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>)",
       R"(<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>)",
       {}},
      {H,
       R"(<tool_call>{"name": "f", "arguments": "not json"}</tool_call>)",
       R"(<tool_call>{"name": "f", "arguments": "not json"}</tool_call>)",
       {}},
      {H,
       "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"unfinish",
       "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"unfinish",
       {}},
      // A bad call, then a good one: only the good one is a call.
      {H,
       R"(<tool_call>oops</tool_call> <tool_call>{"name":"f","arguments":{"k":"v"}}</tool_call>)",
       "<tool_call>oops</tool_call>",
       {{"f", R"({"k":"v"})"}}},
      // Prose that mentions the tag, and text with no calls at all (white space kept).
      {H, "Use the <tool_call> tag to call a tool.", "Use the <tool_call> tag to call a tool.", {}},
      {H, "  Hello, <b>world</b>!\n\n", "  Hello, <b>world</b>!\n\n", {}},
      {H, "", "", {}},
  };
}

std::vector<Case> llama3_cases() {
  return {
      {L,
       R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {L,
       R"(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}})",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {L, R"({"type": "function", "name": "f", "parameters": {}})", "", {{"f", "{}"}}},
      {L, "\n\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}", "", {{"f", R"({"x":1})"}}},
      // Several calls, separated by ';' or a new line.
      {L,
       R"({"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}})",
       "",
       {{"a", "{}"}, {"b", R"({"x":1})"}}},
      {L,
       "{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {}}",
       "",
       {{"a", "{}"}, {"b", "{}"}}},
      // A call, then prose.
      {L,
       "{\"name\":\"f\",\"parameters\":{}}\nThe weather is nice.",
       "The weather is nice.",
       {{"f", "{}"}}},
      // Text before the tag.
      {L,
       "Let me check.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}",
       "Let me check.",
       {{"f", R"({"a":"b"})"}}},
      // JSON that is not a call: an answer, other keys, no parameters, a wrong type, a call
      // not at the start, a builtin tool call, a truncated object.
      {L, R"({"name": "John", "age": 30})", R"({"name": "John", "age": 30})", {}},
      {L, R"({"city": "Paris"})", R"({"city": "Paris"})", {}},
      {L, R"({"name": "f"})", R"({"name": "f"})", {}},
      {L,
       R"({"type": "tool", "name": "f", "parameters": {}})",
       R"({"type": "tool", "name": "f", "parameters": {}})",
       {}},
      {L,
       R"(Here it is: {"name": "f", "parameters": {}})",
       R"(Here it is: {"name": "f", "parameters": {}})",
       {}},
      {L,
       R"(<|python_tag|>brave_search.call(query="weather in Paris"))",
       R"(<|python_tag|>brave_search.call(query="weather in Paris"))",
       {}},
      {L, R"({"name": "f", "parameters": {"x": )", R"({"name": "f", "parameters": {"x": )", {}},
      // A good call followed by a bad one: the bad one stays content.
      {L, R"({"name": "a", "parameters": {}}; {"name": 3})", R"(; {"name": 3})", {{"a", "{}"}}},
      {L, "The answer is 42.", "The answer is 42.", {}},
  };
}

std::vector<Case> mistral_cases() {
  return {
      {V,
       R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {V,
       R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{})",
       "",
       {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}},
      {V,
       R"(Sure.[TOOL_CALLS]f[ARGS]{"a": [1, {"b": null}]})",
       "Sure.",
       {{"f", R"({"a":[1,{"b":null}]})"}}},
      {V,
       R"([TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"})",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      // The array form parses under both Mistral families.
      {V, R"([TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}])", "", {{"f", R"({"x":1})"}}},
      {M,
       R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, )"
       R"("id": "abcDEF123"}, {"name": "get_time", "arguments": {}}])",
       "",
       {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}},
      {M, R"([TOOL_CALLS]f[ARGS]{})", "", {{"f", "{}"}}},
      // Malformed: one bad element spoils the array; a space in the name; arguments not an
      // object; no [ARGS]; truncated.
      {M,
       R"([TOOL_CALLS][{"name": "f", "arguments": {}}, {"arguments": {}}])",
       R"([TOOL_CALLS][{"name": "f", "arguments": {}}, {"arguments": {}}])",
       {}},
      {V, R"([TOOL_CALLS]get weather[ARGS]{})", R"([TOOL_CALLS]get weather[ARGS]{})", {}},
      {V, R"([TOOL_CALLS]f[ARGS]"x")", R"([TOOL_CALLS]f[ARGS]"x")", {}},
      {V, R"([TOOL_CALLS]f{"a": 1})", R"([TOOL_CALLS]f{"a": 1})", {}},
      {V, R"([TOOL_CALLS]f[ARGS]{"a": )", R"([TOOL_CALLS]f[ARGS]{"a": )", {}},
      {M, R"([TOOL_CALLS][])", R"([TOOL_CALLS][])", {}},
      {V, "No tools needed [really].", "No tools needed [really].", {}},
  };
}

std::vector<Case> granite_cases() {
  return {
      {G,
       R"(<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, )"
       R"({"name": "get_time", "arguments": {}}])",
       "",
       {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}},
      {G,
       R"(Checking.<|tool_call|>{"name": "f", "arguments": {"x": 1}})",
       "Checking.",
       {{"f", R"({"x":1})"}}},
      {G,
       R"(<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}])",
       R"(<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}])",
       {}},
      {G, "<|tool_call|>", "<|tool_call|>", {}},
  };
}

std::vector<Case> deepseek_cases() {
  const std::string call_w =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
      "\"Paris\"}\n```<｜tool▁call▁end｜>";
  const std::string call_t =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>";
  return {
      {D,
       "<think>\nNeed the weather.\n</think>\n\n<｜tool▁calls▁begin｜>" + call_w +
           "<｜tool▁calls▁end｜>",
       "<think>\nNeed the weather.\n</think>",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {D,
       "<｜tool▁calls▁begin｜>" + call_w + "\n" + call_t + "<｜tool▁calls▁end｜>",
       "",
       {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}},
      // V3.1 form.
      {D,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
       "\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      // A call without the outer markers, then text.
      {D, call_t + "\nThat is all.", "That is all.", {{"get_time", "{}"}}},
      // Malformed: no closing fence; truncated; arguments not an object.
      {D,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {}},
      {D,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_wea",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_wea",
       {}},
      {D,
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n[1]\n```<｜tool▁call▁end｜>",
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n[1]\n```<｜tool▁call▁end｜>",
       {}},
      {D, "Plain answer <｜end▁of▁sentence｜>", "Plain answer <｜end▁of▁sentence｜>", {}},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto part :
       {hermes_cases(), llama3_cases(), mistral_cases(), granite_cases(), deepseek_cases()})
    all.insert(all.end(), part.begin(), part.end());
  all.push_back({ToolFamily::kNone,
                 "<tool_call>{\"name\": \"f\"}</tool_call> é",
                 "<tool_call>{\"name\": \"f\"}</tool_call> é",
                 {}});
  return all;
}

TEST(ToolCallParse, Hermes) {
  for (const Case& c : hermes_cases()) expect_parse(c);
}
TEST(ToolCallParse, Llama3) {
  for (const Case& c : llama3_cases()) expect_parse(c);
}
TEST(ToolCallParse, Mistral) {
  for (const Case& c : mistral_cases()) expect_parse(c);
}
TEST(ToolCallParse, Granite) {
  for (const Case& c : granite_cases()) expect_parse(c);
}
TEST(ToolCallParse, DeepSeek) {
  for (const Case& c : deepseek_cases()) expect_parse(c);
}

TEST(ToolCallParse, MistralKeepsTheModelsIdsWhenUsable) {
  ParsedOutput p = parse_tool_calls(
      V, R"([TOOL_CALLS]a[CALL_ID]a1b2c3d4e[ARGS]{}[TOOL_CALLS]b[CALL_ID]a1b2c3d4e[ARGS]{})");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "a1b2c3d4e");
  EXPECT_NE(p.calls[1].id, "a1b2c3d4e");  // already used: a fresh one
  EXPECT_TRUE(is_mistral_id(p.calls[1].id));
  p = parse_tool_calls(M, R"([TOOL_CALLS][{"name": "a", "arguments": {}, "id": "short"}])");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_TRUE(is_mistral_id(p.calls[0].id)) << p.calls[0].id;
}

TEST(ToolCallParse, ManyParallelCallsGetUniqueIds) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "<tool_call>{\"name\": \"f\", \"arguments\": {\"i\": " + std::to_string(i) +
            "}}</tool_call>\n";
  const ParsedOutput p = parse_tool_calls(H, text);
  ASSERT_EQ(p.calls.size(), 200u);
  std::set<std::string> ids;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    EXPECT_EQ(p.calls[i].arguments, "{\"i\":" + std::to_string(i) + "}");
    ids.insert(p.calls[i].id);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(p.content, "");
}

TEST(ToolCallParse, HostileInputNeverCrashes) {
  // Deep nesting past the scanner's depth bound, lone escapes, control characters, invalid
  // UTF-8 in a string: content, never a crash.
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(5000, '[') +
                     std::string(5000, ']') + "}</tool_call>";
  EXPECT_EQ(parse_tool_calls(H, deep).content, deep);
  for (std::string bad : {std::string("<tool_call>{\"name\": \"f\\x\"}</tool_call>"),
                          std::string("<tool_call>{\"name\": \"f\n\"}</tool_call>"),
                          std::string("<tool_call>{\"name\": \"\xff\"}</tool_call>"),
                          std::string("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 01}}"
                                      "</tool_call>")}) {
    const ParsedOutput p = parse_tool_calls(H, bad);
    EXPECT_EQ(p.content, bad);
    EXPECT_TRUE(p.calls.empty());
  }
}

// ---- Streaming --------------------------------------------------------------------------------

struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
};

// Pushes `pieces`, then finishes; checks the delta protocol on the way.
Streamed stream(ToolFamily family, const std::vector<std::string>& pieces) {
  ToolCallStreamParser parser(family);
  Streamed out;
  auto take = [&](const StreamEvents& ev) {
    out.content += ev.content;
    for (const ToolCallDelta& d : ev.tool_calls) {
      if (d.id) {  // first delta of a call: the next index, its name, no arguments yet
        EXPECT_EQ(d.index, static_cast<int>(out.calls.size()));
        EXPECT_TRUE(d.name.has_value());
        EXPECT_EQ(d.arguments, "");
        out.calls.push_back(ToolCall{*d.id, d.name.value_or(""), ""});
      } else {
        EXPECT_FALSE(d.name.has_value());
        ASSERT_EQ(d.index + 1, static_cast<int>(out.calls.size()));  // the latest call
        out.calls.back().arguments += d.arguments;
      }
    }
  };
  for (const std::string& p : pieces) take(parser.push(p));
  take(parser.finish());
  EXPECT_EQ(parser.calls(), static_cast<int>(out.calls.size()));
  return out;
}

void expect_same(const Streamed& s, const ParsedOutput& whole, const std::string& how) {
  EXPECT_EQ(s.content, whole.content) << how;
  ASSERT_EQ(s.calls.size(), whole.calls.size()) << how;
  for (size_t i = 0; i < s.calls.size(); ++i) {
    EXPECT_EQ(s.calls[i].name, whole.calls[i].name) << how;
    EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments) << how;
  }
}

TEST(ToolCallStream, EverySplitGivesTheWholeParse) {
  std::mt19937 rng(1234);
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(std::string(tool_family_name(c.family)) + ": " + c.text);
    const ParsedOutput whole = parse_tool_calls(c.family, c.text);
    const size_t n = c.text.size();
    expect_same(stream(c.family, {c.text}), whole, "one piece");
    for (size_t k = 0; k <= n; ++k)
      expect_same(stream(c.family, {c.text.substr(0, k), c.text.substr(k)}), whole,
                  "split at " + std::to_string(k));
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    expect_same(stream(c.family, bytes), whole, "byte by byte");
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < n;) {
        const size_t len = std::uniform_int_distribution<size_t>(0, 9)(rng);
        pieces.push_back(c.text.substr(i, len));
        i += len;
      }
      expect_same(stream(c.family, pieces), whole, "random pieces, trial " + std::to_string(trial));
    }
  }
}

// Texts assembled at random from the pieces calls are made of (markers, halves of markers, JSON
// punctuation, names, blanks, prose): mostly near-misses, some calls. Whatever they are, the
// streamed result at random splits must equal the whole parse, and text without calls must come
// back unchanged.
TEST(ToolCallStream, RandomNearMissTextsAgreeWithTheWholeParse) {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "<tool_",
                                           "<|python_tag|>",
                                           "[TOOL_CALLS]",
                                           "[ARGS]",
                                           "[CALL_ID]",
                                           "abc123XYZ",
                                           "[TOOL_",
                                           "<|tool_call|>",
                                           "<｜tool▁calls▁begin｜>",
                                           "<｜tool▁call▁begin｜>",
                                           "<｜tool▁sep｜>",
                                           "<｜tool▁call▁end｜>",
                                           "<｜tool▁calls▁end｜>",
                                           "<｜tool▁",
                                           "function",
                                           "```json",
                                           "```",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"name\"",
                                           "\"arguments\"",
                                           "\"parameters\"",
                                           "\"type\"",
                                           "\"function\"",
                                           ": ",
                                           ":",
                                           ", ",
                                           ",",
                                           "\"f\"",
                                           "\"x\"",
                                           "1",
                                           "{}",
                                           "\"a b\"",
                                           "get_time",
                                           " ",
                                           "\n",
                                           ";",
                                           "Hello",
                                           "é",
                                           "\"",
                                           "\\",
                                           "{\"name\": \"f\", \"arguments\": {}}",
                                           "{\"name\": \"g\", \"parameters\": {\"k\": [1]}}",
                                           "[{\"name\": \"h\", \"arguments\": {}}]"};
  // One well-formed call per family, used whole or mutated (a piece inserted, a range cut).
  const std::vector<std::pair<ToolFamily, std::string>> calls = {
      {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"},
      {L, "{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}"},
      {M, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]"},
      {V, "[TOOL_CALLS]f[ARGS]{\"a\": [1]}"},
      {G, "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]"},
      {D,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}};
  std::mt19937 rng(99);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int with_calls = 0, without = 0;
  for (const auto& [f, call] : calls) {
    for (int t = 0; t < 300; ++t) {
      std::string text;
      const size_t n = 1 + pick(8);
      for (size_t i = 0; i < n; ++i) {
        if (pick(3) != 0) {
          text += pieces[pick(pieces.size())];
          continue;
        }
        std::string c = call;
        switch (pick(3)) {
          case 0:
            c.insert(pick(c.size() + 1), pieces[pick(pieces.size())]);
            break;
          case 1: {
            const size_t at = pick(c.size());
            c.erase(at, 1 + pick(std::min<size_t>(4, c.size() - at)));
            break;
          }
          default:
            break;
        }
        text += c;
      }
      SCOPED_TRACE(std::string(tool_family_name(f)) + ": " + text);
      const ParsedOutput whole = parse_tool_calls(f, text);
      if (whole.calls.empty()) {
        EXPECT_EQ(whole.content, text);
      }
      with_calls += !whole.calls.empty();
      without += whole.calls.empty();
      std::vector<std::string> split;
      for (size_t i = 0; i < text.size();) {
        const size_t len = 1 + pick(6);
        split.push_back(text.substr(i, len));
        i += len;
      }
      expect_same(stream(f, split), whole, "random pieces");
    }
  }
  // The generator reaches both calls and near-misses in quantity.
  EXPECT_GT(with_calls, 300);
  EXPECT_GT(without, 300);
}

TEST(ToolCallStream, ContentIsHeldOnlyWhileUndecided) {
  ToolCallStreamParser p(H);
  EXPECT_EQ(p.push("Hello <b>wor").content, "Hello <b>wor");  // '<b' cannot start <tool_call>
  EXPECT_EQ(p.push("ld</b> <tool").content, "ld</b>");        // ' <tool' might
  EXPECT_EQ(p.push("box>").content, " <toolbox>");            // it did not
  EXPECT_EQ(p.push(" ab\xC3").content, " ab");                // half of 'é' held
  StreamEvents ev = p.push("\xA9 <tool_call>{\"name\": \"f\", \"arguments\": {}}");
  EXPECT_EQ(ev.content, "\xC3\xA9");
  EXPECT_TRUE(ev.tool_calls.empty());  // not complete until </tool_call>
  ev = p.push("</tool_call>");
  ASSERT_EQ(ev.tool_calls.size(), 2u);  // sent as soon as the call is complete
  EXPECT_EQ(ev.tool_calls[0].name.value_or(""), "f");
  EXPECT_EQ(ev.tool_calls[1].arguments, "{}");
  EXPECT_EQ(p.push("\n\n").content, "");  // blanks after a call: held, dropped if nothing follows
  EXPECT_EQ(p.push("Bye").content, "Bye");
  EXPECT_EQ(p.finish().content, "");
  EXPECT_EQ(p.calls(), 1);
}

TEST(ToolCallStream, Llama3LeadingBraceIsHeldUntilDecided) {
  {
    ToolCallStreamParser p(L);
    EXPECT_EQ(p.push("{\"name\": \"f\", \"param").content, "");
    EXPECT_EQ(p.push("eters\": {\"x\": 1}").content, "");
    StreamEvents ev = p.push("}");
    ASSERT_EQ(ev.tool_calls.size(), 2u);
    EXPECT_EQ(ev.tool_calls[1].arguments, R"({"x":1})");
  }
  {
    ToolCallStreamParser p(L);
    EXPECT_EQ(p.push("{\"ci").content, "");
    // The first key is not one of a call's: decided, released at once.
    EXPECT_EQ(p.push("ty\": \"Paris\",").content, "{\"city\": \"Paris\",");
    EXPECT_EQ(p.push(" \"n\": 1}").content, " \"n\": 1}");
  }
  {
    // A JSON answer that starts like a call: released at its first key that a call cannot have.
    ToolCallStreamParser p(L);
    EXPECT_EQ(p.push("{\"name\": \"John\", \"ag").content, "");
    EXPECT_EQ(p.push("e\": 30, ").content, "{\"name\": \"John\", \"age\": 30,");
    EXPECT_EQ(p.finish().content, " ");
  }
}

TEST(ToolCallStream, NoFamilyPassesTextThrough) {
  ToolCallStreamParser p(ToolFamily::kNone);
  EXPECT_EQ(p.push("<tool_call> a\xC3").content, "<tool_call> a");
  EXPECT_EQ(p.push("\xA9  ").content, "\xC3\xA9  ");
  EXPECT_EQ(p.finish().content, "");
}

// ---- Grammar ----------------------------------------------------------------------------------

OJson weather_tools() {
  return OJson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}},
    {"type": "function", "function": {"name": "search", "strict": true,
      "parameters": {"type": "object", "properties": {
        "city": {"type": "integer"},
        "query": {"type": "string"}},
        "required": ["query", "city"], "additionalProperties": false}}}
  ])");
}

// A call written as each family's template renders it.
std::string render_call(ToolFamily f, const std::string& name, const std::string& args) {
  switch (f) {
    case ToolFamily::kHermes:
      return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
    case ToolFamily::kLlama3:
      return "{\"name\": \"" + name + "\", \"parameters\": " + args + "}";
    case ToolFamily::kMistral:
    case ToolFamily::kGranite:
      return "{\"name\": \"" + name + "\", \"arguments\": " + args + "}";
    case ToolFamily::kMistralV11:
      return "[TOOL_CALLS]" + name + "[ARGS]" + args;
    case ToolFamily::kDeepSeek:
      return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args +
             "\n```<｜tool▁call▁end｜>";
    case ToolFamily::kNone:
      break;
  }
  return "";
}
std::string render_calls(ToolFamily f, const std::vector<Call>& calls) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i && (f == ToolFamily::kHermes || f == ToolFamily::kDeepSeek)) out += "\n";
    if (i && (f == ToolFamily::kMistral || f == ToolFamily::kGranite)) out += ", ";
    out += render_call(f, calls[i].name, calls[i].arguments);
  }
  switch (f) {
    case ToolFamily::kMistral:
      return "[TOOL_CALLS][" + out + "]";
    case ToolFamily::kGranite:
      return "<|tool_call|>[" + out + "]";
    case ToolFamily::kDeepSeek:
      return "<｜tool▁calls▁begin｜>" + out + "<｜tool▁calls▁end｜>";
    default:
      return out;
  }
}

const std::vector<ToolFamily> kFamilies = {H, L, M, V, G, D};

TEST(ToolCallGrammar, ForcesTheFamilysSyntaxAndTheSchemas) {
  const OJson tools = weather_tools();
  const std::vector<Call> good = {
      {"get_weather", R"({"city": "Paris"})"},
      {"get_weather", R"({"city": "Paris", "unit": "celsius"})"},
      {"get_time", "{}"},
      {"search", R"({"city": 75, "query": "cafés"})"},  // properties in schema order
  };
  const std::vector<Call> bad = {
      {"get_wether", R"({"city": "Paris"})"},                     // unknown function
      {"get_weather", R"({"unit": "celsius"})"},                  // required city missing
      {"get_weather", R"({"city": "Paris", "unit": "kelvin"})"},  // not in the enum
      {"get_weather", R"({"city": 75})"},                         // city is a string here
      {"search", R"({"city": "Paris", "query": "x"})"},           // and an integer here
      {"search", R"({"city": 1, "query": "x", "extra": 2})"},     // strict: no extra keys
      {"get_time", R"({"x": 1})"},                                // no parameters: {}
      {"get_weather", R"(["Paris"])"},                            // not an object
  };
  for (ToolFamily f : kFamilies) {
    SCOPED_TRACE(tool_family_name(f));
    const std::string g = tool_call_grammar(f, tools, std::nullopt, /*parallel=*/true);
    std::shared_ptr<const grammar::Grammar> gr;
    ASSERT_NO_THROW(gr = grammar::parse_gbnf(g)) << g;
    for (const Call& c : good) {
      const std::string text = render_calls(f, {c});
      EXPECT_TRUE(grammar::grammar_accepts(*gr, text)) << text;
      const ParsedOutput p = parse_tool_calls(f, text);
      ASSERT_EQ(p.calls.size(), 1u) << text;
      EXPECT_EQ(p.calls[0].name, c.name);
      EXPECT_EQ(OJson::parse(p.calls[0].arguments), OJson::parse(c.arguments));
      EXPECT_EQ(p.content, "");
    }
    for (const Call& c : bad) {
      const std::string text = render_calls(f, {c});
      EXPECT_FALSE(grammar::grammar_accepts(*gr, text)) << text;
    }
    EXPECT_FALSE(grammar::grammar_accepts(*gr, "")) << "a call is required";
    EXPECT_FALSE(grammar::grammar_accepts(*gr, "Sure! " + render_calls(f, {good[0]})));
    // Parallel calls, where the family's template can render them back (not Llama 3).
    const std::string two = render_calls(f, {good[0], good[2]});
    EXPECT_EQ(grammar::grammar_accepts(*gr, two), f != ToolFamily::kLlama3) << two;
    if (f != ToolFamily::kLlama3) {
      EXPECT_EQ(parse_tool_calls(f, two).calls.size(), 2u) << two;
    }
    // Not parallel: exactly one call.
    auto one = grammar::parse_gbnf(tool_call_grammar(f, tools, std::nullopt, false));
    EXPECT_TRUE(grammar::grammar_accepts(*one, render_calls(f, {good[0]})));
    EXPECT_FALSE(grammar::grammar_accepts(*one, two));
  }
}

TEST(ToolCallGrammar, NamedFunctionOnly) {
  const OJson tools = weather_tools();
  for (ToolFamily f : kFamilies) {
    SCOPED_TRACE(tool_family_name(f));
    auto g = grammar::parse_gbnf(tool_call_grammar(f, tools, "search", /*parallel=*/true));
    EXPECT_TRUE(grammar::grammar_accepts(
        *g, render_calls(f, {{"search", R"({"city": 1, "query": "x"})"}})));
    EXPECT_FALSE(grammar::grammar_accepts(*g, render_calls(f, {{"get_time", "{}"}})));
    EXPECT_FALSE(grammar::grammar_accepts(
        *g, render_calls(f, {{"search", R"({"city": 1, "query": "x"})"},
                             {"search", R"({"city": 2, "query": "y"})"}})));
  }
}

TEST(ToolCallGrammar, SchemasOfSeveralFunctionsDoNotClash) {
  // Both functions have $defs named "item" and properties named "x", of different types; each
  // one's rules are its own (the converter's rule names are prefixed per function).
  const OJson tools = OJson::parse(R"([
    {"type": "function", "function": {"name": "a", "parameters": {"type": "object",
      "properties": {"x": {"$ref": "#/$defs/item"}}, "required": ["x"],
      "$defs": {"item": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "b", "parameters": {"type": "object",
      "properties": {"x": {"$ref": "#/$defs/item"}}, "required": ["x"],
      "$defs": {"item": {"type": "array", "items": {"type": "boolean"}}}}}},
    {"type": "function", "function": {"name": "c", "parameters": {}}}
  ])");
  auto g = grammar::parse_gbnf(tool_call_grammar(H, tools, std::nullopt, /*parallel=*/true));
  EXPECT_TRUE(grammar::grammar_accepts(*g, render_call(H, "a", R"({"x": 3})")));
  EXPECT_TRUE(grammar::grammar_accepts(*g, render_call(H, "b", R"({"x": [true, false]})")));
  EXPECT_FALSE(grammar::grammar_accepts(*g, render_call(H, "a", R"({"x": [true]})")));
  EXPECT_FALSE(grammar::grammar_accepts(*g, render_call(H, "b", R"({"x": 3})")));
  // "parameters": {} is taken as an object schema: any object, nothing else.
  EXPECT_TRUE(grammar::grammar_accepts(*g, render_call(H, "c", R"({"any": [1]})")));
  EXPECT_FALSE(grammar::grammar_accepts(*g, render_call(H, "c", "[1]")));
  EXPECT_FALSE(grammar::grammar_accepts(*g, render_call(H, "c", "3")));
}

TEST(ToolCallGrammar, ToolsAreValidated) {
  auto error_of = [](const std::string& tools_json, std::optional<std::string> only = {},
                     ToolFamily f = ToolFamily::kHermes) -> std::string {
    try {
      tool_call_grammar(f, OJson::parse(tools_json), only, true);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string ok = R"({"type": "function", "function": {"name": "f"}})";
  EXPECT_NE(error_of("[]").find("tools"), std::string::npos);
  EXPECT_NE(error_of("{}").find("tools"), std::string::npos);
  EXPECT_NE(error_of("[" + ok + ", 3]").find("tools[1]"), std::string::npos);
  EXPECT_NE(error_of(R"([{"type": "web", "function": {"name": "f"}}])").find("tools[0].type"),
            std::string::npos);
  EXPECT_NE(error_of(R"([{"type": "function"}])").find("tools[0].function"), std::string::npos);
  EXPECT_NE(error_of("[" + ok + R"(, {"type": "function", "function": {"name": "a b"}}])")
                .find("tools[1].function.name"),
            std::string::npos);
  EXPECT_NE(error_of("[{\"type\": \"function\", \"function\": {\"name\": \"" +
                     std::string(65, 'a') + "\"}}]")
                .find("tools[0].function.name"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"([{"type": "function", "function": {"name": 5}}])").find("tools[0].function.name"),
      std::string::npos);
  EXPECT_NE(error_of("[" + ok + ", " + ok + "]").find("tools[1].function.name"),
            std::string::npos);  // duplicate
  EXPECT_NE(error_of(R"([{"type": "function", "function": {"name": "f", "parameters": []}}])")
                .find("tools[0].function.parameters"),
            std::string::npos);
  EXPECT_NE(error_of(R"([{"type": "function", "function": {"name": "f", "parameters":
                {"type": "string"}}}])")
                .find("tools[0].function.parameters.type"),
            std::string::npos);
  // A keyword the converter cannot express: refused, naming the tool and the keyword.
  const std::string unsupported =
      error_of("[" + ok + R"(, {"type": "function", "function": {"name": "g", "parameters":
                {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}])");
  EXPECT_NE(unsupported.find("tools[1].function.parameters"), std::string::npos) << unsupported;
  EXPECT_NE(unsupported.find("multipleOf"), std::string::npos) << unsupported;
  EXPECT_NE(error_of("[" + ok + "]", "g").find("\"g\""), std::string::npos);
  EXPECT_NE(error_of("[" + ok + "]", {}, ToolFamily::kNone), "(no error)");
  EXPECT_EQ(error_of("[" + ok + "]"), "(no error)");
}

}  // namespace
}  // namespace kvasir::server
