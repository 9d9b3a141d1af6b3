// `kvasir quantize` as a drop-in for llama-quantize: its argument forms (IN OUT TYPE [N],
// IN TYPE, --type), mixture names in any case and aliases, --imatrix, --pure,
// --output-tensor-type, --token-embedding-type, --dry-run; the progress lines on a non-terminal
// stderr and the per-tensor table on stdout; and clear errors for bad types and imatrix files.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_test_util.h"
#include "kvasir/format/gguf.h"
#include "quant/quant_fixtures.h"

namespace kvasir::cli_test {
namespace {

std::string imatrix_fixture() {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/imatrix/stories260K-imatrix.gguf";
}

// A 256-wide model (its rows take the 256-blocks), written once.
const std::string& wide_model() {
  static const std::string p = [] {
    const std::string path = tmp("wide-f16.gguf");
    quant_fixtures::write_model(quant_fixtures::hash_model(), path);
    return path;
  }();
  return p;
}

DType type_of(const std::string& path, const std::string& tensor) {
  return gguf::GGUFFile(path).tensor(tensor).type;
}

TEST(CliQuantize, Q4KMWithImatrixShowsProgressAndTheTable) {
  const std::string out = tmp("stories-Q4_K_M.gguf");
  Result r = kvasir("quantize " + q(stories()) + " " + q(out) + " q4_k_m --imatrix " +
                    q(imatrix_fixture()));
  ASSERT_EQ(r.code, 0) << r.err;
  // stderr is not a terminal here: one plain line per tensor, no carriage returns.
  EXPECT_TRUE(has(r.err, "[ 1/48] output.weight f32 -> q8_0 | ")) << r.err;
  EXPECT_TRUE(has(r.err, "[48/48] blk.4.ffn_up.weight f32 -> q5_0")) << r.err;
  EXPECT_TRUE(has(r.err, "ETA")) << r.err;
  EXPECT_FALSE(has(r.err, "\r")) << r.err;
  EXPECT_TRUE(has(r.err, "imatrix " + imatrix_fixture() + ": 35 entries, 4 chunks")) << r.err;
  // The table: type chosen and why, per tensor, and the bits per weight.
  EXPECT_TRUE(has(r.out, "output tensor: 64 cols not a multiple of 256")) << r.out;
  EXPECT_TRUE(has(r.out, "attn_v: more bits in first/last layers")) << r.out;
  EXPECT_TRUE(has(r.out, "fallback: 172 cols not a multiple of 256 nor of 32 (q4_k -> f16)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "1-D: kept f32")) << r.out;
  EXPECT_TRUE(has(r.out, "[imatrix]")) << r.out;
  EXPECT_TRUE(has(r.out, "Q4_K_M: 48 tensors, 37 converted")) << r.out;
  EXPECT_TRUE(has(r.out, "(7.92 bpw)")) << r.out;
  gguf::GGUFFile f(out);
  EXPECT_EQ(f.get_int("general.file_type"), 15);
  EXPECT_EQ(f.get_int("quantize.imatrix.entries_count"), 35);
  EXPECT_EQ(f.tensor("blk.2.attn_v.weight").type, DType::Q8_0);
  EXPECT_EQ(f.tensor("blk.0.attn_v.weight").type, DType::Q5_0);
  // And the file runs.
  Result g = kvasir("run -m " + q(out) + " -p '' -n 8 --temp 0 -q");
  EXPECT_EQ(g.code, 0) << g.err;
}

TEST(CliQuantize, ArgumentFormsAsLlamaQuantize) {
  // IN TYPE: the output is ggml-model-TYPE.gguf beside the input.
  const std::string dir = tmp("forms");
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/model.gguf";
  std::filesystem::copy_file(stories(), in, std::filesystem::copy_options::overwrite_existing);
  Result r = kvasir("quantize -q " + q(in) + " q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(type_of(dir + "/ggml-model-Q8_0.gguf", "blk.0.attn_q.weight"), DType::Q8_0);
  EXPECT_TRUE(r.out.empty()) << r.out;  // -q: no table

  // IN OUT TYPE NTHREADS; the aliases (Q5_K = Q5_K_M) and llama_ftype numbers.
  r = kvasir("quantize -q " + q(wide_model()) + " " + q(dir + "/a.gguf") + " Q5_K 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(gguf::GGUFFile(dir + "/a.gguf").get_int("general.file_type"), 17);
  r = kvasir("quantize -q " + q(wide_model()) + " " + q(dir + "/b.gguf") + " 15");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(gguf::GGUFFile(dir + "/b.gguf").get_int("general.file_type"), 15);
  r = kvasir("quantize -q " + q(wide_model()) + " " + q(dir + "/c.gguf") + " Q8_0 many");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "unexpected argument 'many'")) << r.err;
}

TEST(CliQuantize, PureAndTypeOverrides) {
  const std::string out = tmp("wide-q4_0-pure.gguf");
  Result r = kvasir("quantize -q " + q(wide_model()) + " " + q(out) +
                    " --type Q4_0 --pure --output-tensor-type Q8_0 --token-embedding-type q6_k");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(type_of(out, "output.weight"), DType::Q8_0);
  EXPECT_EQ(type_of(out, "token_embd.weight"), DType::Q6_K);
  EXPECT_EQ(type_of(out, "blk.1.attn_v.weight"), DType::Q4_0);  // --pure: no "more bits"
  EXPECT_EQ(type_of(out, "blk.0.attn_norm.weight"), DType::F32);

  r = kvasir("quantize -q " + q(wide_model()) + " " + q(tmp("x.gguf")) +
             " Q4_0 --output-tensor-type q9_9");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "--output-tensor-type: unknown ggml type 'q9_9'")) << r.err;
}

TEST(CliQuantize, DryRunWritesNothing) {
  const std::string out = tmp("dry.gguf");
  std::filesystem::remove(out);
  Result r = kvasir("quantize --dry-run " + q(wide_model()) + " " + q(out) + " Q3_K_M");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_TRUE(has(r.out, "attn_v: more bits in the first 2 layers")) << r.out;
  EXPECT_TRUE(has(r.err, "dry run")) << r.err;
  // Even a mixture kvasir cannot write yet shows its plan.
  r = kvasir("quantize --dry-run " + q(wide_model()) + " IQ2_XXS");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "iq2_xxs")) << r.out;
  EXPECT_TRUE(has(r.err, "warning:")) << r.err;
}

TEST(CliQuantize, ClearErrors) {
  const std::string out = tmp("err.gguf");
  Result r = kvasir("quantize " + q(stories()) + " " + q(out) + " Q7_K_X");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "unknown type 'Q7_K_X'")) << r.err;
  EXPECT_TRUE(has(r.err, "Q4_K_M")) << r.err;  // the list of what it takes

  r = kvasir("quantize " + q(stories()) + " " + q(out) + " IQ2_XXS");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "IQ2_XXS is a llama-quantize type kvasir cannot write yet")) << r.err;

  r = kvasir("quantize " + q(stories()) + " " + q(out) + " Q4_K_M --imatrix /nonexistent/im.gguf");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "/nonexistent/im.gguf")) << r.err;

  r = kvasir("quantize " + q(stories()) + " " + q(out) + " Q4_K_M --imatrix " + q(stories()));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "not an imatrix file")) << r.err;

  // Q2_K_S's q2_k tensors need an imatrix, as llama-quantize insists.
  r = kvasir("quantize " + q(wide_model()) + " " + q(out) + " Q2_K_S");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "Q2_K_S needs an importance matrix (--imatrix)")) << r.err;
  // An imatrix of another model.
  r = kvasir("quantize " + q(wide_model()) + " " + q(out) + " Q4_K_M --imatrix " +
             q(imatrix_fixture()));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "the imatrix is for another model")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));

  r = kvasir("quantize " + q(stories()) + " " + q(stories()) + " Q8_0");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "must differ from the input")) << r.err;
}

}  // namespace
}  // namespace kvasir::cli_test
