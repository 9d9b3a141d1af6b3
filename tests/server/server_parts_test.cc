// The server's small parts: API key file and bearer check, usage and cost arithmetic, UTF-8
// validation, error objects, logprobs shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kvasir/server/api_error.h"
#include "kvasir/server/api_keys.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/usage.h"
#include "kvasir/server/utf8.h"
#include "kvasir/util/error.h"
#include "server_test_util.h"

namespace kvasir::server {
namespace {

TEST(ApiKeys, FileAndBearer) {
  auto path = std::filesystem::temp_directory_path() / "kvasir-keys-test.txt";
  {
    std::ofstream f(path);
    f << "# comment\n\n  sk-one  \nsk-two\n";
  }
  ApiKeys keys = ApiKeys::load(path.string());
  EXPECT_TRUE(keys.enabled());
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.check("Bearer sk-one").value_or("?"), "key1");
  EXPECT_EQ(keys.check("bearer sk-two").value_or("?"), "key2");
  EXPECT_FALSE(keys.check("Bearer sk-three"));
  EXPECT_FALSE(keys.check("Bearer sk-on"));
  EXPECT_FALSE(keys.check("sk-one"));
  EXPECT_FALSE(keys.check("Bearer "));
  EXPECT_FALSE(keys.check(""));
  EXPECT_FALSE(keys.check("Bearer # comment"));
  {
    std::ofstream f(path);
    f << "# only a comment\n\n";
  }
  EXPECT_THROW(ApiKeys::load(path.string()), Error);
  EXPECT_THROW(ApiKeys::load("/nonexistent/keys.txt"), Error);
  std::filesystem::remove(path);
  EXPECT_EQ(ApiKeys().check("anything").value_or("?"), "none");  // auth off
}

TEST(Usage, CostFormula) {
  Prices p{0.15, 0.60, 0.075};
  Usage u{1000, 400, 200};
  // (1000 - 400) * 0.15 + 400 * 0.075 + 200 * 0.60 = 90 + 30 + 120 = 240 per 1M tokens.
  EXPECT_NEAR(u.cost_usd(p), 240e-6, 1e-15);
  Json j = u.to_json(p);
  EXPECT_EQ(j["prompt_tokens"], 1000);
  EXPECT_EQ(j["completion_tokens"], 200);
  EXPECT_EQ(j["total_tokens"], 1200);
  EXPECT_EQ(j["prompt_tokens_details"]["cached_tokens"], 400);
  EXPECT_NEAR(j["cost_usd"].get<double>(), 240e-6, 1e-15);
  // No cached price: cached tokens cost the input price.
  EXPECT_NEAR(u.cost_usd(Prices{0.15, 0.60, -1}), (1000 * 0.15 + 200 * 0.60) / 1e6, 1e-15);
  EXPECT_EQ(Usage{}.cost_usd(p), 0.0);
}

TEST(Utf8, Validation) {
  EXPECT_FALSE(find_invalid_utf8(""));
  EXPECT_FALSE(find_invalid_utf8("plain ascii"));
  EXPECT_FALSE(find_invalid_utf8("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_EQ(find_invalid_utf8("ab\xff").value_or(99), 2u);
  EXPECT_EQ(find_invalid_utf8("\xc3").value_or(99), 0u);              // truncated
  EXPECT_EQ(find_invalid_utf8("a\xc0\x80").value_or(99), 1u);         // overlong NUL
  EXPECT_EQ(find_invalid_utf8("\xe0\x80\xaf").value_or(99), 0u);      // overlong
  EXPECT_EQ(find_invalid_utf8("\xed\xa0\x80").value_or(99), 0u);      // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80").value_or(99), 0u);  // > U+10FFFF
  EXPECT_EQ(find_invalid_utf8("x\x80").value_or(99), 1u);             // stray continuation
  EXPECT_EQ(find_invalid_utf8("\xe2\x82").value_or(99), 0u);
}

TEST(ApiError, Shape) {
  ApiError e = ApiError::bad_request("bad thing", "temperature");
  Json j = e.to_json();
  EXPECT_EQ(
      j.dump(),
      R"({"error":{"message":"bad thing","type":"invalid_request_error","param":"temperature","code":null}})");
  EXPECT_EQ(ApiError(429, "slow down").type(), "rate_limit_error");
  EXPECT_EQ(ApiError(503, "bye").type(), "server_error");
  EXPECT_EQ(ApiError(401, "who").type(), "authentication_error");
}

TEST(OpenAIResponse, LogprobsShapes) {
  const Tokenizer& tok = test_util::Stories260K::get().tok;
  const int32_t a = tok.find_token(
      "\xe2\x96\x81"
      "Once");  // "▁Once"
  ASSERT_GE(a, 0);
  std::vector<TokenInfo> toks(2);
  toks[0].token = a;
  toks[0].logprob = -0.5f;
  toks[0].top_logprobs = {{a, -0.5f}, {2, -1.5f}};
  toks[1].token = 2;  // </s>
  toks[1].logprob = -std::numeric_limits<float>::infinity();
  int64_t offset = 10;
  Json c = completion_logprobs(toks, tok, offset);
  EXPECT_EQ(c["tokens"], Json::array({" Once", "</s>"}));
  EXPECT_EQ(c["token_logprobs"][0], -0.5);
  EXPECT_EQ(c["token_logprobs"][1], -9999.0);  // -inf is not JSON
  EXPECT_EQ(c["top_logprobs"][0]["</s>"], -1.5);
  EXPECT_EQ(c["text_offset"], Json::array({10, 15}));
  EXPECT_EQ(offset, 19);
  Json ch = chat_logprobs_content(toks, tok, 1);
  ASSERT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch[0]["token"], " Once");
  EXPECT_EQ(ch[0]["bytes"], Json::array({32, 79, 110, 99, 101}));
  EXPECT_EQ(ch[0]["top_logprobs"].size(), 1u);  // limited to top_n
  EXPECT_EQ(ch[0]["top_logprobs"][0]["token"], " Once");
  // A byte token that is not a whole character: U+FFFD in "token", the byte in "bytes".
  const int32_t byte_e2 = tok.find_token("<0xE2>");
  ASSERT_GE(byte_e2, 0);
  toks.resize(1);
  toks[0].token = byte_e2;
  toks[0].top_logprobs.clear();
  Json b = chat_logprobs_content(toks, tok, 0);
  EXPECT_EQ(b[0]["bytes"], Json::array({0xE2}));
  EXPECT_EQ(dump_json(b[0]["token"]), "\"\xef\xbf\xbd\"");
}

TEST(OpenAIResponse, Sse) {
  EXPECT_EQ(sse_event(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  EXPECT_EQ(make_response_id("cmpl-").size(), 5u + 24u);
  EXPECT_NE(make_response_id("x"), make_response_id("x"));
}

}  // namespace
}  // namespace kvasir::server
