// A model's own sampling defaults on the server (ModelInfo::sampling_defaults, from its
// generation_config.json or general.sampling.* keys): apply_sampling_defaults fills only the
// fields a request left unset, and over HTTP a request without temperature gets the model's
// (greedy here, equal to the offline greedy reference) while one with temperature keeps its own
// (equal to the same request on a server without defaults).
#include <gtest/gtest.h>

#include "kvasir/server/openai_request.h"
#include "server_test_util.h"

namespace kvasir::server::testing {
namespace {

SamplingDefaults greedy_defaults() {
  SamplingDefaults d;
  d.temperature = 0.0f;
  d.top_k = 7;
  d.top_p = 0.5f;
  d.min_p = 0.1f;
  d.repetition_penalty = 1.3f;
  d.penalty_last_n = 32;
  d.max_tokens = 12;
  return d;
}

TEST(SamplingDefaults, FillOnlyTheFieldsTheRequestLeftUnset) {
  GenerationOptions bare =
      parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"))
          .options;
  apply_sampling_defaults(bare, greedy_defaults(), 1000);
  EXPECT_EQ(bare.sampling.temperature, 0.0f);
  EXPECT_EQ(bare.sampling.top_k, 7);
  EXPECT_EQ(bare.sampling.top_p, 0.5f);
  EXPECT_EQ(bare.sampling.min_p, 0.1f);
  EXPECT_EQ(bare.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(bare.sampling.penalty_last_n, 32);
  EXPECT_EQ(bare.sampling.max_tokens, 12);

  GenerationOptions own =
      parse_chat_request(
          Json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 1.5,
      "top_k": 3, "top_p": 0.9, "min_p": 0, "repetition_penalty": 1, "max_tokens": 40})"))
          .options;
  apply_sampling_defaults(own, greedy_defaults(), 1000);
  EXPECT_EQ(own.sampling.temperature, 1.5f);
  EXPECT_EQ(own.sampling.top_k, 3);
  EXPECT_EQ(own.sampling.top_p, 0.9f);
  EXPECT_EQ(own.sampling.min_p, 0.0f);
  EXPECT_EQ(own.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(own.sampling.penalty_last_n, SamplingParams{}.penalty_last_n);
  EXPECT_EQ(own.sampling.max_tokens, 40);

  // max_completion_tokens counts as set; completions' 16 does not.
  GenerationOptions mct =
      parse_chat_request(
          Json::parse(
              R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3})"))
          .options;
  apply_sampling_defaults(mct, greedy_defaults(), 1000);
  EXPECT_EQ(mct.sampling.max_tokens, 3);
  GenerationOptions cmpl = parse_completion_request(Json::parse(R"({"prompt": "x"})")).options;
  EXPECT_EQ(cmpl.sampling.max_tokens, 16);
  apply_sampling_defaults(cmpl, greedy_defaults(), 1000);
  EXPECT_EQ(cmpl.sampling.max_tokens, 12);

  // A default max_tokens is cut to what the context leaves, never below 1.
  GenerationOptions tight =
      parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"))
          .options;
  apply_sampling_defaults(tight, greedy_defaults(), 5);
  EXPECT_EQ(tight.sampling.max_tokens, 5);
  apply_sampling_defaults(
      tight =
          parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"))
              .options,
      greedy_defaults(), 0);
  EXPECT_EQ(tight.sampling.max_tokens, 1);

  // Empty defaults change nothing.
  GenerationOptions none =
      parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"))
          .options;
  apply_sampling_defaults(none, SamplingDefaults{}, 1000);
  EXPECT_EQ(none.sampling.temperature, SamplingParams{}.temperature);
  EXPECT_EQ(none.sampling.max_tokens, -1);
}

TEST(SamplingDefaults, ServerAppliesTheModelsDefaultsToRequestsThatLeaveThemUnset) {
  ServerConfig with = test_server_config();
  with.model_info.sampling_defaults.temperature = 0.0f;  // do_sample: false
  with.model_info.sampling_defaults.max_tokens = 24;
  TestServer greedy_srv(test_engine_config(), with);
  TestServer plain_srv(test_engine_config(), test_server_config());
  const std::string prompt = "Once upon a time, a little dog";
  const std::vector<int32_t> ids = Stories260K::get().tok.encode(prompt, true, true);
  const GreedyReference ref = greedy_reference(ids, 24, false);

  // No temperature, no max_tokens: greedy, 24 tokens (the model's defaults), whatever the seed.
  for (int seed : {1, 2}) {
    HttpResult r =
        post(greedy_srv.port, "/v1/completions", Json{{"prompt", prompt}, {"seed", seed}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["choices"][0]["text"], ref.text);
    EXPECT_EQ(r.json["usage"]["completion_tokens"], static_cast<int>(ref.tokens.size()));
  }
  // Its own temperature and max_tokens: exactly what a server without defaults answers.
  const Json own{{"prompt", prompt}, {"seed", 5}, {"temperature", 1.0}, {"max_tokens", 30}};
  HttpResult a = post(greedy_srv.port, "/v1/completions", own);
  HttpResult b = post(plain_srv.port, "/v1/completions", own);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.json["choices"][0]["text"], b.json["choices"][0]["text"]);
  EXPECT_EQ(a.json["usage"]["completion_tokens"], b.json["usage"]["completion_tokens"]);
  // A server without defaults samples at temperature 1 when the request does not say.
  HttpResult c = post(plain_srv.port, "/v1/completions",
                      Json{{"prompt", prompt}, {"seed", 5}, {"max_tokens", 30}});
  EXPECT_EQ(c.json["choices"][0]["text"], b.json["choices"][0]["text"]);
}

}  // namespace
}  // namespace kvasir::server::testing
