// `kvasir perplexity --save-logits / --kl-base` against llama.cpp's own KL divergence report
// (tests/fixtures/kld/make.sh: llama-perplexity --kl-divergence of its Q4_0 stories260K against
// the F32 file, ctx 256, 100 chunks), and the errors of the logits file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

std::string fixture() {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/kld/stories260K-q4_0-kld.txt";
}

// The number after `label` in llama-perplexity's report ("Mean    KLD:   0.075122 ± ...").
double report_value(const std::string& report, const std::string& label) {
  const size_t at = report.find(label);
  if (at == std::string::npos) ADD_FAILURE() << "no '" << label << "' in the fixture";
  return at == std::string::npos ? 0 : std::stod(report.substr(report.find(':', at) + 1));
}

std::string sha256(const std::string& path) {
  const std::string cmd = "sha256sum '" + path + "'";
  std::FILE* p = popen(cmd.c_str(), "r");
  char buf[65] = {};
  const size_t n = p ? std::fread(buf, 1, 64, p) : 0;
  if (p) pclose(p);
  return std::string(buf, n);
}

std::string text() {
  return test_util::text_dir() + "/tinystories-eval.txt";
}

TEST(CliPerplexityKL, AgreesWithLlamaPerplexityKlDivergence) {
  const std::string report = read_file(fixture());
  // Our Q4_0 file is llama-quantize's, byte for byte: the same pair of files is compared.
  const std::string q = tmp("s-q4_0.gguf");
  Result r = kvasir("quantize " + stories() + " " + q + " --type Q4_0");
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = report.find("q4_0 sha256 ");
  ASSERT_NE(at, std::string::npos) << "no sha256 line in the fixture";
  ASSERT_EQ(sha256(q), report.substr(at + 12, 64))
      << "kvasir quantize no longer writes llama-quantize's Q4_0";

  const std::string base = tmp("base.logits");
  r = kvasir("perplexity -m " + stories() + " -f " + text() +
             " --ctx 256 --chunks 100 --save-logits " + base + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  r = kvasir("perplexity -m " + q + " --kl-base " + base + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& kl = j.at("kl");
  // llama.cpp evaluates with its f16 KV cache and its own kernels: KLD within 2%, PPL within
  // 0.1% (measured: 0.12% and 0.01% apart on all 382 chunks).
  const double kld = report_value(report, "Mean    KLD");
  EXPECT_NEAR(kl.at("mean_kld").get<double>(), kld, 0.02 * kld);
  const double ppl_q = report_value(report, "Mean PPL(Q)");
  const double ppl_base = report_value(report, "Mean PPL(base)");
  EXPECT_NEAR(kl.at("ppl_q").get<double>(), ppl_q, 1e-3 * ppl_q);
  EXPECT_NEAR(j.at("ppl").get<double>(), ppl_q, 1e-3 * ppl_q);
  EXPECT_NEAR(kl.at("ppl_base").get<double>(), ppl_base, 1e-3 * ppl_base);
  EXPECT_NEAR(kl.at("same_top").get<double>() * 100, report_value(report, "Same top p"), 0.5);
  EXPECT_NEAR(kl.at("median_kld").get<double>(), report_value(report, "Median  KLD"),
              0.05 * report_value(report, "Median  KLD"));
  EXPECT_NEAR(kl.at("p99_kld").get<double>(), report_value(report, "99.0%   KLD"),
              0.05 * report_value(report, "99.0%   KLD"));
  EXPECT_EQ(kl.at("tokens").get<int>(), 100 * 127);

  // The base against itself: nothing differs but the f32 rounding of the saved log-probabilities
  // (|log p| * 2^-24 each, weighted by p: ~1e-8; observed 1.1e-9).
  r = kvasir("perplexity -m " + stories() + " --kl-base " + base + " --json --chunks 5");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto self = nlohmann::json::parse(r.out).at("kl");
  EXPECT_LT(std::abs(self.at("mean_kld").get<double>()), 1e-7);
  EXPECT_EQ(self.at("same_top").get<double>(), 1.0);

  // The human-readable report names what llama-perplexity names.
  r = kvasir("perplexity -m " + q + " --kl-base " + base + " --chunks 3");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* label :
       {"Mean    KLD:", "99.0%   KLD:", "Median  KLD:", "Same top p:", "Mean ln(PPL(Q)/PPL(base))"})
    EXPECT_NE(r.out.find(label), std::string::npos) << label << "\n" << r.out;
}

TEST(CliPerplexityKL, RefusesABadOrMismatchedLogitsFile) {
  const std::string base = tmp("small.logits");
  Result r = kvasir("perplexity -m " + stories() + " -f " + text() +
                    " --ctx 64 --chunks 2 --save-logits " + base);
  ASSERT_EQ(r.code, 0) << r.err;
  // A different chunk length than the file's.
  r = kvasir("perplexity -m " + stories() + " --kl-base " + base + " --ctx 128");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("was saved with chunks of 64 tokens"), std::string::npos) << r.err;
  // A truncated file.
  const std::string cut = tmp("cut.logits");
  {
    const std::string all = read_file(base);
    std::ofstream(cut, std::ios::binary) << all.substr(0, all.size() - 10);
  }
  r = kvasir("perplexity -m " + stories() + " --kl-base " + cut);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("truncated or not written to the end?"), std::string::npos) << r.err;
  // Not a logits file at all.
  r = kvasir("perplexity -m " + stories() + " --kl-base " + stories());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not a kvasir logits file"), std::string::npos) << r.err;
  // Neither a text nor a base.
  r = kvasir("perplexity -m " + stories());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
