// `kvasir imatrix` as a drop-in for llama-imatrix: on stories260K with make.sh's settings
// (tests/fixtures/imatrix) it writes a file with llama-imatrix's entries and metadata, in either
// format, shows its progress on stderr, and `kvasir quantize --imatrix` picks the same types
// with it as with llama-imatrix's file; clear errors for bad inputs. The values themselves are
// compared in tests/quant/imatrix_collect_test.cc.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_test_util.h"
#include "kvasir/format/gguf.h"
#include "kvasir/quant/imatrix.h"

namespace kvasir::cli_test {
namespace {

std::string fixture(const std::string& ext) {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/imatrix/stories260K-imatrix." + ext;
}

// From the text folder, as make.sh runs llama-imatrix, so the dataset is the bare file name.
Result imatrix(const std::string& args) {
  return kvasir_in(test_util::text_dir(), "",
                   "imatrix -m " + q(stories()) + " -f tinystories-calib.txt " + args);
}

TEST(CliImatrix, WritesLlamaImatrixsFile) {
  const std::string out = tmp("ours-imatrix.gguf");
  Result r = imatrix("-c 128 --chunks 4 -t 1 -o " + q(out));
  ASSERT_EQ(r.code, 0) << r.err;
  // One progress line per chunk on a non-terminal stderr, no carriage returns.
  EXPECT_TRUE(has(r.err, "chunk 1/4 | ppl ")) << r.err;
  EXPECT_TRUE(has(r.err, "chunk 4/4 | ppl ")) << r.err;
  EXPECT_TRUE(has(r.err, "ETA")) << r.err;
  EXPECT_FALSE(has(r.err, "\r")) << r.err;
  EXPECT_TRUE(has(r.out, "perplexity: ")) << r.out;
  EXPECT_TRUE(has(r.out, "imatrix: 35 entries over 4 chunks of 128 tokens")) << r.out;

  const Imatrix ours = read_imatrix(out), ref = read_imatrix(fixture("gguf"));
  EXPECT_EQ(ours.datasets, ref.datasets);
  EXPECT_EQ(ours.chunk_count, ref.chunk_count);
  EXPECT_EQ(ours.chunk_size, ref.chunk_size);
  ASSERT_EQ(ours.stats.size(), ref.stats.size());
  for (const auto& [name, s] : ref.stats) {
    ASSERT_TRUE(ours.stats.count(name)) << name;
    EXPECT_EQ(ours.stats.at(name).counts, s.counts) << name;
  }

  // The legacy format, by flag and by the output's name.
  for (const std::string& args : {std::string("--output-format dat -o ") + q(tmp("a.imatrix")),
                                  std::string("-o ") + q(tmp("b.dat"))}) {
    r = imatrix("-c 128 --chunks 4 --no-ppl " + args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(has(r.out, "perplexity")) << r.out;
  }
  for (const std::string& f : {tmp("a.imatrix"), tmp("b.dat")}) {
    const Imatrix d = read_imatrix(f), ref_dat = read_imatrix(fixture("dat"));
    EXPECT_TRUE(d.legacy) << f;
    EXPECT_EQ(d.datasets, ref_dat.datasets);
    EXPECT_EQ(d.chunk_count, ref_dat.chunk_count);
    EXPECT_EQ(d.stats.size(), ref_dat.stats.size());
  }
}

TEST(CliImatrix, QuantizeWithOursPicksLlamaImatrixsTypes) {
  const std::string im = tmp("q-imatrix.gguf");
  Result r = imatrix("-c 128 --chunks 4 --no-ppl -o " + q(im));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string a = tmp("ours-Q4_K_M.gguf"), b = tmp("llama-Q4_K_M.gguf");
  r = kvasir("quantize " + q(stories()) + " " + q(a) + " Q4_K_M --imatrix " + q(im));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, ": 35 entries, 4 chunks")) << r.err;
  r = kvasir("quantize " + q(stories()) + " " + q(b) + " Q4_K_M --imatrix " + q(fixture("gguf")));
  ASSERT_EQ(r.code, 0) << r.err;
  gguf::GGUFFile fa(a), fb(b);
  ASSERT_EQ(fa.tensors().size(), fb.tensors().size());
  for (size_t i = 0; i < fa.tensors().size(); ++i) {
    EXPECT_EQ(fa.tensors()[i].name, fb.tensors()[i].name);
    EXPECT_EQ(fa.tensors()[i].type, fb.tensors()[i].type) << fa.tensors()[i].name;
  }
  EXPECT_EQ(fa.get_int("quantize.imatrix.entries_count"), 35);
  EXPECT_EQ(fa.get_string("quantize.imatrix.dataset"), "tinystories-calib.txt");
}

TEST(CliImatrix, ClearErrors) {
  Result r =
      kvasir("imatrix -m " + q(stories()) + " -f /nonexistent/calib.txt -o " + q(tmp("x.gguf")));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "/nonexistent/calib.txt: cannot read the text file")) << r.err;

  r = kvasir("imatrix -m /nonexistent/m.gguf -f " + q(stories()) + " -o " + q(tmp("x.gguf")));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "/nonexistent/m.gguf: cannot read the model")) << r.err;

  std::ofstream(tmp("short.txt")) << "Once upon a time there was a cat.\n";
  r = kvasir("imatrix -m " + q(stories()) + " -f " + q(tmp("short.txt")) + " -c 128 -o " +
             q(tmp("x.gguf")));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "short.txt: the text tokenizes to ")) << r.err;
  EXPECT_TRUE(has(r.err, "fewer than one chunk of 128 (-c)")) << r.err;

  r = imatrix("-c 128 -o /nonexistent/dir/x.gguf");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "the folder /nonexistent/dir does not exist")) << r.err;

  r = imatrix("-c 128 --output-format txt -o " + q(tmp("x.gguf")));
  EXPECT_EQ(r.code, 2) << r.err;

  r = imatrix("-c 2 -o " + q(tmp("x.gguf")));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "at least 4 tokens")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp("x.gguf")));
}

}  // namespace
}  // namespace kvasir::cli_test
