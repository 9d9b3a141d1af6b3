// kvasir plan -m FILE [--memory SIZE] [--ctx N] [--max-seqs N] [--max-batched-tokens N]
// [--kv-dtype f16|f32]: prints how a memory budget splits into weights, scratch and KV cache
// blocks, and the largest batch of full-length sequences; exits 1 with a clear error when the
// budget cannot hold one full-length sequence.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/engine/memory_plan.h"
#include "kvasir/model/model.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Plan the memory of a serving engine (KV cache blocks)");
  struct Opts {
    KVTypeOptions kvt;
    std::string model, memory;
    PlanOptions plan;
    std::string margin;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--memory", o->memory,
                  "Memory budget, weights included (e.g. 8GiB, 512MiB, 2G; default: 90% of the "
                  "available memory)");
  cmd->add_option("-c,--ctx,--ctx-size,--max-model-len", o->plan.ctx,
                  "Max tokens per sequence (default: the model's context)");
  cmd->add_option("--max-seqs,--max-num-seqs", o->plan.max_seqs,
                  "Sequences running at once (default 64)");
  cmd->add_option("--max-batched-tokens,--max-num-batched-tokens", o->plan.max_batched_tokens,
                  "Tokens per engine step (default 512)");
  add_kv_type_options(cmd, o->kvt);
  cmd->add_option("--margin", o->margin, "Fixed headroom kept free (default 64MiB)");
  return [o]() {
    PlanOptions opt = o->plan;
    if (!o->memory.empty()) {
      opt.memory_bytes = parse_size(o->memory, "--memory");
    } else if (auto avail = default_memory_budget()) {
      opt.memory_bytes = *avail;
    } else {
      fail("--memory: cannot read the available memory from /proc/meminfo; pass --memory");
    }
    if (!o->margin.empty()) opt.margin_bytes = parse_size(o->margin, "--margin");
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    opt.kv_type = kvt;
    auto model = Model::load(o->model, Model::LoadOptions{.pack = false});
    warn_if_past_trained_context(opt.ctx, model->config().ctx_train);
    Plan plan = plan_memory(model->config(), static_cast<int64_t>(model->weight_bytes()), opt);
    fmt::print("model: {} ({}, {} layers, {} KV heads x {} dims)\n", o->model,
               dtype_name(model->weight_type()), model->config().n_layers,
               model->config().n_kv_heads, model->config().head_dim);
    fmt::print("{}", describe_plan(plan));
    return 0;
  };
}

}  // namespace kvasir::cli
