// eval/gate.h without a model: the baseline file (round trip, defaults, malformed files refused
// by field), path resolution, and compare()'s verdicts at and around each tolerance.
#include "kvasir/eval/gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "kvasir/util/error.h"
#include "test_util/files.h"

namespace kvasir::gate {
namespace {

using nlohmann::json;

const std::string kDigest(64, 'a');

// A baseline with every check configured.
Baseline full_baseline() {
  Baseline b;
  b.run.kl_base = "ref.logits";
  b.run.golden_set = "golden.jsonl";
  b.run.ctx = 128;
  b.run.chunks = 8;
  b.run.tg = 32;
  b.run.pp = 64;
  b.run.reps = 5;
  b.run.threads = 2;
  b.run.kv = {KVDType::Int8, KVDType::F16};
  b.run.kl_base_sha256 = kDigest;
  b.run.golden_set_sha256 = std::string(64, 'b');
  b.model = {"q8.gguf", std::string(64, 'c'), "q8_0", 379168};
  b.env = {"0.1.0", "abc1234", "cpu (AVX2, 2 threads)", "AMD EPYC", 2, "2025-01-31T12:00:00Z"};
  b.metrics.ppl = 4.0;
  b.metrics.ppl_tokens = 504;
  b.metrics.mean_kld = 0.001;
  b.metrics.top1_agreement = 0.9;
  b.metrics.golden_pass_rate = 1.0;
  b.metrics.golden_passed = 3;
  b.metrics.golden_cases = 3;
  b.metrics.tg_tok_s = 100.0;
  b.metrics.pp_tok_s = 1000.0;
  b.tol = {2.0, 0.02, 1.5, 10.0, 25.0};
  return b;
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = test_util::temp_dir("kvasir-gate") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(GateBaseline, RoundTripsThroughTheFile) {
  const Baseline b = full_baseline();
  const std::string path = test_util::temp_dir("kvasir-gate") + "/gate.json";
  write_baseline(path, b);
  const std::string text = test_util::read_file(path);
  EXPECT_NE(text.find("\"format\": \"kvasir-gate/1\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"kv_dtype\": \"k=int8,v=f16\""), std::string::npos) << text;
  const Baseline r = read_baseline(path);
  EXPECT_EQ(baseline_json(r), baseline_json(b));
  EXPECT_EQ(r.run.kv, b.run.kv);
  EXPECT_EQ(r.run.kl_base, "ref.logits");
  EXPECT_EQ(r.run.reps, 5);
  EXPECT_EQ(*r.metrics.tg_tok_s, 100.0);
  EXPECT_EQ(r.metrics.golden_cases, 3);
  EXPECT_EQ(r.tol.throughput_drop_pct, 25.0);
  EXPECT_EQ(r.env.backend, "cpu (AVX2, 2 threads)");
  EXPECT_EQ(r.model.weight_type, "q8_0");
  // Doubles survive exactly (nlohmann writes the shortest round-tripping form).
  Baseline odd = b;
  odd.metrics.ppl = 3.8870303312193872;
  write_baseline(path, odd);
  EXPECT_EQ(*read_baseline(path).metrics.ppl, 3.8870303312193872);
}

TEST(GateBaseline, TolerancesDefaultWhenAbsent) {
  json j = json::parse(baseline_json(full_baseline()).dump());
  j.erase("tolerances");
  const Baseline b = parse_baseline(j, "x.json");
  const Tolerances def;
  EXPECT_EQ(b.tol.ppl_rise_pct, 1.0);
  EXPECT_EQ(b.tol.kld_rise, 0.01);
  EXPECT_EQ(b.tol.top1_drop_points, 1.0);
  EXPECT_EQ(b.tol.golden_drop_points, 0.0);
  EXPECT_EQ(b.tol.throughput_drop_pct, 10.0);
  EXPECT_EQ(def.ppl_rise_pct, b.tol.ppl_rise_pct);
  // One tolerance given, the others default.
  j["tolerances"] = {{"throughput_drop_pct", 50}};
  const Baseline c = parse_baseline(j, "x.json");
  EXPECT_EQ(c.tol.throughput_drop_pct, 50.0);
  EXPECT_EQ(c.tol.ppl_rise_pct, 1.0);
}

TEST(GateBaseline, AGoldenOnlyGateIsEnough) {
  Baseline b;
  b.run.golden_set = "golden.jsonl";
  b.model.path = "m.gguf";
  b.metrics.golden_pass_rate = 0.5;
  b.metrics.golden_passed = 1;
  b.metrics.golden_cases = 2;
  const Baseline r = parse_baseline(json::parse(baseline_json(b).dump()), "g.json");
  EXPECT_FALSE(r.run.perplexity());
  EXPECT_FALSE(r.run.throughput());
  EXPECT_EQ(*r.metrics.golden_pass_rate, 0.5);
}

TEST(GateBaseline, MalformedFilesNameTheField) {
  const json good = json::parse(baseline_json(full_baseline()).dump());
  struct Case {
    std::function<void(json&)> edit;
    std::string want;
  };
  const Case cases[] = {
      {[](json& j) { j["format"] = "kvasir-gate/2"; },
       "field 'format': expected \"kvasir-gate/1\", got \"kvasir-gate/2\""},
      {[](json& j) { j.erase("format"); }, "field 'format' is missing"},
      {[](json& j) { j.erase("run"); }, "field 'run' is missing"},
      {[](json& j) { j["run"] = 3; }, "field 'run': expected an object"},
      {[](json& j) { j["extra"] = 1; }, "unknown field 'extra'"},
      {[](json& j) { j["tolerances"]["ppl_rise"] = 2; }, "unknown field 'tolerances.ppl_rise'"},
      {[](json& j) { j["run"]["ctx"] = "128"; },
       "field 'run.ctx': expected an integer in 0..16777216, got \"128\""},
      {[](json& j) { j["run"]["chunks"] = 0; }, "field 'run.chunks': expected -1 (all) or >= 1"},
      {[](json& j) { j["run"]["reps"] = 0; }, "field 'run.reps': expected an integer in 1..1000"},
      {[](json& j) { j["run"]["kv_dtype"] = "q9"; }, "field 'run.kv_dtype': expected a KV cache"},
      {[](json& j) { j["run"]["text"] = "eval.txt"; },
       "fields 'run.text' and 'run.kl_base' exclude each other"},
      {[](json& j) { j["run"]["text_sha256"] = "xyz"; },
       "field 'run.text_sha256': expected 64 hex characters"},
      {[](json& j) {
         j["run"] = {{"kl_base", nullptr}, {"tg", 0}};
         j["metrics"] = json::object();
       },
       "nothing to check"},
      {[](json& j) { j["metrics"].erase("ppl"); },
       "field 'metrics.ppl' is missing (measured when run.text or run.kl_base is set)"},
      {[](json& j) { j["metrics"]["mean_kld"] = nullptr; }, "field 'metrics.mean_kld' is missing"},
      {[](json& j) { j["run"]["pp"] = 0; },
       "field 'metrics.pp_tok_s' is set but the run does not measure it"},
      {[](json& j) { j["metrics"]["ppl"] = "4.0"; }, "field 'metrics.ppl': expected a number"},
      {[](json& j) { j["metrics"]["top1_agreement"] = 97.8; },
       "field 'metrics.top1_agreement': expected a fraction in 0..1"},
      {[](json& j) { j["tolerances"]["kld_rise"] = -0.01; },
       "field 'tolerances.kld_rise': expected a finite number >= 0, got -0.01"},
      {[](json& j) { j["tolerances"]["throughput_drop_pct"] = 150; },
       "field 'tolerances.throughput_drop_pct': expected 0..100"},
      {[](json& j) { j["model"].erase("path"); }, "field 'model.path' is missing"},
      {[](json& j) { j["model"]["sha256"] = "abc"; }, "field 'model.sha256': expected 64 hex"},
      {[](json& j) { j["environment"]["threads"] = -1; }, "field 'environment.threads'"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    const std::string path = write("bad.json", j.dump());
    try {
      read_baseline(path);
      ADD_FAILURE() << "accepted: " << c.want;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;  // names the file first
      EXPECT_NE(what.find(c.want), std::string::npos) << "want: " << c.want << "\ngot: " << what;
    }
  }
  // Not JSON, not an object, not there.
  const std::pair<std::string, std::string> files[] = {
      {"{\"format\": \"kvasir-gate/1\",", "not valid JSON"},
      {"[1, 2]", "expected a JSON object, got array"},
  };
  for (const auto& [text, want] : files) {
    const std::string path = write("bad.json", text);
    try {
      read_baseline(path);
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": " + want), std::string::npos) << e.what();
    }
  }
  const std::string missing = test_util::temp_dir("kvasir-gate") + "/none.json";
  try {
    read_baseline(missing);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing + ": cannot read the baseline"), std::string::npos)
        << e.what();
  }
}

TEST(GatePaths, RelativeToTheBaselinesFolder) {
  EXPECT_EQ(resolve_path("ci/gate.json", "golden.jsonl"), "ci/golden.jsonl");
  EXPECT_EQ(resolve_path("ci/gate.json", "../data/eval.txt"), "data/eval.txt");
  EXPECT_EQ(resolve_path("gate.json", "eval.txt"), "eval.txt");
  EXPECT_EQ(resolve_path("ci/gate.json", "/abs/eval.txt"), "/abs/eval.txt");
  EXPECT_EQ(resolve_path("ci/gate.json", ""), "");
  // From the command line (relative to the working directory) into the file, and back.
  EXPECT_EQ(path_for_baseline("ci/gate.json", "ci/golden.jsonl"), "golden.jsonl");
  EXPECT_EQ(path_for_baseline("ci/gate.json", "data/eval.txt"), "../data/eval.txt");
  EXPECT_EQ(path_for_baseline("ci/gate.json", "/abs/eval.txt"), "/abs/eval.txt");
  for (const std::string p : {"x.txt", "a/b/x.txt", "ci/x.txt"})
    EXPECT_EQ(resolve_path("ci/gate.json", path_for_baseline("ci/gate.json", p)), p) << p;
}

// ---- compare() ----

const Check& check(const Report& r, const std::string& metric) {
  for (const Check& c : r.checks)
    if (c.metric == metric) return c;
  throw std::runtime_error("no check " + metric);
}

Verdict verdict(const Baseline& b, const std::string& metric, double now, bool tput = true) {
  Metrics m = b.metrics;
  if (metric == "ppl") m.ppl = now;
  if (metric == "mean_kld") m.mean_kld = now;
  if (metric == "top1_agreement") m.top1_agreement = now;
  if (metric == "golden_pass_rate") m.golden_pass_rate = now;
  if (metric == "tg_tok_s") m.tg_tok_s = now;
  if (metric == "pp_tok_s") m.pp_tok_s = now;
  const Report r = compare(b, m, b.tol, tput);
  // Only the metric under test may fail: the others equal the baseline.
  for (const Check& c : r.checks) {
    if (c.metric != metric) {
      EXPECT_NE(c.verdict, Verdict::kFail) << c.metric;
    }
  }
  return check(r, metric).verdict;
}

constexpr double kAbove = 1 + 1e-6, kBelow = 1 - 1e-6;  // far outside the 1e-9 slack

TEST(GateCompare, DefaultTolerancesAtAndAroundEachLimit) {
  Baseline b = full_baseline();
  b.tol = Tolerances{};  // +1 %, +0.01, -1 pt, no drop, -10 %
  // PPL 4.0: at most 4.04 (the decimal value passes too: the slack absorbs 4.0 * 1.01's rounding).
  EXPECT_EQ(verdict(b, "ppl", 4.0 * (1 + 1.0 / 100)), Verdict::kPass);
  EXPECT_EQ(verdict(b, "ppl", 4.04), Verdict::kPass);
  EXPECT_EQ(verdict(b, "ppl", 4.04 * kAbove), Verdict::kFail);
  EXPECT_EQ(verdict(b, "ppl", 4.04 * kBelow), Verdict::kPass);
  EXPECT_EQ(verdict(b, "ppl", 3.5), Verdict::kPass);  // better passes
  // Mean KLD 0.001: at most 0.011, absolute.
  EXPECT_EQ(verdict(b, "mean_kld", 0.011), Verdict::kPass);
  EXPECT_EQ(verdict(b, "mean_kld", 0.011 + 1e-6), Verdict::kFail);
  EXPECT_EQ(verdict(b, "mean_kld", 0.011 - 1e-6), Verdict::kPass);
  EXPECT_EQ(verdict(b, "mean_kld", 0.0), Verdict::kPass);
  // Top-1 agreement 0.9: at least 0.89.
  EXPECT_EQ(verdict(b, "top1_agreement", 0.89), Verdict::kPass);
  EXPECT_EQ(verdict(b, "top1_agreement", 0.89 - 1e-6), Verdict::kFail);
  EXPECT_EQ(verdict(b, "top1_agreement", 0.89 + 1e-6), Verdict::kPass);
  EXPECT_EQ(verdict(b, "top1_agreement", 1.0), Verdict::kPass);
  // Golden pass rate 3/3: may not drop at all.
  EXPECT_EQ(verdict(b, "golden_pass_rate", 1.0), Verdict::kPass);
  EXPECT_EQ(verdict(b, "golden_pass_rate", 2.0 / 3), Verdict::kFail);
  EXPECT_EQ(verdict(b, "golden_pass_rate", 1.0 - 1e-6), Verdict::kFail);
  // Throughput 100 / 1000 tok/s: at least 90 / 900.
  EXPECT_EQ(verdict(b, "tg_tok_s", 90.0), Verdict::kPass);
  EXPECT_EQ(verdict(b, "tg_tok_s", 90.0 * kBelow), Verdict::kFail);
  EXPECT_EQ(verdict(b, "tg_tok_s", 90.0 * kAbove), Verdict::kPass);
  EXPECT_EQ(verdict(b, "tg_tok_s", 500.0), Verdict::kPass);
  EXPECT_EQ(verdict(b, "pp_tok_s", 900.0), Verdict::kPass);
  EXPECT_EQ(verdict(b, "pp_tok_s", 900.0 * kBelow), Verdict::kFail);
}

TEST(GateCompare, TolerancesFromTheBaselineMoveTheLimits) {
  const Baseline b = full_baseline();  // +2 %, +0.02, -1.5 pt, -10 pt, -25 %
  EXPECT_EQ(verdict(b, "ppl", 4.08), Verdict::kPass);
  EXPECT_EQ(verdict(b, "ppl", 4.08 * kAbove), Verdict::kFail);
  EXPECT_EQ(verdict(b, "mean_kld", 0.021), Verdict::kPass);
  EXPECT_EQ(verdict(b, "mean_kld", 0.021 + 1e-6), Verdict::kFail);
  EXPECT_EQ(verdict(b, "top1_agreement", 0.885), Verdict::kPass);
  EXPECT_EQ(verdict(b, "top1_agreement", 0.885 - 1e-6), Verdict::kFail);
  EXPECT_EQ(verdict(b, "golden_pass_rate", 0.9), Verdict::kPass);
  EXPECT_EQ(verdict(b, "golden_pass_rate", 2.0 / 3), Verdict::kFail);
  EXPECT_EQ(verdict(b, "tg_tok_s", 75.0), Verdict::kPass);
  EXPECT_EQ(verdict(b, "tg_tok_s", 75.0 * kBelow), Verdict::kFail);
  // A zero tolerance: equal passes, any worse fails.
  Baseline z = b;
  z.tol = {0, 0, 0, 0, 0};
  EXPECT_EQ(verdict(z, "ppl", 4.0), Verdict::kPass);
  EXPECT_EQ(verdict(z, "ppl", 4.0 * kAbove), Verdict::kFail);
  EXPECT_EQ(verdict(z, "mean_kld", 0.001 + 1e-6), Verdict::kFail);
  EXPECT_EQ(verdict(z, "tg_tok_s", 100.0 * kBelow), Verdict::kFail);
}

TEST(GateCompare, ThroughputCanBeSkippedQualityCannot) {
  const Baseline b = full_baseline();
  // check_throughput false: a collapsed tok/s is skipped, not failed.
  EXPECT_EQ(verdict(b, "tg_tok_s", 1.0, /*tput=*/false), Verdict::kSkipped);
  Metrics m = b.metrics;
  m.tg_tok_s.reset();
  m.pp_tok_s.reset();
  Report r = compare(b, m, b.tol);  // not measured (--no-throughput): skipped
  EXPECT_TRUE(r.pass());
  EXPECT_EQ(check(r, "tg_tok_s").verdict, Verdict::kSkipped);
  EXPECT_EQ(check(r, "tg_tok_s").now_text, "-");
  EXPECT_EQ(verdict_line(r), "PASS: all 4 checks within tolerance (2 skipped)");
  // A quality metric that was not measured, or came out NaN / infinite, fails.
  m = b.metrics;
  m.mean_kld.reset();
  r = compare(b, m, b.tol);
  EXPECT_EQ(check(r, "mean_kld").verdict, Verdict::kFail);
  EXPECT_EQ(check(r, "mean_kld").now_text, "not measured");
  EXPECT_EQ(verdict(b, "ppl", std::numeric_limits<double>::quiet_NaN()), Verdict::kFail);
  EXPECT_EQ(verdict(b, "ppl", std::numeric_limits<double>::infinity()), Verdict::kFail);
}

TEST(GateCompare, OnlyConfiguredChecksAppearInOrder) {
  Baseline b;
  b.run.golden_set = "g.jsonl";
  b.run.tg = 16;
  b.model.path = "m.gguf";
  b.metrics.golden_pass_rate = 1.0;
  b.metrics.golden_passed = 2;
  b.metrics.golden_cases = 2;
  b.metrics.tg_tok_s = 10.0;
  Metrics now = b.metrics;
  const Report r = compare(b, now, b.tol);
  ASSERT_EQ(r.checks.size(), 2u);
  EXPECT_EQ(r.checks[0].metric, "golden_pass_rate");
  EXPECT_EQ(r.checks[1].label, "tg16 tok/s");
  EXPECT_EQ(r.checks[0].baseline_text, "100.0% (2/2)");
}

TEST(GateCompare, TableAndVerdictNameTheFailingMetrics) {
  const Baseline b = full_baseline();
  Metrics now = b.metrics;
  now.ppl = 4.5;
  now.mean_kld = 0.09;
  now.golden_pass_rate = 1.0 / 3;
  now.golden_passed = 1;
  now.golden_cases = 3;
  const Report r = compare(b, now, b.tol);
  EXPECT_FALSE(r.pass());
  EXPECT_EQ(r.failed(), (std::vector<std::string>{"PPL", "mean KLD", "golden pass rate"}));
  EXPECT_EQ(verdict_line(r), "FAIL: 3 of 6 checks regressed: PPL, mean KLD, golden pass rate");
  const std::string t = report_table(r);
  EXPECT_EQ(t.rfind("| metric ", 0), 0u) << t;
  EXPECT_NE(t.find("| baseline "), std::string::npos) << t;
  EXPECT_NE(t.find("| tolerance "), std::string::npos) << t;
  EXPECT_NE(t.find("| verdict |"), std::string::npos) << t;
  // Every line has the same display width (columns padded).
  size_t width = std::string::npos, start = 0;
  while (start < t.size()) {
    const size_t end = t.find('\n', start);
    std::string line = t.substr(start, end - start);
    size_t w = 0;
    for (unsigned char c : line) w += (c & 0xC0) != 0x80 ? 1 : 0;
    if (width == std::string::npos) width = w;
    EXPECT_EQ(w, width) << line;
    start = end + 1;
  }
  EXPECT_NE(t.find("| PPL "), std::string::npos);
  EXPECT_NE(t.find("4.5000"), std::string::npos) << t;
  EXPECT_NE(t.find("+2% (max 4.0800)"), std::string::npos) << t;
  EXPECT_NE(t.find("33.3% (1/3)"), std::string::npos) << t;
  EXPECT_NE(t.find("| FAIL "), std::string::npos) << t;
  const auto j = report_json(r);
  EXPECT_EQ(j.at("pass"), false);
  EXPECT_EQ(j.at("checks").size(), 6u);
  EXPECT_EQ(j.at("checks")[0].at("verdict"), "FAIL");
  EXPECT_DOUBLE_EQ(j.at("checks")[0].at("limit").get<double>(), 4.0 * 1.02);
}

}  // namespace
}  // namespace kvasir::gate
