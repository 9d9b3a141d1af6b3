// collect_imatrix against the importance matrices the pinned llama-imatrix computed
// (tests/fixtures/imatrix, made by make.sh there: stories260K, the shared TinyStories calibration
// text, 4 chunks of 128 tokens, with its default f16 KV cache and with an f32 one): the same
// entries, counts and metadata exactly, the same per-column importance within float rounding
// (f32 cache) or f16 rounding (f16 cache); the collector's rules on their own (which weights,
// the 16-row minimum, non-finite sums); and the statistics independent of how chunks are batched.
#include "kvasir/quant/imatrix_collect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <tuple>
#include <utility>

#include "kvasir/format/gguf.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "test_util/files.h"
#include "test_util/paths.h"

namespace kvasir {
namespace {

// stories260K-imatrix.gguf, ...
std::string fixture(const std::string& name) {
  return std::string(KVASIR_SOURCE_DIR) + "/tests/fixtures/imatrix/stories260K-" + name;
}
std::string tmp(const std::string& name) {
  return test_util::temp_dir("kvasir-imatrix-collect") + "/" + name;
}

// --- the collector on its own ---

TEST(ImatrixCollector, SumsSquaresPerColumnAndCountsRows) {
  ImatrixCollector c;
  std::vector<float> x(20 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 3) - 0.5f * (i / 3 % 2);
  c.on_matmul("blk.0.attn_q.weight", x.data(), 20, 3);
  c.on_matmul("blk.0.attn_q.weight", x.data(), 16, 3);
  const auto s = c.stats();
  ASSERT_EQ(s.size(), 1u);
  const ImatrixStats& e = s.at("blk.0.attn_q.weight");
  EXPECT_EQ(e.counts, std::vector<int64_t>{36});
  ASSERT_EQ(e.sum_sq.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    double want = 0;
    for (int t = 0; t < 20; ++t) want += double(x[t * 3 + j]) * x[t * 3 + j];
    for (int t = 0; t < 16; ++t) want += double(x[t * 3 + j]) * x[t * 3 + j];
    EXPECT_EQ(e.sum_sq[j], want) << j;
  }
}

TEST(ImatrixCollector, CollectsWhatLlamaImatrixCollects) {
  std::vector<float> x(32 * 4, 1.0f);
  ImatrixCollector c;
  EXPECT_TRUE(c.wants("blk.3.ffn_down.weight"));
  EXPECT_FALSE(c.wants("output.weight"));      // only with --process-output
  EXPECT_FALSE(c.wants("token_embd.weight"));  // a tied output matrix: never
  c.on_matmul("output.weight", x.data(), 32, 4);
  c.on_matmul("token_embd.weight", x.data(), 32, 4);
  c.on_matmul("blk.0.ffn_up.weight", x.data(), 15, 4);  // under 16 rows: not collected
  EXPECT_TRUE(c.stats().empty());

  ImatrixCollector out(/*process_output=*/true);
  EXPECT_TRUE(out.wants("output.weight"));
  EXPECT_FALSE(out.wants("token_embd.weight"));
  out.on_matmul("output.weight", x.data(), 32, 4);
  EXPECT_EQ(out.stats().at("output.weight").counts, std::vector<int64_t>{32});
}

TEST(ImatrixCollector, ThreadsGiveTheSameSums) {
  std::vector<float> x(64 * 1500);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  ThreadPool pool(4);
  ImatrixCollector one, four(false, &pool);
  for (ImatrixCollector* c : {&one, &four}) c->on_matmul("blk.0.attn_v.weight", x.data(), 64, 1500);
  EXPECT_EQ(one.stats().at("blk.0.attn_v.weight").sum_sq,
            four.stats().at("blk.0.attn_v.weight").sum_sq);
}

TEST(ImatrixCollector, NamesTheFirstNonFiniteWeight) {
  std::vector<float> x(16 * 2, 1.0f);
  ImatrixCollector c;
  c.on_matmul("blk.0.attn_k.weight", x.data(), 16, 2);
  EXPECT_EQ(c.non_finite(), "");
  x[3] = std::numeric_limits<float>::infinity();
  c.on_matmul("blk.1.attn_k.weight", x.data(), 16, 2);
  c.on_matmul("blk.2.attn_k.weight", x.data(), 16, 2);
  EXPECT_EQ(c.non_finite(), "blk.1.attn_k.weight");
}

// --- against llama-imatrix ---

struct Stories {
  std::unique_ptr<Model> model;
  std::vector<int32_t> tokens;
  int bos = -1;
};

// stories260K and the calibration text tokenized as llama-imatrix does (its -f drops one
// trailing newline; BOS first).
const Stories& stories() {
  static const Stories s = [] {
    Stories r;
    r.model = Model::load(test_util::stories260k_path());
    Tokenizer tok = Tokenizer::from_gguf(r.model->file());
    std::string text = test_util::read_file(test_util::text_dir() + "/tinystories-calib.txt");
    if (!text.empty() && text.back() == '\n') text.pop_back();
    r.tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
    r.bos = tok.add_bos() ? tok.bos_id() : -1;
    return r;
  }();
  return s;
}

// make.sh's settings: -c 128 --chunks 4.
ImatrixCollectResult collect(int ubatch = 512, int threads = 1, KVDType kv_type = KVDType::F16) {
  ThreadPool pool(threads);
  ImatrixCollectOptions o;
  o.ctx = 128;
  o.max_chunks = 4;
  o.bos_id = stories().bos;
  o.ubatch = ubatch;
  o.kv_type = {kv_type, kv_type};
  return collect_imatrix(*stories().model, pool, stories().tokens, o);
}

// Our statistics written as `kvasir imatrix` writes them, against llama-imatrix's file `ref`:
// the same entries, counts, metadata and layout exactly; the per-column importance (sum / count)
// within `tol` relative. Returns the largest relative difference.
double compare_with(const std::string& ref_path, const ImatrixCollectResult& r, double tol) {
  const Imatrix ref = read_imatrix(ref_path);
  EXPECT_EQ(r.chunk_count, ref.chunk_count);
  EXPECT_EQ(r.chunk_size, ref.chunk_size);
  EXPECT_EQ(r.n_chunks, 4);
  // Exactly llama-imatrix's entries (blk.* only) with its counts.
  EXPECT_EQ(r.stats.size(), ref.stats.size());
  for (const auto& [name, s] : ref.stats) {
    EXPECT_TRUE(r.stats.count(name)) << name;
    if (!r.stats.count(name)) return 1;
    EXPECT_EQ(r.stats.at(name).counts, s.counts) << name;
    EXPECT_EQ(r.stats.at(name).sum_sq.size(), s.sum_sq.size()) << name;
  }

  // The file, read back as llama-quantize would.
  const std::string path = tmp("ours.gguf");
  write_imatrix_gguf(path, r.stats, {{"tinystories-calib.txt"}, r.chunk_count, r.chunk_size});
  const Imatrix ours = read_imatrix(path);
  EXPECT_EQ(ours.datasets, ref.datasets);
  EXPECT_EQ(ours.chunk_count, ref.chunk_count);
  EXPECT_EQ(ours.chunk_size, ref.chunk_size);
  {  // the same layout: metadata, tensor names, shapes, types and order; only values differ
    gguf::GGUFFile a(path), b(ref_path);
    EXPECT_EQ(a.tensors().size(), b.tensors().size());
    for (size_t i = 0; i < std::min(a.tensors().size(), b.tensors().size()); ++i) {
      EXPECT_EQ(a.tensors()[i].name, b.tensors()[i].name);
      EXPECT_EQ(a.tensors()[i].shape, b.tensors()[i].shape);
      EXPECT_EQ(a.tensors()[i].type, b.tensors()[i].type);
    }
    EXPECT_EQ(a.get_string("general.type"), b.get_string("general.type"));
    EXPECT_EQ(std::filesystem::file_size(path), std::filesystem::file_size(ref_path));
  }

  double worst = 0;
  for (const auto& [name, e] : ref.importance) {
    const std::vector<float>& o = ours.importance.at(name);
    EXPECT_EQ(o.size(), e.size()) << name;
    double max_rel = 0;
    for (size_t i = 0; i < std::min(o.size(), e.size()); ++i)
      max_rel = std::max(max_rel, std::fabs(double(o[i]) - e[i]) / std::fabs(double(e[i])));
    std::printf("  %-24s max rel diff %.2e\n", name.c_str(), max_rel);
    EXPECT_LE(max_rel, tol) << name;
    worst = std::max(worst, max_rel);
  }
  std::printf("  worst %.2e (bound %.0e)\n", worst, tol);
  return worst;
}

// With an f32 KV cache and llama.cpp's attention without flash attention, both compute every
// activation in f32 from the same f32 weights, only in different kernels (summation order;
// llama.cpp sums the squares in float, we in double): float rounding, measured at most 1.7e-6
// relative over the 35 entries (the first layer's q/k/v inputs, an RMSNorm of the embeddings,
// already 1.3e-6). The bound leaves a margin of 6.
TEST(ImatrixCollect, MatchesLlamaImatrixToFloatRoundingWithAnF32Cache) {
  compare_with(fixture("imatrix-f32kv.gguf"), collect(512, 1, KVDType::F32), 1e-5);
}

// make.sh's default run (f16 KV cache, flash attention): llama.cpp's flash attention rounds Q
// to f16 and accumulates V·softmax in f16; we keep Q and the accumulator in f32. Both round K
// and V to f16 in the cache (2^-11 relative), which alone moves our statistics 1.3e-3 from the
// f32-cache ones (llama.cpp's own: 1.5e-3). Measured: at most 1.7e-3 relative (attn_output and
// ffn_down, downstream of attention; q/k/v and gate/up 1e-6..2.3e-4); the bound leaves a
// margin of 3.
TEST(ImatrixCollect, MatchesLlamaImatrixWithItsDefaults) {
  const ImatrixCollectResult r = collect();
  compare_with(fixture("imatrix.gguf"), r, 5e-3);

  // The legacy file: llama-imatrix's ncall (4 chunks) and trailer.
  write_imatrix_dat(tmp("ours.dat"), r.stats,
                    {{"tinystories-calib.txt"}, r.chunk_count, r.chunk_size});
  const Imatrix dat = read_imatrix(tmp("ours.dat"));
  const Imatrix ref_dat = read_imatrix(fixture("imatrix.dat"));
  EXPECT_EQ(dat.datasets, ref_dat.datasets);
  EXPECT_EQ(dat.chunk_count, ref_dat.chunk_count);
  ASSERT_EQ(dat.stats.size(), ref_dat.stats.size());
  for (const auto& [name, s] : ref_dat.stats)
    EXPECT_EQ(dat.stats.at(name).counts, s.counts) << name;
  EXPECT_EQ(std::filesystem::file_size(tmp("ours.dat")),
            std::filesystem::file_size(fixture("imatrix.dat")));
}

// llama-imatrix printed, for make.sh's f32-cache run, "[1]4.1964,[2]4.8046,[3]5.1069,[4]5.4744"
// and "Final estimate: PPL = 5.4744 +/- 0.65311": 63 predictions scored per chunk.
TEST(ImatrixCollect, PerplexityIsLlamaImatrixs) {
  std::vector<double> running;
  ThreadPool pool(1);
  ImatrixCollectOptions o;
  o.ctx = 128;
  o.max_chunks = 4;
  o.bos_id = stories().bos;
  o.kv_type = {KVDType::F32, KVDType::F32};
  const ImatrixCollectResult r = collect_imatrix(
      *stories().model, pool, stories().tokens, o, [&](const ImatrixCollectProgress& p) {
        EXPECT_EQ(p.chunks_done, static_cast<int>(running.size()) + 1);
        EXPECT_EQ(p.n_chunks, 4);
        running.push_back(p.ppl);
      });
  EXPECT_EQ(r.scored, 4 * 63);
  EXPECT_NEAR(r.ppl, 5.4744, 1e-4);
  EXPECT_NEAR(r.ppl_error, 0.65311, 1e-5);
  ASSERT_EQ(running.size(), 4u);
  const double llama[] = {4.1964, 4.8046, 5.1069, 5.4744};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(running[i], llama[i], 1e-4) << i;
}

// Batch invariance (the logits are bit-identical however a prompt is chunked, tests/model/)
// holds for the activations too: how the chunks are cut into steps and the thread count change
// the statistics only by the order the squares are summed in (double sums of exact products).
TEST(ImatrixCollect, StatisticsDoNotDependOnTheBatching) {
  const ImatrixCollectResult whole = collect(512, 1);  // the 4 chunks in one step
  for (auto [ubatch, threads] : {std::pair{128, 2}, std::pair{64, 1}, std::pair{200, 3}}) {
    const ImatrixCollectResult r = collect(ubatch, threads);
    EXPECT_EQ(r.chunk_count, whole.chunk_count) << ubatch;
    EXPECT_EQ(r.ppl, whole.ppl) << ubatch;
    ASSERT_EQ(r.stats.size(), whole.stats.size());
    for (const auto& [name, s] : whole.stats) {
      EXPECT_EQ(r.stats.at(name).counts, s.counts) << name << " ubatch " << ubatch;
      const std::vector<double>& o = r.stats.at(name).sum_sq;
      ASSERT_EQ(o.size(), s.sum_sq.size());
      for (size_t i = 0; i < o.size(); ++i)
        EXPECT_NEAR(o[i], s.sum_sq[i], 1e-12 * s.sum_sq[i]) << name << " ubatch " << ubatch;
    }
  }
}

// llama-imatrix's steps and its 16-row minimum lose a few tokens with some chunk sizes; we lose
// the same ones, so the counts agree. Measured with the pinned llama-imatrix (-t 2, the same
// text): -c 512 --chunks 3 steps through 170 tokens of each chunk at a time and then 2 of each
// (skipped): 1530 counted, chunk_count 2; -c 1030 --chunks 2 runs each chunk in 512 + 512 + 6
// tokens: 2048 counted, chunk_count 1; -c 20 --chunks 7: one step of 140.
TEST(ImatrixCollect, LosesTheTokensLlamaImatrixLoses) {
  ThreadPool pool(2);
  for (auto [ctx, chunks, count, chunk_count] :
       {std::tuple{512, 3, 1530, 2}, std::tuple{1030, 2, 2048, 1}, std::tuple{20, 7, 140, 7}}) {
    ImatrixCollectOptions o;
    o.ctx = ctx;
    o.max_chunks = chunks;
    o.bos_id = stories().bos;
    o.compute_ppl = false;
    const ImatrixCollectResult r = collect_imatrix(*stories().model, pool, stories().tokens, o);
    EXPECT_EQ(r.stats.size(), 35u) << ctx;
    for (const auto& [name, s] : r.stats)
      EXPECT_EQ(s.counts, std::vector<int64_t>{count}) << name << " -c " << ctx;
    EXPECT_EQ(r.chunk_count, chunk_count) << ctx;
    EXPECT_EQ(r.n_chunks, chunks) << ctx;
  }
}

TEST(ImatrixCollect, OutputWeightWithProcessOutput) {
  ThreadPool pool(1);
  ImatrixCollectOptions o;
  o.ctx = 128;
  o.max_chunks = 1;
  o.bos_id = stories().bos;
  o.process_output = true;
  o.compute_ppl = false;
  const ImatrixCollectResult r = collect_imatrix(*stories().model, pool, stories().tokens, o);
  EXPECT_EQ(r.stats.size(), 36u);
  ASSERT_TRUE(r.stats.count("output.weight"));
  EXPECT_EQ(r.stats.at("output.weight").counts, std::vector<int64_t>{128});
  EXPECT_EQ(r.stats.at("output.weight").sum_sq.size(), 64u);
  EXPECT_EQ(r.ppl, 0.0);
}

TEST(ImatrixCollect, RefusesTooLittleTextAndBadOptions) {
  ThreadPool pool(1);
  auto error = [&](std::span<const int32_t> tokens, ImatrixCollectOptions o) -> std::string {
    try {
      collect_imatrix(*stories().model, pool, tokens, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::vector<int32_t> few(100, 1);
  ImatrixCollectOptions o;
  o.ctx = 128;
  std::string e = error(few, o);
  EXPECT_NE(e.find("100 tokens, fewer than one chunk of 128"), std::string::npos) << e;
  o.ctx = 2;
  e = error(few, o);
  EXPECT_NE(e.find("too small"), std::string::npos) << e;
  // Chunks of 8 tokens, one chunk: every step has fewer than 16 rows.
  o.ctx = 8;
  o.max_chunks = 1;
  e = error(few, o);
  EXPECT_NE(e.find("nothing was collected"), std::string::npos) << e;
}

}  // namespace
}  // namespace kvasir
