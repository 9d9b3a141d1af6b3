// Helpers for the server tests: an Engine + HttpServer on an ephemeral loopback port (TestServer,
// and SharedServerTest, a fixture whose suite shares one), small HTTP/SSE clients (cpp-httplib),
// polling with a timeout, and the offline greedy reference (the same loop as
// `kvasir run --temp 0`: SequenceRunner + Sampler + IncrementalDetokenizer). The model is
// test_util::Stories260K (test_util/models.h), loaded once per process.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/engine/sequence_runner.h"
#include "kvasir/model/model.h"
#include "kvasir/sampling/sampler.h"
#include "kvasir/server/http_server.h"
#include "kvasir/tokenizer/incremental_detokenizer.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/thread_pool.h"
#include "kvasir/util/timer.h"
#include "test_util/files.h"
#include "test_util/models.h"
#include "test_util/paths.h"

namespace kvasir::server::testing {

using Json = nlohmann::ordered_json;
using test_util::Stories260K;

inline std::string data_path(const std::string& name) {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/server/data/" + name;
}

inline EngineConfig test_engine_config() {
  EngineConfig ec;
  ec.max_seqs = 64;
  ec.max_batched_tokens = 512;
  ec.max_model_len = 2048;
  ec.threads = 2;
  return ec;
}

inline ServerConfig test_server_config() {
  ServerConfig sc;
  sc.model_name = "stories260K";
  sc.chat_template = test_util::read_file(data_path("simple_chat.jinja"));
  sc.prices.input = 0.15;
  sc.prices.output = 0.60;
  sc.prices.cached_input = 0.075;
  sc.heartbeat_s = 0.2;
  return sc;
}

// An engine and a server listening on 127.0.0.1 at an ephemeral port.
struct TestServer {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<HttpServer> server;
  int port = 0;

  TestServer(const EngineConfig& ec, const ServerConfig& sc) {
    Stories260K& m = Stories260K::get();
    engine = std::make_unique<Engine>(*m.model, m.tok, ec);
    server = std::make_unique<HttpServer>(*engine, m.tok, sc);
    port = server->bind("127.0.0.1", 0);
    server->start();
  }
  ~TestServer() {
    server->stop();
    server.reset();
    engine.reset();
  }
};

// A fixture whose test suite shares one TestServer, started before its first test (with
// test_engine_config() and test_server_config(), unless the suite's own SetUpTestSuite calls
// start() with others) and stopped after its last. Suite is the fixture class itself, so every
// suite has a server of its own: class MySuite : public SharedServerTest<MySuite> {};
template <class Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { start(test_engine_config(), test_server_config()); }
  static void TearDownTestSuite() {
    delete srv;
    srv = nullptr;
  }
  static void start(const EngineConfig& ec, const ServerConfig& sc) {
    srv = new TestServer(ec, sc);
  }
  static int port() { return srv->port; }
  // The value of a metric in the server's registry.
  static double metric(const std::string& name, const std::vector<std::string>& labels = {}) {
    return srv->server->metrics().registry().value(name, labels);
  }
  static inline TestServer* srv = nullptr;
};

struct HttpResult {
  int status = 0;  // 0: no response (connection error)
  std::string body;
  httplib::Headers headers;
  Json json;  // parsed body when it is JSON
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? std::string() : it->second;
  }
};

inline HttpResult to_result(const httplib::Result& r) {
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  out.json = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  return out;
}

inline httplib::Client make_client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  c.set_connection_timeout(10);
  return c;
}

inline HttpResult post(int port, const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
  httplib::Client c = make_client(port);
  return to_result(c.Post(path, headers, body, "application/json"));
}
inline HttpResult post(int port, const std::string& path, const Json& body,
                       const httplib::Headers& headers = {}) {
  return post(port, path, body.dump(), headers);
}
inline HttpResult get(int port, const std::string& path, const httplib::Headers& headers = {}) {
  httplib::Client c = make_client(port);
  return to_result(c.Get(path, headers));
}

struct StreamResult {
  int status = 0;
  std::string raw;
  std::vector<Json> chunks;  // every "data: {...}" event, in order
  bool done = false;         // "data: [DONE]" seen, last
  bool malformed = false;    // an event that is neither JSON nor [DONE], or data after [DONE]
  std::string error;         // the client's error when no response came
};

// Parses complete SSE events out of `buf` (consumed), appending to `r`.
inline void parse_sse(std::string& buf, StreamResult& r) {
  size_t end;
  while ((end = buf.find("\n\n")) != std::string::npos) {
    std::string ev = buf.substr(0, end);
    buf.erase(0, end + 2);
    if (!ev.empty() && ev[0] == ':') continue;  // comment (keep-alive)
    if (ev.rfind("data: ", 0) != 0) {
      r.malformed = true;
      continue;
    }
    std::string data = ev.substr(6);
    if (r.done) r.malformed = true;
    if (data == "[DONE]") {
      r.done = true;
      continue;
    }
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded())
      r.malformed = true;
    else
      r.chunks.push_back(std::move(j));
  }
}

// POSTs a streaming request and reads the SSE stream for as long as keep_reading(what was read
// so far) holds after each piece; then the client hangs up.
inline StreamResult post_stream_while(int port, const std::string& path, const Json& body,
                                      const std::function<bool(const StreamResult&)>& keep_reading,
                                      const httplib::Headers& headers = {}) {
  StreamResult r;
  std::string buf;
  httplib::Client c = make_client(port);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    r.raw.append(data, n);
    buf.append(data, n);
    parse_sse(buf, r);
    return keep_reading(r);
  };
  auto res = c.send(req);
  if (!res) r.error = httplib::to_string(res.error());
  if (res && r.status == 0) r.status = res->status;
  if (res && r.raw.empty()) r.raw = res->body;
  return r;
}

// POSTs a streaming request and reads the SSE stream; with stop_after_chunks >= 0 the client
// hangs up after that many data events.
inline StreamResult post_stream(int port, const std::string& path, const Json& body,
                                int stop_after_chunks = -1, const httplib::Headers& headers = {}) {
  return post_stream_while(
      port, path, body,
      [&](const StreamResult& r) {
        return stop_after_chunks < 0 || static_cast<int>(r.chunks.size()) < stop_after_chunks;
      },
      headers);
}

// Greedy generation with the offline path `kvasir run` uses, on its own Model instance.
struct GreedyReference {
  std::vector<int32_t> tokens;
  std::string text;
  bool stopped_on_eos = false;
};
inline GreedyReference greedy_reference(const std::vector<int32_t>& prompt, int max_tokens,
                                        bool strip_leading_space) {
  static std::unique_ptr<Model> model = Model::load(test_util::stories260k_path());
  const Tokenizer& tok = Stories260K::get().tok;
  ThreadPool pool(1);
  SequenceRunnerOptions ro;
  ro.max_ctx = 2048;
  SequenceRunner runner(*model, pool, ro);
  SamplingParams sp;
  sp.temperature = 0;
  Sampler sampler(sp, tok.n_vocab());
  sampler.accept_prompt(prompt);
  IncrementalDetokenizer::Options dopt;
  dopt.strip_leading_space = strip_leading_space;
  IncrementalDetokenizer detok(tok, dopt);
  GreedyReference out;
  auto logits = runner.feed(prompt);
  for (int i = 0; i < max_tokens; ++i) {
    int32_t t = sampler.sample(logits.data(), tok.n_vocab());
    if (sp.stops_on_token(t, tok.eog_ids())) {
      out.stopped_on_eos = true;
      break;
    }
    sampler.accept(t);
    out.tokens.push_back(t);
    out.text += detok.push(t);
    if (i + 1 < max_tokens) logits = runner.feed(std::span(&t, 1));
  }
  out.text += detok.flush();
  return out;
}

// Polls `done` every `poll` until it holds (true) or timeout_s has passed (false).
inline bool wait_for(const std::function<bool()>& done, double timeout_s,
                     std::chrono::milliseconds poll) {
  const double t0 = now_seconds();
  while (now_seconds() - t0 < timeout_s) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return false;
}

// Polls until the engine is idle and every KV block is back in the pool (or the timeout).
inline bool wait_blocks_free(Engine& e, double timeout_s) {
  return wait_for(
      [&] {
        EngineStats s = e.stats();
        return s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0;
      },
      timeout_s, std::chrono::milliseconds(10));
}

}  // namespace kvasir::server::testing
