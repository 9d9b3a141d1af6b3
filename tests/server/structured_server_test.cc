// Structured output and tool calls over HTTP (without the SDK: structured_output_sdk_test.cc has
// that): json_object and json_schema answers parse, llama-server's grammar on /v1/completions,
// GBNF errors as 400 naming `grammar`, tool calls with the Hermes template (whole and streamed,
// finish_reason "tool_calls"), tools refused for a template that writes no calls, and the grammar
// metrics.
#include <gtest/gtest.h>

#include <string>

#include "server_test_util.h"
#include "test_util/paths.h"

namespace kvasir::server::testing {
namespace {

class StructuredServer : public SharedServerTest<StructuredServer> {};

TEST_F(StructuredServer, JsonObjectAndSchemaAnswersParse) {
  // json_object admits objects of any size, and stories260K, a story model, never chooses to
  // close one (it writes dialogue: `,` always beats `}`), so the answer would end at max_tokens
  // unfinished. A logit_bias on "}" (applied with the grammar's mask, as any bias is) makes it
  // close: the answer must then be one whole JSON object. ("}" is a byte token here: the last
  // token of its encoding, after SentencePiece's space.)
  const int32_t brace = Stories260K::get().tok.encode("}", false, false).back();
  ASSERT_GE(brace, 0);
  for (double temp : {0.0, 1.0}) {
    HttpResult r = post(port(), "/v1/chat/completions",
                        Json{{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
                             {"temperature", temp},
                             {"seed", 3},
                             {"max_tokens", 400},
                             {"logit_bias", {{std::to_string(brace), 10}}},
                             {"response_format", {{"type", "json_object"}}}});
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string content = r.json["choices"][0]["message"]["content"];
    const Json v = Json::parse(content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << content;
    EXPECT_TRUE(v.is_object()) << content;
    EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
  }
  HttpResult r = post(port(), "/v1/chat/completions", Json::parse(R"({
      "messages": [{"role": "user", "content": "Who is Lily?"}], "max_tokens": 300,
      "temperature": 0.7, "seed": 1,
      "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true,
        "schema": {"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 10},
          "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "pets": {"type": "array", "items": {"type": "string", "enum": ["dog", "cat"]},
                   "maxItems": 2}},
        "required": ["name", "age", "pets"], "additionalProperties": false}}}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json v = Json::parse(r.json["choices"][0]["message"]["content"].get<std::string>());
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.size(), 3u);
  EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 10);
  EXPECT_TRUE(v["age"].is_number_integer() && v["age"] >= 0 && v["age"] <= 120);
  ASSERT_TRUE(v["pets"].is_array());
  EXPECT_LE(v["pets"].size(), 2u);
  for (const Json& p : v["pets"]) EXPECT_TRUE(p == "dog" || p == "cat") << p;
}

TEST_F(StructuredServer, GrammarOnCompletionsAndItsErrors) {
  HttpResult r = post(port(), "/v1/completions",
                      Json{{"prompt", "Once upon a time"},
                           {"max_tokens", 40},
                           {"temperature", 1.0},
                           {"seed", 2},
                           {"grammar", "root ::= (\"yes\" | \"no\") \", \" [a-z]{1,8} \".\""}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = r.json["choices"][0]["text"];
  EXPECT_TRUE(text.rfind("yes, ", 0) == 0 || text.rfind("no, ", 0) == 0) << text;
  EXPECT_EQ(text.back(), '.') << text;
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");

  r = post(port(), "/v1/completions",
           Json{{"prompt", "x"}, {"max_tokens", 4}, {"grammar", "root ::= [a-"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "grammar") << r.body;
  r = post(port(), "/v1/completions",
           Json{{"prompt", "x"}, {"max_tokens", 4}, {"grammar", "root ::= nothing"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find("nothing"), std::string::npos);
}

TEST_F(StructuredServer, ToolsNeedATemplateThatWritesCalls) {
  // The suite's template (tests/server/data/simple_chat.jinja) renders no tools.
  HttpResult r = post(port(), "/v1/chat/completions", Json::parse(R"({
      "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
      "tools": [{"type": "function", "function": {"name": "f"}}]})"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "tools");
  // tool_choice "none" asks for no calls: nothing to parse, accepted.
  r = post(port(), "/v1/chat/completions", Json::parse(R"({
      "messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "f"}}]})"));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(StructuredServer, GrammarWorkIsInTheMetrics) {
  post(port(), "/v1/completions",
       Json{{"prompt", "x"}, {"max_tokens", 8}, {"grammar", "root ::= [a-z]+"}});
  const HttpResult m = get(port(), "/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name : {"kvasir_grammar_masks_computed_total",
                           "kvasir_grammar_mask_cache_hits_total", "kvasir_grammar_seconds_total"})
    EXPECT_NE(m.body.find(name), std::string::npos) << name;
  EXPECT_GT(metric("kvasir_grammar_masks_computed_total", {"stories260K"}), 0);
}

class HermesTools : public SharedServerTest<HermesTools> {
 protected:
  static void SetUpTestSuite() {
    ServerConfig sc = test_server_config();
    sc.chat_template = test_util::read_file(test_util::shared_templates_dir() +
                                            "/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja");
    start(test_engine_config(), sc);
  }
};

Json weather_request() {
  return Json::parse(R"({
      "messages": [{"role": "user", "content": "Weather in Oslo?"}], "max_tokens": 200,
      "temperature": 0, "tool_choice": "required", "parallel_tool_calls": false,
      "tools": [{"type": "function", "function": {"name": "get_weather",
        "description": "The weather in a city", "parameters": {"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 10}}, "required": ["city"],
          "additionalProperties": false}}}]})");
}

TEST_F(HermesTools, RequiredToolChoiceGivesToolCalls) {
  HttpResult r = post(port(), "/v1/chat/completions", weather_request());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& c = r.json["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls") << r.body;
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.body;
  const Json& tc = c["message"]["tool_calls"][0];
  EXPECT_EQ(tc["type"], "function");
  EXPECT_EQ(tc["function"]["name"], "get_weather");
  const Json args = Json::parse(tc["function"]["arguments"].get<std::string>());
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args.size(), 1u);
  EXPECT_TRUE(args["city"].is_string());
  EXPECT_TRUE(c["message"]["content"].is_null()) << r.body;

  // Streamed: the same call, in deltas.
  Json s = weather_request();
  s["stream"] = true;
  StreamResult st = post_stream(port(), "/v1/chat/completions", s);
  ASSERT_EQ(st.status, 200);
  ASSERT_TRUE(st.done && !st.malformed) << st.raw;
  std::string name, arguments, finish;
  int headers = 0;
  for (const Json& ch : st.chunks) {
    const Json& choice = ch["choices"][0];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    for (const Json& d : choice["delta"]["tool_calls"]) {
      EXPECT_EQ(d["index"], 0);
      if (d.contains("id")) {
        ++headers;
        EXPECT_EQ(d["id"].get<std::string>().rfind("call_", 0), 0u);
        name = d["function"]["name"];
      }
      arguments += d["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(headers, 1);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(Json::parse(arguments), args);
}

}  // namespace
}  // namespace kvasir::server::testing
