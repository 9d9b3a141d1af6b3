#include "kvasir/server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "kvasir/server/api_error.h"
#include "kvasir/server/chat_prompt.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/openai_request.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/peer_socket.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

// What one generation request asks for, after parsing and tokenization.
struct Job {
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;  // completions with echo: each prompt's text
  int n = 1;
  SamplingParams sp;
  std::string key;
  bool stream = false;
  bool include_usage = false;
  int completion_logprobs = -1;  // -1: off
  bool chat_logprobs = false;
  int chat_top_logprobs = 0;

  int n_choices() const { return static_cast<int>(prompts.size()) * n; }
  int prompt_of(int choice) const { return choice / n; }
};

// Per-choice text and tokens gathered for a non-streamed response.
struct ChoiceResult {
  std::string text;
  std::vector<TokenInfo> tokens;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

// The known routes and their methods (for 405 vs 404).
const char* allowed_methods(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions") return "POST";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/health" ||
      path == "/metrics")
    return "GET, HEAD";
  return nullptr;
}

// "temperature: must be ..." -> "temperature"; "stop[0]: ..." -> "stop".
std::string param_of(const std::string& message) {
  size_t end = message.find_first_of(":[ ");
  return end == std::string::npos ? std::string() : message.substr(0, end);
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const Tokenizer& tok;
  ServerConfig cfg;
  std::optional<ChatPrompter> prompter;
  ServingMetrics metrics;
  httplib::Server svr;
  std::thread thread;
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> listen_returned{false};
  std::atomic<int> listen_fd{-1};
  int64_t created = unix_time_now();

  mutable std::mutex live_mu;
  std::condition_variable live_cv;
  std::map<const Generation*, std::shared_ptr<Generation>> live;

  Impl(Engine& e, const Tokenizer& t, ServerConfig c) : engine(e), tok(t), cfg(std::move(c)) {
    if (!cfg.chat_template.empty()) {
      const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), true) : "";
      const std::string eos = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id(), true) : "";
      prompter.emplace(cfg.chat_template, bos, eos);
    }
    setup_routes();
  }

  // ---- responses ----

  void send_json(httplib::Response& res, int status, const Json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    if (e.status() == 429 || e.status() == 503)
      res.set_header("Retry-After", fmt::format("{}", cfg.retry_after_s));
    if (e.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
    send_json(res, e.status(), e.to_json());
  }

  // ---- request checks ----

  std::string authorize(const httplib::Request& req) {
    if (!cfg.api_keys.enabled()) return "none";
    if (!req.has_header("Authorization"))
      throw ApiError(401,
                     "You didn't provide an API key. Pass it in the Authorization header as "
                     "'Authorization: Bearer KEY'.",
                     {}, "invalid_api_key", "invalid_request_error");
    auto label = cfg.api_keys.check(req.get_header_value("Authorization"));
    if (!label)
      throw ApiError(401, "Incorrect API key provided.", {}, "invalid_api_key",
                     "invalid_request_error");
    return *label;
  }

  void check_model(const std::optional<std::string>& model) {
    if (model && *model != cfg.model_name)
      throw ApiError(404,
                     fmt::format("The model '{}' does not exist; this server serves '{}'.", *model,
                                 cfg.model_name),
                     "model", "model_not_found");
  }

  void check_prompt(const std::vector<int32_t>& ids, const SamplingParams& sp, const char* field) {
    const int ctx = engine.max_model_len();
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n == 0) throw ApiError::bad_request(fmt::format("'{}' is empty (no tokens)", field), field);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= tok.n_vocab())
        throw ApiError::bad_request(fmt::format("'{}': token id {} at position {} is outside the "
                                                "vocabulary [0, {})",
                                                field, ids[i], i, tok.n_vocab()),
                                    field);
    if (n >= ctx)
      throw ApiError::bad_request(
          fmt::format("This model's maximum context length is {} tokens, but the {} has {} "
                      "tokens, which leaves no room to generate. Please shorten the {}.",
                      ctx, field, n, field),
          field, "context_length_exceeded");
    if (sp.max_tokens > 0 && n + sp.max_tokens > ctx)
      throw ApiError::bad_request(
          fmt::format("This model's maximum context length is {} tokens. However, you requested "
                      "{} tokens ({} in the {}, {} for the completion). Please reduce the length "
                      "of the {} or max_tokens.",
                      ctx, n + sp.max_tokens, n, field, sp.max_tokens, field),
          "max_tokens", "context_length_exceeded");
  }

  void check_sampling(const SamplingParams& sp) {
    if (auto err = sp.validate(tok.n_vocab())) throw ApiError::bad_request(*err, param_of(*err));
  }

  void check_capacity(int n_new) {
    if (shutting_down)
      throw ApiError(503, "The server is shutting down; retry on another replica.", {},
                     "server_shutting_down");
    if (cfg.max_queue <= 0) return;
    const EngineStats s = engine.stats();
    if (s.waiting + n_new > cfg.max_queue && s.waiting > 0)
      throw ApiError(429,
                     fmt::format("The server is overloaded: {} requests are waiting (limit {}). "
                                 "Retry after {} s.",
                                 s.waiting, cfg.max_queue, cfg.retry_after_s),
                     {}, "server_overloaded");
  }

  // ---- generation ----

  static Usage usage_of(const Job& job, const Generation& g) {
    Usage u;
    for (size_t p = 0; p < job.prompts.size(); ++p) {
      u.prompt_tokens += static_cast<int64_t>(job.prompts[p].size());
      u.cached_tokens += g.choice(static_cast<int>(p) * job.n).cached_tokens;
    }
    for (int c = 0; c < g.n_choices(); ++c) u.completion_tokens += g.choice(c).completion_tokens;
    return u;
  }

  void finished(const std::shared_ptr<const Job>& job, const Generation& g) {
    const Usage u = usage_of(*job, g);
    metrics.record(g, u, u.cost_usd(cfg.prices), cfg.model_name, job->key);
    {
      std::lock_guard<std::mutex> lock(live_mu);
      live.erase(&g);
    }
    live_cv.notify_all();
  }

  // Submits every choice of `job`; throws ApiError (after aborting what was submitted) if the
  // engine refuses one.
  std::shared_ptr<Generation> submit(const std::shared_ptr<const Job>& job, double start) {
    check_capacity(job->n_choices());
    auto gen = std::make_shared<Generation>(job->n_choices(), start,
                                            [this, job](Generation& g) { finished(job, g); });
    {
      std::lock_guard<std::mutex> lock(live_mu);
      live[gen.get()] = gen;
    }
    for (int c = 0; c < job->n_choices(); ++c) {
      GenerateRequest r;
      r.prompt = job->prompts[static_cast<size_t>(job->prompt_of(c))];
      r.params = job->sp;
      if (r.params.seed && job->n > 1)
        r.params.seed = *r.params.seed + static_cast<uint64_t>(c % job->n);
      r.api_key = job->key;
      r.detokenize = true;
      // The text starts here (only BOS before it): drop SentencePiece's leading space, as
      // `kvasir run` does.
      r.strip_leading_space = !job->chat && r.prompt.size() == 1 && r.prompt[0] == tok.bos_id();
      try {
        uint64_t id = engine.submit(std::move(r), gen->sink(c));
        gen->set_submitted(c, id);
      } catch (const std::exception& e) {
        for (int k = c; k < job->n_choices(); ++k) gen->mark_not_submitted(k, FinishReason::kAbort);
        gen->abort(engine);
        throw ApiError::bad_request(e.what(), param_of(e.what()));
      }
    }
    return gen;
  }

  Json chunk_base(const Job& job) const {
    Json j;
    j["id"] = job.id;
    j["object"] = job.chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = job.created;
    j["model"] = cfg.model_name;
    return j;
  }

  // One streamed chunk for an event of choice c (or an empty string when it carries nothing).
  std::string event_chunk(const Job& job, const Generation::Event& e,
                          std::vector<int64_t>& offsets) const {
    const RequestOutput& o = e.output;
    std::string out;
    const bool has_lp = job.chat ? job.chat_logprobs : job.completion_logprobs >= 0;
    if (o.text.empty() && !o.finished && !(has_lp && !o.tokens.empty())) return out;
    Json choice;
    choice["index"] = e.choice;
    if (job.chat) {
      Json delta = Json::object();
      if (!o.text.empty() || !o.finished) delta["content"] = o.text;
      choice["delta"] = std::move(delta);
      choice["logprobs"] =
          has_lp && !o.tokens.empty()
              ? Json{{"content", chat_logprobs_content(o.tokens, tok, job.chat_top_logprobs)},
                     {"refusal", nullptr}}
              : Json(nullptr);
    } else {
      choice["text"] = o.text;
      choice["logprobs"] = has_lp && !o.tokens.empty()
                               ? completion_logprobs(o.tokens, tok, offsets[e.choice])
                               : Json(nullptr);
    }
    choice["finish_reason"] = o.finished ? finish_reason_json(o.finish_reason, o.error) : nullptr;
    Json chunk = chunk_base(job);
    chunk["choices"] = Json::array({std::move(choice)});
    if (job.include_usage) chunk["usage"] = nullptr;
    out += sse_event(chunk);
    if (!o.error.empty()) {
      ApiError err(500, "generation failed: " + o.error);
      out += sse_event(err.to_json());
    }
    return out;
  }

  // The chunks sent before any output: chat role deltas, completions echo.
  std::string opening_chunks(const Job& job, std::vector<int64_t>& offsets) const {
    std::string out;
    for (int c = 0; c < job.n_choices(); ++c) {
      Json choice;
      choice["index"] = c;
      if (job.chat) {
        choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
      } else if (job.echo.empty()) {
        continue;
      } else {
        const std::string& text = job.echo[static_cast<size_t>(job.prompt_of(c))];
        choice["text"] = text;
        offsets[static_cast<size_t>(c)] = static_cast<int64_t>(text.size());
      }
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = nullptr;
      Json chunk = chunk_base(job);
      chunk["choices"] = Json::array({std::move(choice)});
      if (job.include_usage) chunk["usage"] = nullptr;
      out += sse_event(chunk);
    }
    return out;
  }

  void stream_response(httplib::Response& res, std::shared_ptr<const Job> job,
                       std::shared_ptr<Generation> gen) {
    struct State {
      bool started = false;
      double last_write = 0;
      std::vector<int64_t> offsets;
    };
    auto st = std::make_shared<State>();
    st->offsets.assign(static_cast<size_t>(job->n_choices()), 0);
    st->last_write = now_seconds();
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, gen, st](size_t, httplib::DataSink& sink) -> bool {
          try {
            std::string out;
            if (!st->started) {
              st->started = true;
              out = opening_chunks(*job, st->offsets);
            }
            std::vector<Generation::Event> events;
            const bool done = gen->wait(events, out.empty() ? cfg.heartbeat_s : 0.0);
            for (const auto& e : events) out += event_chunk(*job, e, st->offsets);
            if (done) {
              if (job->include_usage) {
                Json chunk = chunk_base(*job);
                chunk["choices"] = Json::array();
                chunk["usage"] = usage_of(*job, *gen).to_json(cfg.prices);
                out += sse_event(chunk);
              }
              out += kSseDone;
            }
            const double now = now_seconds();
            if (out.empty() && now - st->last_write >= cfg.heartbeat_s)
              out = ": keep-alive\n\n";  // an SSE comment: notices a client that went away
            if (!out.empty()) {
              if (!sink.write(out.data(), out.size())) return false;
              st->last_write = now;
            }
            if (done) sink.done();
            return true;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "kvasir serve: stream failed: %s\n", e.what());
            return false;
          }
        },
        [this, gen](bool success) {
          if (!success) gen->abort(engine);  // client gone or server stopping
        });
  }

  void full_response(const httplib::Request& req, httplib::Response& res, const Job& job,
                     Generation& gen) {
    std::vector<ChoiceResult> results(static_cast<size_t>(job.n_choices()));
    std::vector<Generation::Event> events;
    bool done = false;
    // The client's socket, looked up once the generation has taken a while (short requests
    // never pay for the lookup); a client that hung up aborts its generation (peer_socket.h).
    const double started = now_seconds();
    int fd = -1;
    bool looked_up = false, client_gone = false;
    while (!done) {
      events.clear();
      done = gen.wait(events, 0.1);
      if (!done && !client_gone && now_seconds() - started >= 0.2) {
        if (!looked_up) {
          fd = find_connection_fd(req.local_addr, req.local_port, req.remote_addr,
                                  req.remote_port);
          looked_up = true;
        }
        if (peer_closed(fd)) {
          client_gone = true;
          gen.abort(engine);
        }
      }
      for (auto& e : events) {
        ChoiceResult& r = results[static_cast<size_t>(e.choice)];
        r.text += e.output.text;
        r.tokens.insert(r.tokens.end(), e.output.tokens.begin(), e.output.tokens.end());
        if (e.output.finished) {
          r.reason = e.output.finish_reason;
          r.error = e.output.error;
        }
      }
    }
    if (client_gone) {
      // Nobody is there to read it; 499 (nginx's "client closed request") shows in the log.
      res.status = 499;
      return;
    }
    for (const ChoiceResult& r : results)
      if (!r.error.empty()) throw ApiError(500, "generation failed: " + r.error);
    if (shutting_down) {
      for (const ChoiceResult& r : results)
        if (r.reason == FinishReason::kAbort)
          throw ApiError(503, "The server is shutting down; the request was aborted.", {},
                         "server_shutting_down");
    }
    Json body;
    body["id"] = job.id;
    body["object"] = job.chat ? "chat.completion" : "text_completion";
    body["created"] = job.created;
    body["model"] = cfg.model_name;
    body["choices"] = Json::array();
    for (int c = 0; c < job.n_choices(); ++c) {
      const ChoiceResult& r = results[static_cast<size_t>(c)];
      Json choice;
      choice["index"] = c;
      if (job.chat) {
        choice["message"] = Json{{"role", "assistant"}, {"content", r.text}};
        choice["logprobs"] =
            job.chat_logprobs
                ? Json{{"content", chat_logprobs_content(r.tokens, tok, job.chat_top_logprobs)},
                       {"refusal", nullptr}}
                : Json(nullptr);
      } else {
        const std::string echo =
            job.echo.empty() ? std::string() : job.echo[static_cast<size_t>(job.prompt_of(c))];
        choice["text"] = echo + r.text;
        int64_t offset = static_cast<int64_t>(echo.size());
        choice["logprobs"] = job.completion_logprobs >= 0
                                 ? completion_logprobs(r.tokens, tok, offset)
                                 : Json(nullptr);
      }
      choice["finish_reason"] = finish_reason_json(r.reason, r.error);
      body["choices"].push_back(std::move(choice));
    }
    body["usage"] = usage_of(job, gen).to_json(cfg.prices);
    send_json(res, 200, body);
  }

  void run_job(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Job> job,
               double start) {
    job->created = unix_time_now();
    std::shared_ptr<const Job> cjob = job;
    std::shared_ptr<Generation> gen = submit(cjob, start);
    if (job->stream) {
      stream_response(res, cjob, gen);
    } else {
      full_response(req, res, *cjob, *gen);
    }
  }

  // ---- routes ----

  void completions(const httplib::Request& req, httplib::Response& res, const std::string& key) {
    const double start = now_seconds();
    Json body = parse_json_body(req.body);
    CompletionRequest cr = parse_completion_request(body);
    check_model(cr.options.model);
    auto job = std::make_shared<Job>();
    job->id = make_response_id("cmpl-");
    job->key = key;
    job->n = cr.options.n;
    job->sp = cr.options.sampling;
    job->stream = cr.options.stream;
    job->include_usage = cr.options.include_usage;
    job->completion_logprobs = cr.logprobs;
    check_sampling(job->sp);
    for (size_t i = 0; i < cr.prompts.size(); ++i) {
      const PromptInput& p = cr.prompts[i];
      std::vector<int32_t> ids =
          p.is_tokens ? p.tokens : tok.encode(p.text, /*add_special=*/true, /*parse_special=*/true);
      check_prompt(ids, job->sp, "prompt");
      if (cr.echo) job->echo.push_back(p.is_tokens ? tok.decode(ids) : p.text);
      job->prompts.push_back(std::move(ids));
    }
    run_job(req, res, job, start);
  }

  void chat_completions(const httplib::Request& req, httplib::Response& res,
                        const std::string& key) {
    const double start = now_seconds();
    Json body = parse_json_body(req.body);
    ChatRequest cr = parse_chat_request(body);
    check_model(cr.options.model);
    if (!prompter)
      throw ApiError::bad_request(
          "This model has no chat template (tokenizer.chat_template); start the server with "
          "--chat-template FILE.jinja, or use /v1/completions.",
          {}, "no_chat_template");
    auto job = std::make_shared<Job>();
    job->chat = true;
    job->id = make_response_id("chatcmpl-");
    job->key = key;
    job->n = cr.options.n;
    job->sp = cr.options.sampling;
    job->stream = cr.options.stream;
    job->include_usage = cr.options.include_usage;
    job->chat_logprobs = cr.logprobs;
    job->chat_top_logprobs = cr.top_logprobs;
    check_sampling(job->sp);
    const std::string prompt = prompter->render(cr);
    // The template writes BOS itself where the model wants it (as vLLM: no special tokens added).
    std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/false, /*parse_special=*/true);
    check_prompt(ids, job->sp, "messages");
    job->prompts.push_back(std::move(ids));
    run_job(req, res, job, start);
  }

  Json model_card() const {
    return Json{{"id", cfg.model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "kvasir"},
                {"max_model_len", engine.max_model_len()}};
  }

  using ApiHandler = void (Impl::*)(const httplib::Request&, httplib::Response&,
                                    const std::string&);

  // Wraps a /v1 handler: auth, shutdown, and every failure answered as an error object.
  httplib::Server::Handler api(ApiHandler h) {
    return [this, h](const httplib::Request& req, httplib::Response& res) {
      try {
        const std::string key = authorize(req);
        if (shutting_down)
          throw ApiError(503, "The server is shutting down; retry on another replica.", {},
                         "server_shutting_down");
        (this->*h)(req, res, key);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
      } catch (...) {
        send_error(res, ApiError(500, "internal error"));
      }
    };
  }

  void models(const httplib::Request&, httplib::Response& res, const std::string&) {
    send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({model_card()})}});
  }

  void model_by_id(const httplib::Request& req, httplib::Response& res, const std::string&) {
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : std::string();
    check_model(id);
    send_json(res, 200, model_card());
  }

  void setup_routes() {
    svr.Post("/v1/completions", api(&Impl::completions));
    svr.Post("/v1/chat/completions", api(&Impl::chat_completions));
    svr.Get("/v1/models", api(&Impl::models));
    svr.Get(R"(/v1/models/(.+))", api(&Impl::model_by_id));
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (shutting_down) {
        res.set_header("Retry-After", fmt::format("{}", cfg.retry_after_s));
        send_json(res, 503, Json{{"status", "shutting_down"}});
      } else {
        send_json(res, 200, Json{{"status", "ok"}});
      }
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 200;
      res.set_content(expose(), "text/plain; version=0.0.4; charset=utf-8");
    });

    // Responses without a body at status >= 400 come from httplib itself (no route, payload too
    // large, bad request line): give them OpenAI error bodies; a known path with another method
    // is 405.
    httplib::Server::HandlerWithResponse on_error = [this](const httplib::Request& req,
                                                           httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string message;
      if (res.status == 404) {
        if (const char* allow = allowed_methods(req.path)) {
          res.status = 405;
          res.set_header("Allow", allow);
          message =
              fmt::format("Method {} is not allowed for {}; use {}.", req.method, req.path, allow);
        } else {
          message = fmt::format("Unknown route: {} {}", req.method, req.path);
        }
      } else if (res.status == 413) {
        message = fmt::format("The request body is larger than the {} bytes allowed.",
                              cfg.max_body_bytes);
      } else {
        message = fmt::format("HTTP error {}", res.status);
      }
      const std::string code = res.status == 404   ? "not_found"
                               : res.status == 405 ? "method_not_allowed"
                                                   : "";
      ApiError e(res.status, message, {}, code);
      res.set_content(dump_json(e.to_json()), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    };
    svr.set_error_handler(on_error);
    svr.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          send_error(res, ApiError(500, "internal error"));
        });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.record_http(res.status);
      if (cfg.log_requests)
        std::fprintf(stderr, "kvasir serve: %s %s %s -> %d\n", req.remote_addr.c_str(),
                     req.method.c_str(), req.path.c_str(), res.status);
    });
    // cpp-httplib 0.11.4 listens with a backlog of 5: remember the socket so bind() can raise it
    // (64 clients connecting at once would otherwise overflow the accept queue).
    svr.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = static_cast<int>(sock);
    });
    svr.set_payload_max_length(cfg.max_body_bytes);
    svr.set_keep_alive_max_count(1000);
    svr.set_read_timeout(30);
    svr.set_write_timeout(30);
    int threads = cfg.http_threads;
    if (threads <= 0) threads = engine.config().max_seqs + std::max(cfg.max_queue, 0) + 16;
    threads = std::clamp(threads, 4, 4096);
    svr.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
  }

  std::string expose() { return metrics.expose(engine.stats(), engine.config().kv_warn_ratio); }

  void abort_all() {
    std::vector<std::shared_ptr<Generation>> gens;
    {
      std::lock_guard<std::mutex> lock(live_mu);
      for (auto& [p, g] : live) gens.push_back(g);
    }
    for (auto& g : gens) g->abort(engine);
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, ServerConfig config) {
  ::signal(SIGPIPE, SIG_IGN);
  impl_ = std::make_unique<Impl>(engine, tokenizer, std::move(config));
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind(const std::string& host, int port) {
  if (port == 0) {
    port = impl_->svr.bind_to_any_port(host);
    if (port <= 0) fail("cannot listen on {} (any port)", host);
  } else if (!impl_->svr.bind_to_port(host, port)) {
    fail("cannot listen on {}:{}", host, port);
  }
  // Listening again on a listening socket only changes its backlog.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);
  return port;
}

void HttpServer::start() {
  impl_->thread = std::thread([this] { run(); });
  while (!impl_->svr.is_running() && !impl_->listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::run() {
  impl_->svr.listen_after_bind();
  impl_->listen_returned = true;
}

void HttpServer::begin_shutdown() {
  impl_->shutting_down = true;
}

bool HttpServer::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lock(impl_->live_mu);
  return impl_->live_cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                 [&] { return impl_->live.empty(); });
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  impl_->shutting_down = true;
  impl_->abort_all();
  if (impl_->svr.is_running()) {
    impl_->svr.stop();
    // The listener joins its workers before it returns; keep aborting what a handler may still
    // have submitted meanwhile so none of them waits for a long generation.
    while (!impl_->listen_returned) {
      impl_->abort_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lock(impl_->live_mu);
  return static_cast<int>(impl_->live.size());
}

const ServerConfig& HttpServer::config() const {
  return impl_->cfg;
}
ServingMetrics& HttpServer::metrics() {
  return impl_->metrics;
}
std::string HttpServer::metrics_text() {
  return impl_->expose();
}

}  // namespace kvasir::server
