// Streaming under load: 64 concurrent SSE clients all complete with a well-formed stream ending in
// [DONE] and the same greedy text as a request alone; a client that hangs up mid-stream gets its
// engine request aborted and every KV block returns to the pool.
#include <gtest/gtest.h>

#include <thread>

#include "server_test_util.h"

namespace kvasir::server::testing {
namespace {

class ServerStream : public SharedServerTest<ServerStream> {};

std::string stream_text(const StreamResult& s, bool chat) {
  std::string text;
  for (const Json& ch : s.chunks) {
    if (ch["choices"].empty()) continue;
    const Json& c = ch["choices"][0];
    if (chat) {
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    } else {
      text += c["text"].get<std::string>();
    }
  }
  return text;
}

TEST_F(ServerStream, SixtyFourConcurrentClients) {
  const Tokenizer& tok = Stories260K::get().tok;
  const std::string prompt = "Once upon a time";
  GreedyReference ref = greedy_reference(tok.encode(prompt, true, true), 24, false);
  constexpr int kClients = 64;
  std::vector<StreamResult> results(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      const bool chat = i % 4 == 3;  // a quarter of them on the chat route
      Json req{{"max_tokens", 24},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
      if (chat)
        req["messages"] = Json::array({{{"role", "user"}, {"content", prompt}}});
      else
        req["prompt"] = prompt;
      results[static_cast<size_t>(i)] =
          post_stream(srv->port, chat ? "/v1/chat/completions" : "/v1/completions", req);
    });
  }
  for (auto& t : threads) t.join();
  std::string chat_text;
  for (int i = 0; i < kClients; ++i) {
    const StreamResult& r = results[static_cast<size_t>(i)];
    SCOPED_TRACE(i);
    ASSERT_EQ(r.status, 200) << r.error << " " << r.raw;
    EXPECT_TRUE(r.done);
    EXPECT_FALSE(r.malformed) << r.raw;
    ASSERT_FALSE(r.chunks.empty());
    EXPECT_TRUE(r.chunks.back()["choices"].empty());  // the usage chunk
    EXPECT_GT(r.chunks.back()["usage"]["completion_tokens"].get<int>(), 0);
    const bool chat = i % 4 == 3;
    const std::string text = stream_text(r, chat);
    if (!chat) {
      // Batch invariance: the same greedy text as the request run alone.
      EXPECT_EQ(text, ref.text);
    } else {
      if (chat_text.empty()) chat_text = text;
      EXPECT_EQ(text, chat_text);
    }
  }
  EXPECT_TRUE(wait_blocks_free(*srv->engine, 10));
  EXPECT_EQ(srv->server->in_flight(), 0);
}

TEST_F(ServerStream, DisconnectAbortsAndFreesBlocks) {
  const double aborts_before = metric("kvasir_requests_total", {"stories260K", "abort"});
  const uint64_t generated_before = srv->engine->stats().generation_tokens;
  const Tokenizer& tok = Stories260K::get().tok;
  // 2000 tokens take far longer than noticing the hang-up does.
  Json req{{"prompt", Json::array({tok.bos_id()})},
           {"max_tokens", 2000},
           {"temperature", 0},
           {"ignore_eos", true},
           {"stream", true}};
  StreamResult r = post_stream(srv->port, "/v1/completions", req, /*stop_after_chunks=*/3);
  EXPECT_EQ(r.status, 200);
  EXPECT_GE(r.chunks.size(), 3u);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(wait_blocks_free(*srv->engine, 10)) << srv->engine->stats().kv_blocks_used;
  wait_for([&] { return srv->server->in_flight() == 0; }, 5, std::chrono::milliseconds(5));
  EXPECT_EQ(srv->server->in_flight(), 0);
  EXPECT_EQ(metric("kvasir_requests_total", {"stories260K", "abort"}), aborts_before + 1);
  // Far fewer than 2000 tokens were generated before the abort.
  EXPECT_LT(srv->engine->stats().generation_tokens - generated_before, 2000u);
  // The server still serves.
  EXPECT_EQ(post(srv->port, "/v1/completions", Json{{"prompt", "Hi"}, {"max_tokens", 2}}).status,
            200);
}

TEST_F(ServerStream, DisconnectOfOneChoiceAbortsAll) {
  const double aborts_before = metric("kvasir_requests_total", {"stories260K", "abort"});
  Json req{{"prompt", "Once"},
           {"max_tokens", 1500},
           {"temperature", 0.8},
           {"seed", 1},
           {"ignore_eos", true},
           {"stream", true},
           {"n", 4}};
  StreamResult r = post_stream(srv->port, "/v1/completions", req, 5);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(wait_blocks_free(*srv->engine, 10)) << srv->engine->stats().kv_blocks_used;
  wait_for([&] { return srv->server->in_flight() == 0; }, 5, std::chrono::milliseconds(5));
  // All four choices were aborted, not run to their 1500 tokens.
  EXPECT_EQ(metric("kvasir_requests_total", {"stories260K", "abort"}), aborts_before + 4);
}

// A non-streaming client that gives up (its read timeout) aborts its generation too.
TEST_F(ServerStream, NonStreamingClientThatHangsUpIsAborted) {
  const double aborts_before = metric("kvasir_requests_total", {"stories260K", "abort"});
  const uint64_t generated_before = srv->engine->stats().generation_tokens;
  const Tokenizer& tok = Stories260K::get().tok;
  Json req{{"prompt", Json::array({tok.bos_id()})},
           {"max_tokens", 2000},
           {"temperature", 0},
           {"ignore_eos", true},
           {"n", 2}};
  {
    httplib::Client c("127.0.0.1", srv->port);
    c.set_read_timeout(0, 300000);  // 0.3 s, far less than 2 x 2000 tokens take
    auto res = c.Post("/v1/completions", req.dump(), "application/json");
    EXPECT_FALSE(res);  // timed out: the client closes its socket
  }
  EXPECT_TRUE(wait_blocks_free(*srv->engine, 10)) << srv->engine->stats().kv_blocks_used;
  wait_for([&] { return srv->server->in_flight() == 0; }, 5, std::chrono::milliseconds(5));
  EXPECT_EQ(srv->server->in_flight(), 0);
  EXPECT_EQ(metric("kvasir_requests_total", {"stories260K", "abort"}), aborts_before + 2);
  EXPECT_LT(srv->engine->stats().generation_tokens - generated_before, 4000u);
  EXPECT_EQ(post(srv->port, "/v1/completions", Json{{"prompt", "Hi"}, {"max_tokens", 2}}).status,
            200);
}

}  // namespace
}  // namespace kvasir::server::testing
