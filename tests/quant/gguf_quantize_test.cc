// quantize_gguf's llama-quantize behaviour beyond the type rules (mixture_fixture_test.cc): no
// silent requantizing (allow_requantize opts in; copying a tensor already of its target type is
// not requantizing), the imatrix requirements and checks, the metadata written, the order of
// the tensors, progress, thread-count independence and the report.
#include "kvasir/quant/gguf_quantize.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kvasir/format/gguf.h"
#include "kvasir/quant/quantize_progress.h"
#include "kvasir/util/error.h"
#include "quant_fixtures.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

using namespace quant_fixtures;

std::string tmp(const std::string& name) {
  return test_util::temp_dir("kvasir-quant") + "/" + name;
}

std::string stories_imatrix() {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/imatrix/stories260K-imatrix.gguf";
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A 256-wide synthetic model (rows fit the 256-blocks) written once per process.
const std::string& wide_model() {
  static const std::string path = [] {
    const std::string p = tmp("wide.gguf");
    write_model(hash_model(), p);
    return p;
  }();
  return path;
}

TEST(MixtureNames, AreLlamaQuantizesInAnyCase) {
  EXPECT_EQ(mixture_from_name("q4_k_m")->ftype, FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(mixture_from_name("Q4_K")->ftype, FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(mixture_from_name("q3_k")->ftype, FileType::MOSTLY_Q3_K_M);
  EXPECT_EQ(mixture_from_name("Q5_K")->ftype, FileType::MOSTLY_Q5_K_M);
  EXPECT_EQ(mixture_from_name("iq4_xs")->ftype, FileType::MOSTLY_IQ4_XS);
  EXPECT_EQ(mixture_from_name("F16")->ftype, FileType::MOSTLY_F16);
  EXPECT_EQ(mixture_from_name("bf16")->ftype, FileType::MOSTLY_BF16);
  EXPECT_EQ(mixture_from_name("15")->ftype, FileType::MOSTLY_Q4_K_M);  // the llama_ftype number
  EXPECT_EQ(mixture_from_name("0")->ftype, FileType::ALL_F32);
  EXPECT_EQ(mixture_from_name("q7_9"), std::nullopt);
  EXPECT_EQ(mixture_from_name(""), std::nullopt);
  EXPECT_EQ(mixture_from_name("4"), std::nullopt);  // a removed llama_ftype
  EXPECT_EQ(mixture_name(FileType::MOSTLY_Q4_K_M), "Q4_K_M");
  EXPECT_EQ(mixture_default_type(FileType::MOSTLY_Q3_K_L), DType::Q3_K);
  EXPECT_EQ(mixture_default_type(FileType::MOSTLY_IQ2_S), DType::IQ2_XS);
  EXPECT_TRUE(mixture_is_writable(FileType::MOSTLY_Q4_K_M));
  EXPECT_TRUE(mixture_is_writable(FileType::MOSTLY_IQ4_XS));
  EXPECT_FALSE(mixture_is_writable(FileType::MOSTLY_IQ2_XXS));
  EXPECT_EQ(ggml_type_from_name("Q6_K"), DType::Q6_K);
  EXPECT_EQ(ggml_type_from_name("q8_0"), DType::Q8_0);
  EXPECT_EQ(ggml_type_from_name("q8_9"), std::nullopt);
}

TEST(ChooseTensorTypes, SaysWhy) {
  FixtureModel m = hash_model();
  const auto tensors = model_tensors(m);
  MixtureOptions o;
  o.ftype = FileType::MOSTLY_Q4_K_M;
  const auto c = choose_tensor_types(mixture_model_of(m), tensors, o);
  auto of = [&](const std::string& n) -> const TensorChoice& {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == n) return c[i];
    throw Error("no tensor " + n);
  };
  EXPECT_EQ(of("output.weight").type, DType::Q6_K);
  EXPECT_EQ(of("output.weight").reason, "output tensor");
  EXPECT_EQ(of("token_embd.weight").type, DType::Q4_K);
  EXPECT_EQ(of("blk.0.attn_norm.weight").reason, "1-D: kept f32");
  EXPECT_FALSE(of("blk.0.attn_norm.weight").convertible);
  EXPECT_EQ(of("blk.0.attn_q.weight").reason, "mixture type");
  // Two layers: layer 1 is in the last eighth, layer 0 is not (0 < 2/8 fails).
  EXPECT_EQ(of("blk.0.attn_v.weight").type, DType::Q4_K);
  EXPECT_EQ(of("blk.1.attn_v.weight").type, DType::Q6_K);
  EXPECT_EQ(of("blk.1.attn_v.weight").reason, "attn_v: more bits in first/last layers");
  // ffn 800: a multiple of 32, not of 256.
  EXPECT_EQ(of("blk.1.ffn_down.weight").type, DType::Q8_0);
  EXPECT_TRUE(of("blk.1.ffn_down.weight").fallback);
  EXPECT_EQ(of("blk.1.ffn_down.weight").reason,
            "ffn_down: more bits in first/last layers; fallback: 800 cols not a multiple of 256 "
            "(q6_k -> q8_0)");
  EXPECT_EQ(of("blk.0.ffn_down.weight").reason,
            "fallback: 800 cols not a multiple of 256 (q4_k -> q5_0)");

  // An explicit type gets no fallback: one that does not fit is refused (llama.cpp aborts).
  o.token_embedding_type = DType::Q4_K;
  m.dim = 64;
  const std::string e =
      error_of([&] { choose_tensor_types(mixture_model_of(m), model_tensors(m), o); });
  EXPECT_TRUE(has(e, "--token-embedding-type q4_k: tensor token_embd.weight has rows of 64")) << e;

  // Q2_K_S needs an imatrix for its q2_k tensors (not token_embd / output).
  o = {};
  o.ftype = FileType::MOSTLY_Q2_K_S;
  const auto q2 = choose_tensor_types(mixture_model_of(hash_model()), tensors, o);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool embd_or_output =
        tensors[i].name == "token_embd.weight" || tensors[i].name == "output.weight";
    EXPECT_EQ(q2[i].requires_imatrix, q2[i].type == DType::Q2_K && !embd_or_output)
        << tensors[i].name;
  }
}

TEST(LlamaTensorOrder, GlobalsFirstThenBlocksByNumber) {
  const std::vector<std::string> names = {"blk.10.b", "blk.2.a",           "output.weight",
                                          "blk.2.0",  "token_embd.weight", "blk.10.a"};
  std::vector<std::string> sorted;
  for (size_t i : llama_tensor_order(names)) sorted.push_back(names[i]);
  EXPECT_EQ(sorted, (std::vector<std::string>{"output.weight", "token_embd.weight", "blk.2.0",
                                              "blk.2.a", "blk.10.a", "blk.10.b"}));
}

TEST(QuantizeGguf, RefusesToRequantizeUnlessAllowed) {
  const std::string q4 = tmp("q4_0.gguf"), q8 = tmp("q8_0.gguf"), copy = tmp("q4_0-copy.gguf");
  quantize_gguf(test_util::stories260k_path(), q4, DType::Q4_0);

  std::filesystem::remove(q8);
  std::string e = error_of([&] { quantize_gguf(q4, q8, DType::Q8_0); });
  EXPECT_TRUE(has(e, q4)) << e;
  EXPECT_TRUE(has(e, "already quantized (q4_0)")) << e;
  EXPECT_TRUE(has(e, "--allow-requantize")) << e;
  EXPECT_FALSE(std::filesystem::exists(q8)) << "nothing is written before the check";
  // Dequantizing is converting a quantized tensor too (llama-quantize refuses it as well).
  EXPECT_THROW(quantize_gguf(q4, tmp("f16.gguf"), DType::F16), Error);

  QuantizeOptions allow;
  allow.allow_requantize = true;
  QuantizeReport r = quantize_gguf(q4, q8, DType::Q8_0, allow);
  EXPECT_GT(r.n_quantized, 0);
  gguf::GGUFFile f(q8);
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, DType::Q8_0);

  // Same type again: every tensor is copied, nothing is requantized, so no refusal.
  r = quantize_gguf(q4, copy, DType::Q4_0);
  EXPECT_EQ(r.n_quantized, 0);
}

TEST(QuantizeGguf, WritesLlamaQuantizesMetadataAndOrder) {
  const std::string out = tmp("stories-q8.gguf");
  QuantizeReport r = quantize_gguf(test_util::stories260k_path(), out, FileType::MOSTLY_Q8_0);
  gguf::GGUFFile in(test_util::stories260k_path()), f(out);
  const auto& kv = f.metadata();
  ASSERT_GE(kv.size(), 2u);
  // Appended after the input's keys, in llama-quantize's order.
  EXPECT_EQ(kv[kv.size() - 2].first, "general.quantization_version");
  EXPECT_EQ(kv[kv.size() - 2].second, gguf::Value::u32(2));
  EXPECT_EQ(kv.back().first, "general.file_type");
  EXPECT_EQ(kv.back().second, gguf::Value::u32(7));
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  // Tensors: globals first, then block by block, by name.
  EXPECT_EQ(f.tensors().front().name, "output.weight");
  EXPECT_EQ(f.tensors()[3].name, "blk.0.attn_k.weight");
  EXPECT_EQ(r.tensors.size(), in.tensors().size());
  EXPECT_EQ(
      r.n_elements, 0u + [&] {
        uint64_t n = 0;
        for (const auto& t : in.tensors()) n += static_cast<uint64_t>(t.n_elements());
        return n;
      }());
  EXPECT_NEAR(r.bpw_in(), 32.0, 1e-9);
  EXPECT_EQ(r.bytes_out, [&] {
    uint64_t n = 0;
    for (const auto& t : f.tensors()) n += t.nbytes;
    return n;
  }());
  const std::string table = format_tensor_table(r);
  EXPECT_TRUE(has(table, "output.weight")) << table;
  EXPECT_TRUE(has(table, "1-D: kept f32")) << table;
  EXPECT_TRUE(has(table, "fallback: 172 cols not a multiple of 32 (q8_0 -> f16)")) << table;
  EXPECT_TRUE(has(table, "Q8_0: 48 tensors, 37 converted")) << table;
}

TEST(QuantizeGguf, ImatrixMetadataAndChecks) {
  const Imatrix im = read_imatrix(stories_imatrix());
  QuantizeOptions o;
  o.imatrix = &im;
  o.dry_run = true;
  QuantizeReport r = quantize_gguf(test_util::stories260k_path(), "", FileType::MOSTLY_Q8_0, o);
  EXPECT_EQ(r.n_quantized, 37);  // dry run: nothing written, the plan reported

  // The keys llama-quantize adds with an imatrix (q8_0 ignores the importance itself).
  o.dry_run = false;
  const std::string out = tmp("stories-q8-imatrix.gguf");
  quantize_gguf(test_util::stories260k_path(), out, FileType::MOSTLY_Q8_0, o);
  gguf::GGUFFile f(out);
  EXPECT_EQ(f.get_string("quantize.imatrix.file"), stories_imatrix());
  EXPECT_EQ(f.get_string("quantize.imatrix.dataset"), "tinystories-calib.txt");
  EXPECT_EQ(f.get_int("quantize.imatrix.entries_count"), 35);
  EXPECT_EQ(f.get_int("quantize.imatrix.chunks_count"), 4);
  EXPECT_EQ(f.metadata().back().first, "quantize.imatrix.chunks_count");

  // Q2_K_S without an imatrix: refused before anything is written, naming tensor and type.
  std::string e =
      error_of([&] { quantize_gguf(wide_model(), tmp("q2ks.gguf"), FileType::MOSTLY_Q2_K_S); });
  EXPECT_TRUE(has(e, "needs an importance matrix")) << e;
  EXPECT_TRUE(has(e, "q2_k")) << e;
  EXPECT_FALSE(std::filesystem::exists(tmp("q2ks.gguf")));

  // An imatrix of another model: its rows do not match.
  o.dry_run = true;
  e = error_of([&] { quantize_gguf(wide_model(), "", FileType::MOSTLY_Q4_K_M, o); });
  EXPECT_TRUE(has(e, "is for another model")) << e;
  EXPECT_TRUE(has(e, "rows of 256")) << e;

  // A required entry missing (the fixture imatrix has none for blk.1.ffn_up.weight) is an
  // error; an optional one only a warning.
  write_imatrix_gguf(tmp("wide.imatrix.gguf"), model_imatrix(hash_model()), {{"s"}, 1, 512});
  const Imatrix wim = read_imatrix(tmp("wide.imatrix.gguf"));
  o.imatrix = &wim;
  e = error_of([&] { quantize_gguf(wide_model(), "", FileType::MOSTLY_Q2_K_S, o); });
  EXPECT_TRUE(has(e, "no entry for tensor blk.1.ffn_up.weight")) << e;
  r = quantize_gguf(wide_model(), "", FileType::MOSTLY_Q4_K_M, o);
  std::string warnings;
  for (const std::string& w : r.warnings) warnings += w + "\n";
  EXPECT_EQ(r.warnings.size(), 3u) << warnings;  // and token_embd, output: no entries either
  EXPECT_TRUE(has(warnings, "no entry for blk.1.ffn_up.weight: quantized without")) << warnings;
}

TEST(QuantizeGguf, KvasirCannotWriteEveryMixture) {
  // Without an imatrix llama-quantize's refusal comes first; with one, kvasir's own.
  std::string e =
      error_of([&] { quantize_gguf(wide_model(), tmp("iq2.gguf"), FileType::MOSTLY_IQ2_XXS); });
  EXPECT_TRUE(has(e, "needs an importance matrix")) << e;
  write_imatrix_gguf(tmp("iq2.imatrix.gguf"), model_imatrix(hash_model()), {{"s"}, 1, 512});
  const Imatrix im = read_imatrix(tmp("iq2.imatrix.gguf"));
  QuantizeOptions o;
  o.imatrix = &im;
  e = error_of([&] { quantize_gguf(wide_model(), tmp("iq2.gguf"), FileType::MOSTLY_IQ2_XXS, o); });
  EXPECT_TRUE(has(e, "iq2_xxs, which kvasir cannot write yet")) << e;
  EXPECT_FALSE(std::filesystem::exists(tmp("iq2.gguf")));
  // A dry run shows the plan anyway, with warnings.
  o.imatrix = nullptr;
  o.dry_run = true;
  const QuantizeReport r = quantize_gguf(wide_model(), "", FileType::MOSTLY_IQ2_XXS, o);
  std::string warnings;
  for (const std::string& w : r.warnings) warnings += w + "\n";
  EXPECT_TRUE(has(warnings, "the real run will refuse to go without one")) << warnings;
  EXPECT_TRUE(has(warnings, "cannot write yet")) << warnings;
}

TEST(QuantizeGguf, ProgressAndThreadsDoNotChangeTheBytes) {
  std::vector<QuantizeProgress> seen;
  QuantizeOptions o;
  o.n_threads = 1;
  o.on_progress = [&](const QuantizeProgress& p) { seen.push_back(p); };
  quantize_gguf(wide_model(), tmp("t1.gguf"), FileType::MOSTLY_Q8_0, o);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().index, 1);
  EXPECT_EQ(seen.back().index, seen.back().count);
  EXPECT_EQ(seen.back().elements_done, seen.back().elements_total);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
    EXPECT_GE(seen[i].elements_done, seen[i - 1].elements_done);
  }
  const std::string line = format_progress(seen.back());
  EXPECT_TRUE(has(line, "/" + std::to_string(seen.back().count) + "]")) << line;
  EXPECT_TRUE(has(line, "MiB")) << line;
  EXPECT_TRUE(has(line, "ETA")) << line;

  o.on_progress = nullptr;
  o.n_threads = 4;
  quantize_gguf(wide_model(), tmp("t4.gguf"), FileType::MOSTLY_Q8_0, o);
  EXPECT_EQ(test_util::read_file(tmp("t1.gguf")), test_util::read_file(tmp("t4.gguf")));
}

TEST(QuantizeProgress, FormatsLinesAndDurations) {
  EXPECT_EQ(format_duration(4.25), "4.2 s");
  EXPECT_EQ(format_duration(125), "2 m 05 s");
  EXPECT_EQ(format_duration(7300), "2 h 01 m");
  const std::string name = "blk.0.ffn_down.weight";
  QuantizeProgress p;
  p.index = 12;
  p.count = 291;
  p.name = name;
  p.from = DType::F16;
  p.to = DType::Q6_K;
  p.bytes_done = 100u << 20;
  p.bytes_total = 400u << 20;
  p.elements_done = 100;
  p.elements_total = 400;
  p.elapsed_s = 10;
  EXPECT_EQ(format_progress(p),
            "[ 12/291] blk.0.ffn_down.weight f16 -> q6_k | 100.0/400.0 MiB | 10.0 s, ETA 30.0 s");
}

}  // namespace
}  // namespace kvasir
