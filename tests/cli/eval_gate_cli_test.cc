// `kvasir eval gate`: a baseline recorded from a Q8_0 copy of stories260K (reference logits and
// a golden set from the F32 original) passes that copy and fails a Q4_0 copy (PPL +10 %, mean
// KLD 0.09 against 0.0008, top-1 agreement -15 points, the golden set), with the exit statuses
// CI relies on: 0 pass, 1 regression, 2 a missing, corrupt or stale baseline or a usage error.
// Throughput is measured and printed but not judged here (--tol-throughput 100): timing on a
// shared CI machine is noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string path = tmp(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The models, reference logits and golden set, made once for the suite in the scratch folder;
// the baseline is written to tmp("ci/gate.json") with paths relative to it.
class CliEvalGate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::filesystem::create_directories(tmp("ci"));
    Result r = kvasir("quantize " + stories() + " " + tmp("gate-q8_0.gguf") + " --type Q8_0");
    ASSERT_EQ(r.code, 0) << r.err;
    r = kvasir("quantize " + stories() + " " + tmp("gate-q4_0.gguf") + " --type Q4_0");
    ASSERT_EQ(r.code, 0) << r.err;
    r = kvasir("perplexity -m " + stories() + " -f " + test_util::text_dir() +
               "/tinystories-eval.txt --ctx 128 --chunks 6 --save-logits " + tmp("ci/ref.logits"));
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string prompts =
        write("gate-prompts.jsonl",
              "{\"id\": \"lily\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32}\n"
              "{\"id\": \"dog\", \"prompt\": \"The little dog\", \"max_tokens\": 24}\n"
              "{\"id\": \"park\", \"prompt\": \"Tom and Sue went to the park\", \"max_tokens\": "
              "24}\n");
    r = kvasir("eval golden -m " + stories() + " --set " + prompts + " --record " +
               tmp("ci/golden.jsonl"));
    ASSERT_EQ(r.code, 0) << r.err;
  }

  static std::string baseline() { return tmp("ci/gate.json"); }

  // Records the baseline from the Q8_0 copy, from the scratch folder with relative paths.
  static Result record(const std::string& extra = "") {
    return kvasir_in(tmp(""), "",
                     "eval gate --baseline ci/gate.json -m gate-q8_0.gguf --update-baseline "
                     "--kl-base ci/ref.logits --set ci/golden.jsonl --tg 16 --pp 32 --reps 2 " +
                         extra);
  }
};

TEST_F(CliEvalGate, PassesTheBaselineModelAndFailsADegradedOne) {
  Result r = record();
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "baseline ci/gate.json written: gate-q8_0.gguf (q8_0")) << r.out;
  const auto file = nlohmann::json::parse(read_file(baseline()));
  EXPECT_EQ(file.at("format"), "kvasir-gate/1");
  EXPECT_EQ(file.at("run").at("kl_base"), "ref.logits");  // relative to the baseline's folder
  EXPECT_EQ(file.at("run").at("golden_set"), "golden.jsonl");
  EXPECT_EQ(file.at("run").at("ctx"), 128);  // the logits file's, stated
  EXPECT_EQ(file.at("model").at("path"), "../gate-q8_0.gguf");
  EXPECT_EQ(file.at("model").at("weight_type"), "q8_0");
  EXPECT_EQ(file.at("model").at("sha256").get<std::string>().size(), 64u);
  EXPECT_FALSE(file.at("environment").at("backend").get<std::string>().empty());
  EXPECT_FALSE(file.at("environment").at("kvasir_commit").get<std::string>().empty());
  const auto& m = file.at("metrics");
  EXPECT_GT(m.at("ppl").get<double>(), 1.0);
  EXPECT_LT(m.at("mean_kld").get<double>(), 0.005);  // Q8_0 against F32: ~8e-4
  EXPECT_GT(m.at("top1_agreement").get<double>(), 0.9);
  EXPECT_EQ(m.at("golden_cases"), 3);
  EXPECT_GT(m.at("tg_tok_s").get<double>(), 0.0);
  EXPECT_GT(m.at("pp_tok_s").get<double>(), 0.0);
  EXPECT_EQ(file.at("tolerances").at("ppl_rise_pct"), 1.0);

  // The baseline model passes, from another working directory (paths resolve from the file).
  r = kvasir_in("/", "",
                "eval gate --baseline " + q(baseline()) + " -m " + q(tmp("gate-q8_0.gguf")) +
                    " --tol-throughput 100");
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "| metric ")) << r.out;
  EXPECT_TRUE(has(r.out, "| baseline ")) << r.out;
  EXPECT_TRUE(has(r.out, "| tolerance ")) << r.out;
  EXPECT_TRUE(has(r.out, "| verdict |")) << r.out;
  for (const char* row : {"| PPL ", "| mean KLD ", "| top-1 agreement ", "| golden pass rate ",
                          "| tg16 tok/s ", "| pp32 tok/s "})
    EXPECT_TRUE(has(r.out, row)) << row << "\n" << r.out;
  EXPECT_TRUE(has(r.out, "-100% (min 0.0)")) << r.out;  // throughput measured, not judged
  EXPECT_FALSE(has(r.out, "FAIL")) << r.out;
  EXPECT_TRUE(has(r.out, "note: the model is the baseline's file (same sha256)")) << r.out;
  EXPECT_TRUE(has(r.out, "PASS: all 6 checks within tolerance")) << r.out;

  // The Q4_0 copy regresses: exit 1, and the output names what regressed.
  r = kvasir("eval gate --baseline " + baseline() + " -m " + tmp("gate-q4_0.gguf") +
             " --tol-throughput 100");
  EXPECT_EQ(r.code, 1) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "FAIL: ")) << r.out;
  for (const char* metric : {"PPL", "mean KLD", "top-1 agreement"})
    EXPECT_TRUE(has(r.out.substr(r.out.find("FAIL: ")), metric)) << metric << "\n" << r.out;
  r = kvasir("eval gate --baseline " + baseline() + " -m " + tmp("gate-q4_0.gguf") +
             " --no-throughput --json");
  EXPECT_EQ(r.code, 1) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("pass"), false);
  const auto failed = j.at("failed").get<std::vector<std::string>>();
  for (const char* metric : {"PPL", "mean KLD", "top-1 agreement"})
    EXPECT_NE(std::find(failed.begin(), failed.end(), metric), failed.end()) << metric;
  EXPECT_EQ(j.at("model").at("weight_type"), "q4_0");
  for (const auto& c : j.at("checks")) {
    if (c.at("metric") == "ppl") {
      // Q4_0 of a 64-wide model: PPL ~10 % above Q8_0's, ten times the tolerance.
      EXPECT_GT(c.at("now").get<double>(), 1.03 * c.at("baseline").get<double>());
    }
    if (c.at("metric") == "mean_kld") {
      EXPECT_GT(c.at("now").get<double>(), 0.03);
    }
    if (c.at("metric") == "tg_tok_s") {
      EXPECT_EQ(c.at("verdict"), "skipped");
      EXPECT_TRUE(c.at("now").is_null());
    }
  }

  // Recording again over the same run shows what changed (here nothing regressed).
  r = record();
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "against the previous baseline")) << r.out;
}

TEST_F(CliEvalGate, BrokenBaselinesAndUsageExitTwo) {
  const std::string q8 = tmp("gate-q8_0.gguf");
  // No baseline: say how to make one.
  Result r = kvasir("eval gate --baseline " + tmp("none.json") + " -m " + q8);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, tmp("none.json") + ": no such baseline; record one with")) << r.err;
  // Not JSON; a typo in a tolerance (must not fall back to the default silently).
  const std::string corrupt = write("ci/corrupt.json", "{\"format\": \"kvasir-gate/1\", \"run\":");
  r = kvasir("eval gate --baseline " + corrupt + " -m " + q8);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, corrupt + ": not valid JSON")) << r.err;
  ASSERT_EQ(record().code, 0);
  auto j = nlohmann::json::parse(read_file(baseline()));
  j["tolerances"]["ppl_rise"] = 5;
  const std::string typo = write("ci/typo.json", j.dump());
  r = kvasir("eval gate --baseline " + typo + " -m " + q8);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, typo + ": unknown field 'tolerances.ppl_rise'")) << r.err;
  j = nlohmann::json::parse(read_file(baseline()));
  j["metrics"].erase("mean_kld");
  const std::string incomplete = write("ci/incomplete.json", j.dump());
  r = kvasir("eval gate --baseline " + incomplete + " -m " + q8);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "field 'metrics.mean_kld' is missing")) << r.err;

  // An input changed since the baseline was measured: refused, not compared.
  std::filesystem::copy_file(tmp("ci/golden.jsonl"), tmp("ci/golden-copy.jsonl"),
                             std::filesystem::copy_options::overwrite_existing);
  r = kvasir("eval gate --baseline " + tmp("ci/stale.json") + " -m " + q8 +
             " --update-baseline --set " + tmp("ci/golden-copy.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = kvasir("eval gate --baseline " + tmp("ci/stale.json") + " -m " + q8);
  EXPECT_EQ(r.code, 0) << r.err << r.out;  // a golden-only gate works
  EXPECT_TRUE(has(r.out, "PASS: all 1 checks within tolerance")) << r.out;
  std::ofstream(tmp("ci/golden-copy.jsonl"), std::ios::app)
      << "{\"prompt\": \"Once\", \"contains\": \"upon\"}\n";
  r = kvasir("eval gate --baseline " + tmp("ci/stale.json") + " -m " + q8);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "field 'run.golden_set' changed since the baseline")) << r.err;

  // Usage: what to run belongs to the baseline; nothing to check; a model that is not there.
  r = kvasir("eval gate --baseline " + baseline() + " -m " + q8 + " --ctx 64");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--ctx: the baseline says what to run")) << r.err;
  r = kvasir("eval gate --baseline " + baseline() + " -m " + q8 + " --tol-ppl 5");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--tol-ppl: quality tolerances are part of the baseline")) << r.err;
  r = kvasir("eval gate --baseline " + tmp("ci/empty.json") + " -m " + q8 + " --update-baseline");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "nothing to check")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp("ci/empty.json")));
  r = kvasir("eval gate --baseline " + tmp("ci/tput.json") + " -m " + q8 +
             " --update-baseline --tg 8 --reps 1");
  ASSERT_EQ(r.code, 0) << r.err;
  r = kvasir("eval gate --baseline " + tmp("ci/tput.json") + " -m " + q8 + " --no-throughput");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "checks throughput only; nothing would be checked")) << r.err;
  r = kvasir("eval gate --baseline " + baseline() + " -m " + tmp("missing.gguf"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, tmp("missing.gguf"))) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
