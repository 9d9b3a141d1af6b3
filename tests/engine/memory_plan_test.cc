// Memory planner: KV bytes per token against known published figures, the budget split's
// invariants, the refusal of a plan that cannot hold one full sequence, and size parsing.
#include "kvasir/engine/memory_plan.h"

#include <gtest/gtest.h>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

ModelConfig stories260k() {  // dims of /work/shared/models/stories260K.gguf
  ModelConfig c;
  c.arch = "llama";
  c.n_vocab = 512;
  c.dim = 64;
  c.n_layers = 5;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.ffn_dim = 172;
  c.ctx_train = 2048;
  return c;
}

ModelConfig llama2_7b() {
  ModelConfig c;
  c.arch = "llama";
  c.n_vocab = 32000;
  c.dim = 4096;
  c.n_layers = 32;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.head_dim = 128;
  c.ffn_dim = 11008;
  c.ctx_train = 4096;
  return c;
}

TEST(MemoryPlan, KvBytesPerToken) {
  // Llama-2-7B keeps 0.5 MiB of f16 K and V per token (2 x 32 layers x 4096 x 2 bytes), the
  // figure vLLM's and llama.cpp's documentation quote.
  EXPECT_EQ(kv_bytes_per_token(llama2_7b(), {}), 524288);
  // stories260K: 2 x 5 layers x 4 KV heads x 8 dims x 2 bytes.
  EXPECT_EQ(kv_bytes_per_token(stories260k(), {}), 640);
  EXPECT_EQ(kv_bytes_per_token(stories260k(), {KVDType::F32, KVDType::F32}), 1280);
}

TEST(MemoryPlan, QuantizedKvBytesPerTokenCountTheirScales) {
  // Llama-2-7B: 32 layers x 32 KV heads x (K + V) rows of 128 values.
  const int64_t rows = 32 * 32 * 2;
  EXPECT_EQ(kv_bytes_per_token(llama2_7b(), {KVDType::Int8, KVDType::Int8}), rows * (128 + 2));
  EXPECT_EQ(kv_bytes_per_token(llama2_7b(), {KVDType::FP8E5M2, KVDType::FP8E5M2}),
            rows * (128 + 2));
  EXPECT_EQ(kv_bytes_per_token(llama2_7b(), {KVDType::Int4, KVDType::Int4}), rows * (64 + 4 * 3));
  EXPECT_EQ(kv_bytes_per_token(llama2_7b(), {KVDType::F16, KVDType::Int4}),
            rows / 2 * (256 + 64 + 12));
  EXPECT_EQ(kv_bytes_per_token_formula(llama2_7b(), {KVDType::Int8, KVDType::Int8}),
            "32 layers x 32 KV heads x (K 130 B (int8: 128 B codes + 2 B scale) + V 130 B (int8: "
            "128 B codes + 2 B scale)) = 266240 B");
}

TEST(MemoryPlan, QuantizedKvHoldsMoreSequencesAtFullContext) {
  // At a fixed budget the largest batch at full context grows with the KV bytes saved.
  PlanOptions o;
  o.memory_bytes = int64_t{16} << 30;
  o.ctx = 4096;
  o.max_seqs = 1000;
  const int64_t weights = int64_t{13} << 29;
  const Plan f16 = plan_memory(llama2_7b(), weights, o);
  o.kv_type = {KVDType::Int8, KVDType::Int8};
  const Plan i8 = plan_memory(llama2_7b(), weights, o);
  o.kv_type = {KVDType::Int4, KVDType::Int4};
  const Plan i4 = plan_memory(llama2_7b(), weights, o);
  EXPECT_EQ(f16.max_batch_at_ctx, f16.kv_budget_bytes / (f16.kv_bytes_per_token * 4096));
  EXPECT_GE(i8.max_batch_at_ctx, f16.max_batch_at_ctx * 128 / 65 - 1);  // 256 B -> 130 B a row
  EXPECT_GE(i4.max_batch_at_ctx, f16.max_batch_at_ctx * 256 / 76 - 1);
  EXPECT_NE(describe_plan(i8).find("(50.8% of f16's 524288 B)"), std::string::npos)
      << describe_plan(i8);
}

TEST(MemoryPlan, SplitsTheBudget) {
  PlanOptions o;
  o.memory_bytes = int64_t{16} << 30;
  o.ctx = 4096;
  o.max_seqs = 32;
  const int64_t weights = int64_t{13} << 29;  // 6.5 GiB of f16 weights
  Plan p = plan_memory(llama2_7b(), weights, o);
  EXPECT_EQ(p.ctx, 4096);
  EXPECT_EQ(p.kv_bytes_per_block, 524288 * 16);
  EXPECT_EQ(p.blocks_per_seq, 256);
  EXPECT_EQ(p.kv_budget_bytes, o.memory_bytes - weights - p.activation_bytes - p.margin_bytes);
  EXPECT_GT(p.activation_bytes, 0);
  EXPECT_EQ(p.margin_bytes, int64_t{64} << 20);
  // Whole blocks: the budget holds kv_blocks_fit blocks and not one more.
  EXPECT_LE(p.kv_blocks_fit * p.kv_bytes_per_block, p.kv_budget_bytes);
  EXPECT_GT((p.kv_blocks_fit + 1) * p.kv_bytes_per_block, p.kv_budget_bytes);
  // 16 GiB - 6.5 GiB of weights - ~0.3 GiB of scratch and margin leaves ~9.2 GiB of KV: four
  // full 4096-token sequences at 2 GiB each, not five.
  EXPECT_EQ(p.max_batch_at_ctx, 4);
  EXPECT_EQ(p.max_batch_fit, 4);
  EXPECT_EQ(p.max_batch_at_ctx, static_cast<int>(std::min<int64_t>(p.kv_blocks / 256, 32)));
  EXPECT_EQ(p.kv_blocks, std::min<int64_t>(p.kv_blocks_fit, 256 * 32));
}

TEST(MemoryPlan, CapsAtMaxSeqsFullSequences) {
  PlanOptions o;
  o.memory_bytes = int64_t{1} << 30;
  o.ctx = 256;
  o.max_seqs = 4;
  Plan p = plan_memory(stories260k(), 1185376, o);
  EXPECT_EQ(p.blocks_per_seq, 16);
  EXPECT_GT(p.kv_blocks_fit, 4 * 16);
  EXPECT_EQ(p.kv_blocks, 4 * 16);  // more could never be used by 4 sequences
  EXPECT_EQ(p.max_batch_at_ctx, 4);
  EXPECT_EQ(p.max_batch_fit, p.kv_blocks_fit / 16);  // the budget alone would hold many more
  EXPECT_EQ(p.kv_bytes(), 64 * 16 * 640);
}

TEST(MemoryPlan, LargestBatchAtContext) {
  PlanOptions o;
  o.ctx = 2048;
  o.max_seqs = 1000;
  o.margin_bytes = 0;
  o.max_batched_tokens = 16;
  // Room for exactly 10 sequences of 128 blocks plus a partial 11th.
  Plan probe = plan_memory(stories260k(), 0, PlanOptions{int64_t{1} << 30, 2048, 1000, 16});
  const int64_t fixed = probe.activation_bytes;
  o.memory_bytes = fixed + (10 * 128 + 50) * int64_t{640 * 16};
  Plan p = plan_memory(stories260k(), 0, o);
  EXPECT_EQ(p.kv_blocks_fit, 10 * 128 + 50);
  EXPECT_EQ(p.max_batch_at_ctx, 10);
  EXPECT_EQ(p.max_batch_fit, 10);
}

// Several models in one budget: weights and activations first, one margin, the KV cache split by
// need (max_seqs full sequences each) or by the shares given; what a model cannot use goes to the
// others.
TEST(MemoryPlan, SharedBudgetSplitsTheKvCacheBetweenModels) {
  const ModelConfig a = stories260k(), b = llama2_7b();
  auto input = [](const std::string& name, const ModelConfig& c, int64_t weights, int ctx, int seqs,
                  double share = 0) {
    SharedPlanInput in;
    in.name = name;
    in.config = &c;
    in.weight_bytes = weights;
    in.options.ctx = ctx;
    in.options.max_seqs = seqs;
    in.share = share;
    return in;
  };
  const int64_t margin = int64_t{64} << 20;
  // Enough for everything both models can use: each gets its full need.
  std::vector<Plan> p = plan_memory_shared(
      {input("small", a, 1 << 20, 256, 4), input("big", b, int64_t{1} << 30, 256, 2)},
      int64_t{8} << 30, margin);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].kv_blocks, 4 * 16);
  EXPECT_EQ(p[1].kv_blocks, 2 * 16);
  EXPECT_EQ(p[0].margin_bytes + p[1].margin_bytes, margin);
  // Tight: the KV budget is split in proportion to need; both still hold a full sequence.
  Plan alone_b = plan_memory(b, int64_t{1} << 30, PlanOptions{int64_t{8} << 30, 256, 8, 512});
  Plan alone_a = plan_memory(a, 1 << 20, PlanOptions{int64_t{8} << 30, 256, 8, 512});
  const int64_t fixed =
      (1 << 20) + alone_a.activation_bytes + (int64_t{1} << 30) + alone_b.activation_bytes + margin;
  const int64_t kv = 4 * 16 * alone_b.kv_bytes_per_block;  // half of b's need (8 sequences)
  p = plan_memory_shared(
      {input("small", a, 1 << 20, 256, 8), input("big", b, int64_t{1} << 30, 256, 8)}, fixed + kv,
      margin);
  EXPECT_GE(p[1].kv_blocks, 3 * 16);
  EXPECT_LT(p[1].kv_blocks, 8 * 16);
  EXPECT_GE(p[0].kv_blocks, 16);
  EXPECT_LE(p[0].kv_bytes() + p[1].kv_bytes(), kv);
  // Explicit shares, both models needing more than theirs: a quarter and three quarters.
  const int64_t fixed_bb = 2 * ((int64_t{1} << 30) + alone_b.activation_bytes) + margin;
  p = plan_memory_shared({input("b1", b, int64_t{1} << 30, 256, 8, 0.25),
                          input("b2", b, int64_t{1} << 30, 256, 8, 0.75)},
                         fixed_bb + kv, margin);
  EXPECT_EQ(p[0].kv_blocks, 16);
  EXPECT_EQ(p[1].kv_blocks, 3 * 16);
  // Too little for one sequence each: refused, naming every model.
  try {
    plan_memory_shared(
        {input("small", a, 1 << 20, 256, 8), input("big", b, int64_t{1} << 30, 256, 8)}, fixed,
        margin);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold the 2 models"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'big'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_memory_shared({input("a", a, 1 << 20, 256, 8, 0.7),
                                   input("b", b, int64_t{1} << 30, 256, 8, 0.7)},
                                  int64_t{8} << 30, margin),
               Error);
}

TEST(MemoryPlan, RefusesWhenOneSequenceDoesNotFit) {
  PlanOptions o;
  o.memory_bytes = int64_t{7} << 30;
  o.ctx = 4096;  // needs 2 GiB of KV beyond 6.5 GiB of weights
  try {
    plan_memory(llama2_7b(), int64_t{13} << 29, o);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold one sequence of 4096 tokens"),
              std::string::npos)
        << e.what();
  }
  // Weights alone beyond the budget.
  o.memory_bytes = int64_t{1} << 30;
  EXPECT_THROW(plan_memory(llama2_7b(), int64_t{13} << 29, o), Error);
  // Invalid options.
  o.memory_bytes = int64_t{64} << 30;
  o.max_seqs = 0;
  EXPECT_THROW(plan_memory(llama2_7b(), 0, o), Error);
}

TEST(MemoryPlan, DescribeMentionsTheFigures) {
  PlanOptions o;
  o.memory_bytes = int64_t{1} << 30;
  o.ctx = 256;
  o.max_seqs = 4;
  const std::string s = describe_plan(plan_memory(stories260k(), 1185376, o));
  EXPECT_NE(s.find("KV bytes per token"), std::string::npos);
  EXPECT_NE(s.find("640 B"), std::string::npos);
  EXPECT_NE(s.find("4 sequences of 256 tokens"), std::string::npos);
}

TEST(ParseSize, Units) {
  EXPECT_EQ(parse_size("8GiB"), int64_t{8} << 30);
  EXPECT_EQ(parse_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_size("2G"), int64_t{2} << 30);
  EXPECT_EQ(parse_size("2gb"), int64_t{2} << 30);
  EXPECT_EQ(parse_size("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(parse_size("4k"), 4096);
  EXPECT_EQ(parse_size("1048576"), 1048576);
  EXPECT_EQ(parse_size("100 B"), 100);
  EXPECT_EQ(parse_size("1T"), int64_t{1} << 40);
  for (const char* bad : {"", "abc", "8XB", "-1G", "1..5G", ".", "G", "1e3", "8 GiB extra"})
    EXPECT_THROW(parse_size(bad, "--memory"), Error) << bad;
  try {
    parse_size("lots", "--memory");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--memory"), std::string::npos);
  }
}

TEST(ParseSize, Format) {
  EXPECT_EQ(format_size(640), "640 B");
  EXPECT_EQ(format_size(int64_t{8} << 30), "8.00 GiB");
  EXPECT_EQ(format_size(int64_t{512} << 20), "512.0 MiB");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
}

TEST(MemoryPlan, DefaultBudgetFromTheSystem) {
  auto b = default_memory_budget();
  ASSERT_TRUE(b) << "/proc/meminfo has no MemAvailable";
  EXPECT_GT(*b, int64_t{16} << 20);
  EXPECT_LT(*b, int64_t{1} << 50);
}

}  // namespace
}  // namespace kvasir
