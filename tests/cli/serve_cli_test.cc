// End-to-end tests of `kvasir plan`, `kvasir serve` and `kvasir bench serve` as a user runs them:
// the real binary, a real listening socket on loopback, SIGTERM for shutdown.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

// `kvasir serve ARGS --port 0` as a child process; the port is read from its startup line.
// The port of the log line "serving 'NAME' on http://HOST:PORT" (0 while not printed yet).
// Plain string search: GCC 12's std::regex trips -Wmaybe-uninitialized under the sanitizers.
int served_port(const std::string& log) {
  const size_t at = log.find("serving '");
  if (at == std::string::npos) return 0;
  const size_t url = log.find(" on http://", at);
  if (url == std::string::npos) return 0;
  const size_t colon = log.find(':', url + 11);
  if (colon == std::string::npos) return 0;
  size_t end = colon + 1;
  while (end < log.size() && std::isdigit(static_cast<unsigned char>(log[end]))) ++end;
  if (end == colon + 1 || end == log.size()) return 0;  // digits not complete yet
  return std::stoi(log.substr(colon + 1, end - colon - 1));
}

class Server {
 public:
  explicit Server(const std::vector<std::string>& args)
      : log_(tmp("serve-" + std::to_string(++count_) + ".log")) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      std::vector<std::string> all{bin(), "serve", "--port", "0"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 600 && port_ == 0; ++i) {  // up to 60 s (a loaded CI machine)
      port_ = served_port(read_file(log_));
      int status = 0;
      if (port_ == 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string log() const { return read_file(log_); }
  // SIGTERM, then the exit status (-1 if it did not exit within 30 s).
  int terminate() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }

 private:
  static inline int count_ = 0;  // each server its own log: never read an earlier one's port
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST(CliPlan, PrintsThePlanAndRefusesOneThatCannotHoldASequence) {
  Result r =
      kvasir("plan -m " + stories() + " --ctx 256 --max-seqs 32 --kv-dtype f16 --memory 128MiB");
  ASSERT_EQ(r.code, 0) << r.err;
  // 5 layers x 4 KV heads x 8 dims x 2 (K and V) x 2 bytes (f16) = 640 bytes per token.
  EXPECT_NE(r.out.find("KV bytes per token        640 B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blocks that fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest batch at ctx      32 sequences of 256 tokens"), std::string::npos)
      << r.out;

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
  EXPECT_NE(metrics->body.find("kvasir_generation_tokens_total 16"), std::string::npos);

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

}  // namespace
}  // namespace kvasir::cli_test
