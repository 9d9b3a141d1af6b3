// POST /v1/embeddings on stories260K: every input shape (string, strings, token ids, arrays of
// token ids) gives the engine's vector for its tokens, the same whether sent alone or in a batch;
// base64 decodes to the float answer bit for bit; dimensions truncates and re-normalizes; usage
// and metrics count the prompt tokens; every refusal is a 400 naming its field. The official
// openai npm SDK's embeddings.create (float, its default base64, dimensions) runs against it when
// installed (scripts/install-openai-sdk.sh), skipped with the reason otherwise.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kvasir/engine/pooling.h"
#include "kvasir/server/embedding_routes.h"
#include "server_test_util.h"
#include "test_util/embed.h"
#include "test_util/node.h"

namespace kvasir::server::testing {
namespace {

class EmbeddingsApi : public SharedServerTest<EmbeddingsApi> {
 public:
  static int server_port() { return port(); }
};

const Tokenizer& tok() {
  return Stories260K::get().tok;
}

std::vector<int32_t> encode(const std::string& text) {
  return tok().encode(text, /*add_special=*/true, /*parse_special=*/true);
}

// The engine's vector for `tokens` (mean pooling, normalized: the server's defaults), submitted
// directly to the server's engine.
std::vector<float> engine_vector(Engine& engine, const std::vector<int32_t>& tokens,
                                 int dimensions = 0) {
  return test_util::embed(engine, tokens, EmbeddingParams{Pooling::kMean, true, dimensions});
}

std::vector<float> floats_of(const Json& a) {
  std::vector<float> v;
  for (const Json& x : a) v.push_back(x.get<float>());
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> decode_base64_floats(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    const uint32_t v = uint32_t(val(s[i])) << 18 | uint32_t(val(s[i + 1])) << 12 |
                       (s[i + 2] == '=' ? 0 : uint32_t(val(s[i + 2])) << 6) |
                       (s[i + 3] == '=' ? 0 : uint32_t(val(s[i + 3])));
    bytes.push_back(static_cast<uint8_t>(v >> 16));
    if (s[i + 2] != '=') bytes.push_back(static_cast<uint8_t>(v >> 8));
    if (s[i + 3] != '=') bytes.push_back(static_cast<uint8_t>(v));
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {  // little-endian, whatever this machine is
    const uint32_t u = uint32_t(bytes[4 * i]) | uint32_t(bytes[4 * i + 1]) << 8 |
                       uint32_t(bytes[4 * i + 2]) << 16 | uint32_t(bytes[4 * i + 3]) << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

HttpResult embed(const Json& body) {
  return post(EmbeddingsApi::server_port(), "/v1/embeddings", body);
}

TEST_F(EmbeddingsApi, AStringInput) {
  const std::string text = "Once upon a time, there was a little girl.";
  const HttpResult r = embed(Json{{"model", "stories260K"}, {"input", text}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "list");
  EXPECT_EQ(r.json["model"], "stories260K");
  ASSERT_EQ(r.json["data"].size(), 1u);
  const Json& d = r.json["data"][0];
  EXPECT_EQ(d["object"], "embedding");
  EXPECT_EQ(d["index"], 0);
  const std::vector<float> v = floats_of(d["embedding"]);
  ASSERT_EQ(v.size(), 64u);  // stories260K's dim
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  EXPECT_NEAR(ss, 1.0, 1e-5) << "normalized";
  const std::vector<int32_t> ids = encode(text);
  EXPECT_EQ(ids[0], tok().bos_id()) << "text inputs get BOS";
  EXPECT_TRUE(same_bits(v, engine_vector(*srv->engine, ids)))
      << "the JSON floats are the engine's vector exactly";
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(r.json["usage"]["total_tokens"], ids.size());
  EXPECT_TRUE(r.json["usage"]["cost_usd"].is_number());
  // No model named is fine (as the other routes); user is accepted and ignored.
  const HttpResult r2 = embed(Json{{"input", text}, {"user", "someone"}});
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_TRUE(same_bits(floats_of(r2.json["data"][0]["embedding"]), v));
}

// A batch answers each input in order, each exactly as the same input alone (the engine batches
// them: bit-identical by construction, checked here end to end); token-id inputs give the vector
// of those tokens.
TEST_F(EmbeddingsApi, BatchesAndTokenInputsEqualSingleTextInputs) {
  const std::vector<std::string> texts = {"The cat sat.", "A big red ball rolled down the hill.",
                                          "Lily", "The cat sat."};
  const HttpResult r = embed(Json{{"input", texts}, {"encoding_format", "float"}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["data"].size(), texts.size());
  size_t total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(r.json["data"][i]["index"], i);
    const HttpResult one = embed(Json{{"input", texts[i]}});
    ASSERT_EQ(one.status, 200);
    EXPECT_TRUE(same_bits(floats_of(r.json["data"][i]["embedding"]),
                          floats_of(one.json["data"][0]["embedding"])))
        << "input " << i;
    total += encode(texts[i]).size();
  }
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], total);
  EXPECT_TRUE(same_bits(floats_of(r.json["data"][0]["embedding"]),
                        floats_of(r.json["data"][3]["embedding"])));

  // Token ids, alone and as a batch of arrays: taken as given (no BOS added).
  const std::vector<int32_t> ids0 = encode(texts[0]), ids1 = encode(texts[1]);
  const HttpResult t = embed(Json{{"input", ids0}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_TRUE(same_bits(floats_of(t.json["data"][0]["embedding"]),
                        floats_of(r.json["data"][0]["embedding"])));
  EXPECT_EQ(t.json["usage"]["prompt_tokens"], ids0.size());
  const HttpResult tt = embed(Json{{"input", Json::array({ids0, ids1})}});
  ASSERT_EQ(tt.status, 200) << tt.body;
  ASSERT_EQ(tt.json["data"].size(), 2u);
  EXPECT_TRUE(same_bits(floats_of(tt.json["data"][1]["embedding"]),
                        floats_of(r.json["data"][1]["embedding"])));
  const std::vector<int32_t> no_bos(ids1.begin() + 1, ids1.end());
  const HttpResult nb = embed(Json{{"input", no_bos}});
  ASSERT_EQ(nb.status, 200);
  EXPECT_FALSE(same_bits(floats_of(nb.json["data"][0]["embedding"]),
                         floats_of(r.json["data"][1]["embedding"])))
      << "token ids are taken as given: without BOS the vector differs";
}

TEST_F(EmbeddingsApi, Base64IsTheLittleEndianFloat32Bytes) {
  const Json input = Json::array({"One day, a little dog", "ran to the park"});
  const HttpResult f = embed(Json{{"input", input}});
  const HttpResult b = embed(Json{{"input", input}, {"encoding_format", "base64"}});
  ASSERT_EQ(f.status, 200);
  ASSERT_EQ(b.status, 200) << b.body;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(b.json["data"][i]["embedding"].is_string());
    const std::string s = b.json["data"][i]["embedding"].get<std::string>();
    EXPECT_EQ(s.size(), (64 * 4 + 2) / 3 * 4);
    EXPECT_TRUE(same_bits(decode_base64_floats(s), floats_of(f.json["data"][i]["embedding"])))
        << "input " << i;
  }
  // The encoder against a hand-computed value: 1.0f = 00 00 80 3F, 2.0f = 00 00 00 40.
  const float v[] = {1.0f, 2.0f};
  EXPECT_EQ(base64_floats(v, 1), "AACAPw==");
  EXPECT_EQ(base64_floats(v, 2), "AACAPwAAAEA=");
  EXPECT_EQ(base64_floats(v, 0), "");
}

TEST_F(EmbeddingsApi, DimensionsTruncateAndRenormalize) {
  const std::string text = "The sun was shining.";
  const HttpResult full = embed(Json{{"input", text}});
  const HttpResult cut = embed(Json{{"input", text}, {"dimensions", 16}});
  ASSERT_EQ(cut.status, 200) << cut.body;
  const std::vector<float> f = floats_of(full.json["data"][0]["embedding"]);
  const std::vector<float> c = floats_of(cut.json["data"][0]["embedding"]);
  ASSERT_EQ(c.size(), 16u);
  double ss = 0, cc = 0;
  for (int i = 0; i < 16; ++i) ss += double(f[i]) * f[i];
  for (float x : c) cc += double(x) * x;
  EXPECT_NEAR(cc, 1.0, 1e-5);
  // c = the first 16 of the raw vector over their norm = the first 16 of the unit vector over
  // theirs; both roundings are ~2^-24 relative.
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(c[i], f[i] / std::sqrt(ss), 1e-6) << i;
  EXPECT_TRUE(same_bits(c, engine_vector(*srv->engine, encode(text), 16)));
  const HttpResult all = embed(Json{{"input", text}, {"dimensions", 64}});
  ASSERT_EQ(all.status, 200);
  EXPECT_TRUE(same_bits(floats_of(all.json["data"][0]["embedding"]), f));
}

// Every refusal is a 400 whose param names the field, and nothing is left running.
TEST_F(EmbeddingsApi, RefusalsNameTheField) {
  struct Case {
    Json body;
    std::string param;
    std::string in_message;
    std::string code;
  };
  const std::vector<int32_t> too_long(2049, 300);  // the test server's context is 2048
  std::string long_text;
  for (int i = 0; i < 2100; ++i) long_text += "a ";
  const std::vector<Case> cases = {
      {Json{{"input", "x"}, {"temperature", 1}}, "temperature", "temperature", ""},
      {Json{{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format", "int8", ""},
      {Json{{"input", "x"}, {"encoding_format", 1}}, "encoding_format", "string", ""},
      {Json{{"input", "x"}, {"dimensions", 0}}, "dimensions", "dimensions", ""},
      {Json{{"input", "x"}, {"dimensions", 65}}, "dimensions", "64", ""},
      {Json{{"input", "x"}, {"dimensions", "8"}}, "dimensions", "integer", ""},
      {Json{{"input", "x"}, {"dimensions", 2.5}}, "dimensions", "integer", ""},
      {Json{{"input", "x"}, {"user", 5}}, "user", "string", ""},
      {Json{{"input", "x"}, {"model", 5}}, "model", "string", ""},
      {Json{{"model", "stories260K"}}, "input", "required", ""},
      {Json{{"input", nullptr}}, "input", "required", ""},
      {Json{{"input", ""}}, "input", "empty", ""},
      {Json{{"input", Json::array()}}, "input", "empty", ""},
      {Json{{"input", Json::array({"a", ""})}}, "input", "input[1]", ""},
      {Json{{"input", Json::array({Json::array({1, 2}), Json::array()})}}, "input", "input[1]", ""},
      {Json{{"input", 5}}, "input", "token ids", ""},
      {Json{{"input", Json::array({"a", 5})}}, "input", "input[1]", ""},
      {Json{{"input", Json::array({1, -2})}}, "input", "input[1]", ""},
      {Json{{"input", Json::array({1, 1.5})}}, "input", "input[1]", ""},
      {Json{{"input", Json::array({1, 512})}}, "input", "vocabulary", ""},
      {Json{{"input", Json::array({Json::array({1}), too_long})}}, "input", "input[1]",
       "context_length_exceeded"},
      {Json{{"input", long_text}}, "input", "2048", "context_length_exceeded"},
      {Json{{"input", std::string(100000, 'x')}}, "input", "at least", "context_length_exceeded"},
  };
  for (const Case& c : cases) {
    const HttpResult r = embed(c.body);
    SCOPED_TRACE(c.body.dump().substr(0, 200));
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
    EXPECT_EQ(r.json["error"]["param"], c.param) << r.body.substr(0, 300);
    EXPECT_EQ(r.json["error"]["type"], "invalid_request_error");
    EXPECT_NE(r.json["error"]["message"].get<std::string>().find(c.in_message), std::string::npos)
        << r.body.substr(0, 300);
    if (!c.code.empty()) {
      EXPECT_EQ(r.json["error"]["code"], c.code);
    }
  }
  const HttpResult many = embed(Json{{"input", std::vector<std::string>(2049, "a")}});
  EXPECT_EQ(many.status, 400);
  EXPECT_EQ(many.json["error"]["param"], "input");
  const HttpResult wrong_model = embed(Json{{"input", "x"}, {"model", "gpt-4"}});
  EXPECT_EQ(wrong_model.status, 404);
  EXPECT_EQ(get(srv->port, "/v1/embeddings").status, 405);
  // An input exactly as long as the context is fine: nothing is generated after it.
  const HttpResult full = embed(Json{{"input", std::vector<int32_t>(2048, 300)}});
  EXPECT_EQ(full.status, 200) << full.body.substr(0, 300);
  srv->engine->wait_idle();
  const EngineStats s = srv->engine->stats();
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

TEST_F(EmbeddingsApi, UsageIsBilledAndCounted) {
  const double prompt0 = metric("kvasir_request_prompt_tokens_total", {"stories260K", "none"});
  const double stop0 = metric("kvasir_requests_total", {"stories260K", "stop"});
  const double cost0 = metric("kvasir_cost_usd_total", {"stories260K", "none"});
  const HttpResult r = embed(Json{{"input", Json::array({"one", "two words", "and three words"})}});
  ASSERT_EQ(r.status, 200);
  const int64_t n = r.json["usage"]["prompt_tokens"].get<int64_t>();
  EXPECT_EQ(n, static_cast<int64_t>(encode("one").size() + encode("two words").size() +
                                    encode("and three words").size()));
  EXPECT_EQ(metric("kvasir_request_prompt_tokens_total", {"stories260K", "none"}), prompt0 + n);
  EXPECT_EQ(metric("kvasir_requests_total", {"stories260K", "stop"}), stop0 + 3);
  // Input price 0.15 USD per 1M tokens (test_server_config), no cached tokens.
  EXPECT_NEAR(r.json["usage"]["cost_usd"].get<double>(), n * 0.15 / 1e6, 1e-12);
  EXPECT_NEAR(metric("kvasir_cost_usd_total", {"stories260K", "none"}) - cost0, n * 0.15 / 1e6,
              1e-12);
}

TEST(EmbeddingsServer, PoolingNoneRefusesTheEndpoint) {
  ServerConfig sc = test_server_config();
  sc.embedding_pooling = Pooling::kNone;
  TestServer srv(test_engine_config(), sc);
  const HttpResult r = post(srv.port, "/v1/embeddings", Json{{"input", "hello"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find("--pooling"), std::string::npos);
}

TEST(EmbeddingsServer, CLSAndLastPoolingFollowTheServerConfig) {
  for (Pooling p : {Pooling::kCls, Pooling::kLast}) {
    ServerConfig sc = test_server_config();
    sc.embedding_pooling = p;
    TestServer srv(test_engine_config(), sc);
    const std::vector<int32_t> ids = encode("The dog barked at the cat.");
    const HttpResult r = post(srv.port, "/v1/embeddings", Json{{"input", ids}});
    ASSERT_EQ(r.status, 200);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<float> want;
    GenerateRequest req;
    req.prompt = ids;
    req.embedding = EmbeddingParams{p, true, 0};
    srv.engine->submit(std::move(req), [&](const RequestOutput& o) {
      std::lock_guard lk(mu);
      if (o.finished) want = o.embedding;
      cv.notify_all();
    });
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return !want.empty(); });
    EXPECT_TRUE(same_bits(floats_of(r.json["data"][0]["embedding"]), want)) << pooling_name(p);
  }
}

TEST(EmbeddingsServer, NeedsTheApiKeyWhenKeysAreSet) {
  ServerConfig sc = test_server_config();
  sc.api_keys = ApiKeys({"sk-embed"});
  TestServer srv(test_engine_config(), sc);
  EXPECT_EQ(post(srv.port, "/v1/embeddings", Json{{"input", "hi"}}).status, 401);
  EXPECT_EQ(post(srv.port, "/v1/embeddings", Json{{"input", "hi"}},
                 {{"Authorization", "Bearer sk-embed"}})
                .status,
            200);
}

// The official openai npm SDK (tests/server/openai_sdk_embeddings.mjs): embeddings.create with
// float, with its default (base64, decoded by the SDK) and with dimensions.
TEST(EmbeddingsServer, OfficialOpenAISdk) {
  if (!test_util::node_available())
    GTEST_SKIP() << "node is not installed (apt-get install nodejs npm)";
  const std::string sdk = test_util::openai_sdk_dir();
  if (const std::string pkg = test_util::missing_sdk_package({"openai"}); !pkg.empty())
    GTEST_SKIP() << "the npm package " << pkg << " is not installed in " << sdk
                 << "; run scripts/install-openai-sdk.sh";
  ServerConfig sc = test_server_config();
  sc.api_keys = ApiKeys({"sk-sdk-test"});
  TestServer srv(test_engine_config(), sc);
  const std::string cmd = "KVASIR_OPENAI_SDK='" + sdk +
                          "' KVASIR_BASE_URL='http://127.0.0.1:" + std::to_string(srv.port) +
                          "/v1' KVASIR_API_KEY='sk-sdk-test' KVASIR_MODEL='stories260K' " +
                          "timeout 120 node '" + std::string(KVASIR_SOURCE_DIR) +
                          "/tests/server/openai_sdk_embeddings.mjs' 2>&1";
  const test_util::ScriptResult r = test_util::run_script(cmd);
  const std::string& out = r.output;
  EXPECT_EQ(r.status, 0) << out;
  EXPECT_NE(out.find("all ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvasir::server::testing
