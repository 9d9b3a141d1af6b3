#include "kvasir/quant/calib_capture.h"

#include <algorithm>
#include <cmath>

#include "kvasir/engine/model_runner.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

std::string calib_group(std::string_view weight) {
  if (!weight.starts_with("blk.")) return "";
  const size_t dot = weight.find('.', 4);
  if (dot == std::string_view::npos) return "";
  const std::string_view prefix = weight.substr(0, dot + 1), rest = weight.substr(dot + 1);
  auto is = [&](std::string_view s) { return rest == s; };
  if (is("attn_q.weight") || is("attn_k.weight") || is("attn_v.weight"))
    return std::string(prefix) + "attn_q.weight";
  if (is("attn_output.weight")) return std::string(prefix) + "attn_output.weight";
  if (is("ffn_gate.weight") || is("ffn_up.weight")) return std::string(prefix) + "ffn_gate.weight";
  if (is("ffn_down.weight")) return std::string(prefix) + "ffn_down.weight";
  return "";
}

void CalibCapture::on_matmul(std::string_view weight, const float* x, int64_t n_rows,
                             int64_t cols) {
  if (n_rows <= 0 || calib_group(weight) != weight) return;
  auto it = stats_.find(weight);
  if (it == stats_.end()) {
    CalibStats s;
    s.cols = cols;
    s.gram.assign(static_cast<size_t>(cols * cols), 0.0);
    s.sum_abs.assign(static_cast<size_t>(cols), 0.0);
    it = stats_.emplace(std::string(weight), std::move(s)).first;
  }
  CalibStats& s = it->second;
  if (s.cols != cols)
    fail("calibration: {} was multiplied by rows of {} and of {} columns", weight, s.cols, cols);
  // Transposed, so that each Gram entry is a dot product of two contiguous columns.
  xt_.resize(static_cast<size_t>(n_rows * cols));
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t j = 0; j < cols; ++j) xt_[static_cast<size_t>(j * n_rows + t)] = x[t * cols + j];
  const float* xt = xt_.data();
  double* g = s.gram.data();
  // Row i of the lower triangle costs i + 1 dot products: index k takes rows from both ends in
  // turn (0, cols-1, 1, cols-2, ...) so that contiguous ranges of k carry equal work.
  auto rows = [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t i = (k % 2 == 0) ? k / 2 : cols - 1 - k / 2;
      const float* xi = xt + i * n_rows;
      double sa = 0;
      for (int64_t t = 0; t < n_rows; ++t) sa += std::fabs(double{xi[t]});
      s.sum_abs[static_cast<size_t>(i)] += sa;
      for (int64_t j = 0; j <= i; ++j) {
        const float* xj = xt + j * n_rows;
        double d = 0;
        for (int64_t t = 0; t < n_rows; ++t) d += double{xi[t]} * double{xj[t]};
        g[i * cols + j] += d;
      }
    }
  };
  if (pool_ != nullptr && pool_->size() > 1 && n_rows * cols >= 4096)
    pool_->parallel_for(cols, [&](int64_t b, int64_t e, int) { rows(b, e); });
  else
    rows(0, cols);
  s.n_tokens += n_rows;
}

std::map<std::string, CalibStats> CalibCapture::stats() const {
  std::map<std::string, CalibStats> out;
  for (const auto& [name, s] : stats_) {
    CalibStats c = s;
    for (int64_t i = 0; i < c.cols; ++i)
      for (int64_t j = 0; j < i; ++j) c.gram[j * c.cols + i] = c.gram[i * c.cols + j];
    out.emplace(name, std::move(c));
  }
  return out;
}

CalibResult capture_calibration(const Model& model, ThreadPool& pool,
                                std::span<const int32_t> tokens, const CalibOptions& opt,
                                const std::function<void(int64_t, int64_t)>& progress) {
  if (opt.ctx < 16) fail("calibration: chunks of {} tokens are too small (need 16)", opt.ctx);
  int64_t total = static_cast<int64_t>(tokens.size());
  if (opt.max_tokens > 0) total = std::min(total, opt.max_tokens);
  if (total < 16)
    fail("calibration: {} tokens of calibration text are too few (need at least 16)", total);
  const int block_size = 16;
  ModelRunnerOptions ro;
  ro.block_size = block_size;
  ro.kv_blocks = (opt.ctx + block_size - 1) / block_size;
  ro.max_tokens = opt.ctx;
  ro.max_logit_rows = 1;
  ModelRunner runner(model, pool, ro);
  if (!runner.backend().shares_host_memory())
    fail("calibration: the {} backend's memory is not host memory (not supported yet)",
         backend_kind_name(runner.backend().kind()));
  CalibCapture capture(&pool);
  runner.set_matmul_observer(&capture);
  std::vector<int32_t> table;
  for (int b = 0; b < ro.kv_blocks; ++b) table.push_back(b);
  std::vector<int32_t> chunk;
  CalibResult r;
  const double t0 = now_seconds();
  for (int64_t first = 0; first < total; first += opt.ctx) {
    const int64_t n = std::min<int64_t>(opt.ctx, total - first);
    if (n < 2) break;
    chunk.assign(tokens.begin() + first, tokens.begin() + first + n);
    if (opt.bos_id >= 0) chunk[0] = opt.bos_id;
    SeqWork w;
    w.id = static_cast<uint64_t>(r.chunks);
    w.tokens = chunk;
    w.start = 0;
    w.blocks = &table;
    w.logits = Logits::kNone;
    std::vector<SeqWork> work{w};
    runner.run(work);
    r.tokens += n;
    r.chunks++;
    if (progress) progress(r.tokens, total);
  }
  r.stats = capture.stats();
  for (const auto& [name, s] : r.stats)
    for (double v : s.gram)
      if (!std::isfinite(v)) fail("calibration: the activations of {} are not finite", name);
  r.seconds = now_seconds() - t0;
  return r;
}

}  // namespace kvasir
