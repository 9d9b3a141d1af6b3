// `kvasir eval report`: the quality table over a reference, a quantized variant and KV dtypes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

TEST(CliEvalReport, OneTableOverModelsAndKvDtypes) {
  const std::string q = tmp("report-q8_0.gguf");
  Result r = kvasir("quantize " + stories() + " " + q + " --type Q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = test_util::text_dir() + "/tinystories-eval.txt";
  r = kvasir("eval report -m " + stories() + " --variants " + q + " --kv-dtypes f16,int8,int4 -f " +
             text + " --ctx 128 --chunks 6 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 6u);
  // The reference with f16 KV is the baseline: no divergence from itself.
  EXPECT_EQ(rows[0].at("format"), "f32");
  EXPECT_EQ(rows[0].at("kv_type"), "f16");
  EXPECT_NEAR(rows[0].at("dppl_pct").get<double>(), 0.0, 1e-6);
  EXPECT_LT(rows[0].at("mean_kld").get<double>(), 1e-7);
  EXPECT_EQ(rows[0].at("top1_agreement").get<double>(), 1.0);
  EXPECT_EQ(rows[0].at("kv_bytes_per_token").get<int>(), 640);
  EXPECT_EQ(rows[1].at("kv_bytes_per_token").get<int>(), 400);  // int8: 8 codes + 2 B a row
  EXPECT_EQ(rows[2].at("kv_bytes_per_token").get<int>(), 280);  // int4: 4 codes + 3 B a row
  EXPECT_EQ(rows[3].at("format"), "q8_0");
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_GT(rows[i].at("mean_kld").get<double>(), 0.0) << i;
    EXPECT_LT(rows[i].at("top1_agreement").get<double>(), 1.0) << i;
  }
  // More quantization, more divergence: int4 KV beyond int8 KV, on both files.
  EXPECT_GT(rows[2].at("mean_kld").get<double>(), rows[1].at("mean_kld").get<double>());
  EXPECT_GT(rows[5].at("mean_kld").get<double>(), rows[4].at("mean_kld").get<double>());
  EXPECT_TRUE(rows[0].at("golden_pass_rate").is_null());

  // The Markdown form has the columns.
  r = kvasir("eval report -m " + stories() + " --kv-dtypes f16 -f " + text +
             " --ctx 128 --chunks 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| model | format | KV | bits/weight | file size | KV bytes/token | PPL | "
                       "ΔPPL % | mean KLD | top-1 agreement | golden pass rate |"),
            std::string::npos)
      << r.out;
  r = kvasir("eval report -m " + stories() + " --kv-dtypes f16,q9 -f " + text);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-dtypes: unknown KV cache dtype 'q9'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
