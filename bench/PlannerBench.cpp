//===- PlannerBench.cpp - how fast the planner searches -------------------===//
//
// Full searches (every dimension open) single-threaded:
//   GPT-3 175B on 1024 H100 (global batch 1536 x 2048 tokens),
//   Llama-3.1 405B on 16384 H100 (global batch 2048 x 8192 tokens),
//   Mixtral 8x7B on 1024 H100 (global batch 1024 x 4096 tokens; EP searched).
// Reports candidates scored per second next to the time.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Planner/Planner.h"

#include <benchmark/benchmark.h>

using namespace llmopt::cost;
using namespace llmopt::planner;

static ModelDesc llama405b() {
  ModelDesc m;
  m.name = "llama3.1-405b";
  m.vocab = 128256;
  m.hidden = 16384;
  m.embeddingParams = 128256.0 * 16384;
  m.headParams = 128256.0 * 16384;
  m.finalNormParams = 16384;
  LayerDesc l;
  l.hidden = 16384;
  l.heads = 128;
  l.kvHeads = 8;
  l.headDim = 128;
  l.ffn = 53248;
  l.gatedMlp = true;
  l.denseParams = 3187703808.0; // per layer, from --llm-stats
  m.layers.assign(126, l);
  return m;
}

static ModelDesc mixtral8x7b() {
  ModelDesc m;
  m.name = "mixtral-8x7b";
  m.vocab = 32000;
  m.hidden = 4096;
  m.embeddingParams = 32000.0 * 4096;
  m.headParams = 32000.0 * 4096;
  m.finalNormParams = 4096;
  LayerDesc l;
  l.hidden = 4096;
  l.heads = 32;
  l.kvHeads = 8;
  l.headDim = 128;
  l.ffn = 14336;
  l.gatedMlp = true;
  l.window = 0;
  l.experts = 8;
  l.topK = 2;
  // Attention (q, o: 4096 x 4096; k, v: 4096 x 1024), two norms, router.
  l.denseParams = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 2.0 * 4096 + 4096.0 * 8;
  l.expertParams = 8 * 3.0 * 4096 * 14336;
  m.layers.assign(32, l);
  return m;
}

static void runSearch(benchmark::State &state, const ModelDesc &m, int gpus, int64_t batch,
                      int64_t seq) {
  ClusterSpec c;
  std::string error;
  if (!parseCluster("dgx-h100", "", {}, gpus, c, error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  JobSpec j;
  j.globalBatch = batch;
  j.seqLen = seq;
  // The default stack, as a user's search runs.
  if (!getStackProfile(defaultStackName(), j.stack, error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  int64_t evaluated = 0;
  for (auto _ : state) {
    SearchResult r = search(m, c, j, SearchOptions());
    benchmark::DoNotOptimize(r.plans.data());
    evaluated = r.evaluated;
  }
  state.counters["candidates"] = double(evaluated);
  state.counters["candidates_per_s"] =
      benchmark::Counter(double(evaluated), benchmark::Counter::kIsIterationInvariantRate);
}

static void BM_SearchGPT3_175B_1024xH100(benchmark::State &state) {
  runSearch(state, ModelDesc::gpt("gpt3-175b", 96, 12288, 96, 50257, 2048), 1024, 1536, 2048);
}
BENCHMARK(BM_SearchGPT3_175B_1024xH100)->Unit(benchmark::kMillisecond);

static void BM_SearchLlama31_405B_16384xH100(benchmark::State &state) {
  runSearch(state, llama405b(), 16384, 2048, 8192);
}
BENCHMARK(BM_SearchLlama31_405B_16384xH100)->Unit(benchmark::kMillisecond);

static void BM_SearchMixtral8x7B_1024xH100(benchmark::State &state) {
  runSearch(state, mixtral8x7b(), 1024, 1024, 4096);
}
BENCHMARK(BM_SearchMixtral8x7B_1024xH100)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
