#include "kvasir/eval/perplexity.h"

#include <cmath>
#include <vector>

#include "kvasir/engine/sequence_runner.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

PerplexityResult perplexity(const Model& model, ThreadPool& pool, std::span<const int32_t> tokens,
                            const PerplexityOptions& opt,
                            const std::function<void(int, double)>& progress,
                            const ScoredRowFn& on_row) {
  if (opt.ctx < 4) fail("perplexity: context {} is too small (need at least 4)", opt.ctx);
  int n_chunks = static_cast<int>(tokens.size() / static_cast<size_t>(opt.ctx));
  if (opt.max_chunks >= 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  if (n_chunks == 0)
    fail("perplexity: the text has {} tokens, fewer than one context of {}", tokens.size(),
         opt.ctx);
  SequenceRunnerOptions ro;
  ro.max_ctx = opt.ctx;
  ro.max_batch = opt.max_batch;
  ro.kv_type = opt.kv_type;
  ro.key_transform = opt.key_transform;
  ro.all_logits = true;
  SequenceRunner runner(model, pool, ro);
  const int64_t V = model.config().n_vocab;
  PerplexityResult r;
  const double t0 = now_seconds();
  double nll_sum = 0;
  std::vector<int32_t> chunk(static_cast<size_t>(opt.ctx));
  for (int c = 0; c < n_chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * opt.ctx;
    for (int i = 0; i < opt.ctx; ++i) chunk[static_cast<size_t>(i)] = tokens[start + i];
    if (opt.bos_id >= 0) chunk[0] = opt.bos_id;
    runner.reset();
    std::span<const float> logits = runner.feed(chunk, /*all_logits=*/true);
    // Score predictions of tokens ctx/2+1 .. ctx-1 (from positions ctx/2 .. ctx-2), as llama.cpp.
    for (int j = opt.ctx / 2; j < opt.ctx - 1; ++j) {
      const float* row = &logits[static_cast<size_t>(j) * V];
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      const int32_t next = tokens[start + static_cast<size_t>(j) + 1];
      nll_sum += -(double(row[next]) - mx - std::log(sum));
      if (on_row) on_row(c, j, std::span<const float>(row, static_cast<size_t>(V)), next);
      r.scored++;
    }
    r.chunks = c + 1;
    if (progress) progress(c, std::exp(nll_sum / double(r.scored)));
  }
  r.nll = nll_sum / double(r.scored);
  r.ppl = std::exp(r.nll);
  r.seconds = now_seconds() - t0;
  return r;
}

}  // namespace kvasir
