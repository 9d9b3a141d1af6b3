// The scheduler (src/kvasir/engine/scheduler.h) over fake sequences: no model, only token counts
// and a KV cache manager. Each test plays the engine's part: after schedule(), every scheduled
// sequence computes its tokens, and one that reached its end samples one more.
#include "kvasir/engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kvasir {
namespace {

struct Harness {
  KVCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<ScheduledSeq> out;
  std::vector<Sequence*> preempted;

  Harness(int32_t n_blocks, int block_size, SchedulerConfig cfg, bool prefix_caching = false)
      : kv(n_blocks, block_size, prefix_caching), sched(cfg, kv) {}

  Sequence* add(int prompt_len, int first_token = 1) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(first_token + i);
    s->n_prompt = prompt_len;
    s->max_tokens = 1000;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // One step: schedule, then what the engine does with the output.
  void step() {
    preempted.clear();
    sched.schedule(out, preempted);
    for (const ScheduledSeq& ss : out) {
      Sequence* s = ss.seq;
      s->num_computed += ss.n_new;
      kv.cache_full_blocks(s->kv, s->tokens, s->num_computed);
      if (s->num_computed == static_cast<int>(s->tokens.size())) s->tokens.push_back(7);
    }
  }

  int n_new(const Sequence* s) const {
    for (const ScheduledSeq& ss : out)
      if (ss.seq == s) return ss.n_new;
    return 0;
  }
  std::vector<const Sequence*> order() const {
    std::vector<const Sequence*> o;
    for (const ScheduledSeq& ss : out) o.push_back(ss.seq);
    return o;
  }
};

SchedulerConfig config(int budget, int max_seqs = 64) {
  SchedulerConfig c;
  c.max_batched_tokens = budget;
  c.max_seqs = max_seqs;
  c.watermark = 0;
  return c;
}

TEST(Scheduler, TheBudgetIsSplitAndLongPromptsAreChunked) {
  Harness h(64, 4, config(10));
  Sequence* a = h.add(6);
  Sequence* b = h.add(7);
  Sequence* c = h.add(3);
  h.step();
  EXPECT_EQ(h.order(), (std::vector<const Sequence*>{a, b}));
  EXPECT_EQ(h.n_new(a), 6);
  EXPECT_EQ(h.n_new(b), 4) << "the rest of the budget: a chunk of b's prompt";
  EXPECT_EQ(c->status, SeqStatus::kWaiting) << "no budget left for c";
  h.step();
  EXPECT_EQ(h.order(), (std::vector<const Sequence*>{a, b, c}));
  EXPECT_EQ(h.n_new(a), 1) << "a decodes";
  EXPECT_EQ(h.n_new(b), 3) << "the last chunk of b's prompt";
  EXPECT_EQ(h.n_new(c), 3);
  h.step();
  EXPECT_EQ(h.n_new(a), 1);
  EXPECT_EQ(h.n_new(b), 1);
  EXPECT_EQ(h.n_new(c), 1);
}

TEST(Scheduler, RunningSequencesComeBeforeWaitingPrompts) {
  Harness h(64, 4, config(4));
  Sequence* a = h.add(2);
  h.step();  // a's prompt
  Sequence* b = h.add(10);
  h.step();
  EXPECT_EQ(h.order(), (std::vector<const Sequence*>{a, b}));
  EXPECT_EQ(h.n_new(a), 1) << "the decode is served first";
  EXPECT_EQ(h.n_new(b), 3) << "the prompt gets what is left";
}

TEST(Scheduler, MaxSeqsBoundsTheRunningSet) {
  Harness h(64, 4, config(100, 2));
  h.add(3);
  h.add(3);
  Sequence* c = h.add(3);
  h.step();
  EXPECT_EQ(h.out.size(), 2u);
  EXPECT_EQ(c->status, SeqStatus::kWaiting);
  EXPECT_EQ(h.sched.n_running(), 2);
  h.sched.remove(h.seqs[0].get());
  h.step();
  EXPECT_EQ(c->status, SeqStatus::kRunning);
}

TEST(Scheduler, TheNewestRunningSequenceIsPreemptedAndResumedFirst) {
  // 4 blocks of 4 tokens. a (8 tokens) and b (6 tokens) fill 4 blocks once they decode.
  Harness h(4, 4, config(100));
  Sequence* a = h.add(7);
  Sequence* b = h.add(6);
  h.step();  // a: 7 (2 blocks), b: 6 (2 blocks); each samples a token
  ASSERT_EQ(h.kv.n_free(), 0);
  Sequence* c = h.add(2);
  h.step();  // a computes position 7 (block 2 has room), b position 6: no new block yet
  EXPECT_TRUE(h.preempted.empty());
  EXPECT_EQ(c->status, SeqStatus::kWaiting) << "no free block for c";
  h.step();  // a needs a 3rd block at position 8: b, the most recently admitted, is preempted
  ASSERT_EQ(h.preempted, (std::vector<Sequence*>{b}));
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_EQ(b->num_computed, 0) << "recompute: its K/V are dropped";
  EXPECT_TRUE(b->kv.blocks.empty());
  EXPECT_EQ(h.order(), (std::vector<const Sequence*>{a}))
      << "no admission in a step that preempted";
  EXPECT_EQ(c->status, SeqStatus::kWaiting);
  // a finishes: b is resumed before c, which arrived before b was preempted.
  h.sched.remove(a);
  h.step();
  ASSERT_GE(h.out.size(), 1u);
  EXPECT_EQ(h.out[0].seq, b);
  // b had 8 tokens (6 of prompt, 2 sampled) and recomputes all of them; the harness has since
  // appended the token it sampled from them.
  EXPECT_EQ(h.n_new(b), 8) << "b recomputes everything it had";
  EXPECT_EQ(b->tokens.size(), 9u);
}

TEST(Scheduler, ASequenceThatCannotFitAloneIsPreemptedItself) {
  Harness h(2, 4, config(100));
  Sequence* a = h.add(8);
  h.step();  // 8 tokens: 2 blocks; it samples a 9th token, which needs a third block
  h.step();
  EXPECT_EQ(h.preempted, (std::vector<Sequence*>{a}));
  EXPECT_TRUE(h.out.empty());
  EXPECT_EQ(a->status, SeqStatus::kWaiting);
}

TEST(Scheduler, AdmissionKeepsTheWatermark) {
  SchedulerConfig cfg = config(100);
  cfg.watermark = 0.25;  // 2 of 8 blocks
  Harness h(8, 4, cfg);
  h.add(12);  // 3 blocks
  h.step();
  Sequence* b = h.add(16);  // 4 blocks: would leave 1 < 2 free
  h.step();
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_TRUE(b->kv.blocks.empty()) << "a refused admission holds no blocks";
  Sequence* c = h.add(1);
  h.step();
  EXPECT_EQ(c->status, SeqStatus::kWaiting) << "admission is in order: c waits behind b";
}

TEST(Scheduler, APrefixHitIsNotRecomputedButOneTokenAlwaysIs) {
  Harness h(64, 4, config(100), /*prefix_caching=*/true);
  Sequence* a = h.add(8);
  h.step();
  Sequence* b = h.add(8);  // the same 8 tokens
  h.step();
  EXPECT_EQ(h.n_new(b), 4) << "one full block is reused, the last block recomputed for logits";
  EXPECT_EQ(b->cached_tokens, 4);
  EXPECT_EQ(h.sched.prefix_hits(), 4u);
  EXPECT_EQ(h.sched.prefix_queries(), 16u);
  EXPECT_EQ(b->kv.blocks[0], a->kv.blocks[0]);
}

TEST(Scheduler, StaticBatchingAdmitsOnlyWhenNothingRuns) {
  SchedulerConfig cfg = config(100);
  cfg.static_batching = true;
  Harness h(64, 4, cfg);
  Sequence* a = h.add(3);
  h.step();
  Sequence* b = h.add(3);
  h.step();
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  h.sched.remove(a);
  h.step();
  EXPECT_EQ(b->status, SeqStatus::kRunning);
}

}  // namespace
}  // namespace kvasir
