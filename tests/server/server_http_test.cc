// /v1/completions and /v1/chat/completions over real HTTP on loopback: response shapes, greedy
// outputs equal to the offline `kvasir run` loop, streaming equal to non-streaming, usage and
// cost, n choices, batches, logprobs, stop strings, echo, seeds, chat templates with tools.
#include <gtest/gtest.h>

#include <set>

#include "server_test_util.h"

namespace kvasir::server::testing {
namespace {

class ServerHttp : public SharedServerTest<ServerHttp> {
 protected:
  static const Tokenizer& tok() { return Stories260K::get().tok; }
};

double expected_cost(const Json& usage) {
  const double p = usage["prompt_tokens"].get<double>();
  const double c = usage["prompt_tokens_details"]["cached_tokens"].get<double>();
  const double g = usage["completion_tokens"].get<double>();
  return ((p - c) * 0.15 + c * 0.075 + g * 0.60) / 1e6;
}

void expect_usage(const Json& usage, int64_t prompt, int64_t completion) {
  ASSERT_TRUE(usage.is_object()) << usage.dump();
  EXPECT_EQ(usage["prompt_tokens"], prompt);
  EXPECT_EQ(usage["completion_tokens"], completion);
  EXPECT_EQ(usage["total_tokens"], prompt + completion);
  ASSERT_TRUE(usage["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  EXPECT_LE(usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), prompt);
  EXPECT_NEAR(usage["cost_usd"].get<double>(), expected_cost(usage), 1e-15);
}

TEST_F(ServerHttp, HealthAndModels) {
  HttpResult h = get(port(), "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.json["status"], "ok");
  HttpResult m = get(port(), "/v1/models");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.json["object"], "list");
  ASSERT_EQ(m.json["data"].size(), 1u);
  EXPECT_EQ(m.json["data"][0]["id"], "stories260K");
  EXPECT_EQ(m.json["data"][0]["object"], "model");
  EXPECT_EQ(m.json["data"][0]["max_model_len"], 2048);
  EXPECT_EQ(get(port(), "/v1/models/stories260K").json["id"], "stories260K");
  EXPECT_EQ(get(port(), "/v1/models/gpt-4").status, 404);
}

// From BOS alone, greedy, the server produces exactly what `kvasir run --temp 0` produces: the
// published stories260K sample.
TEST_F(ServerHttp, GreedyFromBosMatchesRun) {
  HttpResult r = post(port(), "/v1/completions",
                      Json{{"model", "stories260K"},
                           {"prompt", Json::array({tok().bos_id()})},
                           {"max_tokens", 256},
                           {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  GreedyReference ref = greedy_reference({tok().bos_id()}, 256, /*strip_leading_space=*/true);
  const std::string text = r.json["choices"][0]["text"];
  EXPECT_EQ(text, ref.text);
  EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily. She loved to play "
                       "outside in the park.",
                       0),
            0u)
      << text;
  EXPECT_EQ(r.json["usage"]["completion_tokens"], static_cast<int>(ref.tokens.size()));
}

TEST_F(ServerHttp, CompletionShapeAndGreedy) {
  const std::string prompt = "Once upon a time, a little dog";
  HttpResult r = post(port(), "/v1/completions",
                      Json{{"model", "stories260K"},
                           {"prompt", prompt},
                           {"max_tokens", 40},
                           {"temperature", 0},
                           {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  const Json& j = r.json;
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "stories260K");
  ASSERT_EQ(j["choices"].size(), 1u);
  const Json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  const std::vector<int32_t> ids = tok().encode(prompt, true, true);
  GreedyReference ref = greedy_reference(ids, 40, false);
  EXPECT_EQ(c["text"], ref.text);
  expect_usage(j["usage"], static_cast<int64_t>(ids.size()), 40);
}

TEST_F(ServerHttp, StreamingCompletionEqualsNonStreaming) {
  Json req{{"prompt", "The cat sat"}, {"max_tokens", 30}, {"temperature", 0}};
  HttpResult full = post(port(), "/v1/completions", req);
  ASSERT_EQ(full.status, 200) << full.body;
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  StreamResult s = post_stream(port(), "/v1/completions", req);
  ASSERT_EQ(s.status, 200) << s.raw;
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.malformed) << s.raw;
  ASSERT_GE(s.chunks.size(), 2u);
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 1 < s.chunks.size(); ++i) {
    const Json& ch = s.chunks[i];
    EXPECT_EQ(ch["object"], "text_completion");
    EXPECT_EQ(ch["id"], s.chunks[0]["id"]);
    EXPECT_TRUE(ch.contains("usage") && ch["usage"].is_null());  // include_usage: null until last
    ASSERT_EQ(ch["choices"].size(), 1u);
    text += ch["choices"][0]["text"].get<std::string>();
    if (!ch["choices"][0]["finish_reason"].is_null()) {
      finishes++;
      EXPECT_EQ(ch["choices"][0]["finish_reason"], full.json["choices"][0]["finish_reason"]);
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, full.json["choices"][0]["text"]);
  const Json& last = s.chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], full.json["usage"]["completion_tokens"]);
  EXPECT_EQ(last["usage"]["prompt_tokens"], full.json["usage"]["prompt_tokens"]);
  EXPECT_NEAR(last["usage"]["cost_usd"].get<double>(), expected_cost(last["usage"]), 1e-15);
  // Without include_usage there is no usage field at all.
  req.erase("stream_options");
  StreamResult s2 = post_stream(port(), "/v1/completions", req);
  ASSERT_TRUE(s2.done);
  for (const Json& ch : s2.chunks) EXPECT_FALSE(ch.contains("usage"));
}

TEST_F(ServerHttp, ChatCompletionAndStream) {
  Json messages = Json::array({{{"role", "user"}, {"content", "Hello"}}});
  HttpResult r = post(port(), "/v1/chat/completions",
                      Json{{"model", "stories260K"},
                           {"messages", messages},
                           {"max_tokens", 24},
                           {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& j = r.json;
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "chat.completion");
  const Json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  ASSERT_TRUE(c["message"]["content"].is_string());
  // The prompt is the template's rendering, tokenized without extra special tokens.
  const std::vector<int32_t> ids = tok().encode("<s>user: Hello\nassistant:", false, true);
  ASSERT_EQ(ids[0], tok().bos_id());
  GreedyReference ref = greedy_reference(ids, 24, false);
  EXPECT_EQ(c["message"]["content"], ref.text);
  EXPECT_EQ(c["finish_reason"], ref.stopped_on_eos ? "stop" : "length");
  expect_usage(j["usage"], static_cast<int64_t>(ids.size()),
               static_cast<int64_t>(ref.tokens.size()));

  StreamResult s = post_stream(
      port(), "/v1/chat/completions",
      Json{{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true}});
  ASSERT_TRUE(s.done) << s.raw;
  EXPECT_FALSE(s.malformed);
  ASSERT_GE(s.chunks.size(), 2u);
  const Json& first = s.chunks[0]["choices"][0];
  EXPECT_EQ(s.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(first["delta"]["role"], "assistant");
  std::string content;
  Json finish;
  for (const Json& ch : s.chunks) {
    const Json& d = ch["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!ch["choices"][0]["finish_reason"].is_null()) finish = ch["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, c["message"]["content"]);
  EXPECT_EQ(finish, c["finish_reason"]);
}

TEST_F(ServerHttp, ChatTemplateGetsToolsAndRaises) {
  Json base{{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 2}};
  HttpResult plain = post(port(), "/v1/chat/completions", base);
  ASSERT_EQ(plain.status, 200) << plain.body;
  Json with_tools = base;
  with_tools["tools"] =
      Json::array({{{"type", "function"},
                    {"function", {{"name", "get_weather"}, {"parameters", Json::object()}}}}});
  // This template renders tools but writes calls in no form the server parses: asking for calls
  // is refused (as vLLM without a tool-call parser), tool_choice "none" renders them.
  HttpResult refused = post(port(), "/v1/chat/completions", with_tools);
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.json["error"]["param"], "tools");
  with_tools["tool_choice"] = "none";
  HttpResult tools = post(port(), "/v1/chat/completions", with_tools);
  ASSERT_EQ(tools.status, 200) << tools.body;
  // Jinja's tojson separates with ", " and ": ".
  std::string pretty =
      "<s>Tools: [{\"type\": \"function\", \"function\": {\"name\": "
      "\"get_weather\", \"parameters\": {}}}]\nuser: Hi\nassistant:";
  EXPECT_EQ(tools.json["usage"]["prompt_tokens"],
            static_cast<int64_t>(tok().encode(pretty, false, true).size()));
  EXPECT_GT(tools.json["usage"]["prompt_tokens"], plain.json["usage"]["prompt_tokens"]);

  // Content given as text parts renders like the joined string.
  Json parts = base;
  parts["messages"][0]["content"] = Json::array({{{"type", "text"}, {"text", "Hi"}}});
  HttpResult p = post(port(), "/v1/chat/completions", parts);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(p.json["usage"]["prompt_tokens"], plain.json["usage"]["prompt_tokens"]);

  Json bad = base;
  bad["messages"][0]["content"] = "forbidden";
  HttpResult e = post(port(), "/v1/chat/completions", bad);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.json["error"]["message"], "the content forbidden is not allowed");
  EXPECT_EQ(e.json["error"]["code"], "chat_template_error");
}

TEST_F(ServerHttp, NChoicesAndBatches) {
  Json req{{"prompt", "Once"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7}, {"n", 3}};
  HttpResult a = post(port(), "/v1/completions", req);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.json["choices"].size(), 3u);
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.json["choices"][i]["index"], i);
    texts.insert(a.json["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(texts.size(), 1u);                          // seed + j per choice: independent samples
  HttpResult b = post(port(), "/v1/completions", req);  // same seed: same choices
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.json["choices"][i]["text"], a.json["choices"][i]["text"]);
  const int64_t prompt_len = static_cast<int64_t>(tok().encode("Once", true, true).size());
  EXPECT_EQ(a.json["usage"]["prompt_tokens"], prompt_len);  // the prompt counts once
  // Completion tokens are summed over the choices (each at most max_tokens, at least one).
  EXPECT_LE(a.json["usage"]["completion_tokens"].get<int64_t>(), 36);
  EXPECT_GE(a.json["usage"]["completion_tokens"].get<int64_t>(), 3);

  // A batch of two prompts, n = 2: four choices, prompt i's choices at 2i and 2i+1.
  HttpResult batch = post(port(), "/v1/completions",
                          Json{{"prompt", Json::array({"Once", "The dog"})},
                               {"max_tokens", 5},
                               {"temperature", 0},
                               {"n", 2}});
  ASSERT_EQ(batch.status, 200) << batch.body;
  ASSERT_EQ(batch.json["choices"].size(), 4u);
  EXPECT_EQ(batch.json["choices"][0]["text"], batch.json["choices"][1]["text"]);  // greedy
  EXPECT_EQ(batch.json["choices"][2]["text"], batch.json["choices"][3]["text"]);
  EXPECT_NE(batch.json["choices"][0]["text"], batch.json["choices"][2]["text"]);
  EXPECT_EQ(batch.json["usage"]["prompt_tokens"],
            prompt_len + static_cast<int64_t>(tok().encode("The dog", true, true).size()));
}

TEST_F(ServerHttp, CompletionLogprobs) {
  HttpResult r = post(port(), "/v1/completions",
                      Json{{"prompt", "Once upon"},
                           {"max_tokens", 6},
                           {"temperature", 0},
                           {"logprobs", 3},
                           {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& lp = r.json["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r.body;
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  ASSERT_EQ(lp["text_offset"].size(), 6u);
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    joined += lp["tokens"][i].get<std::string>();
    const Json& top = lp["top_logprobs"][i];
    EXPECT_EQ(top.size(), 3u);
    double best = -1e9;
    for (auto it = top.begin(); it != top.end(); ++it)
      best = std::max(best, it.value().get<double>());
    // Greedy: the chosen token is the most likely one.
    EXPECT_DOUBLE_EQ(lp["token_logprobs"][i].get<double>(), best);
    EXPECT_LE(best, 0.0);
  }
  EXPECT_EQ(joined, r.json["choices"][0]["text"]);
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(ServerHttp, ChatLogprobs) {
  Json req{{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})},
           {"max_tokens", 5},
           {"temperature", 0},
           {"logprobs", true},
           {"top_logprobs", 2},
           {"ignore_eos", true}};
  HttpResult r = post(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& content = r.json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u) << r.body;
  for (const Json& e : content) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(e["bytes"].is_array());
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_DOUBLE_EQ(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>());
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
  }
  req["stream"] = true;
  StreamResult s = post_stream(port(), "/v1/chat/completions", req);
  ASSERT_TRUE(s.done);
  size_t n = 0;
  for (const Json& ch : s.chunks)
    if (ch["choices"][0]["logprobs"].is_object())
      n += ch["choices"][0]["logprobs"]["content"].size();
  EXPECT_EQ(n, 5u);
}

TEST_F(ServerHttp, StopStringsEchoAndSeeds) {
  const std::vector<int32_t> bos{tok().bos_id()};
  GreedyReference ref = greedy_reference(bos, 60, true);
  const size_t cut = ref.text.find("Lily");
  ASSERT_NE(cut, std::string::npos);
  HttpResult r =
      post(port(), "/v1/completions",
           Json{{"prompt", bos}, {"max_tokens", 60}, {"temperature", 0}, {"stop", "Lily"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json["choices"][0]["text"], ref.text.substr(0, cut));
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");

  HttpResult e =
      post(port(), "/v1/completions",
           Json{{"prompt", "Once upon"}, {"max_tokens", 4}, {"temperature", 0}, {"echo", true}});
  ASSERT_EQ(e.status, 200);
  EXPECT_EQ(e.json["choices"][0]["text"].get<std::string>().rfind("Once upon", 0), 0u);
  StreamResult es = post_stream(port(), "/v1/completions",
                                Json{{"prompt", "Once upon"},
                                     {"max_tokens", 4},
                                     {"temperature", 0},
                                     {"echo", true},
                                     {"stream", true}});
  ASSERT_TRUE(es.done);
  EXPECT_EQ(es.chunks[0]["choices"][0]["text"], "Once upon");  // the echo comes first
  std::string streamed;
  for (const Json& ch : es.chunks) streamed += ch["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, e.json["choices"][0]["text"]);

  Json sampled{{"prompt", "Once"},
               {"max_tokens", 20},
               {"temperature", 0.9},
               {"top_k", 40},
               {"top_p", 0.95},
               {"min_p", 0.02},
               {"repetition_penalty", 1.1},
               {"presence_penalty", 0.2},
               {"frequency_penalty", 0.1},
               {"seed", 1234}};
  HttpResult s1 = post(port(), "/v1/completions", sampled);
  HttpResult s2 = post(port(), "/v1/completions", sampled);
  ASSERT_EQ(s1.status, 200) << s1.body;
  EXPECT_EQ(s1.json["choices"][0]["text"], s2.json["choices"][0]["text"]);

  HttpResult ig =
      post(port(), "/v1/completions",
           Json{{"prompt", bos}, {"max_tokens", 300}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(ig.status, 200);
  EXPECT_EQ(ig.json["usage"]["completion_tokens"], 300);
  EXPECT_EQ(ig.json["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerHttp, ChatWithoutMaxTokensRunsToTheContextOrEos) {
  HttpResult r = post(port(), "/v1/chat/completions",
                      Json{{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})},
                           {"temperature", 0},
                           {"max_completion_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(r.json["usage"]["completion_tokens"].get<int>(), 3);
}

}  // namespace
}  // namespace kvasir::server::testing
