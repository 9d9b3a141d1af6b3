// `kvasir serve` with several models as a user runs it: stories260K as "small" and a Q8_0 copy of
// TinyStories-656K (made with `kvasir convert --type q8_0`) as "large", from repeated -m flags and
// from a kvasir.toml; routing by prompt length; one memory plan for both (a budget that cannot
// hold them is refused); pins (engine version range, sha256, quantization) refused with what was
// pinned and what was found.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "serve_process.h"
#include "test_util/files.h"

namespace kvasir::cli_test {
namespace {

using Json = nlohmann::json;

// The Q8_0 copy of TinyStories-656K, made once per process.
const std::string& large_q8() {
  static const std::string path = [] {
    const std::string out = tmp("tinystories-656k-q8_0.gguf");
    Result r =
        kvasir("convert " + q(models_dir() + "/tinystories-656k") + " " + q(out) + " --type q8_0");
    EXPECT_EQ(r.code, 0) << r.err;
    return out;
  }();
  return path;
}

std::string sha256_of(const std::string& path) {
  const std::string out = tmp("sha.txt");
  EXPECT_EQ(std::system(("sha256sum " + q(path) + " > " + q(out)).c_str()), 0);
  return read_file(out).substr(0, 64);
}

Json post(int port, const std::string& path, const Json& body, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) return Json();
  if (status) *status = r->status;
  return Json::parse(r->body, nullptr, false);
}

std::string get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get(path);
  return r ? r->body : std::string();
}

TEST(CliServeMultiModel, RoutesByPromptLengthFromFlags) {
  Server s({"-m", "small=" + stories(), "-m", "large=" + large_q8(), "--route", "auto",
            "--route-max-small-prompt-tokens", "12", "--model-price", "small=0.1,0.4",
            "--model-price", "large=1,4", "--memory", "512MiB", "-t", "1"});
  ASSERT_GT(s.port(), 0) << s.log();
  // Small and large picked by parameter count (the Q8_0 file is the smaller one on disk).
  EXPECT_NE(s.log().find("route 'auto': small 'small', large 'large'"), std::string::npos)
      << s.log();
  const Json models = Json::parse(get(s.port(), "/v1/models"));
  ASSERT_EQ(models["data"].size(), 3u) << models;
  EXPECT_EQ(models["data"][1]["meta"]["quantization"], "q8_0");

  int status = 0;
  Json a = post(s.port(), "/v1/completions",
                {{"model", "auto"}, {"prompt", "Once upon a time"}, {"max_tokens", 4}}, &status);
  ASSERT_EQ(status, 200) << a;
  EXPECT_EQ(a["model"], "small");
  Json b = post(s.port(), "/v1/completions",
                {{"model", "auto"},
                 {"prompt",
                  "Once upon a time, there was a little girl named Lily. She loved to "
                  "play outside in the park."},
                 {"max_tokens", 4}},
                &status);
  ASSERT_EQ(status, 200) << b;
  EXPECT_EQ(b["model"], "large");
  EXPECT_EQ(b["usage"]["route"]["reason"], "prompt_length");

  const std::string metrics = get(s.port(), "/metrics");
  EXPECT_NE(metrics.find("kvasir_route_requests_total{route=\"auto\",model=\"small\",reason="
                         "\"default\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvasir_generation_tokens_total{model=\"large\"} 4"), std::string::npos)
      << metrics;
  // The models' hashes are computed in the background and then reported.
  const std::string want = sha256_of(large_q8());
  std::string health;
  for (int i = 0; i < 100 && health.find(want) == std::string::npos; ++i) {
    health = get(s.port(), "/health");
    if (health.find(want) == std::string::npos)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(health.find(want), std::string::npos) << health;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(CliServeMultiModel, AConfigFileWithPinsServesOrIsRefused) {
  const std::string dir = test_util::temp_dir("kvasir-serve-config");
  const std::string small_sha = sha256_of(stories()), large_sha = sha256_of(large_q8());
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  auto config = [&](const std::string& require, const std::string& sha, const std::string& quant) {
    return "[require]\nengine = \"" + require + "\"\n\n[[model]]\nname = \"small\"\npath = \"" +
           stories() + "\"\nsha256 = \"" + small_sha +
           "\"\nprice_input = 0.1\n\n[[model]]\nname = "
           "\"large\"\npath = \"" +
           large_q8() + "\"\nsha256 = \"" + sha + "\"\nquantization = \"" + quant +
           "\"\nmax_seqs = 8\n\n[[route]]\nname = \"auto\"\nsmall = \"small\"\nlarge = "
           "\"large\"\nmax_small_prompt_tokens = 12\n";
  };
  const std::string good = write("good.toml", config(">=0.1", large_sha, "q8_0"));
  {
    Server s({"--config", good, "--memory", "512MiB", "-t", "1"});
    ASSERT_GT(s.port(), 0) << s.log();
    const std::string health = get(s.port(), "/health");
    EXPECT_NE(health.find(small_sha), std::string::npos) << health;
    EXPECT_NE(health.find(large_sha), std::string::npos) << health;
    int status = 0;
    Json a = post(s.port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 2}},
                  &status);
    ASSERT_EQ(status, 200) << a;
    EXPECT_EQ(a["usage"]["route"]["name"], "auto");
    EXPECT_EQ(s.terminate(), 0) << s.log();
  }
  // --dry-run checks all of it (pins, plan) and exits 0 without serving.
  Result dry = kvasir("serve --config " + q(good) + " --memory 512MiB --dry-run");
  EXPECT_EQ(dry.code, 0) << dry.err;
  EXPECT_NE(dry.err.find("dry run: 2 model(s) load and fit the memory budget"), std::string::npos)
      << dry.err;
  // A pinned hash that differs: refused before serving, with both hashes.
  const std::string wrong(64, 'a');
  Result r = kvasir("serve --config " + q(write("sha.toml", config(">=0.1", wrong, "q8_0"))) +
                    " --memory 512MiB --port 0");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find(wrong), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(large_sha), std::string::npos) << r.err;
  // A quantization pin that differs, and an engine outside the required range.
  r = kvasir("serve --config " + q(write("quant.toml", config(">=0.1", large_sha, "q4_0"))) +
             " --memory 512MiB --port 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("quantization pinned 'q4_0'"), std::string::npos) << r.err;
  r = kvasir("serve --config " + q(write("engine.toml", config(">=99", large_sha, "q8_0"))) +
             " --memory 512MiB --dry-run");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("require.engine"), std::string::npos) << r.err;
}

TEST(CliServeMultiModel, OneMemoryPlanForAllModels) {
  // Enough for the small model alone at this context, not for both.
  Result r = kvasir("serve -m small=" + q(stories()) + " -m large=" + q(large_q8()) +
                    " --ctx 512 --memory 70MiB --port 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot hold the 2 models"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'large'"), std::string::npos) << r.err;
  r = kvasir("serve -m " + q(stories()) + " -m " + q(stories()) + " --memory 1GiB --port 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("two models are named 'stories260K'"), std::string::npos) << r.err;
  r = kvasir("serve -m a=" + q(stories()) + " --route auto --memory 1GiB --port 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("a route needs two models"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
