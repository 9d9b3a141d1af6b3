#include "kvasir/eval/quality_report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "kvasir/bench/model_bench.h"
#include "kvasir/engine/key_calibration.h"
#include "kvasir/engine/memory_plan.h"
#include "kvasir/eval/golden.h"
#include "kvasir/eval/kl_divergence.h"
#include "kvasir/eval/perplexity.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the text file", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Removes the reference distributions when the report ends, however it ends.
struct ScratchFile {
  std::string path;
  ~ScratchFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

}  // namespace

std::vector<ReportRow> run_quality_report(const ReportOptions& opt,
                                          const std::function<void(const std::string&)>& progress) {
  if (opt.kv_types.empty()) fail("eval report: no KV dtypes");
  const std::string text = read_text(opt.text);
  std::vector<GoldenCase> golden;
  if (!opt.golden_set.empty()) golden = read_golden_set(opt.golden_set);
  ThreadPool pool(opt.threads);

  std::vector<int32_t> tokens;
  int n_vocab = 0;
  ScratchFile scratch;
  const std::string dir =
      opt.scratch_dir.empty() ? std::filesystem::temp_directory_path().string() : opt.scratch_dir;
  scratch.path = fmt::format("{}/kvasir-report-{}.logits", dir, ::getpid());
  std::unique_ptr<LogitsReader> base;
  double base_ppl = 0;

  std::vector<std::string> models{opt.reference};
  models.insert(models.end(), opt.variants.begin(), opt.variants.end());
  std::vector<ReportRow> rows;
  for (size_t mi = 0; mi < models.size(); ++mi) {
    const std::string& path = models[mi];
    auto model = Model::load(path);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    if (mi == 0) {
      tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
      n_vocab = model->config().n_vocab;
      // The reference's own distributions with an f16 cache: what every row is compared with.
      PerplexityOptions po;
      po.ctx = opt.ctx;
      po.max_chunks = opt.chunks;
      po.bos_id = tok.add_bos() ? tok.bos_id() : -1;
      int n_chunks = static_cast<int>(tokens.size() / static_cast<size_t>(std::max(opt.ctx, 1)));
      if (opt.chunks >= 0) n_chunks = std::min(n_chunks, opt.chunks);
      if (n_chunks < 1)
        fail("{}: {} tokens, fewer than one chunk of {}", opt.text, tokens.size(), opt.ctx);
      LogitsWriter w(scratch.path, n_vocab, opt.ctx, n_chunks, tokens);
      base_ppl = perplexity(*model, pool, tokens, po, {},
                            [&](int, int, std::span<const float> l, int32_t) { w.add(l); })
                     .ppl;
      w.finish();
      base = std::make_unique<LogitsReader>(scratch.path);
    } else if (model->config().n_vocab != n_vocab) {
      fail("{}: a vocabulary of {} tokens, the reference {} has {}", path, model->config().n_vocab,
           opt.reference, n_vocab);
    }
    int64_t n_params = 0;
    for (const auto& t : model->file().tensors()) n_params += t.n_elements();
    const DType format = model->predominant_weight_type();  // a mixture's main format
    for (const KVCacheType& kv : opt.kv_types) {
      ReportRow r;
      r.model = path;
      r.format = std::string(dtype_name(format));
      r.kv = kv;
      r.file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
      r.bits_per_weight = n_params > 0 ? 8.0 * static_cast<double>(model->weight_bytes()) /
                                             static_cast<double>(n_params)
                                       : 0;
      r.kv_bytes_per_token = kv_bytes_per_token(model->config(), kv);
      const auto key_transform =
          opt.calibrate_keys ? calibrate_key_transform(*model, pool, kv.k) : nullptr;
      if (key_transform) r.key_transform = key_transform->source;
      PerplexityOptions po;
      po.ctx = opt.ctx;
      po.max_chunks = base->n_chunks();
      po.bos_id = tok.add_bos() ? tok.bos_id() : -1;
      po.kv_type = kv;
      po.key_transform = key_transform;
      KLAccumulator kl(*base);
      r.ppl = perplexity(*model, pool, tokens, po, {},
                         [&](int, int, std::span<const float> l, int32_t next) { kl.add(l, next); })
                  .ppl;
      const KLStats s = kl.finish();
      r.dppl_pct = 100.0 * (r.ppl / base_ppl - 1.0);
      r.kld = s.kld;
      r.kld_err = s.kld_err;
      r.top1 = s.same_top;
      if (!golden.empty()) {
        GoldenOptions go;
        go.kv_type = kv;
        go.key_transform = key_transform;
        const auto res = run_golden_set(*model, tok, pool, golden, go);
        int pass = 0;
        for (const auto& g : res) pass += g.pass ? 1 : 0;
        r.golden_pass_rate = static_cast<double>(pass) / static_cast<double>(res.size());
      }
      if (opt.tg > 0) {
        bench::BenchOptions bo;
        bo.pp = 0;
        bo.tg = opt.tg;
        bo.batches.clear();
        bo.bandwidth = false;
        bo.kv_type = kv;
        bo.key_transform = key_transform;
        for (const auto& b : bench::run_model_bench(*model, pool, bo))
          if (b.name == fmt::format("tg{}", opt.tg)) r.tg_tok_s = b.stats.median;
      }
      if (progress)
        progress(fmt::format("{} ({}), KV {}: PPL {:.4f} ({:+.3f}%), mean KLD {:.6f}", path,
                             r.format, kv.name(), r.ppl, r.dppl_pct, r.kld));
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::string report_markdown(const std::vector<ReportRow>& rows, int tg) {
  std::string s =
      "| model | format | KV | bits/weight | file size | KV bytes/token | PPL | ΔPPL % | mean KLD "
      "| top-1 agreement | golden pass rate |";
  std::string rule = "|---|---|---|---|---|---|---|---|---|---|---|";
  if (tg > 0) {
    s += fmt::format(" tg{} tok/s |", tg);
    rule += "---|";
  }
  s += "\n" + rule + "\n";
  for (const ReportRow& r : rows) {
    s += fmt::format(
        "| {} | {} | {} | {:.2f} | {:.2f} MiB | {} | {:.4f} | {:+.3f} | {:.6f} ± {:.6f} | {:.2f}% "
        "| {} |",
        std::filesystem::path(r.model).filename().string(), r.format, r.kv.name(),
        r.bits_per_weight, static_cast<double>(r.file_bytes) / 1048576.0, r.kv_bytes_per_token,
        r.ppl, r.dppl_pct, r.kld, r.kld_err, 100 * r.top1,
        r.golden_pass_rate ? fmt::format("{:.1f}%", 100 * *r.golden_pass_rate) : "-");
    if (tg > 0) s += r.tg_tok_s ? fmt::format(" {:.2f} |", *r.tg_tok_s) : " - |";
    s += "\n";
  }
  return s;
}

nlohmann::json report_json(const std::vector<ReportRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const ReportRow& r : rows) {
    nlohmann::json j = {{"model", r.model},
                        {"format", r.format},
                        {"kv_type", r.kv.name()},
                        {"bits_per_weight", r.bits_per_weight},
                        {"file_bytes", r.file_bytes},
                        {"kv_bytes_per_token", r.kv_bytes_per_token},
                        {"ppl", r.ppl},
                        {"dppl_pct", r.dppl_pct},
                        {"mean_kld", r.kld},
                        {"mean_kld_err", r.kld_err},
                        {"top1_agreement", r.top1},
                        {"key_transform", r.key_transform}};
    j["golden_pass_rate"] = r.golden_pass_rate ? nlohmann::json(*r.golden_pass_rate) : nullptr;
    j["tg_tok_s"] = r.tg_tok_s ? nlohmann::json(*r.tg_tok_s) : nullptr;
    a.push_back(j);
  }
  return a;
}

}  // namespace kvasir
