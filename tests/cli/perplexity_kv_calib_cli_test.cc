// `kvasir perplexity --kv-dtype ... --kv-calib builtin|none|TEXT`: which key transform a quantized
// K cache is measured with (engine/key_calibration.h; builtin by default), reported in --json, and
// the flag's refusals.
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
  const auto none = ppl("--cache-type-k int4 --kv-calib none");
  const auto by_default = ppl("--cache-type-k int4");
  const auto own =
      ppl("--cache-type-k int4 --kv-calib " + test_util::text_dir() + "/tinystories-calib.txt");
  ASSERT_TRUE(f16.contains("ppl") && builtin.contains("ppl") && none.contains("ppl") &&
              own.contains("ppl") && by_default.contains("ppl"));
  EXPECT_EQ(by_default.at("key_transform"), builtin.at("key_transform"));  // builtin by default
  EXPECT_EQ(by_default.at("ppl"), builtin.at("ppl"));
  EXPECT_EQ(f16.at("key_transform"), "none");  // f16 keys are stored as they are
  EXPECT_EQ(none.at("key_transform"), "none");
  const std::string b = builtin.at("key_transform");
  EXPECT_NE(b.find("the built-in calibration text"), std::string::npos) << b;
  const std::string o = own.at("key_transform");
  EXPECT_NE(o.find("tinystories-calib.txt"), std::string::npos) << o;
  EXPECT_NE(o.find(" tokens"), std::string::npos) << o;
  // 8 chunks: int4 keys cost ~+25% untransformed and ~1% with either calibration.
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
  r = kvasir("perplexity -m " + stories() + " -f " + eval_text() +
             " --ctx 256 --chunks 1 --kv-calib builtin");  // f16 keys: nothing to transform
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-calib: the keys are stored as f16, which takes no transform"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
