// Request parsing without a server: every field's mapping to SamplingParams, the accepted
// shapes of prompt / stop / content, and the 400 errors (with the offending field in `param`).
#include "kvasir/server/openai_request.h"

#include <gtest/gtest.h>

#include "kvasir/server/api_error.h"

namespace kvasir::server {
namespace {

Json J(const char* s) {
  return Json::parse(s);
}

// Expects parse to fail with 400 naming `param`.
template <class F>
void expect_bad(F f, const std::string& param) {
  try {
    f();
    ADD_FAILURE() << "expected ApiError for " << param;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_EQ(e.type(), "invalid_request_error");
  }
}

TEST(OpenAIRequest, CompletionFields) {
  CompletionRequest r = parse_completion_request(J(R"({
      "model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "presence_penalty": 0.1, "frequency_penalty": -0.2,
      "repetition_penalty": 1.1, "seed": 42, "stop": ["a", "bc"], "n": 3, "logprobs": 2,
      "echo": true, "stream": true, "stream_options": {"include_usage": true},
      "ignore_eos": true, "stop_token_ids": [5], "logit_bias": {"17": -100, "3": 2.5},
      "user": "ignored"})"));
  const SamplingParams& sp = r.options.sampling;
  EXPECT_EQ(*r.options.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "Once");
  EXPECT_EQ(sp.max_tokens, 7);
  EXPECT_FLOAT_EQ(sp.temperature, 0.5f);
  EXPECT_FLOAT_EQ(sp.top_p, 0.9f);
  EXPECT_EQ(sp.top_k, 40);
  EXPECT_FLOAT_EQ(sp.min_p, 0.05f);
  EXPECT_FLOAT_EQ(sp.presence_penalty, 0.1f);
  EXPECT_FLOAT_EQ(sp.frequency_penalty, -0.2f);
  EXPECT_FLOAT_EQ(sp.repetition_penalty, 1.1f);
  EXPECT_EQ(*sp.seed, 42u);
  EXPECT_EQ(sp.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.options.n, 3);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(sp.logprobs);
  EXPECT_EQ(sp.top_logprobs, 2);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.options.stream);
  EXPECT_TRUE(r.options.include_usage);
  EXPECT_TRUE(sp.ignore_eos);
  EXPECT_EQ(sp.stop_token_ids, std::vector<int32_t>{5});
  EXPECT_EQ(sp.logit_bias.at(17), -100.0f);
  EXPECT_EQ(sp.logit_bias.at(3), 2.5f);
}

TEST(OpenAIRequest, CompletionDefaults) {
  CompletionRequest r =
      parse_completion_request(J(R"({"prompt": "x", "stop": "\n", "seed": null})"));
  EXPECT_EQ(r.options.sampling.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 1.0f);
  EXPECT_EQ(r.options.sampling.stop, std::vector<std::string>{"\n"});
  EXPECT_FALSE(r.options.sampling.seed);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.options.sampling.logprobs);
  EXPECT_EQ(r.options.n, 1);
  EXPECT_FALSE(r.options.stream);
}

TEST(OpenAIRequest, PromptShapes) {
  auto p = parse_completion_request(J(R"({"prompt": [1, 2, 3]})")).prompts;
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(p[0].is_tokens);
  EXPECT_EQ(p[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  p = parse_completion_request(J(R"({"prompt": ["a", "b"]})")).prompts;
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].text, "b");
  p = parse_completion_request(J(R"({"prompt": [[1], [4, 5]]})")).prompts;
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].tokens, (std::vector<int32_t>{4, 5}));
  expect_bad([] { parse_completion_request(J(R"({})")); }, "prompt");
  expect_bad([] { parse_completion_request(J(R"({"prompt": 5})")); }, "prompt");
  expect_bad([] { parse_completion_request(J(R"({"prompt": []})")); }, "prompt");
  expect_bad([] { parse_completion_request(J(R"({"prompt": [1, "a"]})")); }, "prompt[1]");
  expect_bad([] { parse_completion_request(J(R"({"prompt": [1, -2]})")); }, "prompt[1]");
  expect_bad([] { parse_completion_request(J(R"({"prompt": [1.5]})")); }, "prompt[0]");
  expect_bad([] { parse_completion_request(J(R"({"prompt": ["a", {}]})")); }, "prompt[1]");
  expect_bad([] { parse_completion_request(J(R"({"prompt": [[]]})")); }, "prompt");
}

TEST(OpenAIRequest, WrongTypesNameTheField) {
  const char* cases[][2] = {
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": true})", "temperature"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e30})", "max_tokens"},
      {R"({"prompt": "x", "top_k": "1"})", "top_k"},
      {R"({"prompt": "x", "top_k": -7})", "top_k"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 1000})", "n"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 3]})", "stop[1]"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "seed": "1"})", "seed"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "echo": 1})", "echo"},
      {R"({"prompt": "x", "model": 7})", "model"},
      {R"({"prompt": "x", "logit_bias": []})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": "1"}})", "logit_bias[5]"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids[0]"},
      {R"({"prompt": ["a","b"], "n": 100})", "n"},
  };
  for (auto& c : cases) expect_bad([&] { parse_completion_request(J(c[0])); }, c[1]);
}

TEST(OpenAIRequest, ChatFields) {
  ChatRequest r = parse_chat_request(J(R"({
      "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                {"type": "text", "text": "there"}]},
                   {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}],
      "max_completion_tokens": 9, "max_tokens": 3, "logprobs": true, "top_logprobs": 4,
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false})"));
  EXPECT_EQ(r.options.sampling.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "Hi\nthere");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "1");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_TRUE(r.options.sampling.logprobs);
  EXPECT_EQ(r.options.sampling.top_logprobs, 4);
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  EXPECT_FALSE(r.add_generation_prompt);
  // Chat has no default max_tokens: until the context is full.
  EXPECT_EQ(parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}]})"))
                .options.sampling.max_tokens,
            -1);
}

TEST(OpenAIRequest, ChatErrors) {
  const char* cases[][2] = {
      {R"({})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [1]})", "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
  };
  for (auto& c : cases) expect_bad([&] { parse_chat_request(J(c[0])); }, c[1]);
}

// OpenAI's documented ranges (vLLM's for the fields OpenAI lacks); each refusal names the field
// and says the range.
TEST(OpenAIRequest, RangesAreChecked) {
  struct Case {
    const char* fields;  // added to {"prompt": "x", ...}
    const char* param;
    const char* message;  // a part of the error message
  };
  const Case cases[] = {
      {R"("temperature": 1e10)", "temperature", "'temperature' must be in [0, 2], got 1"},
      {R"("temperature": 2.0001)", "temperature", "in [0, 2]"},
      {R"("temperature": -0.5)", "temperature", "in [0, 2]"},
      {R"("top_p": 0)", "top_p", "'top_p' must be in (0, 1], got 0"},
      {R"("top_p": 1.01)", "top_p", "in (0, 1]"},
      {R"("top_p": -1)", "top_p", "in (0, 1]"},
      {R"("min_p": -0.1)", "min_p", "in [0, 1]"},
      {R"("min_p": 1.5)", "min_p", "in [0, 1]"},
      {R"("presence_penalty": 2.5)", "presence_penalty", "in [-2, 2]"},
      {R"("presence_penalty": -2.01)", "presence_penalty", "in [-2, 2]"},
      {R"("frequency_penalty": 3)", "frequency_penalty", "in [-2, 2]"},
      {R"("frequency_penalty": -1e300)", "frequency_penalty", "in [-2, 2]"},
      {R"("repetition_penalty": 0)", "repetition_penalty", "> 0"},
      {R"("repetition_penalty": -1)", "repetition_penalty", "> 0"},
      {R"("repetition_penalty": 1e300)", "repetition_penalty", "finite"},
      {R"("logit_bias": {"5": 101})", "logit_bias", "'logit_bias[5]' must be in [-100, 100]"},
      {R"("logit_bias": {"5": -100.5})", "logit_bias", "in [-100, 100]"},
      {R"("logit_bias": {"5": 1e300})", "logit_bias", "in [-100, 100]"},
      {R"("logprobs": 21)", "logprobs", "[0, 20]"},
      {R"("logprobs": -1)", "logprobs", "[0, 20]"},
      {R"("n": 129)", "n", "[1, 128]"},
      {R"("max_tokens": -1)", "max_tokens", ">= 1"},
      {R"("max_tokens": 2147483648)", "max_tokens", "2147483647"},
      {R"("top_k": -2)", "top_k", "[-1, 2147483647]"},
      {R"("top_k": 2147483648)", "top_k", "[-1, 2147483647]"},
      {R"("seed": -2)", "seed", "or -1 for a random seed, got -2"},
      {R"("seed": -9223372036854775808)", "seed", "got -9223372036854775808"},
      {R"("seed": 1.5)", "seed", "an integer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    const std::string body = std::string(R"({"prompt": "x", )") + c.fields + "}";
    try {
      parse_completion_request(J(body.c_str()));
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), c.param) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
  const char* chat_cases[][2] = {
      {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs"},
      {R"("logprobs": true, "top_logprobs": -1)", "top_logprobs"},
      {R"("max_completion_tokens": 0)", "max_completion_tokens"},
      {R"("temperature": 3)", "temperature"},
  };
  for (auto& c : chat_cases) {
    const std::string body =
        std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + c[0] + "}";
    expect_bad([&] { parse_chat_request(J(body.c_str())); }, c[1]);
  }
}

TEST(OpenAIRequest, RangeEdgesAreAccepted) {
  CompletionRequest r = parse_completion_request(J(R"({"prompt": "x", "temperature": 2,
      "top_p": 1, "min_p": 1, "presence_penalty": -2, "frequency_penalty": 2,
      "repetition_penalty": 1e-3, "logit_bias": {"1": -100, "2": 100}, "logprobs": 20,
      "n": 128, "top_k": 0, "max_tokens": 2147483647})"));
  const SamplingParams& sp = r.options.sampling;
  EXPECT_EQ(sp.temperature, 2.0f);
  EXPECT_EQ(sp.top_p, 1.0f);
  EXPECT_EQ(sp.min_p, 1.0f);
  EXPECT_EQ(sp.presence_penalty, -2.0f);
  EXPECT_EQ(sp.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(sp.repetition_penalty, 1e-3f);
  EXPECT_EQ(sp.logit_bias.at(1), -100.0f);
  EXPECT_EQ(sp.logit_bias.at(2), 100.0f);
  EXPECT_EQ(r.logprobs, 20);
  EXPECT_EQ(r.options.n, 128);
  EXPECT_EQ(sp.top_k, 0);
  EXPECT_EQ(sp.max_tokens, 2147483647);
  EXPECT_FALSE(sp.validate().has_value()) << *sp.validate();
  EXPECT_EQ(parse_completion_request(J(R"({"prompt": "x", "temperature": 0})"))
                .options.sampling.temperature,
            0.0f);
  ChatRequest c =
      parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
            "top_logprobs": 20})"));
  EXPECT_EQ(c.top_logprobs, 20);
}

// seed: -1 means "no seed" (random, as llama-server); every other value must be in [0, 2^64-1]
// and is used as given, never wrapped.
TEST(OpenAIRequest, Seed) {
  auto seed = [](const char* v) {
    const std::string body = std::string(R"({"prompt": "x", "seed": )") + v + "}";
    return parse_completion_request(J(body.c_str())).options.sampling.seed;
  };
  EXPECT_FALSE(seed("-1").has_value());
  EXPECT_FALSE(seed("-1.0").has_value());
  EXPECT_FALSE(seed("null").has_value());
  EXPECT_EQ(seed("0"), 0u);
  EXPECT_EQ(seed("42"), 42u);
  EXPECT_EQ(seed("9223372036854775807"), 9223372036854775807u);
  EXPECT_EQ(seed("9223372036854775808"), 9223372036854775808u);
  EXPECT_EQ(seed("18446744073709551615"), 18446744073709551615u);
  EXPECT_EQ(seed("1e3"), 1000u);
}

TEST(OpenAIRequest, ChatRoles) {
  for (const char* role : {"system", "user", "assistant", "tool", "developer", "function"}) {
    Json body = J(R"({"messages": [{"role": "user", "content": "x"}]})");
    body["messages"].push_back({{"role", role}, {"content", "y"}});
    EXPECT_EQ(parse_chat_request(body).messages[1]["role"], role);
  }
  for (const char* role : {"robot", "User", "", "forbidden", "system "}) {
    SCOPED_TRACE(role);
    Json body = J(R"({"messages": [{"role": "user", "content": "x"}]})");
    body["messages"].push_back({{"role", role}, {"content", "y"}});
    try {
      parse_chat_request(body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "messages[1].role");
      EXPECT_EQ(std::string(e.what()),
                std::string("'messages[1].role' must be one of system, user, assistant, tool, "
                            "developer, function; got \"") +
                    role + "\"");
    }
  }
  // A long role is quoted in part, cut at a character boundary.
  Json body = J(R"({"messages": [{"role": "user", "content": "x"}]})");
  body["messages"][0]["role"] = std::string(63, 'a') + "\xc3\xa9" + std::string(100, 'b');
  try {
    parse_chat_request(body);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "messages[0].role");
    EXPECT_NE(std::string(e.what()).find("got \"" + std::string(63, 'a') + "...\""),
              std::string::npos)
        << e.what();
  }
}

TEST(OpenAIRequest, Body) {
  EXPECT_TRUE(parse_json_body(R"({"a": "é"})").is_object());
  auto expect_code = [](std::string body, const std::string& code) {
    try {
      parse_json_body(body);
      ADD_FAILURE() << "expected an error for " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.code(), code) << e.what();
    }
  };
  expect_code("", "invalid_json");
  expect_code("{\"prompt\": ", "invalid_json");
  expect_code("[1, 2]", "invalid_json");
  expect_code("{\"a\": \"\\ud800\"}", "invalid_json");  // lone surrogate escape
  expect_code(std::string("{\"a\": \"\xff\"}"), "invalid_utf8");
  expect_code(std::string("{\"a\": \"\xc0\xaf\"}"), "invalid_utf8");           // overlong '/'
  expect_code(std::string(200, '[') + std::string(200, ']'), "invalid_json");  // too deep
  // Very deep nesting is refused without recursion (no stack overflow).
  expect_code(std::string(1000000, '['), "invalid_json");
  try {
    parse_json_body("\x80");
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvasir::server

namespace kvasir::server {
namespace {

// A field the server does not honour is refused by name, never silently ignored.
TEST(OpenAIRequest, UnknownFieldsAreRefusedByName) {
  for (const char* field : {"response_format", "best_of", "functions", "n_predict", "store",
                            "Temperature", "metadata"}) {
    SCOPED_TRACE(field);
    Json c = J(R"({"prompt": "x"})");
    c[field] = 1;
    expect_bad([&] { parse_completion_request(c); }, field);
    Json m = J(R"({"messages": [{"role": "user", "content": "x"}]})");
    m[field] = 1;
    expect_bad([&] { parse_chat_request(m); }, field);
  }
  // Fields of the other endpoint.
  expect_bad([] { parse_completion_request(J(R"({"prompt": "x", "top_logprobs": 2})")); },
             "top_logprobs");
  expect_bad(
      [] {
        parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}],
                                           "echo": true})"));
      },
      "echo");
  // tool_choice "required" without tools (structured_request_test.cc has the rest).
  expect_bad(
      [] {
        parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}],
                                           "tool_choice": "required"})"));
      },
      "tool_choice");
  EXPECT_NO_THROW(parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}],
                                           "tool_choice": "auto", "user": "u1"})")));
  // null counts as absent; every documented field is accepted.
  EXPECT_NO_THROW(parse_completion_request(J(R"({"prompt": "x", "response_format": null,
      "model": "m", "max_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
      "presence_penalty": 0.1, "frequency_penalty": 0.1, "repetition_penalty": 1.1, "seed": 1,
      "stop": "x", "stop_token_ids": [1], "ignore_eos": true, "logit_bias": {"1": 1}, "n": 1,
      "stream": true, "stream_options": {"include_usage": true}, "user": "u", "suffix": "",
      "echo": false, "logprobs": 1})")));
}

}  // namespace
}  // namespace kvasir::server
