// `kvasir perplexity --kv-dtype ... --kv-calib builtin|TEXT --kv-calib-positions N`: which key
// transform a quantized K cache is measured with (engine/key_calibration.h; none by default),
// reported in --json, and the refusals of the two flags.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace kvasir::cli_test {
namespace {

std::string eval_text() {
  return test_util::text_dir() + "/tinystories-eval.txt";
}

nlohmann::json ppl(const std::string& args) {
  Result r = kvasir("perplexity -m " + stories() + " -f " + eval_text() +
                    " --ctx 256 --chunks 8 --json " + args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

TEST(CliPerplexityKvCalib, TheTransformIsNamedAndCutsInt4KeysLoss) {
  const auto f16 = ppl("");
  const auto builtin = ppl("--cache-type-k int4 --kv-calib builtin");
  const auto none = ppl("--cache-type-k int4");
  const auto own = ppl("--cache-type-k int4 --kv-calib " + test_util::text_dir() +
                       "/tinystories-calib.txt --kv-calib-positions 512");
  ASSERT_TRUE(f16.contains("ppl") && builtin.contains("ppl") && none.contains("ppl") &&
              own.contains("ppl"));
  EXPECT_EQ(f16.at("key_transform"), "none");  // f16 keys are stored as they are
  EXPECT_EQ(none.at("key_transform"), "none");
  const std::string b = builtin.at("key_transform");
  EXPECT_NE(b.find("the built-in calibration text"), std::string::npos) << b;
  EXPECT_NE(b.find("positions < 256"), std::string::npos) << b;
  const std::string o = own.at("key_transform");
  EXPECT_NE(o.find("tinystories-calib.txt"), std::string::npos) << o;
  EXPECT_NE(o.find("positions < 512"), std::string::npos) << o;
  // 8 chunks: int4 keys cost ~+25% untransformed and a few % with either calibration.
  const double base = f16.at("ppl");
  EXPECT_GT(none.at("ppl").get<double>(), base * 1.15);
  EXPECT_LT(builtin.at("ppl").get<double>(), base * 1.06);
  EXPECT_LT(own.at("ppl").get<double>(), base * 1.06);
}

TEST(CliPerplexityKvCalib, BadValuesAreRefusedByName) {
  const std::string run = "perplexity -m " + stories() + " -f " + eval_text() +
                          " --ctx 256 --chunks 1 --kv-dtype int8 ";
  Result r = kvasir(run + "--kv-calib " + tmp("no-such-calib.txt"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-calib text file"), std::string::npos) << r.err;
  r = kvasir(run + "--kv-calib " + stories());  // a binary file is not a text
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-calib"), std::string::npos) << r.err;
  r = kvasir(run + "--kv-calib builtin --kv-calib-positions -3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-calib-positions"), std::string::npos) << r.err;
  r = kvasir("perplexity -m " + stories() + " -f " + eval_text() +
             " --ctx 256 --chunks 1 --kv-calib builtin");  // f16 keys: nothing to transform
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-calib: the keys are stored as f16, which takes no transform"),
            std::string::npos)
      << r.err;
  r = kvasir(run + "--kv-calib-positions 512");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no key shift without --kv-calib"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
