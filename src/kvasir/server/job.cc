#include "kvasir/server/job.h"

#include <exception>
#include <mutex>

#include "kvasir/server/api_error.h"
#include "kvasir/server/request_validation.h"

namespace kvasir::server {

namespace {

void finished(RouteContext& ctx, const std::shared_ptr<const Job>& job, const Generation& g) {
  const Usage u = usage_of(*job, g);
  const double cost = u.cost_usd(job->model->prices);
  ctx.metrics.record(g, u, cost, job->model->name, job->key);
  if (job->route)
    ctx.metrics.record_route_cost(job->route->route, cost, u.cost_usd(job->route_large_prices));
  {
    std::lock_guard<std::mutex> lock(ctx.live_mu);
    ctx.live.erase(&g);
  }
  ctx.live_cv.notify_all();
}

}  // namespace

Usage usage_of(const Job& job, const Generation& g) {
  Usage u;
  for (size_t p = 0; p < job.prompts.size(); ++p) {
    u.prompt_tokens += static_cast<int64_t>(job.prompts[p].size());
    u.cached_tokens += g.choice(static_cast<int>(p) * job.n).cached_tokens;
  }
  for (int c = 0; c < g.n_choices(); ++c) {
    const Generation::Choice& ch = g.choice(c);
    u.completion_tokens += ch.completion_tokens;
    u.spec_proposed += ch.spec_proposed;
    u.spec_accepted += ch.spec_accepted;
    u.spec_passes += ch.spec_passes;
  }
  return u;
}

Json usage_json(const Job& job, const Generation& g) {
  Json u = usage_of(job, g).to_json(job.model->prices);
  if (job.route) u["route"] = job.route->to_json();
  return u;
}

std::shared_ptr<Generation> submit(RouteContext& ctx, const std::shared_ptr<const Job>& job,
                                   double start) {
  ModelSlot& m = *job->model;
  check_capacity(ctx, m, job->n_choices());
  auto gen = std::make_shared<Generation>(job->n_choices(), start,
                                          [&ctx, job](Generation& g) { finished(ctx, job, g); });
  gen->limit_backlog(ctx.cfg.max_unread_outputs, m.engine);
  {
    std::lock_guard<std::mutex> lock(ctx.live_mu);
    ctx.live[gen.get()] = {gen, &m.engine};
  }
  for (int c = 0; c < job->n_choices(); ++c) {
    GenerateRequest r;
    r.prompt = job->prompts[static_cast<size_t>(job->prompt_of(c))];
    r.params = job->sp;
    if (r.params.seed && job->n > 1)
      r.params.seed = *r.params.seed + static_cast<uint64_t>(c % job->n);
    r.api_key = job->key;
    r.detokenize = true;
    r.speculative = job->speculative;
    r.grammar = job->grammar;
    r.render_special = job->parse_tool_calls;  // the family's call markers may be control tokens
    // The text starts here (only BOS before it): drop SentencePiece's leading space, as
    // `kvasir run` does.
    r.strip_leading_space = !job->chat && r.prompt.size() == 1 && r.prompt[0] == m.tok.bos_id();
    try {
      uint64_t id = m.engine.submit(std::move(r), gen->sink(c));
      gen->set_submitted(c, id);
    } catch (const std::exception& e) {
      for (int k = c; k < job->n_choices(); ++k) gen->mark_not_submitted(k, FinishReason::kAbort);
      gen->abort(m.engine);
      throw ApiError::bad_request(e.what(), param_of(e.what()));
    }
  }
  return gen;
}

}  // namespace kvasir::server
