// Request parsing of structured output and tools, without a server: response_format (text,
// json_object with and without llama-server's schema, json_schema), llama-server's grammar, tools,
// tool_choice and parallel_tool_calls; assistant tool_call arguments handed to the template as
// objects; every malformed or unsupported form a 400 naming its field.
#include <gtest/gtest.h>

#include "kvasir/grammar/grammar.h"
#include "kvasir/server/api_error.h"
#include "kvasir/server/openai_request.h"

namespace kvasir::server {
namespace {

Json J(const char* s) {
  return Json::parse(s);
}

template <class F>
void expect_bad(F f, const std::string& param, const std::string& words = {}) {
  try {
    f();
    ADD_FAILURE() << "expected ApiError for " << param;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), param) << e.what();
    if (!words.empty()) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

Json chat(const char* extra) {
  Json j = J(extra);
  j["messages"] = J(R"([{"role": "user", "content": "x"}])");
  return j;
}

TEST(StructuredRequest, ResponseFormatsBecomeGrammars) {
  EXPECT_TRUE(
      parse_chat_request(chat(R"({"response_format": {"type": "text"}})")).options.grammar.empty());
  GenerationOptions o =
      parse_chat_request(chat(R"({"response_format": {"type": "json_object"}})")).options;
  ASSERT_FALSE(o.grammar.empty());
  auto g = grammar::parse_gbnf(o.grammar);
  EXPECT_TRUE(grammar::grammar_accepts(*g, R"({"a": [1, 2]})"));
  EXPECT_FALSE(grammar::grammar_accepts(*g, "[1]"));

  o = parse_chat_request(chat(R"({"response_format": {"type": "json_schema", "json_schema": {
        "name": "p", "strict": true, "schema": {"type": "object",
        "properties": {"n": {"type": "integer"}}, "required": ["n"],
        "additionalProperties": false}}}})"))
          .options;
  g = grammar::parse_gbnf(o.grammar);
  EXPECT_TRUE(grammar::grammar_accepts(*g, R"({"n": 5})"));
  EXPECT_FALSE(grammar::grammar_accepts(*g, R"({"n": "5"})"));
  EXPECT_FALSE(grammar::grammar_accepts(*g, R"({})"));
  EXPECT_EQ(o.grammar_field, "response_format");

  // llama-server's json_object with a schema, on /v1/completions too.
  CompletionRequest c = parse_completion_request(J(R"({"prompt": "x", "response_format":
      {"type": "json_object", "schema": {"type": "array", "items": {"type": "boolean"}}}})"));
  g = grammar::parse_gbnf(c.options.grammar);
  EXPECT_TRUE(grammar::grammar_accepts(*g, "[true, false]"));
  EXPECT_FALSE(grammar::grammar_accepts(*g, "[1]"));

  // llama-server's grammar.
  c = parse_completion_request(J(R"({"prompt": "x", "grammar": "root ::= \"a\"+"})"));
  EXPECT_EQ(c.options.grammar, "root ::= \"a\"+");
  EXPECT_EQ(c.options.grammar_field, "grammar");
}

TEST(StructuredRequest, BadResponseFormatsNameTheirField) {
  expect_bad([] { parse_chat_request(chat(R"({"response_format": "json"})")); }, "response_format");
  expect_bad([] { parse_chat_request(chat(R"({"response_format": {}})")); },
             "response_format.type");
  expect_bad([] { parse_chat_request(chat(R"({"response_format": {"type": "yaml"}})")); },
             "response_format.type", "yaml");
  expect_bad([] { parse_chat_request(chat(R"({"response_format": {"type": "json_schema"}})")); },
             "response_format.json_schema");
  expect_bad(
      [] {
        parse_chat_request(chat(R"({"response_format": {"type": "json_schema",
                                    "json_schema": {"schema": {}}}})"));
      },
      "response_format.json_schema.name");
  expect_bad(
      [] {
        parse_chat_request(chat(R"({"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "x", "schemas": {}}}})"));
      },
      "response_format.json_schema.schemas");
  expect_bad(
      [] { parse_chat_request(chat(R"({"response_format": {"type": "text", "schema": {}}})")); },
      "response_format.schema");
  // A keyword the converter does not implement is refused by name, not ignored.
  expect_bad(
      [] {
        parse_chat_request(chat(R"({"response_format": {"type": "json_schema", "json_schema":
            {"name": "x", "schema": {"type": "integer", "multipleOf": 3}}}})"));
      },
      "response_format", "multipleOf");
  expect_bad([] { parse_chat_request(chat(R"({"grammar": 5})")); }, "grammar");
  expect_bad(
      [] {
        parse_chat_request(
            chat(R"({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})"));
      },
      "grammar");
}

TEST(StructuredRequest, ToolsAndToolChoice) {
  const char* tools = R"({"tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object"}}}, {"type": "function", "function": {"name": "g"}}]})";
  ChatRequest r = parse_chat_request(chat(tools));
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.parallel_tool_calls);
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools.size(), 2u);

  Json j = chat(tools);
  j["tool_choice"] = "required";
  j["parallel_tool_calls"] = false;
  r = parse_chat_request(j);
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.parallel_tool_calls);
  j["tool_choice"] = J(R"({"type": "function", "function": {"name": "g"}})");
  r = parse_chat_request(j);
  EXPECT_EQ(r.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.tool_choice_function, "g");
  j["tool_choice"] = "none";
  EXPECT_EQ(parse_chat_request(j).tool_choice, ToolChoice::kNone);
  // An empty tools array is no tools.
  EXPECT_TRUE(parse_chat_request(chat(R"({"tools": []})")).tools.is_null());

  j["tool_choice"] = J(R"({"type": "function", "function": {"name": "h"}})");
  expect_bad([&] { parse_chat_request(j); }, "tool_choice", "\"h\"");
  j["tool_choice"] = "sometimes";
  expect_bad([&] { parse_chat_request(j); }, "tool_choice", "sometimes");
  j["tool_choice"] = 3;
  expect_bad([&] { parse_chat_request(j); }, "tool_choice");
  expect_bad([] { parse_chat_request(chat(R"({"tool_choice": "required"})")); }, "tool_choice");
  expect_bad([] { parse_chat_request(chat(R"({"tools": [{"type": "retrieval"}]})")); },
             "tools[0].type");
  expect_bad([] { parse_chat_request(chat(R"({"tools": [{"type": "function"}]})")); },
             "tools[0].function");
  expect_bad(
      [] {
        parse_chat_request(chat(R"({"tools": [{"type": "function", "function": {"name": ""}}]})"));
      },
      "tools[0].function.name");
  expect_bad(
      [] {
        parse_chat_request(chat(
            R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]})"));
      },
      "tools[0].function.parameters");
  expect_bad(
      [] {
        parse_chat_request(
            chat(R"({"tools": [{"type": "function", "function": {"name": "f", "returns": {}}}]})"));
      },
      "tools[0].function.returns");
  expect_bad([] { parse_chat_request(chat(R"({"parallel_tool_calls": "yes"})")); },
             "parallel_tool_calls");
}

TEST(StructuredRequest, ToolCallArgumentsReachTheTemplateAsObjects) {
  ChatRequest r = parse_chat_request(J(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 3}"}]})"));
  const Json& calls = r.messages[1]["tool_calls"];
  EXPECT_EQ(calls[0]["function"]["arguments"], J(R"({"city": "Oslo"})"));
  EXPECT_EQ(calls[1]["function"]["arguments"], "not json");  // left as the client sent it
}

}  // namespace
}  // namespace kvasir::server
