//===- PlannerTest.cpp - the search --------------------------------------===//

#include "llmopt/Planner/Planner.h"

#include "gtest/gtest.h"
#include <cstdio>

using namespace llmopt::cost;
using namespace llmopt::planner;

namespace {

ClusterSpec cluster(const char *preset, int gpus) {
  ClusterSpec c;
  std::string error;
  EXPECT_TRUE(parseCluster(preset, "", {}, gpus, c, error)) << error;
  return c;
}

JobSpec job(int64_t batch, int64_t seq) {
  JobSpec j;
  j.globalBatch = batch;
  j.seqLen = seq;
  return j;
}

ModelDesc llama(int layers, int64_t h, int64_t heads, int64_t kv, int64_t ffn,
                int64_t vocab) {
  ModelDesc m;
  m.name = "llama";
  m.vocab = vocab;
  m.hidden = h;
  m.embeddingParams = double(vocab) * h;
  m.headParams = double(vocab) * h;
  m.finalNormParams = double(h);
  LayerDesc l;
  l.hidden = h;
  l.heads = heads;
  l.kvHeads = kv;
  l.headDim = h / heads;
  l.ffn = ffn;
  l.gatedMlp = true;
  l.denseParams = 2.0 * h * h + 2.0 * h * kv * (h / heads) + 3.0 * h * ffn + 2.0 * h;
  m.layers.assign(layers, l);
  return m;
}

TEST(Planner, ConstraintsParse) {
  Constraints c;
  std::string error;
  ASSERT_TRUE(Constraints::parse("tp:8,pp:8,recompute:full,sp:1,schedule:interleaved", c,
                                 error))
      << error;
  EXPECT_EQ(c.ints["tp"], 8);
  EXPECT_EQ(c.ints["pp"], 8);
  EXPECT_EQ(*c.recompute, Recompute::Full);
  EXPECT_TRUE(*c.sp);
  EXPECT_EQ(*c.schedule, Schedule::Interleaved);
  EXPECT_FALSE(Constraints::parse("tq:8", c, error));
  EXPECT_NE(error.find("unknown key 'tq'"), std::string::npos) << error;
  EXPECT_FALSE(Constraints::parse("tp:0", c, error));
  EXPECT_NE(error.find("tp must be a positive integer"), std::string::npos) << error;
  EXPECT_FALSE(Constraints::parse("recompute:some", c, error));
  EXPECT_FALSE(Constraints::parse("zero:4", c, error));
  EXPECT_FALSE(Constraints::parse("tp", c, error));
}

TEST(Planner, FixRestrictsEveryPlan) {
  ModelDesc m = llama(32, 4096, 32, 8, 14336, 128256);
  SearchOptions o;
  std::string error;
  ASSERT_TRUE(Constraints::parse("tp:4,zero:1,recompute:selective", o.fixed, error));
  o.topK = 10;
  SearchResult r = search(m, cluster("dgx-h100", 16), job(64, 4096), o);
  ASSERT_FALSE(r.plans.empty());
  for (const PlanEval &p : r.plans) {
    EXPECT_EQ(p.config.tp, 4);
    EXPECT_EQ(p.config.zero, 1);
    EXPECT_EQ(p.config.recompute, Recompute::Selective);
    EXPECT_TRUE(p.feasible());
  }
}

TEST(Planner, BestFirstAndDeterministic) {
  ModelDesc m = llama(32, 4096, 32, 8, 14336, 128256);
  SearchOptions o;
  o.topK = 8;
  SearchResult a = search(m, cluster("dgx-h100", 32), job(256, 8192), o);
  SearchResult b = search(m, cluster("dgx-h100", 32), job(256, 8192), o);
  ASSERT_EQ(a.plans.size(), 8u);
  for (size_t i = 0; i < a.plans.size(); ++i) {
    EXPECT_EQ(describe(a.plans[i].config), describe(b.plans[i].config));
    if (i) {
      EXPECT_LE(a.plans[i - 1].time.step, a.plans[i].time.step);
    }
  }
  EXPECT_EQ(a.evaluated, b.evaluated);
}

TEST(Planner, NeverWorseThanPublishedKorthikantiConfigs) {
  // The search must find at least the published configuration's throughput,
  // and its choice must fit in memory (korthikanti2022.json).
  struct Row {
    const char *name;
    int layers, hidden, heads, gpus, batch;
    ParallelConfig published;
  };
  auto cfg = [](int tp, int pp, int vpp, int mb, int batch) {
    ParallelConfig c;
    c.tp = tp, c.pp = pp, c.vpp = vpp, c.dp = 1, c.sp = true;
    c.recompute = Recompute::Selective;
    c.microBatch = mb;
    c.numMicroBatches = batch / mb;
    c.schedule = pp == 1 ? Schedule::None : vpp > 1 ? Schedule::Interleaved
                                                    : Schedule::OneFOneB;
    return c;
  };
  const Row rows[] = {
      {"22B", 48, 6144, 64, 8, 4, cfg(8, 1, 1, 4, 4)},
      {"175B", 96, 12288, 96, 64, 64, cfg(8, 8, 3, 1, 64)},
      {"530B", 105, 20480, 128, 280, 280, cfg(8, 35, 3, 1, 280)},
      {"1T", 128, 25600, 160, 512, 512, cfg(8, 64, 1, 1, 512)},
  };
  for (const Row &r : rows) {
    ModelDesc m = ModelDesc::gpt(r.name, r.layers, r.hidden, r.heads, 51200, 2048);
    ClusterSpec c = cluster("dgx-a100-80gb", r.gpus);
    JobSpec j = job(r.batch, 2048);
    j.gradBytes = 4;
    j.dropout = true;
    j.flashAttention = false;
    j.dtype = DType::FP16;
    PlanEval pub = evaluate(m, c, j, r.published);
    ASSERT_TRUE(pub.feasible()) << r.name << ": " << pub.detail;
    SearchResult s = search(m, c, j, SearchOptions());
    ASSERT_FALSE(s.plans.empty()) << r.name;
    const PlanEval &best = s.plans.front();
    std::printf("%-5s published %.2f s  best %.2f s  (%s)\n", r.name, pub.time.step,
                best.time.step, describe(best.config).c_str());
    EXPECT_TRUE(best.feasible());
    EXPECT_LE(best.time.step, pub.time.step * (1 + 1e-9)) << r.name;
    EXPECT_LE(best.peak.total(), c.gpu.hbmBytes);
  }
}

TEST(Planner, RejectionReasonsAreCounted) {
  // 20 heads are not divisible by tp 8, 10 kv heads not by tp 4; batch 6 does
  // not split over dp 4; 6 micro-batches cannot feed 8 pipeline stages.
  ModelDesc m = llama(12, 5120, 20, 10, 13824, 32000);
  SearchResult r = search(m, cluster("dgx-a100-40gb", 16), job(6, 4096), SearchOptions());
  for (const char *reason : {"heads_not_divisible_by_tp", "kv_heads_not_divisible_by_tp",
                             "batch_not_divisible", "fewer_micro_batches_than_stages"})
    EXPECT_GT(r.rejected[reason].count, 0) << reason;
  EXPECT_NE(r.rejected["heads_not_divisible_by_tp"].example.find("20 attention heads"),
            std::string::npos);
}

TEST(Planner, NoPlanWhenTheModelCannotFit) {
  // GPT-3 175B: even fully sharded with the optimizer on the host, weights
  // and gradients need 4 bytes x 175e9 / 8 = 87.5 GB per GPU: no plan on
  // 8 x 40 GB.
  ModelDesc m = ModelDesc::gpt("175B", 96, 12288, 96, 50257, 2048);
  SearchResult r = search(m, cluster("dgx-a100-40gb", 8), job(64, 4096), SearchOptions());
  EXPECT_TRUE(r.plans.empty());
  ASSERT_GT(r.rejected["out_of_memory"].count, 0);
  EXPECT_NE(r.rejected["out_of_memory"].example.find("OOM by"), std::string::npos);
}

} // namespace

namespace {

TEST(Planner, PerStageRecomputationWhereUniformDoesNotFit) {
  // GPT-3 175B, tp8 pp8, micro-batch 4, no fused attention: stage 0 holds 8
  // micro-batches and needs full recomputation, the last stage needs none.
  ModelDesc m = ModelDesc::gpt("175B", 96, 12288, 96, 50257, 2048);
  ClusterSpec c = cluster("dgx-a100-80gb", 64);
  JobSpec j = job(512, 2048);
  j.gradBytes = 4;
  j.dropout = true;
  j.flashAttention = false;
  ParallelConfig cfg;
  cfg.tp = 8, cfg.pp = 8, cfg.dp = 1, cfg.sp = true;
  cfg.microBatch = 4;
  cfg.numMicroBatches = 128;
  cfg.schedule = Schedule::OneFOneB;
  auto with = [&](Recompute r) {
    ParallelConfig x = cfg;
    x.recompute = r;
    return evaluate(m, c, j, x);
  };
  PlanEval selective = with(Recompute::Selective);
  PlanEval full = with(Recompute::Full);
  PlanEval perStage = with(Recompute::PerStage);
  EXPECT_EQ(selective.reason, RejectReason::OutOfMemory);
  ASSERT_TRUE(full.feasible());
  ASSERT_TRUE(perStage.feasible()) << perStage.detail;
  ASSERT_EQ(perStage.config.stageRecompute.size(), 8u);
  EXPECT_EQ(perStage.config.stageRecompute.front(), Recompute::Full);
  EXPECT_EQ(perStage.config.stageRecompute.back(), Recompute::None);
  EXPECT_LT(perStage.time.step, full.time.step);
  for (const StageMemory &s : perStage.stages)
    EXPECT_LE(s.memory.total(), c.gpu.hbmBytes) << "stage " << s.stage;
}

} // namespace

namespace {

TEST(Planner, NeverWorseThanTorchtitansFsdpConfig) {
  // torchtitan_h100.json, 8 GPUs: FSDP over 8, local batch 2, selective
  // checkpointing on the benchmark's 96 GB GPUs. The search must find a plan
  // at least as fast, and it must fit.
  ModelDesc m = llama(32, 4096, 32, 8, 14336, 128256);
  ClusterSpec c = cluster("dgx-h100", 8);
  c.gpu.hbmBytes = 96.0 * (1ull << 30);
  JobSpec j = job(16, 8192);
  ParallelConfig pub;
  pub.dp = 8;
  pub.zero = 3;
  pub.recompute = Recompute::Selective;
  pub.microBatch = 2;
  pub.numMicroBatches = 1;
  PlanEval published = evaluate(m, c, j, pub);
  ASSERT_TRUE(published.feasible()) << published.detail;
  SearchResult s = search(m, c, j, SearchOptions());
  ASSERT_FALSE(s.plans.empty());
  EXPECT_GE(s.plans.front().tokensPerS, published.tokensPerS * (1 - 1e-9));
  EXPECT_LE(s.plans.front().peak.total(), c.gpu.hbmBytes);
}

TEST(Planner, UnevenStagesWhenTheHeadIsHeavy) {
  // Llama-3 8B's 128256-entry vocabulary makes the last stage (head + loss)
  // heavier than a layer: the balancer gives it fewer layers, which beats the
  // even split.
  ModelDesc m = llama(32, 4096, 32, 8, 14336, 128256);
  ClusterSpec c = cluster("dgx-h100", 8);
  JobSpec j = job(64, 8192);
  ParallelConfig cfg;
  cfg.tp = 2, cfg.pp = 4, cfg.dp = 1, cfg.sp = true;
  cfg.recompute = Recompute::Full;
  cfg.microBatch = 1;
  cfg.numMicroBatches = 64;
  cfg.schedule = Schedule::OneFOneB;
  PlanEval balanced = evaluate(m, c, j, cfg);
  ASSERT_TRUE(balanced.feasible()) << balanced.detail;
  const std::vector<int> &layers = balanced.config.stageLayers;
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_LT(layers.back(), layers[1]);
  cfg.stageLayers = {8, 8, 8, 8};
  PlanEval even = evaluate(m, c, j, cfg);
  EXPECT_LT(balanced.time.step, even.time.step);
}

TEST(Collectives, MatchNcclTestsBusBandwidth) {
  // hardware.json: 8x H100 all-reduce 480 GB/s (NVLS), ring 370 GB/s; NDR
  // NIC 47 GB/s. For large messages the alpha term vanishes.
  ClusterSpec c = cluster("dgx-h100", 64);
  Collectives coll{c};
  double bytes = 8e9;
  double ar = coll.allReduce(bytes, 8, 8);
  EXPECT_NEAR(2.0 * 7 / 8 * bytes / ar / 1e9, 480, 480 * 0.01);
  double ag = coll.allGather(bytes, 8, 8);
  EXPECT_NEAR(7.0 / 8 * bytes / ag / 1e9, 370, 370 * 0.01);
  // One GPU per node across 8 nodes: each GPU's share of its node's NICs.
  double inter = coll.allReduce(bytes, 8, 1);
  EXPECT_NEAR(2.0 * 7 / 8 * bytes / inter / 1e9, 47, 47 * 0.01);
  // Small messages cost NCCL's latency: base + 2(n-1) ring steps.
  EXPECT_NEAR(coll.allReduce(8, 8, 8), 8.4e-6 + 14 * 3.4e-6, 1e-7);
  // Hierarchical: two nodes of 8 are slower than one node, faster than the
  // network alone would allow for the whole message.
  double two = coll.allReduce(bytes, 16, 8);
  EXPECT_GT(two, ar);
  EXPECT_LT(two, 2.0 * bytes / (47e9));
  // Across 1024 nodes a small all-reduce takes the tree: 2 log2(1024) = 20
  // network steps, not the ring's 2046.
  ClusterSpec big = cluster("dgx-h100", 8192);
  Collectives wide{big};
  EXPECT_NEAR(wide.allReduce(8, 1024, 1), 8.4e-6 + 20 * 14e-6, 1e-7);
}

} // namespace
