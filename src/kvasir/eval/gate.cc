#include "kvasir/eval/gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <sstream>

#include "kvasir/bench/model_bench.h"
#include "kvasir/engine/key_calibration.h"
#include "kvasir/eval/golden.h"
#include "kvasir/eval/kl_divergence.h"
#include "kvasir/eval/perplexity.h"
#include "kvasir/kernels/backend.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/atomic_file.h"
#include "kvasir/util/build_info.h"
#include "kvasir/util/error.h"
#include "kvasir/util/sha256.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::gate {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ---- reading JSON fields, errors naming "section.field" ----

class Fields {
 public:
  Fields(const json& obj, std::string where, std::string section)
      : obj_(obj), where_(std::move(where)), section_(std::move(section)) {
    if (!obj_.is_object()) {
      if (section_.empty()) fail("{}: expected a JSON object, got {}", where_, obj_.type_name());
      fail("{}: field '{}': expected an object, got {}", where_, section_, obj_.type_name());
    }
  }
  // Refuses a field not in `known`.
  void only(std::initializer_list<const char*> known) const {
    for (const auto& [key, value] : obj_.items()) {
      if (std::find_if(known.begin(), known.end(), [&](const char* k) { return key == k; }) ==
          known.end()) {
        std::string names;
        for (const char* k : known) names += (names.empty() ? "" : ", ") + std::string(k);
        fail("{}: unknown field '{}' (expected one of: {})", where_, name(key.c_str()), names);
      }
    }
  }
  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  std::string name(const char* key) const {
    return section_.empty() ? std::string(key) : section_ + "." + key;
  }

  std::string str(const char* key, bool required = false) const {
    if (!has(key)) {
      if (required) missing(key);
      return "";
    }
    const json& v = obj_.at(key);
    if (!v.is_string()) bad(key, "a string", v);
    std::string s = v.get<std::string>();
    if (required && s.empty())
      fail("{}: field '{}': expected a non-empty string", where_, name(key));
    return s;
  }
  std::optional<double> num(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = obj_.at(key);
    if (!v.is_number()) bad(key, "a number", v);
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0) bad(key, "a finite number >= 0", v);
    return d;
  }
  int64_t integer(const char* key, int64_t def, int64_t lo, int64_t hi) const {
    if (!has(key)) return def;
    const json& v = obj_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      bad(key, fmt::format("an integer in {}..{}", lo, hi), v);
    return v.get<int64_t>();
  }
  [[noreturn]] void missing(const char* key) const {
    fail("{}: field '{}' is missing", where_, name(key));
  }
  [[noreturn]] void bad(const char* key, const std::string& expected, const json& v) const {
    fail("{}: field '{}': expected {}, got {}", where_, name(key), expected, v.dump());
  }
  const std::string& where() const { return where_; }

 private:
  const json& obj_;
  std::string where_, section_;
};

using ojson = nlohmann::ordered_json;

ojson str_or_null(const std::string& s) {
  return s.empty() ? ojson(nullptr) : ojson(s);
}

ojson opt_or_null(const std::optional<double>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

// "f16" or "k=int8,v=int4" (KVCacheType::name()); nullopt otherwise.
std::optional<KVCacheType> parse_kv(const std::string& s) {
  if (auto t = kv_dtype_from_name(s)) return KVCacheType{*t, *t};
  if (s.rfind("k=", 0) != 0) return std::nullopt;
  const size_t comma = s.find(",v=");
  if (comma == std::string::npos) return std::nullopt;
  auto k = kv_dtype_from_name(s.substr(2, comma - 2));
  auto v = kv_dtype_from_name(s.substr(comma + 3));
  if (!k || !v) return std::nullopt;
  return KVCacheType{*k, *v};
}

// a <= limit, and a >= limit, with the slack of the header.
double slack(double limit) {
  return 1e-9 * std::max(std::abs(limit), 1.0);
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return "";
    const size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "" : line.substr(b);
  }
  return "";
}

std::string read_text(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the text file (field '{}')", path, field);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// ---- the file ----

void validate_run(const Run& r, const std::string& where) {
  if (!r.perplexity() && r.golden_set.empty() && !r.throughput())
    fail(
        "{}: nothing to check: the run configures none of 'run.text', 'run.kl_base', "
        "'run.golden_set', 'run.tg', 'run.pp'",
        where);
  if (!r.text.empty() && !r.kl_base.empty())
    fail(
        "{}: fields 'run.text' and 'run.kl_base' exclude each other (the logits file carries "
        "its text)",
        where);
  if (r.ctx < 0 || (!r.text.empty() && r.ctx < 4))
    fail("{}: field 'run.ctx': expected at least 4 tokens per chunk, got {}", where, r.ctx);
  if (r.chunks < -1 || r.chunks == 0)
    fail("{}: field 'run.chunks': expected -1 (all) or >= 1, got {}", where, r.chunks);
  if (r.tg < 0) fail("{}: field 'run.tg': expected >= 0, got {}", where, r.tg);
  if (r.pp < 0) fail("{}: field 'run.pp': expected >= 0, got {}", where, r.pp);
  if (r.reps < 1) fail("{}: field 'run.reps': expected >= 1, got {}", where, r.reps);
  if (r.threads < 0) fail("{}: field 'run.threads': expected >= 0, got {}", where, r.threads);
  for (const auto& [field, digest] : {std::pair{"run.text_sha256", &r.text_sha256},
                                      {"run.kl_base_sha256", &r.kl_base_sha256},
                                      {"run.golden_set_sha256", &r.golden_set_sha256}}) {
    if (!digest->empty() && !is_sha256_hex(*digest))
      fail("{}: field '{}': expected 64 hex characters, got \"{}\"", where, field, *digest);
  }
}

Baseline parse_baseline(const json& j, const std::string& where) {
  Fields top(j, where, "");
  top.only({"format", "run", "model", "environment", "metrics", "tolerances"});
  if (!j.contains("format"))
    fail("{}: field 'format' is missing (expected \"{}\")", where, kFormat);
  if (!j.at("format").is_string() || j.at("format").get<std::string>() != kFormat)
    fail("{}: field 'format': expected \"{}\", got {}", where, kFormat, j.at("format").dump());
  for (const char* s : {"run", "model", "environment", "metrics"})
    if (!j.contains(s)) fail("{}: field '{}' is missing", where, s);

  Baseline b;
  {
    Fields f(j.at("run"), where, "run");
    f.only({"text", "kl_base", "golden_set", "ctx", "chunks", "tg", "pp", "reps", "threads",
            "kv_dtype", "text_sha256", "kl_base_sha256", "golden_set_sha256"});
    Run& r = b.run;
    r.text = f.str("text");
    r.kl_base = f.str("kl_base");
    r.golden_set = f.str("golden_set");
    r.ctx = static_cast<int>(f.integer("ctx", 0, 0, 1 << 24));
    r.chunks = static_cast<int>(f.integer("chunks", -1, -1, 1 << 30));
    r.tg = static_cast<int>(f.integer("tg", 0, 0, 1 << 20));
    r.pp = static_cast<int>(f.integer("pp", 0, 0, 1 << 20));
    r.reps = static_cast<int>(f.integer("reps", 3, 1, 1000));
    r.threads = static_cast<int>(f.integer("threads", 0, 0, 4096));
    if (f.has("kv_dtype")) {
      const std::string kv = f.str("kv_dtype");
      auto t = parse_kv(kv);
      if (!t)
        fail("{}: field 'run.kv_dtype': expected a KV cache dtype ({}) or \"k=X,v=Y\", got \"{}\"",
             where, kv_dtype_choices(), kv);
      r.kv = *t;
    }
    r.text_sha256 = f.str("text_sha256");
    r.kl_base_sha256 = f.str("kl_base_sha256");
    r.golden_set_sha256 = f.str("golden_set_sha256");
    validate_run(r, where);
  }
  {
    Fields f(j.at("model"), where, "model");
    f.only({"path", "sha256", "weight_type", "file_bytes"});
    b.model.path = f.str("path", true);
    b.model.sha256 = f.str("sha256");
    if (!b.model.sha256.empty() && !is_sha256_hex(b.model.sha256))
      fail("{}: field 'model.sha256': expected 64 hex characters, got \"{}\"", where,
           b.model.sha256);
    b.model.weight_type = f.str("weight_type");
    b.model.file_bytes = f.integer("file_bytes", 0, 0, INT64_MAX);
  }
  {
    Fields f(j.at("environment"), where, "environment");
    f.only({"kvasir_version", "kvasir_commit", "backend", "cpu", "threads", "created"});
    b.env.kvasir_version = f.str("kvasir_version");
    b.env.kvasir_commit = f.str("kvasir_commit");
    b.env.backend = f.str("backend");
    b.env.cpu = f.str("cpu");
    b.env.threads = static_cast<int>(f.integer("threads", 0, 0, 4096));
    b.env.created = f.str("created");
  }
  {
    Fields f(j.at("metrics"), where, "metrics");
    f.only({"ppl", "ppl_tokens", "mean_kld", "top1_agreement", "golden_pass_rate", "golden_passed",
            "golden_cases", "tg_tok_s", "pp_tok_s"});
    Metrics& m = b.metrics;
    m.ppl = f.num("ppl");
    m.ppl_tokens = f.integer("ppl_tokens", 0, 0, INT64_MAX);
    m.mean_kld = f.num("mean_kld");
    m.top1_agreement = f.num("top1_agreement");
    m.golden_pass_rate = f.num("golden_pass_rate");
    m.golden_passed = static_cast<int>(f.integer("golden_passed", 0, 0, 1 << 30));
    m.golden_cases = static_cast<int>(f.integer("golden_cases", 0, 0, 1 << 30));
    m.tg_tok_s = f.num("tg_tok_s");
    m.pp_tok_s = f.num("pp_tok_s");
    // A metric is present exactly when the run configures it.
    auto rule = [&](const char* key, const std::optional<double>& v, bool configured,
                    const char* because) {
      if (configured && !v) fail("{}: field 'metrics.{}' is missing ({})", where, key, because);
      if (!configured && v)
        fail("{}: field 'metrics.{}' is set but the run does not measure it ({})", where, key,
             because);
    };
    const Run& r = b.run;
    rule("ppl", m.ppl, r.perplexity(), "measured when run.text or run.kl_base is set");
    rule("mean_kld", m.mean_kld, !r.kl_base.empty(), "measured when run.kl_base is set");
    rule("top1_agreement", m.top1_agreement, !r.kl_base.empty(),
         "measured when run.kl_base is set");
    rule("golden_pass_rate", m.golden_pass_rate, !r.golden_set.empty(),
         "measured when run.golden_set is set");
    rule("tg_tok_s", m.tg_tok_s, r.tg > 0, "measured when run.tg > 0");
    rule("pp_tok_s", m.pp_tok_s, r.pp > 0, "measured when run.pp > 0");
    for (const auto& [key, v] : {std::pair{"top1_agreement", m.top1_agreement},
                                 {"golden_pass_rate", m.golden_pass_rate}}) {
      if (v && *v > 1.0)
        fail("{}: field 'metrics.{}': expected a fraction in 0..1, got {}", where, key, *v);
    }
    if (m.golden_passed > m.golden_cases)
      fail("{}: field 'metrics.golden_passed': {} is more than golden_cases {}", where,
           m.golden_passed, m.golden_cases);
  }
  if (j.contains("tolerances")) {
    Fields f(j.at("tolerances"), where, "tolerances");
    f.only({"ppl_rise_pct", "kld_rise", "top1_drop_points", "golden_drop_points",
            "throughput_drop_pct"});
    Tolerances& t = b.tol;
    t.ppl_rise_pct = f.num("ppl_rise_pct").value_or(t.ppl_rise_pct);
    t.kld_rise = f.num("kld_rise").value_or(t.kld_rise);
    t.top1_drop_points = f.num("top1_drop_points").value_or(t.top1_drop_points);
    t.golden_drop_points = f.num("golden_drop_points").value_or(t.golden_drop_points);
    t.throughput_drop_pct = f.num("throughput_drop_pct").value_or(t.throughput_drop_pct);
    if (t.top1_drop_points > 100)
      fail("{}: field 'tolerances.top1_drop_points': expected 0..100, got {}", where,
           t.top1_drop_points);
    if (t.golden_drop_points > 100)
      fail("{}: field 'tolerances.golden_drop_points': expected 0..100, got {}", where,
           t.golden_drop_points);
    if (t.throughput_drop_pct > 100)
      fail("{}: field 'tolerances.throughput_drop_pct': expected 0..100, got {}", where,
           t.throughput_drop_pct);
  }
  return b;
}

Baseline read_baseline(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the baseline ({})", path, std::strerror(errno));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  return parse_baseline(j, path);
}

ojson baseline_json(const Baseline& b) {
  const Run& r = b.run;
  const Metrics& m = b.metrics;
  ojson metrics = {{"ppl", opt_or_null(m.ppl)},
                   {"ppl_tokens", m.ppl_tokens},
                   {"mean_kld", opt_or_null(m.mean_kld)},
                   {"top1_agreement", opt_or_null(m.top1_agreement)},
                   {"golden_pass_rate", opt_or_null(m.golden_pass_rate)},
                   {"golden_passed", m.golden_passed},
                   {"golden_cases", m.golden_cases},
                   {"tg_tok_s", opt_or_null(m.tg_tok_s)},
                   {"pp_tok_s", opt_or_null(m.pp_tok_s)}};
  return ojson{{"format", kFormat},
               {"run",
                {{"text", str_or_null(r.text)},
                 {"kl_base", str_or_null(r.kl_base)},
                 {"golden_set", str_or_null(r.golden_set)},
                 {"ctx", r.ctx},
                 {"chunks", r.chunks},
                 {"tg", r.tg},
                 {"pp", r.pp},
                 {"reps", r.reps},
                 {"threads", r.threads},
                 {"kv_dtype", r.kv.name()},
                 {"text_sha256", str_or_null(r.text_sha256)},
                 {"kl_base_sha256", str_or_null(r.kl_base_sha256)},
                 {"golden_set_sha256", str_or_null(r.golden_set_sha256)}}},
               {"model",
                {{"path", b.model.path},
                 {"sha256", str_or_null(b.model.sha256)},
                 {"weight_type", b.model.weight_type},
                 {"file_bytes", b.model.file_bytes}}},
               {"environment",
                {{"kvasir_version", b.env.kvasir_version},
                 {"kvasir_commit", b.env.kvasir_commit},
                 {"backend", b.env.backend},
                 {"cpu", b.env.cpu},
                 {"threads", b.env.threads},
                 {"created", b.env.created}}},
               {"metrics", metrics},
               {"tolerances",
                {{"ppl_rise_pct", b.tol.ppl_rise_pct},
                 {"kld_rise", b.tol.kld_rise},
                 {"top1_drop_points", b.tol.top1_drop_points},
                 {"golden_drop_points", b.tol.golden_drop_points},
                 {"throughput_drop_pct", b.tol.throughput_drop_pct}}}};
}

void write_baseline(const std::string& path, const Baseline& b) {
  const std::string text = baseline_json(b).dump(2) + "\n";
  parse_baseline(json::parse(text), path);  // what is written reads back
  write_file_atomically(path, [&](FileSink& out) { out.put(text.data(), text.size()); });
}

std::string resolve_path(const std::string& baseline_path, const std::string& stored) {
  if (stored.empty() || fs::path(stored).is_absolute()) return stored;
  const fs::path dir = fs::path(baseline_path).parent_path();
  return (dir / stored).lexically_normal().string();
}

std::string path_for_baseline(const std::string& baseline_path, const std::string& given) {
  if (given.empty() || fs::path(given).is_absolute()) return given;
  const fs::path dir = fs::absolute(fs::path(baseline_path)).parent_path().lexically_normal();
  const fs::path target = fs::absolute(fs::path(given)).lexically_normal();
  const fs::path rel = target.lexically_relative(dir);
  return rel.empty() ? target.string() : rel.string();
}

// ---- measuring ----

Measurement measure(const Run& run, const std::string& baseline_path, const std::string& model_path,
                    const MeasureOptions& opt) {
  validate_run(run, baseline_path);
  auto say = [&](const std::string& line) {
    if (opt.progress) opt.progress(line);
  };
  Measurement out;
  // Inputs first: a changed or missing input is refused before the model loads.
  struct Input {
    const char* field;
    const std::string& stored;
    const std::string& recorded;
    std::string* digest;
  };
  const Input inputs[] = {
      {"run.text", run.text, run.text_sha256, &out.text_sha256},
      {"run.kl_base", run.kl_base, run.kl_base_sha256, &out.kl_base_sha256},
      {"run.golden_set", run.golden_set, run.golden_set_sha256, &out.golden_set_sha256}};
  for (const Input& in : inputs) {
    if (in.stored.empty()) continue;
    const std::string path = resolve_path(baseline_path, in.stored);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      fail("{}: cannot read the file of field '{}' in {} (not a readable file)", path, in.field,
           baseline_path);
    *in.digest = sha256_file(path);
    if (opt.verify_inputs && !in.recorded.empty() && *in.digest != in.recorded)
      fail(
          "{}: the file of field '{}' changed since the baseline {} was measured (sha256 {}, "
          "recorded {}); measure the baseline again",
          path, in.field, baseline_path, *in.digest, in.recorded);
  }

  auto model = Model::load(model_path);
  Tokenizer tok = Tokenizer::from_gguf(model->file());
  ThreadPool pool(run.threads);

  out.model.path = model_path;
  out.model.sha256 = sha256_model_path(model_path);
  out.model.weight_type = std::string(dtype_name(model->predominant_weight_type()));
  std::error_code ec;
  if (fs::is_regular_file(model_path, ec))
    out.model.file_bytes = static_cast<int64_t>(fs::file_size(model_path));
  const BuildInfo& bi = build_info();
  out.env.kvasir_version = bi.version;
  out.env.kvasir_commit = bi.commit;
  out.env.backend = make_backend(model->backend_kind(), pool)->description();
  out.env.cpu = cpu_model_name();
  out.env.threads = pool.size();
  out.env.created = utc_now();

  // Quantized keys go through the key transform calibrated on the built-in text, as kvasir's
  // commands store them by default (engine/key_calibration.h).
  const auto key_transform = calibrate_key_transform(*model, pool, run.kv.k);
  Metrics& m = out.metrics;
  if (run.perplexity()) {
    std::unique_ptr<LogitsReader> base;
    std::vector<int32_t> tokens;
    int ctx = run.ctx;
    if (!run.kl_base.empty()) {
      const std::string path = resolve_path(baseline_path, run.kl_base);
      base = std::make_unique<LogitsReader>(path);
      if (ctx != 0 && ctx != base->ctx())
        fail("{}: saved with chunks of {} tokens, field 'run.ctx' says {}", path, base->ctx(), ctx);
      ctx = base->ctx();
      if (base->n_vocab() != model->config().n_vocab)
        fail("{}: saved with a vocabulary of {} tokens, {} has {}", path, base->n_vocab(),
             model_path, model->config().n_vocab);
      tokens.assign(base->tokens().begin(), base->tokens().end());
    } else {
      const std::string path = resolve_path(baseline_path, run.text);
      tokens = tok.encode(read_text(path, "run.text"), /*add_special=*/true,
                          /*parse_special=*/false);
    }
    PerplexityOptions po;
    po.ctx = ctx;
    po.max_chunks = run.chunks;
    if (base)
      po.max_chunks = run.chunks >= 0 ? std::min(run.chunks, base->n_chunks()) : base->n_chunks();
    po.bos_id = tok.add_bos() ? tok.bos_id() : -1;
    po.kv_type = run.kv;
    po.key_transform = key_transform;
    std::unique_ptr<KLAccumulator> kl;
    ScoredRowFn on_row;
    if (base) {
      kl = std::make_unique<KLAccumulator>(*base);
      on_row = [&](int, int, std::span<const float> logits, int32_t next) {
        kl->add(logits, next);
      };
    }
    const PerplexityResult pr = perplexity(*model, pool, tokens, po, {}, on_row);
    m.ppl = pr.ppl;
    m.ppl_tokens = pr.scored;
    out.ctx = ctx;
    std::string line = fmt::format("perplexity {:.4f} over {} tokens ({} chunks of {})", pr.ppl,
                                   pr.scored, pr.chunks, ctx);
    if (kl) {
      const KLStats s = kl->finish();
      m.mean_kld = s.kld;
      m.top1_agreement = s.same_top;
      line += fmt::format(", mean KLD {:.6f}, top-1 agreement {:.2f}%", s.kld, 100 * s.same_top);
    }
    say(line);
  }
  if (!run.golden_set.empty()) {
    const auto cases = read_golden_set(resolve_path(baseline_path, run.golden_set));
    GoldenOptions go;
    go.kv_type = run.kv;
    go.key_transform = key_transform;
    const auto results = run_golden_set(*model, tok, pool, cases, go);
    m.golden_cases = static_cast<int>(results.size());
    for (const auto& r : results) {
      if (r.pass)
        ++m.golden_passed;
      else
        m.golden_failed.push_back(r.id);
    }
    m.golden_pass_rate = static_cast<double>(m.golden_passed) / m.golden_cases;
    say(fmt::format("golden set: {} of {} cases pass", m.golden_passed, m.golden_cases));
  }
  if (run.throughput() && opt.throughput) {
    bench::BenchOptions bo;
    bo.reps = run.reps;
    bo.pp = run.pp;
    bo.tg = run.tg;
    bo.batches.clear();
    bo.bandwidth = false;
    bo.kv_type = run.kv;
    bo.key_transform = key_transform;
    bench::validate(bo, model.get());
    for (const auto& r : bench::run_model_bench(*model, pool, bo)) {
      if (run.tg > 0 && r.name == fmt::format("tg{}", run.tg)) m.tg_tok_s = r.stats.median;
      if (run.pp > 0 && r.name == fmt::format("pp{}", run.pp)) m.pp_tok_s = r.stats.median;
    }
    if ((run.tg > 0 && !m.tg_tok_s) || (run.pp > 0 && !m.pp_tok_s))
      fail("eval gate: the benchmark did not report tg{} / pp{}", run.tg, run.pp);
    say(fmt::format("throughput:{}{} ({} threads, median of {})",
                    m.tg_tok_s ? fmt::format(" tg{} {:.1f} tok/s", run.tg, *m.tg_tok_s) : "",
                    m.pp_tok_s ? fmt::format(" pp{} {:.1f} tok/s", run.pp, *m.pp_tok_s) : "",
                    pool.size(), run.reps));
  }
  return out;
}

// ---- comparing ----

bool Report::pass() const {
  return std::none_of(checks.begin(), checks.end(),
                      [](const Check& c) { return c.verdict == Verdict::kFail; });
}

std::vector<std::string> Report::failed() const {
  std::vector<std::string> out;
  for (const Check& c : checks)
    if (c.verdict == Verdict::kFail) out.push_back(c.label);
  return out;
}

Report compare(const Baseline& base, const Metrics& now, const Tolerances& tol,
               bool check_throughput) {
  Report rep;
  const Metrics& b = base.metrics;
  // higher_better: the limit is a floor, else a ceiling.
  auto add = [&](const char* metric, std::string label, const std::optional<double>& bv,
                 const std::optional<double>& nv, double limit, bool higher_better,
                 std::string tolerance, const std::function<std::string(double)>& show,
                 bool skippable) {
    if (!bv) return;
    Check c;
    c.metric = metric;
    c.label = std::move(label);
    c.baseline = *bv;
    c.now = nv;
    c.limit = limit;
    c.baseline_text = show(*bv);
    c.tolerance_text = std::move(tolerance);
    if (skippable && (!check_throughput || !nv)) {
      c.now_text = nv ? show(*nv) : "-";
      c.verdict = Verdict::kSkipped;
    } else if (!nv || !std::isfinite(*nv)) {
      c.now_text = nv ? show(*nv) : "not measured";
      c.verdict = Verdict::kFail;
    } else {
      c.now_text = show(*nv);
      const bool ok = higher_better ? *nv >= limit - slack(limit) : *nv <= limit + slack(limit);
      c.verdict = ok ? Verdict::kPass : Verdict::kFail;
    }
    rep.checks.push_back(std::move(c));
  };
  auto fixed = [](int digits) {
    return [digits](double v) { return fmt::format("{:.{}f}", v, digits); };
  };
  auto rise = [](double t, const char* unit) {
    return t == 0 ? std::string("no rise") : fmt::format("+{:g}{}", t, unit);
  };
  auto drop = [](double t, const char* unit) {
    return t == 0 ? std::string("no drop") : fmt::format("-{:g}{}", t, unit);
  };
  auto pct = [](int digits) {
    return [digits](double v) { return fmt::format("{:.{}f}%", 100 * v, digits); };
  };
  if (b.ppl) {
    const double lim = *b.ppl * (1 + tol.ppl_rise_pct / 100);
    add("ppl", "PPL", b.ppl, now.ppl, lim, false,
        fmt::format("{} (max {:.4f})", rise(tol.ppl_rise_pct, "%"), lim), fixed(4), false);
  }
  if (b.mean_kld) {
    const double lim = *b.mean_kld + tol.kld_rise;
    add("mean_kld", "mean KLD", b.mean_kld, now.mean_kld, lim, false,
        fmt::format("{} (max {:.6f})", rise(tol.kld_rise, ""), lim), fixed(6), false);
  }
  if (b.top1_agreement) {
    const double lim = *b.top1_agreement - tol.top1_drop_points / 100;
    add("top1_agreement", "top-1 agreement", b.top1_agreement, now.top1_agreement, lim, true,
        fmt::format("{} (min {:.2f}%)", drop(tol.top1_drop_points, " pt"), 100 * lim), pct(2),
        false);
  }
  if (b.golden_pass_rate) {
    const double lim = *b.golden_pass_rate - tol.golden_drop_points / 100;
    auto show_b = [&](double v) {
      return fmt::format("{:.1f}% ({}/{})", 100 * v, b.golden_passed, b.golden_cases);
    };
    auto show_n = [&](double v) {
      return now.golden_cases > 0
                 ? fmt::format("{:.1f}% ({}/{})", 100 * v, now.golden_passed, now.golden_cases)
                 : fmt::format("{:.1f}%", 100 * v);
    };
    add("golden_pass_rate", "golden pass rate", b.golden_pass_rate, now.golden_pass_rate, lim, true,
        fmt::format("{} (min {:.1f}%)", drop(tol.golden_drop_points, " pt"), 100 * lim), show_n,
        false);
    rep.checks.back().baseline_text = show_b(*b.golden_pass_rate);
  }
  auto tput = [&](const char* metric, const std::string& label, const std::optional<double>& bv,
                  const std::optional<double>& nv) {
    if (!bv) return;
    const double lim = *bv * (1 - tol.throughput_drop_pct / 100);
    add(metric, label, bv, nv, lim, true,
        fmt::format("{} (min {:.1f})", drop(tol.throughput_drop_pct, "%"), lim), fixed(1), true);
  };
  tput("tg_tok_s", fmt::format("tg{} tok/s", base.run.tg), b.tg_tok_s, now.tg_tok_s);
  tput("pp_tok_s", fmt::format("pp{} tok/s", base.run.pp), b.pp_tok_s, now.pp_tok_s);
  return rep;
}

namespace {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "FAIL";
    case Verdict::kSkipped:
      return "skipped";
  }
  return "?";
}

// A Markdown table with its columns padded to their widest cell (display width: UTF-8
// continuation bytes do not count).
std::string padded_table(const std::vector<std::vector<std::string>>& rows) {
  auto width = [](const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
    return n;
  };
  std::vector<size_t> w;
  for (const auto& row : rows) {
    w.resize(std::max(w.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], width(row[i]));
  }
  std::string s;
  for (size_t r = 0; r < rows.size(); ++r) {
    s += "|";
    for (size_t i = 0; i < rows[r].size(); ++i)
      s += " " + rows[r][i] + std::string(w[i] - width(rows[r][i]), ' ') + " |";
    s += "\n";
    if (r == 0) {
      s += "|";
      for (size_t x : w) s += std::string(x + 2, '-') + "|";
      s += "\n";
    }
  }
  return s;
}

}  // namespace

std::string report_table(const Report& r) {
  std::vector<std::vector<std::string>> rows{{"metric", "baseline", "now", "tolerance", "verdict"}};
  for (const Check& c : r.checks)
    rows.push_back(
        {c.label, c.baseline_text, c.now_text, c.tolerance_text, verdict_name(c.verdict)});
  return padded_table(rows);
}

std::string verdict_line(const Report& r) {
  size_t judged = 0, skipped = 0;
  for (const Check& c : r.checks) (c.verdict == Verdict::kSkipped ? skipped : judged)++;
  const std::string skip = skipped ? fmt::format(" ({} skipped)", skipped) : "";
  if (r.pass()) return fmt::format("PASS: all {} checks within tolerance{}", judged, skip);
  const auto failed = r.failed();
  return fmt::format("FAIL: {} of {} checks regressed{}: {}", failed.size(), judged, skip,
                     fmt::join(failed, ", "));
}

ojson report_json(const Report& r) {
  ojson checks = ojson::array();
  for (const Check& c : r.checks) {
    checks.push_back({{"metric", c.metric},
                      {"label", c.label},
                      {"baseline", c.baseline},
                      {"now", opt_or_null(c.now)},
                      {"limit", c.limit},
                      {"tolerance", c.tolerance_text},
                      {"verdict", verdict_name(c.verdict)}});
  }
  return ojson{{"pass", r.pass()}, {"failed", r.failed()}, {"checks", checks}};
}

std::string values_table(const Baseline& b) {
  // The baseline compared with itself: the same rows, the tolerances, no verdict.
  const Report r = compare(b, b.metrics, b.tol, true);
  std::vector<std::vector<std::string>> rows{{"metric", "value", "tolerance"}};
  for (const Check& c : r.checks) rows.push_back({c.label, c.baseline_text, c.tolerance_text});
  return padded_table(rows);
}

}  // namespace kvasir::gate
