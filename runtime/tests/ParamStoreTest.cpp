//===- ParamStoreTest.cpp - checkpoints through a parameter store ---------===//
//
// Checkpoints reach a backend's training state only through ParamStore
// (param_store.h), one tensor at a time: a store that is not the CPU
// executor (here a map standing in for a device store) saves and resumes
// bit-exactly, is read once per tensor in the plan's order, and a failing or
// differently laid out store fails the checkpoint with its reason and leaves
// nothing behind. With a GPU: the CUDA executor is such a store, its state
// on the device only.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/checkpoint.h"
#ifdef LLMOPT_HAVE_CUDA
#include "llmopt-runtime/cuda_executor.h"
#endif
#include "llmopt-runtime/executor.h"
#include "llmopt-runtime/llmopt_runtime.h"
#include "llmopt-runtime/sha256.h"

#include "gtest/gtest.h"
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace llmopt::runtime;

namespace {

/// One rank, two parameters: `w` gets a gradient of ones, `b` of twos, each
/// updated by AdamW with global-norm clipping.
std::string twoParamPlan() {
  auto buf = [](int offset, const char *shape) {
    return std::string(R"({"space": "arena", "offset": )") + std::to_string(offset) +
           R"(, "shape": )" + shape + R"(, "dtype": "f32"})";
  };
  std::string gw = buf(16, "[4]"), gb = buf(32, "[3]"), norm = buf(4, "[]");
  auto adamw = [&](const char *param, const std::string &grad) {
    return std::string(R"({"kernel": "adamw", "ins": [)") + grad + ", " + norm +
           R"(], "outs": [], "params": {"param": ")" + param +
           R"(", "lr": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "max_norm": 1.0}})";
  };
  return std::string(R"({
  "format": "llm-opt-plan", "version": 1, "world_size": 1,
  "mesh": {"dp": 1},
  "inputs": [{"name": "tokens", "shape": [1, 2], "dtype": "i32"},
             {"name": "labels", "shape": [1, 2], "dtype": "i32"}],
  "params": [{"name": "w", "shape": [4], "dtype": "f32", "init": "normal", "std": 0.5},
             {"name": "b", "shape": [3], "dtype": "f32", "init": "ones"}],
  "programs": [{"name": "train_step", "ranks": [0], "arena_bytes": 48, "num_micro_batches": 1,
    "outputs": {"loss": )") +
         buf(0, "[]") + R"(, "grad_norm": )" + norm + R"(},
    "micro_batch_instructions": [],
    "step_instructions": [
      {"kernel": "fill", "ins": [], "outs": [)" +
         gw + R"(], "params": {"value": 1.0}},
      {"kernel": "fill", "ins": [], "outs": [)" +
         gb + R"(], "params": {"value": 2.0}},
      {"kernel": "global_norm", "ins": [)" +
         gw + ", " + gb + R"(], "outs": [)" + norm + R"(], "params": {}},
      )" +
         adamw("w", gw) + ",\n      " + adamw("b", gb) + R"(
    ]}]
})";
}

/// A directory of this test's own (ctest runs tests in parallel).
std::string tempDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/llmopt-param-store-" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" + name;
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  return dir;
}

std::string writeTestPlan() {
  std::string dir = tempDir("plan"), text = twoParamPlan();
  std::ofstream(dir + "/plan.json") << text;
  std::ofstream(dir + "/checksums.sha256") << sha256Hex(text) << "  plan.json\n";
  return dir;
}

Plan loadTestPlan() {
  std::string dir = writeTestPlan();
  Plan plan;
  std::string error;
  EXPECT_TRUE(loadPlan(dir, plan, error)) << error;
  return plan;
}

bool steps(CpuExecutor &exe, int n) {
  SingleRank one;
  for (int i = 0; i < n; ++i) {
    StepResult r;
    std::string error;
    if (!exe.step({{1, 2}}, {{2, 3}}, one, r, error)) {
      ADD_FAILURE() << error;
      return false;
    }
  }
  return true;
}

/// A store that is not the CPU executor (as a device store is not): its own
/// state, laid out like `like`'s; records the reads and can fail them.
struct MapStore final : ParamStore {
  std::map<std::string, ParamState> state;
  std::vector<std::string> reads;
  std::string failRead;
  explicit MapStore(const CpuExecutor &like) {
    for (const auto &[name, st] : like.params) {
      ParamState empty;
      empty.shard = st.shard;
      empty.valueChunked = st.valueChunked;
      state[name] = empty;
    }
  }
  bool holds(const std::string &name) const override { return state.count(name) != 0; }
  void layout(const std::string &name, Chunk &shard, bool &valueChunked) const override {
    shard = state.at(name).shard;
    valueChunked = state.at(name).valueChunked;
  }
  bool read(const std::string &name, ParamState &out, std::string &error) const override {
    const_cast<MapStore *>(this)->reads.push_back(name);
    if (name == failRead)
      return (error = "the device lost parameter '" + name + "'", false);
    out = state.at(name);
    return true;
  }
  bool write(const std::string &name, ParamState &&in, std::string &error) override {
    ParamState &st = state.at(name);
    if (in.shard.begin != st.shard.begin || in.shard.end != st.shard.end)
      return (error = "parameter '" + name + "' is laid out otherwise", false);
    st = std::move(in);
    return true;
  }
};

void expectSameState(const std::map<std::string, ParamState> &a,
                     const std::map<std::string, ParamState> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto &[name, st] : a) {
    const ParamState &other = b.at(name);
    EXPECT_EQ(st.value, other.value) << name;
    EXPECT_EQ(st.m, other.m) << name;
    EXPECT_EQ(st.v, other.v) << name;
  }
}

TEST(ParamStore, CheckpointsStreamThroughAnyStore) {
  Plan plan = loadTestPlan();
  CpuExecutor exe;
  std::string error;
  ASSERT_TRUE(exe.init(plan, 0, 7, error)) << error;
  ASSERT_TRUE(steps(exe, 2));
  exe.lossScale.scale = 1024.0f;
  exe.lossScale.goodSteps = 5;
  SingleRank one;
  std::string first = tempDir("first");
  ASSERT_TRUE(saveCheckpoint(first, exe, plan, one, error)) << error;

  // Resumed into the other store: the same state, step and loss scale.
  MapStore device(exe);
  ASSERT_TRUE(loadCheckpoint(first, device, plan, 0, 1, error)) << error;
  expectSameState(exe.params, device.state);
  EXPECT_EQ(device.steps, 2);
  EXPECT_EQ(device.lossScale.scale, 1024.0f);
  EXPECT_EQ(device.lossScale.goodSteps, 5);

  // Saved from it: each tensor read once, in the plan's order; resumed into
  // a fresh CPU executor, training goes on bit-exactly.
  std::string second = tempDir("second");
  ASSERT_TRUE(saveCheckpoint(second, device, plan, one, error)) << error;
  EXPECT_EQ(device.reads, (std::vector<std::string>{"w", "b"}));
  CpuExecutor resumed;
  ASSERT_TRUE(resumed.init(plan, 0, 99, error)) << error;
  ASSERT_TRUE(loadCheckpoint(second, resumed, plan, 0, 1, error)) << error;
  EXPECT_EQ(resumed.steps, 2);
  ASSERT_TRUE(steps(exe, 1));
  ASSERT_TRUE(steps(resumed, 1));
  expectSameState(exe.params, resumed.params);
}

TEST(ParamStore, FailuresNameTheirCauseAndLeaveNothing) {
  Plan plan = loadTestPlan();
  CpuExecutor exe;
  std::string error;
  ASSERT_TRUE(exe.init(plan, 0, 7, error)) << error;
  ASSERT_TRUE(steps(exe, 1));
  SingleRank one;

  // A store that cannot give a tensor back: no checkpoint, no partial one.
  MapStore device(exe);
  for (auto &[name, st] : exe.params)
    device.state[name] = st;
  device.steps = exe.steps;
  device.failRead = "b";
  std::string dir = tempDir("failed");
  EXPECT_FALSE(saveCheckpoint(dir, device, plan, one, error));
  EXPECT_NE(error.find("the device lost parameter 'b'"), std::string::npos) << error;
  struct stat st;
  EXPECT_NE(::stat((dir + "/LATEST").c_str(), &st), 0);
  EXPECT_NE(::stat((dir + "/.step-00000001.partial").c_str(), &st), 0);
  EXPECT_NE(::stat((dir + "/step-00000001").c_str(), &st), 0);
  EXPECT_EQ(std::system(("test -z \"$(ls -A " + dir + ")\"").c_str()), 0) << dir << " not empty";

  // A store laid out otherwise than the checkpoint refuses it by name.
  std::string good = tempDir("good");
  ASSERT_TRUE(saveCheckpoint(good, exe, plan, one, error)) << error;
  MapStore other(exe);
  other.state["w"].shard.end = 2;
  bool changed = false;
  EXPECT_FALSE(loadCheckpoint(good, other, plan, 0, 1, error, &changed));
  EXPECT_NE(error.find("parameter 'w'"), std::string::npos) << error;
  EXPECT_TRUE(changed); // the store's state was released: it is unusable now

  // No checkpoint at all: refused before the state is touched.
  EXPECT_FALSE(loadCheckpoint(tempDir("empty"), exe, plan, 0, 1, error, &changed));
  EXPECT_FALSE(changed);
  EXPECT_FALSE(exe.params.at("w").value.empty());

  // The CPU store itself refuses a tensor of another layout by name.
  ParamState wrong;
  ASSERT_TRUE(exe.read("w", wrong, error)) << error;
  wrong.m.pop_back();
  EXPECT_FALSE(exe.write("w", std::move(wrong), error));
  EXPECT_NE(error.find("parameter 'w' is laid out otherwise"), std::string::npos) << error;
  EXPECT_FALSE(exe.write("nope", ParamState(), error));
  EXPECT_NE(error.find("no parameter 'nope'"), std::string::npos) << error;
}

/// The C interface: a resume refused before the state is touched leaves the
/// trainer usable.
TEST(ParamStore, RefusedResumeLeavesTheTrainerUsable) {
  char err[512] = {0};
  llmopt_trainer *t = llmopt_trainer_open(writeTestPlan().c_str(), 7, err, sizeof err);
  ASSERT_NE(t, nullptr) << err;
  EXPECT_NE(llmopt_trainer_resume(t, tempDir("nothing").c_str(), err, sizeof err), 0);
  EXPECT_EQ(std::string(err).find("resume failed"), std::string::npos) << err;
  int32_t tokens[2] = {1, 2}, labels[2] = {2, 3};
  float loss = 0, norm = 0;
  EXPECT_EQ(llmopt_trainer_step(t, tokens, labels, &loss, &norm, err, sizeof err), 0) << err;
  EXPECT_EQ(llmopt_trainer_steps(t), 1);
  llmopt_trainer_close(t);
}

#ifdef LLMOPT_HAVE_CUDA
/// The CUDA backend's store, on a GPU (skipped without one): the state it
/// initializes is the CPU backend's; after two steps on the GPU it equals
/// the CPU's two steps; saved from the device and resumed into a fresh
/// executor it is the same bits, and both go on identically.
TEST(ParamStore, CudaExecutorSavesAndResumesFromTheDevice) {
  if (!CudaExecutor::available())
    GTEST_SKIP() << "no CUDA device";
  Plan plan = loadTestPlan();
  std::string error;
  CpuExecutor cpu;
  ASSERT_TRUE(cpu.init(plan, 0, 7, error)) << error;
  CudaExecutor gpu;
  ASSERT_TRUE(gpu.init(plan, 0, 7, error)) << error;
  EXPECT_TRUE(gpu.host.params.at("w").value.empty()); // no host copy kept
  auto readAll = [&](const ParamStore &store) {
    std::map<std::string, ParamState> all;
    for (const char *name : {"w", "b"}) {
      EXPECT_TRUE(store.holds(name)) << name;
      EXPECT_TRUE(store.read(name, all[name], error)) << error;
    }
    return all;
  };
  expectSameState(cpu.params, readAll(gpu));

  auto gpuSteps = [&](CudaExecutor &exe, int n) {
    for (int i = 0; i < n; ++i) {
      StepResult r;
      if (!exe.step({{1, 2}}, {{2, 3}}, r, error))
        return false;
    }
    return true;
  };
  ASSERT_TRUE(gpuSteps(gpu, 2)) << error;
  ASSERT_TRUE(steps(cpu, 2));
  EXPECT_EQ(gpu.steps, 2);
  std::map<std::string, ParamState> after = readAll(gpu);
  for (const auto &[name, st] : cpu.params)
    for (size_t i = 0; i < st.value.size(); ++i)
      EXPECT_NEAR(after[name].value[i], st.value[i], 1e-6f + 1e-5f * std::fabs(st.value[i]))
          << name << "[" << i << "]";

  SingleRank one;
  std::string dir = tempDir("gpu");
  ASSERT_TRUE(saveCheckpoint(dir, gpu, plan, one, error)) << error;
  CudaExecutor resumed;
  ASSERT_TRUE(resumed.init(plan, 0, 99, error)) << error;
  ASSERT_TRUE(loadCheckpoint(dir, resumed, plan, 0, 1, error)) << error;
  EXPECT_EQ(resumed.steps, 2);
  expectSameState(after, readAll(resumed));
  ASSERT_TRUE(gpuSteps(gpu, 1)) << error;
  ASSERT_TRUE(gpuSteps(resumed, 1)) << error;
  expectSameState(readAll(gpu), readAll(resumed));

  // A tensor of another layout is refused by name, the state untouched.
  ParamState wrong = readAll(gpu)["w"];
  wrong.m.pop_back();
  EXPECT_FALSE(gpu.write("w", std::move(wrong), error));
  EXPECT_NE(error.find("parameter 'w' is laid out otherwise"), std::string::npos) << error;
  expectSameState(readAll(gpu), readAll(resumed));
}
#endif

} // namespace
