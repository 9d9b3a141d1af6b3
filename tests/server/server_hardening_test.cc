// The server against clients that misbehave or attack it (issue 10's findings), through raw
// sockets where an HTTP client library would hide the bytes: port sharing, header and body
// limits (before auth), slowloris, pipelining, half-closed clients, keep-alive latency, streams
// nobody reads, shutdown with streams open, request ids, CORS, TLS, tokenization endpoints and
// oversized prompts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvasir/util/error.h"
#include "kvasir/util/log.h"
#include "server_test_util.h"
#include "test_util/raw_socket.h"

namespace kvasir::server::testing {
namespace {

// Resident set size of this process (the server runs in it), in bytes.
int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

bool sanitized() {
  return std::getenv("KVASIR_SANITIZER_RUN") != nullptr;
}

using Raw = test_util::RawSocket;

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

int count(const std::string& s, std::string_view what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

std::string get_request(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

ServerConfig hardened_config() {
  ServerConfig sc = test_server_config();
  sc.transport.header_timeout_s = 1.0;
  sc.transport.body_timeout_s = 2.0;
  sc.transport.write_timeout_s = 1.0;
  sc.transport.max_body_bytes = size_t{1} << 20;
  return sc;
}

TEST(Hardening, ASecondServerOnATakenPortFailsAtBindNamingIt) {
  TestServer a(test_engine_config(), test_server_config());
  Stories260K& m = Stories260K::get();
  Engine e(*m.model, m.tok, test_engine_config());
  HttpServer b(e, m.tok, test_server_config());
  try {
    b.bind("127.0.0.1", a.port);
    FAIL() << "a second server bound a taken port";
  } catch (const Error& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find(std::to_string(a.port)), std::string::npos) << what;
    EXPECT_NE(what.find("in use"), std::string::npos) << what;
  }
  // Every request reaches the first server.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(get(a.port, "/health").status, 200);
}

TEST(Hardening, PortSharingIsOptIn) {
  ServerConfig sc = test_server_config();
  sc.transport.reuse_port = true;
  TestServer a(test_engine_config(), sc);
  Stories260K& m = Stories260K::get();
  Engine e(*m.model, m.tok, test_engine_config());
  HttpServer b(e, m.tok, sc);
  EXPECT_EQ(b.bind("127.0.0.1", a.port), a.port) << "--reuse-port lets both bind";
}

TEST(Hardening, HugeHeadsAreRefusedWithoutBeingBuffered) {
  TestServer s(test_engine_config(), hardened_config());
  Raw c(s.port);
  ASSERT_TRUE(c.ok());
  const int64_t rss0 = rss_bytes();
  std::string line = "X-Filler: " + std::string(1000, 'a') + "\r\n";
  ASSERT_TRUE(c.send_all("GET /health HTTP/1.1\r\nHost: x\r\n"));
  size_t sent = 0;
  while (sent < (size_t{300} << 20) && c.send_all(line)) sent += line.size();
  EXPECT_LT(sent, size_t{64} << 20) << "the server kept reading headers";
  EXPECT_LT(rss_bytes() - rss0, int64_t{64} << 20);
  Raw d(s.port);
  ASSERT_TRUE(d.send_all("GET /health HTTP/1.1\r\nHost: x\r\n" + std::string(70000, 'a') + "\r\n"));
  const std::string r = d.read_until("\r\n\r\n", 5);
  EXPECT_EQ(status_of(r), 431) << r;
}

TEST(Hardening, BodiesAreCheckedAfterAuthAndAgainstTheLimitChunkedOrNot) {
  ServerConfig sc = hardened_config();
  sc.api_keys = ApiKeys({"secret-key"});
  TestServer s(test_engine_config(), sc);
  const int64_t rss0 = rss_bytes();
  {
    // No key: 401 at the head, the chunked body never read.
    Raw c(s.port);
    ASSERT_TRUE(
        c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                   "chunked\r\nContent-Type: application/json\r\n\r\n"));
    const std::string r = c.read_until("\r\n\r\n", 5);
    EXPECT_EQ(status_of(r), 401) << r;
    std::string chunk = "100000\r\n" + std::string(0x100000, 'x') + "\r\n";
    size_t sent = 0;
    while (sent < (size_t{1000} << 20) && c.send_all(chunk)) sent += chunk.size();
    EXPECT_LT(sent, size_t{64} << 20) << "the server read an unauthorized body";
  }
  {
    // With a key: a chunked body past max_body_bytes is 413 as soon as it passes the limit.
    Raw c(s.port);
    ASSERT_TRUE(
        c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                   "secret-key\r\nTransfer-Encoding: chunked\r\n\r\n"));
    std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";
    size_t sent = 0;
    while (sent < (size_t{200} << 20) && c.send_all(chunk)) sent += chunk.size();
    EXPECT_LT(sent, size_t{64} << 20);
    const std::string r = c.read_until("\r\n\r\n", 5);
    EXPECT_EQ(status_of(r), 413) << r.substr(0, 200);
  }
  EXPECT_LT(rss_bytes() - rss0, int64_t{64} << 20);
  {
    // A declared length over the limit: 413 at once, no body needed.
    Raw c(s.port);
    const double t0 = now_seconds();
    ASSERT_TRUE(
        c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                   "secret-key\r\nContent-Length: 1000000000000\r\n\r\n"));
    const std::string r = c.read_until("\r\n\r\n", 5);
    EXPECT_EQ(status_of(r), 413) << r;
    EXPECT_LT(now_seconds() - t0, 1.0);
  }
  {
    Raw c(s.port);
    ASSERT_TRUE(
        c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"));
    EXPECT_EQ(status_of(c.read_until("\r\n\r\n", 5)), 400);
  }
}

TEST(Hardening, SlowClientsHoldNothingAndAreCutAtTheHeaderDeadline) {
  TestServer s(test_engine_config(), hardened_config());
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 400; ++i) {
    auto c = std::make_unique<Raw>(s.port);
    ASSERT_TRUE(c->ok());
    ASSERT_TRUE(c->send_all("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "));
    slow.push_back(std::move(c));
  }
  // While they trickle, a normal request is answered at once.
  for (int round = 0; round < 3; ++round) {
    for (auto& c : slow) c->send_all("a");
    const double t0 = now_seconds();
    EXPECT_EQ(get(s.port, "/health").status, 200);
    EXPECT_LT(now_seconds() - t0, 1.0);
  }
  // Trickling does not extend the deadline for the whole head.
  int closed = 0;
  for (auto& c : slow) closed += c->closed_within(3.0);
  EXPECT_EQ(closed, 400);
}

TEST(Hardening, PipelinedRequestsAreAllAnsweredInOrder) {
  TestServer s(test_engine_config(), test_server_config());
  Raw c(s.port);
  ASSERT_TRUE(
      c.send_all(get_request("/health") + get_request("/v1/models") + get_request("/nope")));
  const std::string r = c.read_until("Unknown route", 5);
  EXPECT_EQ(count(r, "HTTP/1.1 200"), 2) << r;
  EXPECT_EQ(count(r, "HTTP/1.1 404"), 1) << r;
  EXPECT_LT(r.find("\"status\""), r.find("\"object\":\"list\"")) << "in order";
}

TEST(Hardening, AHalfClosedClientStillGetsItsAnswer) {
  TestServer s(test_engine_config(), test_server_config());
  Raw c(s.port);
  ASSERT_TRUE(c.send_all(get_request("/health", "Connection: close\r\n")));
  ::shutdown(c.fd, SHUT_WR);
  const std::string r = c.read_until("", 5);
  EXPECT_EQ(status_of(r), 200) << r;
  Raw d(s.port);
  const Json body{{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};
  const std::string b = body.dump();
  ASSERT_TRUE(
      d.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: "
                 "close\r\nContent-Length: " +
                 std::to_string(b.size()) + "\r\n\r\n" + b));
  ::shutdown(d.fd, SHUT_WR);
  const std::string r2 = d.read_until("", 10);
  EXPECT_NE(status_of(r2), 0) << "no answer at all";
}

TEST(Hardening, KeptAliveRequestsAreNotDelayedByNagle) {
  TestServer s(test_engine_config(), test_server_config());
  httplib::Client c = make_client(s.port);
  c.set_keep_alive(true);
  ASSERT_EQ(c.Get("/health")->status, 200);
  std::vector<double> dt;
  for (int i = 0; i < 5; ++i) {
    const double t0 = now_seconds();
    ASSERT_EQ(c.Get("/health")->status, 200);
    dt.push_back(now_seconds() - t0);
  }
  std::sort(dt.begin(), dt.end());
  // Nagle with delayed ACKs holds a second small response ~40 ms; TCP_NODELAY answers in well
  // under a millisecond here (the bound leaves room for a slow sanitizer build).
  EXPECT_LT(dt[2], 0.03);
}

TEST(Hardening, AStreamNobodyReadsIsCutOffAndItsKVFreed) {
  ServerConfig sc = hardened_config();
  sc.transport.send_buffer_bytes = 4096;
  sc.max_unread_outputs = 64;
  TestServer s(test_engine_config(), sc);
  Raw c(s.port, /*rcvbuf=*/4096);
  const Json body{{"prompt", "Once upon a time"},
                  {"max_tokens", 1900},
                  {"ignore_eos", true},
                  {"stream", true},
                  {"logprobs", 5}};
  const std::string b = body.dump();
  ASSERT_TRUE(c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                         std::to_string(b.size()) + "\r\n\r\n" + b));
  // Never read. The server's writes stall; the outputs behind them queue up to the bound, then
  // the generation is aborted (its KV freed) and the stalled write times out and closes.
  const double t0 = now_seconds();
  ASSERT_TRUE(wait_for(
      [&] { return s.engine->stats().generation_tokens > 0 && s.server->in_flight() == 0; }, 20.0,
      std::chrono::milliseconds(5)))
      << "never cut off";
  s.engine->wait_idle();
  EXPECT_EQ(s.engine->stats().kv_blocks_used, 0);
  // 64 queued outputs plus what the socket buffers took (a few dozen events of ~400 bytes).
  EXPECT_LT(s.engine->stats().generation_tokens, 400u) << "the engine ran on for nobody";
  // The stalled write gives up after write_timeout_s (1 s) and the connection closes: what the
  // client reads afterwards is the start of the stream, never its end. (A client that resumes
  // reading before the timeout gets the error event that ends the stream instead.)
  std::this_thread::sleep_for(std::chrono::duration<double>(t0 + 2.5 - now_seconds()));
  const double t1 = now_seconds();
  const std::string got = c.read_until("", 10);
  EXPECT_LT(now_seconds() - t1, 5.0) << "the connection stayed open";
  EXPECT_NE(got.find("200 OK"), std::string::npos);
  EXPECT_EQ(got.find("[DONE]"), std::string::npos) << "the whole stream was buffered";
}

TEST(Hardening, StopEndsEveryStreamWithAFinalEventWithinTheDrainTime) {
  auto s = std::make_unique<TestServer>(test_engine_config(), hardened_config());
  const int port = s->port;
  const Json body{
      {"prompt", "Once upon a time"}, {"max_tokens", 1900}, {"ignore_eos", true}, {"stream", true}};
  const std::string b = body.dump();
  auto request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(b.size()) +
      "\r\n\r\n" + b;
  Raw reader(port), idle(port);
  ASSERT_TRUE(reader.send_all(request));
  ASSERT_TRUE(idle.send_all(request));  // this one never reads
  ASSERT_NE(reader.read_until("data: ", 10).find("data: "), std::string::npos);
  std::string rest;
  std::thread t([&] { rest = reader.read_until("data: [DONE]", 10); });
  const double t0 = now_seconds();
  s->server->stop(0.5);
  const double took = now_seconds() - t0;
  t.join();
  EXPECT_LT(took, 0.5 + 1.0) << "stop() waited on a client";
  EXPECT_NE(rest.find("server_shutting_down"), std::string::npos) << rest.substr(0, 400);
  EXPECT_NE(rest.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(rest.find("\"abort\""), std::string::npos) << "no such OpenAI finish reason";
  s.reset();
}

TEST(Hardening, EveryResponseCarriesARequestId) {
  TestServer s(test_engine_config(), test_server_config());
  httplib::Client c = make_client(s.port);
  auto r = c.Get("/health", {{"X-Request-Id", "trace-42.a_b:c"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("X-Request-Id"), "trace-42.a_b:c");
  r = c.Get("/health", {{"X-Request-Id", "bad id with spaces"}});
  EXPECT_EQ(r->get_header_value("X-Request-Id").rfind("req-", 0), 0u);
  r = c.Get("/nope");
  EXPECT_EQ(r->status, 404);
  EXPECT_FALSE(r->get_header_value("X-Request-Id").empty());
}

TEST(Hardening, CorsIsOffByDefaultAndAnswersPreflightsWhenOn) {
  {
    TestServer s(test_engine_config(), test_server_config());
    httplib::Client c = make_client(s.port);
    auto r = c.Get("/health", {{"Origin", "https://app.example"}});
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  }
  ServerConfig sc = test_server_config();
  sc.cors_origins = {"https://app.example"};
  TestServer s(test_engine_config(), sc);
  httplib::Client c = make_client(s.port);
  auto pre = c.Options("/v1/chat/completions",
                       {{"Origin", "https://app.example"},
                        {"Access-Control-Request-Method", "POST"},
                        {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  auto r = c.Get("/v1/models", {{"Origin", "https://app.example"}});
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(r->get_header_value("Access-Control-Expose-Headers").find("X-Request-Id"),
            std::string::npos);
  r = c.Get("/v1/models", {{"Origin", "https://evil.example"}});
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST(Hardening, TokenizeAndDetokenizeRoundTrip) {
  TestServer s(test_engine_config(), test_server_config());
  auto t = post(s.port, "/tokenize", Json{{"content", "Once upon a time"}, {"add_special", true}});
  ASSERT_EQ(t.status, 200) << t.body;
  const Json tokens = t.json["tokens"];
  ASSERT_GT(tokens.size(), 2u);
  EXPECT_EQ(tokens[0], Stories260K::get().tok.bos_id());
  auto d = post(s.port, "/detokenize", Json{{"tokens", tokens}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_NE(d.json["content"].get<std::string>().find("Once upon a time"), std::string::npos);
  auto p = post(s.port, "/tokenize", Json{{"content", "Once"}, {"with_pieces", true}});
  ASSERT_EQ(p.status, 200);
  EXPECT_TRUE(p.json["tokens"][0].contains("piece"));
  EXPECT_EQ(post(s.port, "/tokenize", Json{{"content", "x"}, {"bogus", 1}}).status, 400);
  EXPECT_EQ(post(s.port, "/detokenize", Json{{"tokens", {1, 99999999}}}).status, 400);
}

TEST(Hardening, APromptTooLongForTheContextIsRefusedBeforeTokenizing) {
  TestServer s(test_engine_config(), test_server_config());
  const int64_t rss0 = rss_bytes();
  const std::string huge(20 << 20, 'a');
  const double t0 = now_seconds();
  auto r = post(s.port, "/v1/completions", Json{{"prompt", huge}, {"max_tokens", 1}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json["error"]["code"], "context_length_exceeded") << r.body.substr(0, 300);
  if (!sanitized()) {
    EXPECT_LT(now_seconds() - t0, 2.0);
  }
  EXPECT_LT(rss_bytes() - rss0, int64_t{400} << 20);
}

TEST(Hardening, TlsServesWithACertificateMadeHere) {
  const std::string dir = test_util::temp_dir() + "/tls";
  std::filesystem::create_directories(dir);
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 1 "
      "-keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl is not installed";
  ServerConfig sc = test_server_config();
  sc.transport.tls_cert_file = cert;
  sc.transport.tls_key_file = key;
  TestServer s(test_engine_config(), sc);
  httplib::SSLClient c("127.0.0.1", s.port);
  c.enable_server_certificate_verification(false);
  auto r = c.Get("/health");
  ASSERT_TRUE(r) << "TLS handshake or request failed";
  EXPECT_EQ(r->status, 200);
  auto m = c.Post("/v1/completions", Json{{"prompt", "Once"}, {"max_tokens", 3}}.dump(),
                  "application/json");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200) << m->body;
  // Plain HTTP to the TLS port gets nothing it could mistake for an answer.
  Raw plain(s.port);
  plain.send_all(get_request("/health"));
  EXPECT_EQ(status_of(plain.read_until("\r\n\r\n", 2)), 0);
  ServerConfig bad = test_server_config();
  bad.transport.tls_cert_file = dir + "/missing.pem";
  bad.transport.tls_key_file = key;
  Stories260K& mdl = Stories260K::get();
  Engine e(*mdl.model, mdl.tok, test_engine_config());
  HttpServer srv(e, mdl.tok, bad);
  EXPECT_THROW(srv.bind("127.0.0.1", 0), Error);
}

// Access-log lines in JSON parse and carry the request id.
TEST(Hardening, JsonAccessLogLinesCarryTheRequestId) {
  ServerConfig sc = test_server_config();
  sc.log_requests = true;
  TestServer s(test_engine_config(), sc);
  const std::string path = test_util::temp_dir() + "/access.log";
  std::fflush(stderr);
  const int saved = ::dup(2);
  FILE* f = std::fopen(path.c_str(), "w");
  ::dup2(fileno(f), 2);
  log::configure(log::Level::kInfo, log::Format::kJson);
  httplib::Client c = make_client(s.port);
  c.Post("/v1/completions", {{"X-Request-Id", "trace-7"}},
         Json{{"prompt", "Once"}, {"max_tokens", 3}}.dump(), "application/json");
  c.Get("/health");
  {
    // A stream its client abandons after the first bytes: logged as not completed.
    Raw r(s.port);
    const std::string b = Json{
        {"prompt", "Once"},
        {"max_tokens", 1900},
        {"ignore_eos", true},
        {"stream", true}}.dump();
    ASSERT_TRUE(
        r.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: trace-cut\r\n"
                   "Content-Length: " +
                   std::to_string(b.size()) + "\r\n\r\n" + b));
    ASSERT_NE(r.read_until("data: ", 10).find("data: "), std::string::npos);
  }
  ASSERT_TRUE(
      wait_for([&] { return s.server->in_flight() == 0; }, 20.0, std::chrono::milliseconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  log::configure(log::Level::kInfo, log::Format::kText);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  std::ifstream in(path);
  std::string line;
  bool found = false, found_cut = false;
  int lines = 0;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    ++lines;
    if (j.value("request_id", "") == "trace-7") {
      found = true;
      EXPECT_EQ(j["msg"], "POST /v1/completions");
      EXPECT_EQ(j["status"], 200);
      EXPECT_EQ(j["completion_tokens"], 3);
      EXPECT_TRUE(j.contains("ttft_ms"));
      EXPECT_TRUE(j.contains("duration_ms"));
    }
    if (j.value("request_id", "") == "trace-cut") {
      found_cut = true;
      EXPECT_EQ(j.value("completed", true), false) << line;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(found_cut);
  EXPECT_GE(lines, 2);
}

}  // namespace
}  // namespace kvasir::server::testing
