//===- StepDriverBench.cpp - the step driver's own host time per step -----===//
//
// What every backend pays on the host on top of its kernels and collectives:
// the step driver walking a plan's micro-batch and step instructions (the
// schedule, the runs of kernels handed to the backend, the collectives it
// runs itself) against a backend that does nothing.
//
//   llm-opt-bench-step-driver PLAN_DIR [--benchmark_...]
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/plan.h"
#include "llmopt-runtime/step_driver.h"

#include "benchmark/benchmark.h"
#include <cstdio>
#include <string>
#include <vector>

using namespace llmopt::runtime;

namespace {

/// A backend whose operations do nothing (each kernel counted).
struct NullBackend final : StepBackend {
  std::vector<float> scratch = std::vector<float>(1 << 16);
  int64_t kernels = 0;
  float *data(const Buffer &) override { return scratch.data(); }
  bool store(const Buffer &, const float *, std::string &) override { return true; }
  bool paramValue(const std::string &, const float *&value, int64_t &count,
                  std::string &) override {
    value = scratch.data();
    count = 1;
    return true;
  }
  bool allocate(int64_t n, BackendFloats &out, std::string &) override {
    out = {scratch.data(), n, nullptr};
    return true;
  }
  bool copy(float *, const float *, int64_t, std::string &) override { return true; }
  bool addScaled(float *, const float *, float, int64_t, std::string &) override { return true; }
  bool fill(float *, float, int64_t, std::string &) override { return true; }
  bool copyStrided(float *, const float *, const StridedCopy &, std::string &) override {
    return true;
  }
  bool ringForward(const Instruction &, const float *, const float *, const float *, int, float *,
                   float *, std::string &) override {
    return true;
  }
  bool ringMerge(const Instruction &, float *, float *, const float *, const float *,
                 std::string &) override {
    return true;
  }
  bool ringBackward(const Instruction &, const float *, const float *, const float *, const float *,
                    const float *, const float *, int, float *, float *, float *,
                    std::string &) override {
    return true;
  }
  bool clearAccumulators(std::string &) override { return true; }
  bool select(const std::vector<int32_t> &, const std::vector<int32_t> &, size_t,
              std::string &) override {
    return true;
  }
  bool widen(const Instruction &, std::string &) override { return true; }
  bool narrow(const Instruction &, std::string &) override { return true; }
  bool compute(const Instruction &, Communicator &, std::string &) override {
    ++kernels;
    return true;
  }
};

std::string planDir;

void BM_Step(benchmark::State &state) {
  Plan plan;
  std::string error;
  const Program *program = nullptr;
  StepDriver driver;
  if (!loadPlan(planDir, plan, error) || !(program = plan.programFor(0)) ||
      !driver.init(plan, *program, 0, error)) {
    state.SkipWithError(("the plan: " + error).c_str());
    return;
  }
  if (plan.worldSize != 1) {
    state.SkipWithError("a plan of one rank (the driver runs its collectives on a world of one)");
    return;
  }
  NullBackend backend;
  SingleRank comm;
  std::vector<std::vector<int32_t>> tokens(size_t(program->numMicroBatches),
                                           std::vector<int32_t>(size_t(plan.inputs[0].elements)));
  for (auto _ : state)
    if (!driver.step(backend, tokens, tokens, comm, error)) {
      state.SkipWithError(error.c_str());
      return;
    }
  state.counters["kernels_per_step"] =
      benchmark::Counter(double(backend.kernels) / double(state.iterations()));
  // Seconds per kernel handed to the backend (printed with an SI prefix).
  state.counters["s_per_kernel"] = benchmark::Counter(
      double(backend.kernels), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Step)->Unit(benchmark::kMicrosecond);

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::string(argv[1]).rfind("--", 0) == 0) {
    std::fprintf(stderr, "usage: llm-opt-bench-step-driver PLAN_DIR [--benchmark_...]\n");
    return 2;
  }
  planDir = argv[1];
  argv[1] = argv[0]; // the rest for Google Benchmark, the program first
  int rest = argc - 1;
  benchmark::Initialize(&rest, argv + 1);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
