// Bad input over HTTP: every case answers an OpenAI error object with the right status and the
// offending field, and the server keeps serving (including after random garbage).
#include <gtest/gtest.h>

#include <random>

#include "server_test_util.h"

namespace kvasir::server::testing {
namespace {

class ServerErrors : public SharedServerTest<ServerErrors> {};

// The error object's shape: {"error": {"message": str, "type": str, "param", "code"}}.
void expect_error(const HttpResult& r, int status, const std::string& param = "*",
                  const std::string& code = "*") {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.json.is_object()) << r.body;
  const Json& e = r.json["error"];
  ASSERT_TRUE(e.is_object()) << r.body;
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
  if (param != "*") {
    EXPECT_EQ(e["param"], param.empty() ? Json(nullptr) : Json(param)) << r.body;
  }
  if (code != "*") {
    EXPECT_EQ(e["code"], code.empty() ? Json(nullptr) : Json(code)) << r.body;
  }
  EXPECT_EQ(r.header("Content-Type"), "application/json");
}

TEST_F(ServerErrors, MalformedBodies) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(path);
    expect_error(post(port(), path, std::string("")), 400, "", "invalid_json");
    expect_error(post(port(), path, std::string("{\"prompt\": ")), 400, "", "invalid_json");
    expect_error(post(port(), path, std::string("[1, 2]")), 400, "", "invalid_json");
    expect_error(post(port(), path, std::string("{\"prompt\": \"a\xff\"}")), 400, "",
                 "invalid_utf8");
    expect_error(post(port(), path, std::string(100000, '[')), 400, "", "invalid_json");
  }
}

TEST_F(ServerErrors, WrongTypesAndRanges) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case completions[] = {
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "presence_penalty": 5})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "logprobs": 30})", "logprobs"},
      {R"({"prompt": "x", "logit_bias": {"1": 500}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"100000": 1}})", "logit_bias"},
      {R"({"prompt": [1, 100000]})", "prompt"},
      {R"({"prompt": "x", "stop_token_ids": [100000]})", "stop_token_ids"},
  };
  for (const Case& c : completions) {
    SCOPED_TRACE(c.body);
    expect_error(post(port(), "/v1/completions", std::string(c.body)), 400, c.param);
  }
  const Case chat[] = {
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": null, "top_k": -2})",
       "top_k"},
  };
  for (const Case& c : chat) {
    SCOPED_TRACE(c.body);
    expect_error(post(port(), "/v1/chat/completions", std::string(c.body)), 400, c.param);
  }
}

TEST_F(ServerErrors, UnknownModel) {
  HttpResult r = post(port(), "/v1/completions", Json{{"model", "gpt-4"}, {"prompt", "x"}});
  expect_error(r, 404, "model", "model_not_found");
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find("gpt-4"), std::string::npos);
  expect_error(
      post(port(), "/v1/chat/completions",
           Json{{"model", "x"}, {"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}}),
      404, "model", "model_not_found");
}

TEST_F(ServerErrors, ContextLimits) {
  std::string long_prompt;
  for (int i = 0; i < 1500; ++i) long_prompt += "Once upon a time ";
  HttpResult r = post(port(), "/v1/completions", Json{{"prompt", long_prompt}, {"max_tokens", 1}});
  expect_error(r, 400, "prompt", "context_length_exceeded");
  r = post(port(), "/v1/chat/completions",
           Json{{"messages", Json::array({{{"role", "user"}, {"content", long_prompt}}})}});
  expect_error(r, 400, "messages", "context_length_exceeded");
  r = post(port(), "/v1/completions", Json{{"prompt", "Once"}, {"max_tokens", 2047}});
  expect_error(r, 400, "max_tokens", "context_length_exceeded");
  r = post(port(), "/v1/chat/completions",
           Json{{"messages", Json::array({{{"role", "user"}, {"content", "x"}}})},
                {"max_completion_tokens", 5000}});
  expect_error(r, 400, "max_tokens", "context_length_exceeded");
  // Exactly filling the context is fine.
  const int n = static_cast<int>(Stories260K::get().tok.encode("Once", true, true).size());
  r = post(
      port(), "/v1/completions",
      Json{{"prompt", "Once"}, {"max_tokens", 2048 - n}, {"temperature", 0}, {"stop", "Lily"}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(ServerErrors, RoutesAndMethods) {
  HttpResult r = get(port(), "/v1/nothing");
  expect_error(r, 404, "", "not_found");
  expect_error(post(port(), "/nope", std::string("{}")), 404, "", "not_found");
  r = get(port(), "/v1/completions");
  expect_error(r, 405, "", "method_not_allowed");
  EXPECT_EQ(r.header("Allow"), "POST");
  httplib::Client c = make_client(port());
  r = to_result(c.Delete("/v1/chat/completions"));
  expect_error(r, 405, "", "method_not_allowed");
  r = to_result(c.Post("/health", "{}", "application/json"));
  expect_error(r, 405, "", "method_not_allowed");
  EXPECT_EQ(r.header("Allow"), "GET, HEAD");
  // Keep-alive survives an error on the same connection.
  httplib::Client k = make_client(port());
  k.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(to_result(k.Post("/v1/completions", "{bad", "application/json")).status, 400);
    EXPECT_EQ(to_result(k.Get("/health")).status, 200);
  }
}

TEST_F(ServerErrors, NoChatTemplate) {
  // A server without a template refuses chat with a clear 400 (the GGUF has none).
  ServerConfig sc = test_server_config();
  sc.chat_template.clear();
  HttpServer other(*srv->engine, Stories260K::get().tok, sc);
  int p = other.bind("127.0.0.1", 0);
  other.start();
  HttpResult r = post(p, "/v1/chat/completions",
                      Json{{"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}});
  expect_error(r, 400, "", "no_chat_template");
  other.stop();
}

TEST_F(ServerErrors, GarbageNeverCrashes) {
  std::mt19937 rng(1234);
  const std::string samples[] = {
      R"({"prompt": "x", "max_tokens": 2})",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true})",
      R"({"prompt": [1, 2], "n": 2, "logprobs": 1, "max_tokens": 2})"};
  int ok = 0, client_errors = 0;
  for (int i = 0; i < 150; ++i) {
    std::string body = samples[static_cast<size_t>(i) % 3];
    // Mutate: flip, delete or insert random bytes.
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      size_t pos = rng() % body.size();
      switch (rng() % 3) {
        case 0:
          body[pos] = static_cast<char>(rng() % 256);
          break;
        case 1:
          body.erase(pos, 1);
          break;
        default:
          body.insert(pos, 1, static_cast<char>(rng() % 256));
          break;
      }
    }
    const char* path = i % 2 ? "/v1/chat/completions" : "/v1/completions";
    HttpResult r = post(port(), path, body);
    ASSERT_NE(r.status, 0) << "no response to " << body;
    EXPECT_LT(r.status, 500) << body << " -> " << r.body;
    if (r.status == 200)
      ok++;
    else
      client_errors++;
  }
  EXPECT_GT(client_errors, 0);
  EXPECT_EQ(get(port(), "/health").status, 200);
  EXPECT_TRUE(wait_blocks_free(*srv->engine, 10));
}

}  // namespace
}  // namespace kvasir::server::testing
