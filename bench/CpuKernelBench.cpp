//===- CpuKernelBench.cpp - CPU reference kernels the CPU backend runs ----===//
//
// The MoE experts on a dropless dispatch: every expert sized for all tokens
// (capacity = tokens), of which only the routed rows (tokens x top_k /
// experts on average) are filled. Argument: whether the experts' rows are
// all filled (1) or as a dispatch leaves them (0).
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include "benchmark/benchmark.h"
#include <random>
#include <vector>

namespace cpu = llmopt::kernels::cpu;

namespace {

struct Experts {
  cpu::MoEExpertShape shape;
  std::vector<float> x, g, y, dx;
  std::vector<std::vector<float>> w, dw;
  const float *wp[3] = {};
  float *dwp[3] = {};
  Experts(int64_t tokens, int64_t experts, int64_t topK, int64_t hidden, int64_t ffn, bool full) {
    shape = {experts, tokens, hidden, ffn, true};
    std::mt19937 gen(7);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, int(experts) - 1);
    size_t rows = size_t(experts * tokens * hidden);
    x.assign(rows, 0.0f);
    g.assign(rows, 0.0f);
    y.resize(rows);
    dx.resize(rows);
    std::vector<int64_t> load(size_t(experts), 0);
    for (int64_t c = 0; c < tokens * topK; ++c) {
      int64_t e = full ? c % experts : pick(gen);
      int64_t r = load[size_t(e)]++;
      if (r >= tokens)
        continue;
      for (int64_t i = 0; i < hidden; ++i) {
        x[size_t((e * tokens + r) * hidden + i)] = n(gen);
        g[size_t((e * tokens + r) * hidden + i)] = n(gen);
      }
    }
    if (full)
      for (size_t i = 0; i < rows; ++i)
        x[i] = x[i] != 0.0f ? x[i] : n(gen), g[i] = g[i] != 0.0f ? g[i] : n(gen);
    for (int k = 0; k < 3; ++k) {
      w.emplace_back(size_t(experts * ffn * hidden));
      for (float &v : w.back())
        v = 0.02f * n(gen);
      dw.emplace_back(w.back().size(), 0.0f);
      wp[k] = w.back().data();
      dwp[k] = dw.back().data();
    }
  }
};

void BM_MoEExpertsForwardBackward(benchmark::State &state) {
  Experts e(256, 8, 2, 256, 512, state.range(0) != 0);
  for (auto _ : state) {
    cpu::moeExpertsForward(e.x.data(), e.wp, e.y.data(), e.shape);
    cpu::moeExpertsBackward(e.g.data(), e.x.data(), e.wp, e.dx.data(), e.dwp, e.shape);
    benchmark::DoNotOptimize(e.dx.data());
  }
}

} // namespace

BENCHMARK(BM_MoEExpertsForwardBackward)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
