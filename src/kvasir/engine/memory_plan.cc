#include "kvasir/engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <string>

#include "kvasir/engine/prompt_scorer.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Scratch of one forward step (see the header for what is counted).
int64_t activation_bytes(const ModelConfig& c, const PlanOptions& o) {
  const int64_t n = o.max_batched_tokens;
  const int64_t per_token_f32 = 2 * int64_t{c.dim} + 2 * int64_t{c.q_dim()} +
                                2 * int64_t{c.kv_dim()} + 2 * int64_t{c.ffn_dim};
  // The matmul input prepared once per step, for the widest input: an f32 copy in token tiles
  // (float weights: the CPU backend's token tiles), 4 bytes a value, which also covers the int8
  // codes, scales and sums of quantized weights (about 1.3 bytes a value).
  const int64_t widest = std::max({int64_t{c.dim}, int64_t{c.q_dim()}, int64_t{c.ffn_dim}});
  const int64_t per_token_prepared = 4 * widest;
  // Sampling rows, plus the rows a prompt-scoring chunk may ask for (prompt_scorer.h).
  const int64_t rows = std::min<int64_t>(n, o.max_seqs) +
                       score_rows_per_step(c.n_vocab, static_cast<int>(n));
  const int64_t logits = rows * (int64_t{c.n_vocab} + c.dim) * 4;
  return 2 * (n * (per_token_f32 * 4 + per_token_prepared) + logits);
}

}  // namespace

int64_t kv_bytes_per_token(const ModelConfig& c, KVCacheType kv_type) {
  return int64_t{c.n_layers} * c.n_kv_heads *
         static_cast<int64_t>(kv_row_layout(kv_type.k, c.head_dim).bytes() +
                              kv_row_layout(kv_type.v, c.head_dim).bytes());
}

namespace {
// "66 B (int8: 64 B codes + 2 B scale)"
std::string row_formula(KVDType t, int head_dim) {
  const KVRowLayout L = kv_row_layout(t, head_dim);
  if (L.meta_bytes == 0)
    return fmt::format("{} B ({}: {} x {} B)", L.bytes(), kv_dtype_name(t), head_dim,
                       L.code_bytes / static_cast<size_t>(head_dim));
  if (t == KVDType::Int4)
    return fmt::format("{} B (int4: {} B codes + {} x 3 B scale and zero point)", L.bytes(),
                       L.code_bytes, L.n_groups);
  return fmt::format("{} B ({}: {} B codes + 2 B scale)", L.bytes(), kv_dtype_name(t),
                     L.code_bytes);
}
}  // namespace

std::string kv_bytes_per_token_formula(const ModelConfig& c, KVCacheType kv_type) {
  return fmt::format("{} layers x {} KV heads x (K {} + V {}) = {} B", c.n_layers, c.n_kv_heads,
                     row_formula(kv_type.k, c.head_dim), row_formula(kv_type.v, c.head_dim),
                     kv_bytes_per_token(c, kv_type));
}

Plan plan_memory(const ModelConfig& c, int64_t weight_bytes, const PlanOptions& o) {
  if (o.block_size <= 0) fail("block size: must be > 0, got {}", o.block_size);
  if (o.max_seqs <= 0) fail("--max-seqs: must be > 0, got {}", o.max_seqs);
  if (o.max_batched_tokens <= 0)
    fail("--max-batched-tokens: must be > 0, got {}", o.max_batched_tokens);
  if (o.memory_bytes <= 0) fail("--memory: must be > 0, got {} bytes", o.memory_bytes);
  if (o.ctx < 0) fail("--ctx: must be > 0 (or 0 = the model's context), got {}", o.ctx);
  if (c.n_layers <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0)
    fail("model: invalid KV shape (layers {}, kv heads {}, head dim {})", c.n_layers, c.n_kv_heads,
         c.head_dim);

  Plan p;
  p.ctx = o.ctx > 0 ? o.ctx : c.ctx_train;
  if (p.ctx <= 0) fail("--ctx: the model does not say its context length; pass --ctx");
  p.block_size = o.block_size;
  p.max_seqs = o.max_seqs;
  p.kv_type = o.kv_type;
  p.memory_bytes = o.memory_bytes;
  p.weight_bytes = weight_bytes;
  p.activation_bytes = activation_bytes(c, o);
  p.margin_bytes = o.margin_bytes;
  p.kv_budget_bytes = o.memory_bytes - weight_bytes - p.activation_bytes - p.margin_bytes;
  p.kv_bytes_per_token = kv_bytes_per_token(c, o.kv_type);
  p.kv_bytes_per_token_f16 = kv_bytes_per_token(c, KVCacheType{});
  p.kv_bytes_formula = kv_bytes_per_token_formula(c, o.kv_type);
  p.kv_bytes_per_block = p.kv_bytes_per_token * o.block_size;
  p.blocks_per_seq = ceil_div(p.ctx, o.block_size);
  p.kv_blocks_fit = p.kv_budget_bytes > 0 ? p.kv_budget_bytes / p.kv_bytes_per_block : 0;
  if (p.kv_blocks_fit < p.blocks_per_seq) {
    const int64_t needed = weight_bytes + p.activation_bytes + p.margin_bytes +
                           p.blocks_per_seq * p.kv_bytes_per_block;
    fail(
        "memory plan: {} cannot hold one sequence of {} tokens: weights {} + activations {} + "
        "margin {} + KV {} ({} blocks of {} tokens) = {}; raise --memory or lower --ctx",
        format_size(o.memory_bytes), p.ctx, format_size(weight_bytes),
        format_size(p.activation_bytes), format_size(p.margin_bytes),
        format_size(p.blocks_per_seq * p.kv_bytes_per_block), p.blocks_per_seq, o.block_size,
        format_size(needed));
  }
  p.kv_blocks = std::min(p.kv_blocks_fit, p.blocks_per_seq * o.max_seqs);
  p.max_batch_fit = p.kv_blocks_fit / p.blocks_per_seq;
  p.max_batch_at_ctx = static_cast<int>(std::min<int64_t>(p.max_batch_fit, o.max_seqs));
  return p;
}

std::vector<Plan> plan_memory_shared(const std::vector<SharedPlanInput>& models,
                                     int64_t memory_bytes, int64_t margin_bytes) {
  if (models.empty()) fail("memory plan: no model");
  if (memory_bytes <= 0) fail("--memory: must be > 0, got {} bytes", memory_bytes);
  const auto n = static_cast<int64_t>(models.size());
  // Each model alone with an unlimited budget: its fixed bytes and what its KV cache can use.
  std::vector<Plan> alone;
  std::vector<int64_t> fixed(models.size()), need(models.size()), one_seq(models.size());
  int64_t fixed_total = margin_bytes, share_total_need = 0;
  double share_sum = 0;
  for (size_t i = 0; i < models.size(); ++i) {
    const SharedPlanInput& m = models[i];
    if (m.share < 0 || m.share > 1)
      fail("model '{}': memory_share must be in [0, 1], got {}", m.name, m.share);
    share_sum += m.share;
    PlanOptions o = m.options;
    o.margin_bytes = 0;
    o.memory_bytes = int64_t{1} << 60;
    Plan p = plan_memory(*m.config, m.weight_bytes, o);
    fixed[i] = m.weight_bytes + p.activation_bytes;
    need[i] = p.blocks_per_seq * o.max_seqs * p.kv_bytes_per_block;
    one_seq[i] = p.blocks_per_seq * p.kv_bytes_per_block;
    fixed_total += fixed[i];
    if (m.share == 0) share_total_need += need[i];
    alone.push_back(p);
  }
  if (share_sum > 1 + 1e-9) fail("memory_share: the models' shares add up to {} (> 1)", share_sum);
  const int64_t kv_budget = memory_bytes - fixed_total;
  int64_t min_total = fixed_total;
  for (int64_t b : one_seq) min_total += b;
  if (kv_budget < 0 || memory_bytes < min_total) {
    std::string parts;
    for (size_t i = 0; i < models.size(); ++i)
      parts += fmt::format("{}'{}': weights + activations {}, one {}-token sequence's KV {}",
                           i ? "; " : "", models[i].name, format_size(fixed[i]), alone[i].ctx,
                           format_size(one_seq[i]));
    fail(
        "memory plan: {} cannot hold the {} models: {}; margin {}; needed at least {}; raise "
        "--memory, lower a context, or serve fewer models",
        format_size(memory_bytes), n, parts, format_size(margin_bytes), format_size(min_total));
  }
  // Shares first, then the rest by need; what a model cannot use goes back to the others.
  std::vector<int64_t> kv(models.size(), 0);
  const double by_need = 1.0 - share_sum;
  for (size_t i = 0; i < models.size(); ++i) {
    const double frac = models[i].share > 0    ? models[i].share
                        : share_total_need > 0 ? by_need * static_cast<double>(need[i]) /
                                                     static_cast<double>(share_total_need)
                                               : 0.0;
    kv[i] = std::min(need[i], static_cast<int64_t>(frac * static_cast<double>(kv_budget)));
  }
  int64_t left = kv_budget;
  for (int64_t k : kv) left -= k;
  for (size_t i = 0; i < models.size() && left > 0; ++i) {
    const int64_t more = std::min(left, need[i] - kv[i]);
    kv[i] += more;
    left -= more;
  }
  std::vector<Plan> plans;
  for (size_t i = 0; i < models.size(); ++i) {
    PlanOptions o = models[i].options;
    o.margin_bytes = margin_bytes / n;
    o.memory_bytes = fixed[i] + o.margin_bytes + kv[i];
    try {
      plans.push_back(plan_memory(*models[i].config, models[i].weight_bytes, o));
    } catch (const Error& e) {
      fail("model '{}': its share of the KV budget ({} of {}) {}", models[i].name,
           format_size(kv[i]), format_size(kv_budget), e.what());
    }
  }
  return plans;
}

std::string describe_plan(const Plan& p) {
  std::string s;
  auto line = [&](std::string_view name, const std::string& value) {
    s += fmt::format("  {:<26}{}\n", name, value);
  };
  s += fmt::format("memory plan ({} budget, ctx {}, max {} sequences, KV {}):\n",
                   format_size(p.memory_bytes), p.ctx, p.max_seqs, p.kv_type.name());
  line("weights", format_size(p.weight_bytes));
  line("activations (estimate)", format_size(p.activation_bytes));
  line("margin", format_size(p.margin_bytes));
  line("KV budget", format_size(p.kv_budget_bytes));
  line("KV bytes per token", p.kv_type == KVCacheType{}
                                 ? p.kv_bytes_formula
                                 : fmt::format("{} ({:.1f}% of f16's {} B)", p.kv_bytes_formula,
                                               100.0 * static_cast<double>(p.kv_bytes_per_token) /
                                                   static_cast<double>(p.kv_bytes_per_token_f16),
                                               p.kv_bytes_per_token_f16));
  line("KV block", fmt::format("{} tokens, {}", p.block_size, format_size(p.kv_bytes_per_block)));
  line("blocks that fit",
       fmt::format("{} ({} tokens)", p.kv_blocks_fit, p.kv_blocks_fit * p.block_size));
  line("blocks allocated",
       fmt::format("{} ({} tokens, {}){}", p.kv_blocks, p.kv_tokens(), format_size(p.kv_bytes()),
                   p.kv_blocks < p.kv_blocks_fit ? ": capped at max-seqs full sequences" : ""));
  line("blocks per sequence", fmt::format("{} (ctx {})", p.blocks_per_seq, p.ctx));
  line("largest batch at ctx",
       fmt::format("{} sequences of {} tokens{}", p.max_batch_at_ctx, p.ctx,
                   p.max_batch_fit > p.max_batch_at_ctx
                       ? fmt::format(" (memory holds {}; --max-seqs caps it)", p.max_batch_fit)
                       : std::string()));
  return s;
}

int64_t parse_size(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const std::string number(text.substr(0, i));
  std::string unit;
  for (char ch : text.substr(i))
    if (ch != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double value = 0;
  size_t used = 0;
  bool ok = !number.empty() && std::count(number.begin(), number.end(), '.') <= 1 && number != ".";
  if (ok) {
    try {
      value = std::stod(number, &used);
    } catch (const std::exception&) {
      ok = false;
    }
    ok = ok && used == number.size();
  }
  int shift = -1;
  if (unit.empty() || unit == "b")
    shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    shift = 40;
  if (!ok || shift < 0)
    fail("{}: expected a size such as 8GiB, 512MiB, 2G or 1048576, got '{}'", what, text);
  const double bytes = value * std::ldexp(1.0, shift);
  if (!(bytes < 9.0e18)) fail("{}: size '{}' is too large", what, text);
  return static_cast<int64_t>(bytes);
}

std::optional<int64_t> default_memory_budget() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024 / 10 * 9;
  return std::nullopt;
}

std::string format_size(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double a = std::fabs(b);
  if (a >= double(int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(int64_t{1} << 30));
  if (a >= double(1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  if (a >= double(1 << 10)) return fmt::format("{:.1f} KiB", b / double(1 << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace kvasir
