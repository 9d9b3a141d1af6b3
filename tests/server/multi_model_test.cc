// Multi-model serving and routing in one HttpServer: stories260K (GGUF, 512-token vocabulary) as
// "small" and a Q8_0 copy of TinyStories-656K (converted from its Hugging Face folder; 2048-token
// vocabulary: a different tokenizer) as "large", each with its own engine; routes between them by
// prompt length, by the small model's difficulty score, by API key, and by load (fallover), with
// the decision reported in usage.route, the X-Kvasir-Model header and the kvasir_route_* metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvasir/quant/gguf_quantize.h"
#include "server_test_util.h"
#include "test_util/paths.h"

namespace kvasir::server::testing {
namespace {

std::string large_q8_0() {
  const std::string out = test_util::temp_dir("kvasir-multi-model") + "/tinystories-656k-q8_0.gguf";
  quantize_gguf(test_util::models_dir() + "/tinystories-656k", out, DType::Q8_0);
  return out;
}

struct Large {
  std::unique_ptr<Model> model = Model::load(large_q8_0());
  Tokenizer tok = Tokenizer::from_gguf(model->file());
  static Large& get() {
    static Large m;
    return m;
  }
};

// Two engines and a server with the given routes; small costs a tenth of large.
struct TwoModels {
  std::unique_ptr<Engine> small, large;
  std::unique_ptr<HttpServer> server;
  int port = 0;

  explicit TwoModels(std::vector<RoutePolicy> routes, EngineConfig small_ec = test_engine_config(),
                     ServerConfig sc = test_server_config()) {
    Stories260K& s = Stories260K::get();
    Large& l = Large::get();
    small = std::make_unique<Engine>(*s.model, s.tok, small_ec);
    EngineConfig lec = test_engine_config();
    large = std::make_unique<Engine>(*l.model, l.tok, lec);
    std::vector<ServedModel> models(2);
    models[0].name = "small";
    models[0].engine = small.get();
    models[0].tokenizer = &s.tok;
    models[0].chat_template = sc.chat_template;
    models[0].prices = {0.1, 0.4, 0.05};
    models[0].info.weight_type = "f32";
    models[1].name = "large";
    models[1].engine = large.get();
    models[1].tokenizer = &l.tok;
    models[1].chat_template = sc.chat_template;
    models[1].prices = {1.0, 4.0, 0.5};
    models[1].info.weight_type = "q8_0";
    models[1].info.sha256 = [] { return std::string("abc"); };
    sc.routes = std::move(routes);
    server = std::make_unique<HttpServer>(std::move(models), sc);
    port = server->bind("127.0.0.1", 0);
    server->start();
  }
  ~TwoModels() {
    server->stop();
    server.reset();
    small.reset();
    large.reset();
  }
  double metric(const std::string& name, const std::vector<std::string>& labels) {
    return server->metrics().registry().value(name, labels);
  }
};

RoutePolicy route(int max_prompt_tokens = 0, double max_difficulty = 0) {
  RoutePolicy r;
  r.name = "auto";
  r.small = "small";
  r.large = "large";
  r.max_small_prompt_tokens = max_prompt_tokens;
  r.max_small_difficulty = max_difficulty;
  return r;
}

Json completion(const std::string& model, const std::string& prompt, int max_tokens = 8) {
  return Json{{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

const char* kEasy = "Once upon a time, there was a little girl named Lily.";
const char* kLong =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.";

TEST(MultiModel, ModelsAndRoutesAreListedAndNamedModelsAnswerThemselves) {
  TwoModels t({route()});
  HttpResult r = get(t.port, "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["data"].size(), 3u);
  EXPECT_EQ(r.json["data"][0]["id"], "small");
  EXPECT_EQ(r.json["data"][1]["id"], "large");
  EXPECT_EQ(r.json["data"][1]["meta"]["quantization"], "q8_0");
  EXPECT_EQ(r.json["data"][1]["meta"]["sha256"], "abc");
  EXPECT_EQ(r.json["data"][2]["id"], "auto");
  EXPECT_EQ(r.json["data"][2]["meta"]["route"]["large"], "large");

  // Each named model answers with its own tokenizer: the same text has different token counts.
  HttpResult a = post(t.port, "/v1/completions", completion("small", kEasy));
  HttpResult b = post(t.port, "/v1/completions", completion("large", kEasy));
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.json["model"], "small");
  EXPECT_EQ(b.json["model"], "large");
  EXPECT_EQ(a.header("X-Kvasir-Model"), "small");
  EXPECT_NE(a.json["usage"]["prompt_tokens"], b.json["usage"]["prompt_tokens"]);
  EXPECT_FALSE(a.json["usage"].contains("route"));
  // The large model's greedy text is its own ("... Lily. She had a toy car ..." from BOS).
  HttpResult c = post(t.port, "/v1/completions", completion("large", "", 12));
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.json["choices"][0]["text"].get<std::string>().rfind("Once upon a time", 0), 0u)
      << c.body;

  // Per-model metrics: every series carries the model.
  EXPECT_GE(t.metric("kvasir_requests_total", {"small", "length"}), 1);
  EXPECT_GE(t.metric("kvasir_requests_total", {"large", "length"}), 1);
  const std::string text = get(t.port, "/metrics").body;
  EXPECT_NE(text.find("kvasir_kv_cache_usage_ratio{model=\"large\"} "), std::string::npos);
  EXPECT_NE(text.find("kvasir_model_info{model=\"large\",quantization=\"q8_0\",kv_dtype=\"\","
                      "sha256=\"abc\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kvasir_build_info{"), std::string::npos);

  // An unknown model lists what is served; embeddings and tokenize take models, not routes.
  HttpResult u = post(t.port, "/v1/completions", completion("medium", kEasy));
  EXPECT_EQ(u.status, 404);
  EXPECT_NE(u.body.find("'small', 'large' and route 'auto'"), std::string::npos) << u.body;
  HttpResult tk = post(t.port, "/tokenize", Json{{"model", "large"}, {"content", kEasy}});
  ASSERT_EQ(tk.status, 200) << tk.body;
  HttpResult ts = post(t.port, "/tokenize", Json{{"model", "small"}, {"content", kEasy}});
  EXPECT_NE(tk.json["tokens"].size(), ts.json["tokens"].size());
  EXPECT_EQ(post(t.port, "/v1/embeddings", Json{{"model", "auto"}, {"input", "hi"}}).status, 404);
  EXPECT_EQ(post(t.port, "/v1/embeddings", Json{{"model", "large"}, {"input", "hi"}}).status, 200);
}

TEST(MultiModel, PromptLengthRouteSendsLongPromptsToTheLargeModelAndCountsTheSaving) {
  TwoModels t({route(/*max_prompt_tokens=*/20)});
  HttpResult a = post(t.port, "/v1/completions", completion("auto", kEasy));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json["model"], "small");
  const Json& ra = a.json["usage"]["route"];
  EXPECT_EQ(ra["name"], "auto");
  EXPECT_EQ(ra["model"], "small");
  EXPECT_EQ(ra["reason"], "default");
  EXPECT_EQ(a.header("X-Kvasir-Model"), "small");
  EXPECT_EQ(a.header("X-Kvasir-Route"), "auto; reason=default");

  HttpResult b = post(t.port, "/v1/completions", completion("auto", kLong));
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.json["model"], "large");
  EXPECT_EQ(b.json["usage"]["route"]["reason"], "prompt_length");
  EXPECT_NE(b.json["usage"]["route"]["detail"].get<std::string>().find("> 20"), std::string::npos);

  // Chat goes through the same rules (the small model's chat template renders the prompt).
  Json chat{{"model", "auto"},
            {"messages", Json::array({Json{{"role", "user"}, {"content", "Hi"}}})},
            {"max_tokens", 4}};
  HttpResult c = post(t.port, "/v1/chat/completions", chat);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.json["usage"]["route"]["model"], "small");
  // Without "model" the first route decides.
  HttpResult d = post(t.port, "/v1/completions", Json{{"prompt", kLong}, {"max_tokens", 2}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json["model"], "large");
  // Token-id prompts cannot be routed (the tokenizers differ).
  HttpResult e = post(t.port, "/v1/completions", Json{{"model", "auto"}, {"prompt", {1, 2, 3}}});
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.body.find("token ids cannot be routed"), std::string::npos) << e.body;

  EXPECT_EQ(t.metric("kvasir_route_requests_total", {"auto", "small", "default"}), 2);
  EXPECT_EQ(t.metric("kvasir_route_requests_total", {"auto", "large", "prompt_length"}), 2);
  // Saved = what the small model's requests would have cost on the large one, minus their cost.
  auto cost = [](const Json& u, double in, double out) {
    return (u["prompt_tokens"].get<double>() * in + u["completion_tokens"].get<double>() * out) /
           1e6;
  };
  const Json& ua = a.json["usage"];
  const Json& uc = c.json["usage"];
  const double saved =
      cost(ua, 1.0, 4.0) - cost(ua, 0.1, 0.4) + cost(uc, 1.0, 4.0) - cost(uc, 0.1, 0.4);
  EXPECT_NEAR(t.metric("kvasir_route_cost_saved_usd_total", {"auto"}), saved, 1e-12);
  EXPECT_NEAR(t.metric("kvasir_route_cost_always_large_usd_total", {"auto"}) -
                  t.metric("kvasir_route_cost_usd_total", {"auto"}),
              saved, 1e-12);
}

TEST(MultiModel, DifficultyRouteScoresThePromptOnTheSmallModel) {
  // A threshold no prompt reaches: everything stays small, and the scores are reported.
  double easy = 0, hard = 0;
  {
    TwoModels probe({route(0, /*max_difficulty=*/1000)});
    HttpResult a = post(probe.port, "/v1/completions", completion("auto", kEasy));
    HttpResult b = post(probe.port, "/v1/completions",
                        completion("auto", "Qz7 vbx, kjw; 9!! plm ZZ trq — ww ghx 0z"));
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(a.json["usage"]["route"]["reason"], "difficulty");
    easy = a.json["usage"]["route"]["difficulty"].get<double>();
    hard = b.json["usage"]["route"]["difficulty"].get<double>();
    // The scoring prefill stays in the small model's prefix cache: the request reuses its full
    // blocks (16 tokens each; the last prompt token is always computed).
    HttpResult c = post(probe.port, "/v1/completions", completion("auto", kLong));
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_GE(c.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << c.body;
    EXPECT_EQ(probe.metric("kvasir_route_difficulty", {"auto"}), 3);
  }
  // Story text is what the small model knows; noise is not.
  ASSERT_LT(easy, hard) << "easy " << easy << " hard " << hard;
  TwoModels t({route(0, (easy + hard) / 2)});
  HttpResult a = post(t.port, "/v1/completions", completion("auto", kEasy));
  HttpResult b = post(t.port, "/v1/completions",
                      completion("auto", "Qz7 vbx, kjw; 9!! plm ZZ trq — ww ghx 0z"));
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.json["model"], "small");
  EXPECT_EQ(b.json["model"], "large");
  EXPECT_EQ(b.json["usage"]["route"]["reason"], "difficulty");
  EXPECT_NEAR(a.json["usage"]["route"]["difficulty"].get<double>(), easy, 1e-6);
}

TEST(MultiModel, KeyPolicyPicksTheModelPerApiKey) {
  RoutePolicy r = route();
  r.keys["key2"] = "large";
  ServerConfig sc = test_server_config();
  sc.api_keys = ApiKeys({"sk-one", "sk-two"});
  TwoModels t({r}, test_engine_config(), sc);
  auto as = [&](const std::string& key) {
    return post(t.port, "/v1/completions", completion("auto", kEasy),
                {{"Authorization", "Bearer " + key}});
  };
  HttpResult a = as("sk-one"), b = as("sk-two");
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.json["model"], "small");
  EXPECT_EQ(b.json["model"], "large");
  EXPECT_EQ(b.json["usage"]["route"]["reason"], "key_policy");
}

TEST(MultiModel, ASaturatedModelFallsOverToTheOtherAndNoRequestFails) {
  // The small model runs one sequence at a time: a burst queues behind it.
  EngineConfig ec = test_engine_config();
  ec.max_seqs = 1;
  TwoModels t({route()}, ec);
  constexpr int kN = 12;
  std::vector<HttpResult> results(kN);
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i)
    threads.emplace_back([&, i] {
      Json body = completion("auto", kEasy, 96);
      body["ignore_eos"] = true;
      results[static_cast<size_t>(i)] = post(t.port, "/v1/completions", body);
    });
  for (auto& th : threads) th.join();
  int small = 0, large = 0, fell_over = 0;
  for (const HttpResult& r : results) {
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 96);
    (r.json["model"] == "small" ? small : large)++;
    if (r.json["usage"]["route"]["reason"] == "fallover") {
      ++fell_over;
      EXPECT_EQ(r.json["usage"]["route"]["fell_over_from"], "small");
      EXPECT_EQ(r.json["model"], "large");
    }
  }
  EXPECT_GE(small, 1);
  EXPECT_GE(fell_over, 1);
  EXPECT_EQ(large, fell_over);
  EXPECT_EQ(t.metric("kvasir_route_fallovers_total", {"auto", "small", "large"}), fell_over);
}

TEST(MultiModel, BadConfigurationsAreRefused) {
  Stories260K& s = Stories260K::get();
  Engine e(*s.model, s.tok, test_engine_config());
  auto make = [&](std::vector<std::string> names, std::vector<RoutePolicy> routes) {
    std::vector<ServedModel> ms;
    for (auto& n : names) {
      ServedModel m;
      m.name = n;
      m.engine = &e;
      m.tokenizer = &s.tok;
      ms.push_back(m);
    }
    ServerConfig sc;
    sc.routes = std::move(routes);
    HttpServer h(std::move(ms), sc);
  };
  auto error_of = [&](std::vector<std::string> names, std::vector<RoutePolicy> routes) {
    try {
      make(std::move(names), std::move(routes));
    } catch (const std::exception& ex) {
      return std::string(ex.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({"a", "a"}, {}).find("two models are named 'a'"), std::string::npos);
  RoutePolicy r = route();
  EXPECT_NE(error_of({"small", "big"}, {r}).find("large model 'large' is not served"),
            std::string::npos);
  r.name = "small";
  EXPECT_NE(error_of({"small", "large"}, {r}).find("already a model's"), std::string::npos);
  r = route();
  r.keys["key1"] = "medium";
  EXPECT_NE(error_of({"small", "large"}, {r}).find("expected small, large or auto"),
            std::string::npos);
  EXPECT_EQ(error_of({"small", "large"}, {route()}), "");
}

}  // namespace
}  // namespace kvasir::server::testing
