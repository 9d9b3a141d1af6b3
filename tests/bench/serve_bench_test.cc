// `kvasir bench serve` against a stub OpenAI server (cpp-httplib): a server that gives up in the
// middle of a stream (an `error` event, as llama-server sends when its output parser fails)
// fails the request instead of counting its partial output, and banned token ids reach the
// server as logit_bias.
#include "kvasir/bench/serve_bench.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kvasir::bench {
namespace {

// Streams `max_tokens` tokens and a usage chunk; every `fail_every`-th request (1-based) sends an
// error event after its second token instead.
class StubServer {
 public:
  explicit StubServer(int fail_every) : fail_every_(fail_every) {
    svr_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"stub"}]})", "application/json");
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const auto body = nlohmann::json::parse(req.body);
      const int n = ++count_;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bodies_.push_back(body);
      }
      const int max_tokens = body.value("max_tokens", 1);
      const bool fail = fail_every_ > 0 && n % fail_every_ == 0;
      std::string out;
      for (int i = 0; i < max_tokens; ++i) {
        if (fail && i == 2) {
          out += R"(data: {"error":{"code":500,"message":"output does not parse"}})"
                 "\n\n";
          break;
        }
        out += R"(data: {"choices":[{"text":"x","index":0,"finish_reason":null}]})"
               "\n\n";
      }
      if (!fail) {
        out += "data: " +
               nlohmann::json{{"choices", nlohmann::json::array()},
                              {"usage",
                               {{"prompt_tokens", body["prompt"].size()},
                                {"completion_tokens", max_tokens}}}}
                   .dump() +
               "\n\n";
      }
      out += "data: [DONE]\n\n";
      res.set_content(out, "text/event-stream");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StubServer() {
    svr_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
  int fail_every_;
  std::atomic<int> count_{0};
  std::mutex mu_;
  std::vector<nlohmann::json> bodies_;
};

ServeBenchOptions options(int port) {
  ServeBenchOptions o;
  o.port = port;
  o.requests = 6;
  o.concurrency = 1;  // requests reach the stub in order
  o.prompt_min = 4;
  o.prompt_max = 8;
  o.output_min = 5;
  o.output_max = 5;
  o.timeout_s = 30;
  return o;
}

TEST(ServeBench, AnErrorEventInTheStreamFailsTheRequest) {
  StubServer stub(3);  // requests 3 and 6 give up after 2 tokens
  const ServeBenchResult r = run_serve_bench(options(stub.port()));
  EXPECT_EQ(r.completed, 4);
  EXPECT_EQ(r.failed, 2);
  EXPECT_EQ(r.output_tokens, 4 * 5);  // the failed requests' partial output is not counted
  EXPECT_NE(r.first_error.find("output does not parse"), std::string::npos) << r.first_error;
}

TEST(ServeBench, BannedTokensAreSentAsLogitBias) {
  StubServer stub(0);
  ServeBenchOptions o = options(stub.port());
  o.ban_lo = 3;
  o.ban_hi = 258;
  const ServeBenchResult r = run_serve_bench(o);
  EXPECT_EQ(r.failed, 0);
  const auto bodies = stub.bodies();
  ASSERT_EQ(bodies.size(), 6u);
  for (const auto& b : bodies) {
    ASSERT_TRUE(b.contains("logit_bias"));
    EXPECT_EQ(b["logit_bias"].size(), 256u);
    EXPECT_EQ(b["logit_bias"]["3"], -100);
    EXPECT_EQ(b["logit_bias"]["258"], -100);
    EXPECT_FALSE(b["logit_bias"].contains("259"));
    EXPECT_EQ(b["ignore_eos"], true);
  }
}

TEST(ServeBench, NoLogitBiasUnlessAsked) {
  StubServer stub(0);
  const ServeBenchResult r = run_serve_bench(options(stub.port()));
  EXPECT_EQ(r.completed, 6);
  for (const auto& b : stub.bodies()) EXPECT_FALSE(b.contains("logit_bias"));
}

}  // namespace
}  // namespace kvasir::bench
