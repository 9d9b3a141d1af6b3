#include "kvasir/server/model_router.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "kvasir/server/api_error.h"
#include "kvasir/util/log.h"

namespace kvasir::server {

namespace {

// The small model's mean next-token entropy for each prompt (one scoring request each, run
// together); the highest. Aborts what it submitted and throws ApiError 503 when the server starts
// shutting down meanwhile.
double score_prompts(RouteContext& ctx, ModelSlot& small,
                     const std::vector<std::vector<int32_t>>& prompts) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    int left = 0;
    double worst = 0;
    std::string error;
  };
  auto w = std::make_shared<Wait>();
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) {
    GenerateRequest r;
    r.prompt = p;
    r.detokenize = false;
    r.score_prompt = true;
    {
      std::lock_guard lk(w->mu);
      ++w->left;
    }
    try {
      ids.push_back(small.engine.submit(std::move(r), [w](const RequestOutput& o) {
        if (!o.finished) return;
        std::lock_guard lk(w->mu);
        if (!o.error.empty())
          w->error = o.error;
        else if (o.prompt_score)
          w->worst = std::max(w->worst, o.prompt_score->mean_entropy);
        if (--w->left == 0) w->cv.notify_all();
      }));
    } catch (const std::exception& e) {
      for (uint64_t id : ids) small.engine.abort(id);
      throw ApiError::bad_request(
          fmt::format("route: the small model '{}' cannot score the "
                      "prompt: {}",
                      small.name, e.what()));
    }
  }
  std::unique_lock lk(w->mu);
  while (!w->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return w->left == 0; })) {
    if (ctx.shutting_down) {
      lk.unlock();
      for (uint64_t id : ids) small.engine.abort(id);
      throw ApiError(503, "The server is shutting down; retry on another replica.", {},
                     "server_shutting_down");
    }
  }
  if (!w->error.empty())
    throw ApiError(
        500, fmt::format("route: scoring the prompt on '{}' failed: {}", small.name, w->error));
  return w->worst;
}

}  // namespace

Json RouteDecision::to_json() const {
  Json j{{"name", route}, {"model", model->name}, {"reason", reason}, {"detail", detail}};
  if (difficulty >= 0) j["difficulty"] = difficulty;
  if (!fell_over_from.empty()) j["fell_over_from"] = fell_over_from;
  return j;
}

bool saturated(const RouteContext& ctx, const ModelSlot& m, const RoutePolicy& policy, int n_new) {
  const EngineStats s = m.engine.stats();
  const int max_seqs = m.engine.config().max_seqs;
  if (policy.fallover_waiting > 0 && s.running + s.waiting - max_seqs >= policy.fallover_waiting)
    return true;
  if (s.waiting > 0 && s.kv_usage >= m.engine.config().kv_warn_ratio) return true;
  return ctx.cfg.max_queue > 0 && s.waiting > 0 && s.waiting + n_new > ctx.cfg.max_queue;
}

RouteDecision decide_route(RouteContext& ctx, const RoutePolicy& p, const std::string& key,
                           const std::vector<std::vector<int32_t>>& small_prompts, int n_new,
                           int max_tokens) {
  ModelSlot& small = *ctx.find_model(p.small);
  ModelSlot& large = *ctx.find_model(p.large);
  RouteDecision d;
  d.route = p.name;
  size_t longest = 0;
  for (const auto& q : small_prompts) longest = std::max(longest, q.size());
  const int64_t n = static_cast<int64_t>(longest);
  const int small_ctx = small.engine.max_model_len();
  auto choose = [&](ModelSlot& m, const char* reason, std::string detail) {
    d.model = &m;
    d.reason = reason;
    d.detail = std::move(detail);
  };

  if (auto it = p.keys.find(key); it != p.keys.end() && it->second != "auto") {
    choose(it->second == "small" ? small : large, "key_policy",
           fmt::format("key {} -> {}", key, it->second));
  } else if (n >= small_ctx || (max_tokens > 0 && n + max_tokens > small_ctx)) {
    choose(large, "prompt_length",
           fmt::format("prompt {} tokens + max_tokens {} do not fit the small model's context {}",
                       n, max_tokens, small_ctx));
  } else if (p.max_small_prompt_tokens > 0 && n > p.max_small_prompt_tokens) {
    choose(large, "prompt_length",
           fmt::format("prompt {} tokens > {}", n, p.max_small_prompt_tokens));
  } else if (p.max_small_difficulty > 0 && saturated(ctx, small, p, n_new) &&
             !saturated(ctx, large, p, n_new)) {
    // Scoring would queue behind the small model's backlog: the large model takes it unscored.
    choose(large, "fallover", fmt::format("small model '{}' saturated; not scored", small.name));
    d.fell_over_from = small.name;
  } else if (p.max_small_difficulty > 0) {
    d.difficulty = score_prompts(ctx, small, small_prompts);
    const bool hard = d.difficulty > p.max_small_difficulty;
    choose(hard ? large : small, "difficulty",
           fmt::format("difficulty {:.3f} {} {:.3f} nats", d.difficulty,
                       hard ? ">" : "<=", p.max_small_difficulty));
  } else {
    choose(small, "default",
           p.max_small_prompt_tokens > 0
               ? fmt::format("prompt {} tokens <= {}", n, p.max_small_prompt_tokens)
               : std::string("no rule sent it to the large model"));
  }

  if (d.fell_over_from.empty()) {
    ModelSlot& other = d.model == &small ? large : small;
    // The small model cannot take a prompt beyond its context, whatever the load.
    const bool other_fits =
        &other == &large || (n < small_ctx && (max_tokens <= 0 || n + max_tokens <= small_ctx));
    if (other_fits && saturated(ctx, *d.model, p, n_new) && !saturated(ctx, other, p, n_new)) {
      d.fell_over_from = d.model->name;
      d.detail += fmt::format("; '{}' saturated, fell over to '{}'", d.model->name, other.name);
      d.model = &other;
      d.reason = "fallover";
    }
  }
  ctx.metrics.record_route(p.name, d.model->name, d.reason, d.difficulty, d.fell_over_from);
  return d;
}

}  // namespace kvasir::server
