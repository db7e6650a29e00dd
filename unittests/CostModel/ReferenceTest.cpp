//===- ReferenceTest.cpp - cost model against published measurements -----===//
//
// Each test evaluates a configuration that was published with its measured
// result (shared/reference/) and holds the tolerance the reference states.
//
//===----------------------------------------------------------------------===//

#include "llmopt/CostModel/CostModel.h"

#include "gtest/gtest.h"
#include <cmath>
#include <cstdio>

using namespace llmopt::cost;

namespace {

constexpr double GiB = double(1ull << 30);

struct KorthikantiRun {
  const char *name;
  int layers, hidden, heads, tp, pp, vpp, gpus, globalBatch, microBatch;
  double fullRecomputeS, spSelectiveS;
  double stateGiB, actNoRecomputeGiB, actSpSelectiveGiB;
};

// korthikanti2022.json: Tables 3 and 5, Figure 1 (A100 80GB, seq 2048,
// vocab 51200); micro-batch and interleaving from the public reproduction.
const KorthikantiRun kRuns[] = {
    {"22B", 48, 6144, 64, 8, 1, 1, 8, 4, 4, 1.42, 1.10, 45.6, 59.3, 9.6},
    {"175B", 96, 12288, 96, 8, 8, 3, 64, 64, 1, 18.13, 13.75, 45.6, 66.8, 12.4},
    {"530B", 105, 20480, 128, 8, 35, 3, 280, 280, 1, 49.05, 37.83, 31.6, 114.0, 23.1},
    {"1T", 128, 25600, 160, 8, 64, 1, 512, 512, 1, 94.42, 71.49, 33.0, 131.3, 26.6},
};

struct Scenario {
  ModelDesc model;
  ClusterSpec cluster;
  JobSpec job;
  ParallelConfig cfg;
};

Scenario korthikanti(const KorthikantiRun &r, bool sp, Recompute rc) {
  Scenario s;
  s.model = ModelDesc::gpt(r.name, r.layers, r.hidden, r.heads, 51200, 2048);
  EXPECT_TRUE(getClusterPreset("dgx-a100-80gb", s.cluster));
  s.cluster.numNodes = r.gpus / 8;
  s.job.globalBatch = r.globalBatch;
  s.job.seqLen = 2048;
  s.job.dtype = DType::FP16;
  s.job.gradBytes = 4; // Megatron accumulates fp32 main gradients
  s.job.dropout = true;
  s.job.flashAttention = false;
  s.cfg.tp = r.tp;
  s.cfg.pp = r.pp;
  s.cfg.vpp = r.vpp;
  s.cfg.dp = 1;
  s.cfg.sp = sp;
  s.cfg.recompute = rc;
  s.cfg.microBatch = r.microBatch;
  s.cfg.numMicroBatches = r.globalBatch / r.microBatch;
  s.cfg.schedule = r.pp == 1   ? Schedule::None
                   : r.vpp > 1 ? Schedule::Interleaved
                               : Schedule::OneFOneB;
  return s;
}

PlanEval eval(const Scenario &s) { return evaluate(s.model, s.cluster, s.job, s.cfg); }

double relErr(double got, double want) { return std::abs(got - want) / want; }

TEST(Korthikanti2022, IterationTimeWithin10PercentMeanUnder5) {
  double sumErr = 0;
  int n = 0;
  for (const KorthikantiRun &r : kRuns) {
    for (bool selective : {false, true}) {
      Scenario s =
          korthikanti(r, /*sp=*/selective, selective ? Recompute::Selective : Recompute::Full);
      PlanEval e = eval(s);
      double want = selective ? r.spSelectiveS : r.fullRecomputeS;
      double err = relErr(e.time.step, want);
      std::printf("%-5s %-22s predicted %7.2f s  published %7.2f s  error %5.1f%%\n", r.name,
                  selective ? "sp+selective" : "full recompute", e.time.step, want, 100 * err);
      EXPECT_LT(err, 0.10) << r.name << (selective ? " sp+selective" : " full");
      sumErr += err;
      ++n;
    }
  }
  EXPECT_LT(sumErr / n, 0.05);
}

TEST(Korthikanti2022, MemoryPerCategoryWithin5Percent) {
  for (const KorthikantiRun &r : kRuns) {
    Scenario none = korthikanti(r, /*sp=*/false, Recompute::None);
    Scenario sel = korthikanti(r, /*sp=*/true, Recompute::Selective);
    PlanEval en = eval(none), es = eval(sel);
    const StageMemory &first = en.stages.front();
    // Figure 1 counts the transformer layers' states (18 bytes per
    // parameter); take the first stage's embedding table out.
    double embedding = (51200.0 * r.hidden / r.tp + 2048.0 * r.hidden) * 18;
    double states =
        first.memory.weights + first.memory.gradients + first.memory.optimizer - embedding;
    double actNone = first.memory.activations;
    double actSel = es.stages.front().memory.activations;
    std::printf("%-5s states %6.1f/%6.1f  act none %6.1f/%6.1f  act sp+sel %6.1f/%6.1f GiB\n",
                r.name, states / GiB, r.stateGiB, actNone / GiB, r.actNoRecomputeGiB, actSel / GiB,
                r.actSpSelectiveGiB);
    EXPECT_LT(relErr(states / GiB, r.stateGiB), 0.05) << r.name;
    EXPECT_LT(relErr(actNone / GiB, r.actNoRecomputeGiB), 0.05) << r.name;
    EXPECT_LT(relErr(actSel / GiB, r.actSpSelectiveGiB), 0.05) << r.name;
  }
}

TEST(ZeRO2020, ModelStatesPerGpuWithin1Percent) {
  // zero2020.json: 7.5B parameters, data parallel 64, 16 bytes per parameter.
  ModelDesc m;
  m.name = "7.5B";
  m.vocab = 1;
  m.hidden = 1;
  LayerDesc l;
  l.hidden = 64;
  l.heads = l.kvHeads = 1;
  l.headDim = 64;
  l.ffn = 64;
  l.denseParams = 7.5e9;
  m.layers = {l};
  ClusterSpec c;
  ASSERT_TRUE(getClusterPreset("dgx-a100-80gb", c));
  c.numNodes = 8;
  JobSpec j;
  j.globalBatch = 64;
  j.seqLen = 16;
  j.gradBytes = 2;
  const double want[] = {120.0, 31.4, 16.6, 1.9};
  for (int zero = 0; zero <= 3; ++zero) {
    ParallelConfig cfg;
    cfg.dp = 64;
    cfg.zero = zero;
    cfg.numMicroBatches = 1;
    PlanEval e = evaluate(m, c, j, cfg);
    const MemoryBreakdown &mem = e.stages.front().memory;
    double states = mem.weights + mem.gradients + mem.optimizer;
    if (zero == 3) // leave out the gathered-layer buffers: states only
      states -= 2 * 7.5e9 * 2;
    std::printf("zero%d %6.3f GB (published %.1f)\n", zero, states / 1e9, want[zero]);
    // Published to one decimal: within 1 % or within the rounding (0.05 GB),
    // whichever is wider (1.875 GB prints as 1.9).
    double tol = std::max(0.01 * want[zero], 0.05);
    EXPECT_LE(std::abs(states / 1e9 - want[zero]), tol) << "zero " << zero;
  }
}

} // namespace

namespace {

// torchtitan_h100.json: Llama 3.1 8B, seq 8192, FSDP over all GPUs, local
// batch 2, selective activation checkpointing, torch.compile. The benchmark's
// H100s are 96 GB HBM2e parts capped at 500 W, slower than the SXM preset: we
// fit the GPU's sustained `throughputScale` on the 8-GPU bf16 row, then hold
// the other rows (128 GPUs, fp8) and the peak memory to the stated 15 %.
ModelDesc llama31_8b() {
  ModelDesc m;
  m.name = "llama3.1-8b";
  m.vocab = 128256;
  m.hidden = 4096;
  m.embeddingParams = 128256.0 * 4096;
  m.headParams = 128256.0 * 4096;
  m.finalNormParams = 4096;
  LayerDesc l;
  l.hidden = 4096;
  l.heads = 32;
  l.kvHeads = 8;
  l.headDim = 128;
  l.ffn = 14336;
  l.gatedMlp = true;
  l.denseParams = 218112000; // per layer, --llm-stats of llama3-8b.json
  m.layers.assign(32, l);
  return m;
}

PlanEval torchtitanRun(int gpus, bool fp8, double throughputScale) {
  ClusterSpec c;
  EXPECT_TRUE(getClusterPreset("dgx-h100", c));
  c.numNodes = gpus / 8;
  c.gpu.hbmBytes = 96 * GiB;
  c.gpu.throughputScale = throughputScale;
  JobSpec j;
  j.globalBatch = 2 * gpus;
  j.seqLen = 8192;
  j.fp8 = fp8;
  ParallelConfig cfg;
  cfg.dp = gpus;
  cfg.zero = 3;
  cfg.recompute = Recompute::Selective;
  cfg.microBatch = 2;
  cfg.numMicroBatches = 1;
  return evaluate(llama31_8b(), c, j, cfg);
}

TEST(Torchtitan2024, Llama31_8BTokensPerGpuWithin15Percent) {
  // Fit on 8 GPUs bf16 (6667 tokens/s/GPU) by bisection.
  double lo = 0.1, hi = 1.0;
  for (int i = 0; i < 50; ++i) {
    double mid = (lo + hi) / 2;
    (torchtitanRun(8, false, mid).tokensPerS / 8 > 6667 ? hi : lo) = mid;
  }
  double k = (lo + hi) / 2;
  std::printf("fitted throughput scale %.3f\n", k);
  // A power-capped part runs below its datasheet rate, but not at a fraction
  // no cap explains: outside this range the model, not the GPU, is off.
  EXPECT_GT(k, 0.45);
  EXPECT_LT(k, 0.9);

  struct Row {
    int gpus;
    bool fp8;
    double published;
    double peakGiB; // 0 where not published
  };
  const Row rows[] = {
      {8, false, 6667, 77.0}, {8, true, 8532, 76.8}, {128, false, 6514, 0}, {128, true, 8380, 0}};
  for (const Row &r : rows) {
    PlanEval e = torchtitanRun(r.gpus, r.fp8, k);
    ASSERT_TRUE(e.feasible()) << e.detail;
    double perGpu = e.tokensPerS / r.gpus;
    double err = relErr(perGpu, r.published);
    std::printf("%4d GPUs %-5s predicted %6.0f tokens/s/GPU  published %6.0f  error %5.1f%%"
                "  peak %.1f GiB\n",
                r.gpus, r.fp8 ? "fp8" : "bf16", perGpu, r.published, 100 * err,
                e.peak.total() / GiB);
    EXPECT_LT(err, 0.15) << r.gpus << (r.fp8 ? " fp8" : " bf16");
    if (r.peakGiB > 0) {
      EXPECT_LT(relErr(e.peak.total() / GiB, r.peakGiB), 0.15) << "peak memory";
    }
  }
}

} // namespace

// The vocabulary rows a tp rank holds, per stack (Megatron pads to a multiple
// of 128 x tp: GPT-2's 50257 becomes 50432 on tp 2, 51200 on tp 8; DTensor
// shards unevenly; llm-run keeps a vocabulary tp does not divide whole).
TEST(Vocabulary, RowsPerRankAsEachStackSplitsThem) {
  EXPECT_EQ(vocabRowsPerRank(50257, 1, 128), 50257);
  EXPECT_EQ(vocabRowsPerRank(50257, 2, 128), 50432 / 2);
  EXPECT_EQ(vocabRowsPerRank(50257, 8, 128), 51200 / 8);
  EXPECT_EQ(vocabRowsPerRank(128256, 8, 128), 129024 / 8);
  EXPECT_EQ(vocabRowsPerRank(128256, 2, 128), 128256 / 2);
  EXPECT_EQ(vocabRowsPerRank(50257, 2, 0), 25129);
  EXPECT_EQ(vocabRowsPerRank(50257, 2, -1), 50257);
  EXPECT_EQ(vocabRowsPerRank(50304, 2, -1), 25152);
  EXPECT_EQ(vocabRowsPerRank(257, 4, -1), 257);
}
