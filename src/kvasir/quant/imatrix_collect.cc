#include "kvasir/quant/imatrix_collect.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvasir/engine/model_runner.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

ImatrixCollector::ImatrixCollector(bool process_output, ThreadPool* pool)
    : process_output_(process_output), pool_(pool) {}

bool ImatrixCollector::wants(std::string_view weight) const {
  return weight.starts_with("blk.") || (process_output_ && weight == "output.weight");
}

void ImatrixCollector::on_matmul(std::string_view weight, const float* x, int64_t n_rows,
                                 int64_t cols) {
  if (n_rows < kMinRows || !wants(weight)) return;
  auto it = stats_.find(weight);
  if (it == stats_.end())
    it = stats_.emplace(std::string(weight), ImatrixStats{std::vector<double>(cols), {0}}).first;
  ImatrixStats& e = it->second;
  if (static_cast<int64_t>(e.sum_sq.size()) != cols)
    fail("imatrix: {} was multiplied by rows of {} and of {} columns", weight, e.sum_sq.size(),
         cols);
  double* acc = e.sum_sq.data();
  auto add_columns = [&](int64_t begin, int64_t end) {
    for (int64_t t = 0; t < n_rows; ++t) {
      const float* row = x + t * cols;
      for (int64_t j = begin; j < end; ++j) acc[j] += double{row[j]} * double{row[j]};
    }
  };
  if (pool_ != nullptr && pool_->size() > 1 && n_rows * cols >= (int64_t{1} << 16))
    pool_->parallel_for(cols, [&](int64_t b, int64_t end, int) { add_columns(b, end); });
  else
    add_columns(0, cols);
  e.counts[0] += n_rows;
  if (non_finite_.empty() &&
      !std::all_of(e.sum_sq.begin(), e.sum_sq.end(), [](double v) { return std::isfinite(v); }))
    non_finite_ = std::string(weight);
}

std::map<std::string, ImatrixStats> ImatrixCollector::stats() const {
  return {stats_.begin(), stats_.end()};
}

namespace {

// -log p(next) under one row of logits.
double nll_of(const float* row, int64_t n_vocab, int32_t next) {
  double mx = row[0];
  for (int64_t v = 1; v < n_vocab; ++v) mx = std::max(mx, double{row[v]});
  double sum = 0;
  for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double{row[v]} - mx);
  return -(double{row[next]} - mx - std::log(sum));
}

// The steps of a group of k chunks (of the n_seq llama-imatrix evaluates together): the
// positions [start, start + len) each of the k chunks computes in one step.
struct Piece {
  int start, len;
};
std::vector<Piece> group_steps(int ctx, int k, int n_seq, int n_batch, int n_ubatch) {
  std::vector<Piece> steps;
  if (n_seq > 1) {  // one decode of the k whole chunks, the same tokens from each per step
    const int per = std::max(1, n_ubatch / k);
    for (int p = 0; p < ctx; p += per) steps.push_back({p, std::min(per, ctx - p)});
  } else {  // decodes of n_batch tokens, each in n_ubatch pieces
    for (int b = 0; b < ctx; b += n_batch) {
      const int end = std::min(ctx, b + n_batch);
      for (int p = b; p < end; p += n_ubatch) steps.push_back({p, std::min(n_ubatch, end - p)});
    }
  }
  return steps;
}

}  // namespace

ImatrixCollectResult collect_imatrix(
    const Model& model, ThreadPool& pool, std::span<const int32_t> tokens,
    const ImatrixCollectOptions& opt,
    const std::function<void(const ImatrixCollectProgress&)>& progress) {
  const int ctx = opt.ctx;
  if (ctx < 4) fail("imatrix: a chunk of {} tokens is too small (need at least 4)", ctx);
  if (opt.batch <= 0 || opt.ubatch <= 0)
    fail("imatrix: the batch sizes must be positive, got {} and {}", opt.batch, opt.ubatch);
  int n_chunks = static_cast<int>(tokens.size() / static_cast<size_t>(ctx));
  if (opt.max_chunks >= 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  if (n_chunks == 0) {
    if (opt.max_chunks == 0) fail("imatrix: --chunks 0 leaves nothing to compute");
    fail("imatrix: the text has {} tokens, fewer than one chunk of {} (-c)", tokens.size(), ctx);
  }

  // llama-imatrix's grouping: n_seq chunks per decode, its batch of at most n_kv tokens.
  const int n_seq = std::max(1, opt.batch / ctx);
  const int n_batch = std::min(opt.batch, n_seq * ctx);
  const int n_ubatch = std::min(opt.ubatch, n_batch);
  const bool want_logits = opt.compute_ppl || opt.process_output;
  const int block_size = 16;
  const int chunk_blocks = (ctx + block_size - 1) / block_size;
  ModelRunnerOptions ro;
  ro.kv_blocks = int64_t{n_seq} * chunk_blocks;
  ro.block_size = block_size;
  ro.kv_type = opt.kv_type;
  // A step holds at most n_ubatch tokens, or one from each chunk when there are more chunks.
  ro.max_tokens = std::max(n_ubatch, n_seq);
  ro.max_logit_rows = want_logits ? ro.max_tokens : 1;
  ModelRunner runner(model, pool, ro);
  if (!runner.backend().shares_host_memory())
    fail("imatrix: the {} backend's memory is not host memory (not supported yet)",
         backend_kind_name(runner.backend().kind()));
  ImatrixCollector collector(opt.process_output, &pool);
  runner.set_matmul_observer(&collector);

  // Sequence s of a step owns blocks [s * chunk_blocks, (s + 1) * chunk_blocks); a chunk starts
  // at position 0 and reads only the positions it wrote, so nothing needs clearing between
  // chunks.
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seq));
  std::vector<std::vector<int32_t>> chunk(static_cast<size_t>(n_seq),
                                          std::vector<int32_t>(static_cast<size_t>(ctx)));
  for (int s = 0; s < n_seq; ++s)
    for (int b = 0; b < chunk_blocks; ++b)
      tables[static_cast<size_t>(s)].push_back(s * chunk_blocks + b);
  std::vector<SeqWork> work;
  std::vector<double> chunk_nll(static_cast<size_t>(n_seq));

  const int64_t V = model.config().n_vocab;
  const int first_scored = ctx / 2;  // predictions from positions ctx/2 .. ctx-2
  ImatrixCollectResult r;
  double nll = 0, nll2 = 0;
  const double t0 = now_seconds();
  for (int first = 0; first < n_chunks; first += n_seq) {
    const int k = std::min(n_seq, n_chunks - first);
    for (int s = 0; s < k; ++s) {
      const auto begin = tokens.begin() + static_cast<ptrdiff_t>(first + s) * ctx;
      std::vector<int32_t>& c = chunk[static_cast<size_t>(s)];
      std::copy(begin, begin + ctx, c.begin());
      if (opt.bos_id >= 0) c[0] = opt.bos_id;
      chunk_nll[static_cast<size_t>(s)] = 0;
    }
    for (const auto [p0, len] : group_steps(ctx, k, n_seq, n_batch, n_ubatch)) {
      work.clear();
      for (int s = 0; s < k; ++s) {
        SeqWork w;
        w.id = static_cast<uint64_t>(first + s);
        w.tokens = std::span<const int32_t>(chunk[static_cast<size_t>(s)])
                       .subspan(static_cast<size_t>(p0), static_cast<size_t>(len));
        w.start = p0;
        w.blocks = &tables[static_cast<size_t>(s)];
        w.logits = want_logits ? Logits::kAll : Logits::kNone;
        work.push_back(w);
      }
      const StepOutput& out = runner.run(work);
      if (!collector.non_finite().empty())
        fail("imatrix: the squared activations of {} are not finite after chunk {} of {}",
             collector.non_finite(), first + k, n_chunks);
      if (!opt.compute_ppl) continue;
      for (int s = 0; s < k; ++s) {
        const size_t start = static_cast<size_t>(first + s) * ctx;
        for (int j = std::max(p0, first_scored); j < std::min(p0 + len, ctx - 1); ++j) {
          const int64_t row = out.first_row[static_cast<size_t>(s)] + (j - p0);
          const double v = nll_of(&out.logits[static_cast<size_t>(row * V)], V,
                                  tokens[start + static_cast<size_t>(j) + 1]);
          chunk_nll[static_cast<size_t>(s)] += v;
          nll2 += v * v;
        }
      }
    }
    for (int s = 0; s < k; ++s) {
      r.n_chunks = first + s + 1;
      if (opt.compute_ppl) {
        nll += chunk_nll[static_cast<size_t>(s)];
        r.scored += ctx - 1 - first_scored;
      }
      if (progress) {
        ImatrixCollectProgress p;
        p.chunks_done = r.n_chunks;
        p.n_chunks = n_chunks;
        p.ppl = r.scored > 0 ? std::exp(nll / static_cast<double>(r.scored)) : 0;
        p.elapsed_s = now_seconds() - t0;
        progress(p);
      }
    }
  }
  r.seconds = now_seconds() - t0;
  r.stats = collector.stats();
  if (r.stats.empty())
    fail(
        "imatrix: nothing was collected: every forward step had fewer than {} tokens (use a "
        "larger -c or more chunks)",
        ImatrixCollector::kMinRows);
  int64_t max_count = 0;
  for (const auto& [name, s] : r.stats) max_count = std::max(max_count, s.counts[0]);
  r.chunk_size = ctx;
  r.chunk_count = static_cast<int>(max_count / ctx);
  if (r.scored > 0) {
    const double n = static_cast<double>(r.scored);
    const double mean = nll / n;
    r.ppl = std::exp(mean);
    const double var = nll2 / n - mean * mean;
    r.ppl_error = var > 0 && r.scored > 1 ? std::sqrt(var / (n - 1)) * r.ppl : 0;
  }
  return r;
}

}  // namespace kvasir
