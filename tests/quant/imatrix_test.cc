// read_imatrix against files the pinned llama-imatrix wrote (tests/fixtures/imatrix, made by
// make.sh there from stories260K): both formats, the importance llama-quantize derives from them,
// the writers reproducing those files byte for byte, and the refusals.
#include "kvasir/quant/imatrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "kvasir/format/gguf.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

std::string fixture(const std::string& ext) {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/imatrix/stories260K-imatrix." + ext;
}
std::string tmp(const std::string& name) {
  return test_util::temp_dir("kvasir-imatrix") + "/" + name;
}

std::string error_of(const std::string& path) {
  try {
    read_imatrix(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Imatrix, ReadsLlamaImatrixGguf) {
  const Imatrix m = read_imatrix(fixture("gguf"));
  EXPECT_FALSE(m.legacy);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"tinystories-calib.txt"});
  EXPECT_EQ(m.chunk_count, 4);
  EXPECT_EQ(m.chunk_size, 128);
  // stories260K: 5 layers of q, k, v, output, gate, up, down (llama-imatrix skips output.weight).
  EXPECT_EQ(m.importance.size(), 35u);
  ASSERT_TRUE(m.importance.count("blk.0.attn_q.weight"));
  EXPECT_EQ(m.importance.at("blk.0.attn_q.weight").size(), 64u);
  EXPECT_EQ(m.importance.at("blk.4.ffn_down.weight").size(), 172u);
  for (const auto& [name, s] : m.stats) {
    ASSERT_EQ(s.counts.size(), 1u) << name;
    EXPECT_EQ(s.counts[0], 4 * 128) << name;
    const std::vector<float>& e = m.importance.at(name);
    ASSERT_EQ(e.size(), s.sum_sq.size());
    for (size_t i = 0; i < e.size(); ++i) {
      // As llama-quantize: the float sum over the float count, exactly.
      EXPECT_EQ(e[i], static_cast<float>(s.sum_sq[i]) / static_cast<float>(s.counts[0]));
      EXPECT_GT(e[i], 0.0f);
    }
  }
}

TEST(Imatrix, ReadsTheLegacyFormatToTheSameImportance) {
  const Imatrix g = read_imatrix(fixture("gguf"));
  const Imatrix d = read_imatrix(fixture("dat"));
  EXPECT_TRUE(d.legacy);
  EXPECT_EQ(d.datasets, g.datasets);
  EXPECT_EQ(d.chunk_count, 4);
  ASSERT_EQ(d.importance.size(), g.importance.size());
  for (const auto& [name, e] : g.importance) {
    ASSERT_TRUE(d.importance.count(name)) << name;
    const std::vector<float>& l = d.importance.at(name);
    ASSERT_EQ(l.size(), e.size()) << name;
    EXPECT_EQ(d.stats.at(name).counts, std::vector<int64_t>{4});  // ncall = 512 tokens / 128
    for (size_t i = 0; i < e.size(); ++i)  // (sum / count) * ncall / ncall: float rounding only
      EXPECT_NEAR(l[i], e[i], 1e-6f * std::fabs(e[i])) << name << " " << i;
  }
}

TEST(Imatrix, WritersReproduceLlamaImatrixFiles) {
  const Imatrix g = read_imatrix(fixture("gguf"));
  const ImatrixMeta meta{g.datasets, g.chunk_count, g.chunk_size};
  write_imatrix_gguf(tmp("w.gguf"), g.stats, meta);
  EXPECT_TRUE(test_util::read_file(tmp("w.gguf")) == test_util::read_file(fixture("gguf")));
  write_imatrix_dat(tmp("w.dat"), g.stats, meta);
  EXPECT_TRUE(test_util::read_file(tmp("w.dat")) == test_util::read_file(fixture("dat")));
}

TEST(Imatrix, ExpertsWithoutTokensGetImportanceOne) {
  std::map<std::string, ImatrixStats> s;
  s["blk.0.ffn_up_exps.weight"] = {{2, 4, 6, 8, 1, 1, 1, 1}, {2, 0}};
  s["blk.0.attn_q.weight"] = {{3, 6}, {3}};
  write_imatrix_gguf(tmp("e.gguf"), s, {{"x.txt"}, 1, 2});
  Imatrix m = read_imatrix(tmp("e.gguf"));
  EXPECT_EQ(m.importance.at("blk.0.ffn_up_exps.weight"),
            (std::vector<float>{1, 2, 3, 4, 1, 1, 1, 1}));
  EXPECT_EQ(m.importance.at("blk.0.attn_q.weight"), (std::vector<float>{1, 2}));
  gguf::GGUFFile f(tmp("e.gguf"));
  EXPECT_EQ(f.tensor("blk.0.ffn_up_exps.weight.in_sum2").shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(f.tensor("blk.0.ffn_up_exps.weight.counts").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f.get_string("general.type"), "imatrix");

  // Legacy: ncall = ceil(max count / chunk size) = 1; the token-less matrix stored as 1 * ncall.
  write_imatrix_dat(tmp("e.dat"), s, {{"x.txt"}, 1, 2});
  m = read_imatrix(tmp("e.dat"));
  EXPECT_TRUE(m.legacy);
  EXPECT_EQ(m.importance.at("blk.0.ffn_up_exps.weight"),
            (std::vector<float>{1, 2, 3, 4, 1, 1, 1, 1}));
  EXPECT_EQ(m.importance.at("blk.0.attn_q.weight"), (std::vector<float>{1, 2}));
  EXPECT_EQ(m.datasets, std::vector<std::string>{"x.txt"});
  EXPECT_EQ(m.chunk_count, 1);
}

TEST(Imatrix, RefusesWhatLlamaQuantizeRefuses) {
  std::string e = error_of("/nonexistent/imatrix.gguf");
  EXPECT_NE(e.find("/nonexistent/imatrix.gguf"), std::string::npos) << e;

  std::ofstream(tmp("junk.dat")) << "this is not an imatrix";
  e = error_of(tmp("junk.dat"));
  EXPECT_NE(e.find("not an imatrix file"), std::string::npos) << e;

  std::ofstream(tmp("empty.dat")).flush();
  e = error_of(tmp("empty.dat"));
  EXPECT_NE(e.find("not an imatrix file"), std::string::npos) << e;

  // A model is a GGUF file, but not an imatrix.
  e = error_of(test_util::stories260k_path());
  EXPECT_NE(e.find("imatrix.chunk_count"), std::string::npos) << e;

  // A truncated legacy file.
  const std::string dat = test_util::read_file(fixture("dat"));
  std::ofstream(tmp("cut.dat"), std::ios::binary) << dat.substr(0, dat.size() / 2);
  e = error_of(tmp("cut.dat"));
  EXPECT_NE(e.find("cut.dat"), std::string::npos) << e;
  EXPECT_NE(e.find("values"), std::string::npos) << e;

  // Sums without counts.
  {
    gguf::GGUFWriter w;
    w.set("imatrix.datasets", gguf::Value::string_array({"x"}));
    w.set("imatrix.chunk_count", gguf::Value::u32(1));
    w.set("imatrix.chunk_size", gguf::Value::u32(1));
    w.add_tensor_copy("a.weight.in_sum2", DType::F32, {2, 1}, std::vector<uint8_t>(8, 0));
    w.write(tmp("nocounts.gguf"));
  }
  e = error_of(tmp("nocounts.gguf"));
  EXPECT_NE(e.find("a.weight has in_sum2 but no counts"), std::string::npos) << e;

  // Non-finite importance.
  std::map<std::string, ImatrixStats> s;
  s["a.weight"] = {{1.0, NAN}, {1}};
  write_imatrix_gguf(tmp("nan.gguf"), s, {{"x"}, 1, 1});
  e = error_of(tmp("nan.gguf"));
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
  EXPECT_NE(e.find("a.weight"), std::string::npos) << e;

  // Inconsistent writer input.
  s["a.weight"] = {{1.0, 2.0, 3.0}, {1, 1}};
  EXPECT_THROW(write_imatrix_gguf(tmp("bad.gguf"), s, {{"x"}, 1, 1}), Error);
  EXPECT_THROW(write_imatrix_dat(tmp("bad.dat"), s, {{"x"}, 1, 0}), Error);
}

}  // namespace
}  // namespace kvasir
