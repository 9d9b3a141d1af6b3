// End-to-end tests of `kvasir plan`, `kvasir serve` and `kvasir bench serve` as a user runs them:
// the real binary, a real listening socket on loopback, SIGTERM for shutdown.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
#include "serve_process.h"
#include "test_util/raw_socket.h"

namespace kvasir::cli_test {
namespace {

TEST(CliPlan, PrintsThePlanAndRefusesOneThatCannotHoldASequence) {
  Result r =
      kvasir("plan -m " + stories() + " --ctx 256 --max-seqs 32 --kv-dtype f16 --memory 128MiB");
  ASSERT_EQ(r.code, 0) << r.err;
  // 5 layers x 4 KV heads x 8 dims x 2 (K and V) x 2 bytes (f16) = 640 bytes per token.
  EXPECT_NE(r.out.find("KV bytes per token        5 layers x 4 KV heads x (K 16 B (f16: 8 x 2 B) "
                       "+ V 16 B (f16: 8 x 2 B)) = 640 B"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("blocks that fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest batch at ctx      32 sequences of 256 tokens"), std::string::npos)
      << r.out;

  // Quantized: int8 rows are 8 codes + a 2-byte scale; llama.cpp's -ctk/-ctv name K and V apart.
  r = kvasir("plan -m " + stories() + " --ctx 256 --max-seqs 32 --kv-dtype int8 --memory 128MiB");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(K 10 B (int8: 8 B codes + 2 B scale) + V 10 B (int8: 8 B codes + 2 B "
                       "scale)) = 400 B (62.5% of f16's 640 B)"),
            std::string::npos)
      << r.out;
  r = kvasir("plan -m " + stories() + " --ctx 256 -ctk q8_0 -ctv q4_0 --memory 128MiB");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("KV k=int8,v=int4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("V 7 B (int4: 4 B codes + 1 x 3 B scale and zero point)) = 340 B"),
            std::string::npos)
      << r.out;
  r = kvasir("plan -m " + stories() + " --ctx 256 --cache-type-v q5_1 --memory 128MiB");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--cache-type-v: unknown KV cache dtype 'q5_1' (expected f16, f32, int8"),
            std::string::npos)
      << r.err;

  r = kvasir("plan -m " + stories() + " --ctx 256 --max-seqs 32 --memory 1MiB");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot hold one sequence of 256 tokens"), std::string::npos) << r.err;

  r = kvasir("plan -m " + stories() + " --memory lots");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--memory"), std::string::npos) << r.err;
}

TEST(CliServe, ServesCompletionsAndMetricsThenStopsOnSigterm) {
  Server s({"-m", stories(), "--memory", "256MiB", "-t", "1", "--price-input", "0.15",
            "--price-output", "0.60"});
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(nlohmann::json::parse(models->body)["data"][0]["id"], "stories260K");

  auto res = c.Post(
      "/v1/completions",
      R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":16,"temperature":0})",
      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto j = nlohmann::json::parse(res->body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  // The greedy continuation of the published sample starts the same way.
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind(", there was a little girl", 0), 0u)
      << res->body;
  // 5 prompt tokens x 0.15 + 16 x 0.60 USD per 1M tokens.
  EXPECT_NEAR(j["usage"]["cost_usd"].get<double>(), (5 * 0.15 + 16 * 0.60) / 1e6, 1e-12);

  auto bad = c.Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvasir_generation_tokens_total{model=\"stories260K\"} 16"),
            std::string::npos);

  EXPECT_EQ(s.terminate(), 0) << s.log();
  EXPECT_NE(s.log().find("shutting down"), std::string::npos) << s.log();
}

TEST(CliServe, BadOptionsAreClearErrors) {
  Result r = kvasir("serve -m " + stories() + " --kv-dtype q9");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-dtype"), std::string::npos) << r.err;
  r = kvasir("serve -m /nonexistent/model.gguf --memory 1GiB");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
}

TEST(CliBenchServe, DrivesTheServerAndReportsLatencies) {
  Server s({"-m", stories(), "--memory", "256MiB", "-t", "1"});
  ASSERT_GT(s.port(), 0) << s.log();
  Result r = kvasir("bench serve --port " + std::to_string(s.port()) +
                    " --requests 12 --concurrency 4 --prompt-min 8 --prompt-max 40 --output-min 4"
                    " --output-max 24 --shared-prefix 32 --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["completed"], 12);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_GT(j["output_tok_per_s"].get<double>(), 0);
  // Outputs are exactly max_tokens long (ignore_eos): 12 requests of 4..24 tokens.
  EXPECT_GE(j["output_tokens"].get<int>(), 12 * 4);
  EXPECT_LE(j["output_tokens"].get<int>(), 12 * 24);
  // Every prompt starts with the same 32 tokens: later requests find its 2 full blocks cached.
  EXPECT_GT(j["cached_tokens"].get<int>(), 0);
  for (const char* k : {"ttft_s", "tpot_s", "itl_s", "e2e_s"}) {
    EXPECT_GT(j[k]["p50"].get<double>(), 0) << k;
    EXPECT_LE(j[k]["p50"].get<double>(), j[k]["p99"].get<double>()) << k;
  }

  // No server there: a clear failure, not a hang.
  s.terminate();
  r = kvasir("bench serve --port " + std::to_string(s.port()) + " --requests 2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot list models"), std::string::npos) << r.err;
}

// The README's serving example, as written: its serve line's flags (the port aside: the test
// takes a free one; [optional] parts left out) on the README's own model, then its chat body.
struct ReadmeExample {
  std::vector<std::string> serve_args;  // after "$K serve"
  std::string chat_path, chat_body, content_type;
};

ReadmeExample readme_example() {
  const std::string readme = read_file(std::string(KVASIR_SOURCE_DIR) + "/README.md");
  const size_t use = readme.find("\n## Use\n");
  EXPECT_NE(use, std::string::npos);
  const std::string section = readme.substr(use, readme.find("\n## ", use + 1) - use);
  ReadmeExample ex;
  // The serve line, with its continuation lines.
  size_t at = section.find("\n$K serve ");
  EXPECT_NE(at, std::string::npos) << section;
  std::string line;
  for (size_t p = at + 1;;) {
    size_t e = section.find('\n', p);
    std::string l = section.substr(p, e - p);
    const bool more = !l.empty() && l.find_last_not_of(' ') != std::string::npos &&
                      l[l.find_last_not_of(' ')] == '\\';
    if (more) l = l.substr(0, l.find_last_not_of(' '));
    line += l + " ";
    if (!more) break;
    p = e + 1;
  }
  if (size_t hash = line.find('#'); hash != std::string::npos) line = line.substr(0, hash);
  std::string words;
  for (size_t i = 0, depth = 0; i < line.size(); ++i) {  // drop [optional] parts
    if (line[i] == '[') depth++;
    if (depth == 0) words += line[i];
    if (line[i] == ']') depth--;
  }
  std::istringstream ws(words);
  std::string w;
  ws >> w >> w;  // "$K serve"
  while (ws >> w) {
    if (w == "\\") continue;
    ex.serve_args.push_back(w);
  }
  // The curl line after it: URL path and -d body.
  const size_t curl = section.find("\ncurl ", at);
  EXPECT_NE(curl, std::string::npos) << section;
  const std::string c = section.substr(curl + 1, section.find('\n', curl + 1) - curl - 1);
  const size_t path = c.find("/v1/");
  ex.chat_path = c.substr(path, c.find(' ', path) - path);
  const size_t body = c.find("-d '") + 4;
  ex.chat_body = c.substr(body, c.find('\'', body) - body);
  // curl -d sends a form unless the line sets Content-Type.
  ex.content_type = "application/x-www-form-urlencoded";
  if (size_t h = c.find("Content-Type: "); h != std::string::npos)
    ex.content_type = c.substr(h + 14, c.find_first_of("'\"", h) - h - 14);
  return ex;
}

TEST(CliServe, TheReadmeServingExampleWorksAsWritten) {
  ReadmeExample ex = readme_example();
  std::vector<std::string> args;
  bool has_model = false;
  for (size_t i = 0; i < ex.serve_args.size(); ++i) {
    const std::string& a = ex.serve_args[i];
    if (a == "--port" && i + 1 < ex.serve_args.size()) {  // Server passes --port 0
      ++i;
      continue;
    }
    // The README's model path is relative to the repository; this test may run elsewhere.
    if (a.find("stories260K.gguf") != std::string::npos) {
      args.push_back(stories());
      has_model = true;
      continue;
    }
    args.push_back(a);
  }
  ASSERT_TRUE(has_model) << "the README's serve line should use the README's model";
  Server s(args);
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(120);
  auto res = c.Post(ex.chat_path, ex.chat_body, ex.content_type);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << ex.chat_path << " " << ex.chat_body << "\n" << res->body;
  EXPECT_NE(res->body.find("data: "), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("chat.completion.chunk"), std::string::npos) << res->body;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(CliServe, PositionalModelAndInlineApiKeysWithTheKeyFile) {
  const std::string keys = tmp("keys.txt");
  std::ofstream(keys) << "# keys\nsk-from-file\n";
  // vLLM's `serve MODEL`; one key on the command line, one from the environment, one in a file.
  Server s({stories(), "--memory", "256MiB", "-t", "1", "--chat-template", "chatml", "--api-key",
            "sk-inline-one", "--api-key-file", keys},
           {"KVASIR_MAX_SEQS=4"});
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  const std::string body = R"({"prompt":"Once","max_tokens":2,"temperature":0})";
  auto no_key = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  for (const char* key : {"sk-inline-one", "sk-from-file"}) {
    auto res = c.Post("/v1/completions", {{"Authorization", std::string("Bearer ") + key}}, body,
                      "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << key << ": " << res->body;
  }
  const std::string log = s.log();
  EXPECT_NE(log.find("api_keys=2"), std::string::npos) << log;
  EXPECT_NE(log.find("max_seqs=4"), std::string::npos) << log;  // from KVASIR_MAX_SEQS
  EXPECT_NE(log.find("chat_template=\"chatml (built-in)\""), std::string::npos) << log;
  EXPECT_EQ(log.find("sk-inline-one"), std::string::npos) << "a key was printed:\n" << log;
  EXPECT_EQ(log.find("sk-from-file"), std::string::npos) << "a key was printed:\n" << log;
  EXPECT_EQ(s.terminate(), 0) << log;
}

TEST(CliServe, ApiKeyFromTheEnvironment) {
  Server s({"-m", stories(), "--memory", "256MiB", "-t", "1"}, {"KVASIR_API_KEY=sk-env-key"});
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  const std::string body = R"({"prompt":"Once","max_tokens":2,"temperature":0})";
  auto res = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res =
      c.Post("/v1/completions", {{"Authorization", "Bearer sk-env-key"}}, body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(s.log().find("sk-env-key"), std::string::npos) << s.log();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CliServe, ASecondServerOnATakenPortExitsAtOnceNamingThePort) {
  Server a({"-m", stories(), "--memory", "256MiB", "-t", "1"});
  ASSERT_GT(a.port(), 0) << a.log();
  const auto t0 = std::chrono::steady_clock::now();
  Result r =
      kvasir("serve -m " + stories() + " --memory 256MiB -t 1 --port " + std::to_string(a.port()));
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(":" + std::to_string(a.port())), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("memory plan"), std::string::npos) << "it loaded the model first:\n"
                                                          << r.err;
  // With --reuse-port on both, the second one binds (the operator asked for sharing).
  Server b({"-m", stories(), "--memory", "256MiB", "-t", "1", "--reuse-port"});
  ASSERT_GT(b.port(), 0) << b.log();
  Server c({"-m", stories(), "--memory", "256MiB", "-t", "1", "--reuse-port", "--port",
            std::to_string(b.port())});
  EXPECT_EQ(c.port(), b.port()) << c.log();
}

// SIGTERM with --shutdown-grace 1 while streams run: one client reads, one never reads. The
// server exits within grace + 1 s and the reading client's stream ends with an error event
// (code server_shutting_down) and [DONE], never mid-chunk.
TEST(CliServe, SigtermExitsWithinTheGraceWhateverTheClientsDo) {
  Server s({"-m", stories(), "--memory", "256MiB", "-t", "1", "--shutdown-grace", "1", "--max-seqs",
            "16", "--log-format", "json"});
  ASSERT_GT(s.port(), 0) << s.log();
  // 16 choices of 2000 tokens each: far more than fits in the grace period on one thread.
  const std::string body =
      R"({"prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true,"stream":true,"n":16})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  test_util::RawSocket reader(s.port()), sleeper(s.port(), 4096);
  ASSERT_TRUE(reader.send_all(req));
  ASSERT_TRUE(sleeper.send_all(req));
  std::string got;
  std::thread t([&] { got = reader.read_until("", 30); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  const int code = s.terminate();
  const double took = seconds_since(t0);
  t.join();
  EXPECT_EQ(code, 0) << s.log();
  EXPECT_LT(took, 1.0 + 1.0) << s.log();
  EXPECT_NE(got.find("server_shutting_down"), std::string::npos) << got.substr(0, 2000);
  // The body is chunked: the last chunk is the terminating 0-length one, after [DONE].
  const size_t done = got.rfind("data: [DONE]");
  ASSERT_NE(done, std::string::npos) << got.substr(got.size() > 2000 ? got.size() - 2000 : 0);
  EXPECT_NE(got.find("\r\n0\r\n\r\n", done), std::string::npos) << "cut mid-stream";
  // Every log line is JSON with a timestamp and a level.
  std::istringstream lines(s.log());
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("msg")) << line;
  }
  EXPECT_GT(n, 3);
}

}  // namespace
}  // namespace kvasir::cli_test
