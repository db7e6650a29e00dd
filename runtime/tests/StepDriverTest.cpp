//===- StepDriverTest.cpp - the step driver against a recording backend ---===//
//
// The step driver hands a backend each run of instructions between two
// data-moving ones at once (computeRun: the CUDA backend replays it as one
// captured graph), runs the data-moving ones itself between the backend's
// widen and narrow, and ends the step with the first error a backend or a
// communicator reports (a device's failed allocation, copy or upload), the
// backend's wide copies still narrowed.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/json.h"
#include "llmopt-runtime/plan.h"
#include "llmopt-runtime/step_driver.h"

#include "gtest/gtest.h"
#include <map>
#include <string>
#include <vector>

using namespace llmopt::runtime;

namespace {

/// One rank: a micro-batch of two fills around an all-reduce, a step phase
/// of a fill, an all-reduce, a fill, a global norm and an AdamW.
const char *kPlan = R"({
  "format": "llm-opt-plan", "version": 1, "world_size": 1, "mesh": {"dp": 1},
  "inputs": [{"name": "tokens", "shape": [1, 2], "dtype": "i32"},
             {"name": "labels", "shape": [1, 2], "dtype": "i32"}],
  "params": [{"name": "w", "shape": [4], "dtype": "f32", "init": "normal", "std": 0.5}],
  "programs": [{"name": "train_step", "ranks": [0], "arena_bytes": 48, "num_micro_batches": 2,
    "outputs": {"loss": {"space": "arena", "offset": 0, "shape": [], "dtype": "f32"},
                "grad_norm": {"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}},
    "micro_batch_instructions": [
      {"kernel": "fill", "ins": [], "outs": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}], "params": {"value": 1.0}},
      {"collective": "all_reduce", "axis": "dp", "reduce": "sum", "buffers": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}]},
      {"kernel": "fill", "ins": [], "outs": [{"space": "arena", "offset": 0, "shape": [], "dtype": "f32"}], "params": {"value": 2.0}},
      {"kernel": "fill", "ins": [], "outs": [{"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}], "params": {"value": 0.0}}
    ],
    "step_instructions": [
      {"kernel": "fill", "ins": [], "outs": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}], "params": {"value": 1.0}},
      {"collective": "all_reduce", "axis": "dp", "reduce": "avg", "buffers": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}]},
      {"kernel": "fill", "ins": [], "outs": [{"space": "arena", "offset": 32, "shape": [], "dtype": "f32"}], "params": {"value": 0.0}},
      {"kernel": "global_norm", "ins": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}], "outs": [{"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}], "params": {}},
      {"kernel": "adamw", "ins": [{"space": "arena", "offset": 16, "shape": [4], "dtype": "f32"}, {"space": "arena", "offset": 4, "shape": [], "dtype": "f32"}], "outs": [], "params": {"param": "w", "lr": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0, "max_norm": 1.0}}
    ]}]
})";

Plan loadTestPlan() {
  json::Value root;
  std::string error;
  Plan plan;
  EXPECT_TRUE(json::parse(kPlan, root, error)) << error;
  EXPECT_TRUE(parsePlan(root, plan, error)) << error;
  return plan;
}

/// Host memory, every call recorded; any one operation can be made to fail.
struct Recorder final : StepBackend {
  std::vector<std::string> calls;
  std::string failOn; // the call that fails
  std::map<int64_t, std::vector<float>> arena;
  const std::vector<Instruction> *micro = nullptr, *step = nullptr;

  bool fail(const std::string &call, std::string &error) {
    calls.push_back(call);
    if (call != failOn)
      return true;
    error = "the device refused " + call;
    return false;
  }
  /// "micro[i]" / "step[i]" for an instruction of the program.
  std::string where(const Instruction *ins) const {
    if (ins >= micro->data() && ins < micro->data() + micro->size())
      return "micro[" + std::to_string(ins - micro->data()) + "]";
    return "step[" + std::to_string(ins - step->data()) + "]";
  }

  float *data(const Buffer &b) override {
    std::vector<float> &v = arena[b.offset];
    v.resize(size_t(std::max<int64_t>(b.elements, 1)));
    return v.data();
  }
  bool store(const Buffer &, const float *, std::string &error) override {
    return fail("store", error);
  }
  bool paramValue(const std::string &, const float *&, int64_t &, std::string &error) override {
    return fail("paramValue", error);
  }
  bool allocate(int64_t n, BackendFloats &out, std::string &error) override {
    auto v = std::make_shared<std::vector<float>>(size_t(n));
    out = {v->data(), n, v};
    return fail("allocate", error);
  }
  bool copy(float *, const float *, int64_t, std::string &error) override {
    return fail("copy", error);
  }
  bool addScaled(float *, const float *, float, int64_t, std::string &error) override {
    return fail("addScaled", error);
  }
  bool fill(float *, float, int64_t, std::string &error) override { return fail("fill", error); }
  bool copyStrided(float *, const float *, const StridedCopy &, std::string &error) override {
    return fail("copyStrided", error);
  }
  bool ringForward(const Instruction &, const float *, const float *, const float *, int, float *,
                   float *, std::string &error) override {
    return fail("ringForward", error);
  }
  bool ringMerge(const Instruction &, float *, float *, const float *, const float *,
                 std::string &error) override {
    return fail("ringMerge", error);
  }
  bool ringBackward(const Instruction &, const float *, const float *, const float *, const float *,
                    const float *, const float *, int, float *, float *, float *,
                    std::string &error) override {
    return fail("ringBackward", error);
  }
  bool clearAccumulators(std::string &error) override { return fail("clear", error); }
  bool select(const std::vector<int32_t> &, const std::vector<int32_t> &, size_t slot,
              std::string &error) override {
    return fail("select " + std::to_string(slot), error);
  }
  bool widen(const Instruction &ins, std::string &error) override {
    return fail("widen " + where(&ins), error);
  }
  bool narrow(const Instruction &ins, std::string &error) override {
    return fail("narrow " + where(&ins), error);
  }
  bool compute(const Instruction &ins, Communicator &, std::string &error) override {
    return fail("compute " + where(&ins), error);
  }
  bool computeRun(const Instruction *first, size_t count, Communicator &comm,
                  std::string &error) override {
    if (!fail("run " + where(first) + " x" + std::to_string(count), error))
      return false;
    return StepBackend::computeRun(first, count, comm, error);
  }
};

/// A communicator whose all-reduces fail (a rank that died).
struct Broken final : Communicator {
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool allReduce(const std::string &axis, float *, int64_t, bool, std::string &error) override {
    error = "rank 1 did not join the all-reduce over " + axis;
    return false;
  }
};

struct Driven {
  Plan plan = loadTestPlan();
  StepDriver driver;
  Recorder backend;
  std::vector<std::vector<int32_t>> tokens{{1, 2}, {3, 4}}, labels{{2, 3}, {4, 5}};
  Driven() {
    std::string error;
    const Program &p = plan.programs.at(0);
    EXPECT_TRUE(driver.init(plan, p, 0, error)) << error;
    backend.micro = &p.microBatch;
    backend.step = &p.step;
  }
  bool step(Communicator &comm, std::string &error) {
    backend.calls.clear();
    return driver.step(backend, tokens, labels, comm, error);
  }
};

TEST(StepDriver, RunsOfKernelsGoToTheBackendAtOnce) {
  Driven d;
  SingleRank one;
  std::string error;
  ASSERT_TRUE(d.step(one, error)) << error;
  // Each micro-batch: its forward (no backward half: no pipeline), the
  // kernels before and after the all-reduce as two runs; then the step
  // phase in micro-batch 0's slot: one kernel, the all-reduce, four kernels.
  std::vector<std::string> want = {"clear"};
  for (int m = 0; m < 2; ++m)
    for (const char *c :
         {"select 0", "run micro[0] x1", "compute micro[0]", "widen micro[1]", "narrow micro[1]",
          "run micro[2] x2", "compute micro[2]", "compute micro[3]", "select 0"})
      want.push_back(c);
  for (const char *c :
       {"select 0", "run step[0] x1", "compute step[0]", "widen step[1]", "narrow step[1]",
        "run step[2] x3", "compute step[2]", "compute step[3]", "compute step[4]"})
    want.push_back(c);
  EXPECT_EQ(d.backend.calls, want);
}

TEST(StepDriver, FailuresEndTheStepWithTheirCause) {
  SingleRank one;
  for (const char *call : {"clear", "select 0", "run micro[2] x2", "compute step[3]",
                           "widen step[1]", "narrow micro[1]"}) {
    Driven d;
    d.backend.failOn = call;
    std::string error;
    EXPECT_FALSE(d.step(one, error)) << call;
    EXPECT_EQ(error, std::string("the device refused ") + call);
    // Nothing runs after the failing call.
    EXPECT_EQ(d.backend.calls.back(), call);
  }
  // A collective that fails: its error, and the wide copies still narrowed.
  Driven d;
  Broken broken;
  std::string error;
  EXPECT_FALSE(d.step(broken, error));
  EXPECT_EQ(error, "rank 1 did not join the all-reduce over dp");
  ASSERT_GE(d.backend.calls.size(), 2u);
  EXPECT_EQ(d.backend.calls.back(), "narrow micro[1]");
}

} // namespace
