//===- CheckpointTest.cpp - which run, rank and model a checkpoint is -----===//
//
// A resumed job is the state of one run at one step on every rank, checked,
// or it is refused naming what differs (issue 31):
//  - every checkpoint names its run (a run id drawn by a fresh run's first
//    save, kept by a resume) and every rank file its rank: a file renamed or
//    swapped with another rank's is refused;
//  - the manifest's own checksum is verified and its numbers checked (a loss
//    scale of 0 used to skip every later step without a word);
//  - a checkpoint holding a parameter the plan lacks (a layer more) is
//    refused, as one lacking a parameter the plan has already was;
//  - a run that replaces another (--overwrite) removes that run's step
//    directories once its own first checkpoint is in place, and retention
//    drops an abandoned continuation;
//  - version-1 checkpoints (no run id, LLMCKPT2 rank files) still resume,
//    their numbers checked too.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/checkpoint.h"
#include "llmopt-runtime/executor.h"
#include "llmopt-runtime/json.h"
#include "llmopt-runtime/sha256.h"

#include "gtest/gtest.h"
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace llmopt::runtime;

namespace {

/// One rank; parameters `w` [4], `b` [3] and, with `withC`, `c` [2], each
/// with a constant gradient, updated by AdamW with global-norm clipping.
std::string planText(bool withC) {
  auto buf = [](int offset, const char *shape) {
    return std::string(R"({"space": "arena", "offset": )") + std::to_string(offset) +
           R"(, "shape": )" + shape + R"(, "dtype": "f32"})";
  };
  std::string gw = buf(16, "[4]"), gb = buf(32, "[3]"), gc = buf(48, "[2]"), norm = buf(4, "[]");
  auto adamw = [&](const char *param, const std::string &grad) {
    return std::string(R"({"kernel": "adamw", "ins": [)") + grad + ", " + norm +
           R"(], "outs": [], "params": {"param": ")" + param +
           R"(", "lr": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "max_norm": 1.0}})";
  };
  auto fill = [](const std::string &out, const char *value) {
    return std::string(R"({"kernel": "fill", "ins": [], "outs": [)") + out +
           R"(], "params": {"value": )" + value + "}}";
  };
  std::string params =
      R"({"name": "w", "shape": [4], "dtype": "f32", "init": "normal", "std": 0.5},
             {"name": "b", "shape": [3], "dtype": "f32", "init": "ones"})";
  std::string steps = fill(gw, "1.0") + ",\n" + fill(gb, "2.0") + ",\n";
  std::string grads = gw + ", " + gb;
  if (withC) {
    params += R"(, {"name": "c", "shape": [2], "dtype": "f32", "init": "ones"})";
    steps += fill(gc, "3.0") + ",\n";
    grads += ", " + gc;
  }
  steps += R"({"kernel": "global_norm", "ins": [)" + grads + R"(], "outs": [)" + norm +
           R"(], "params": {}},
)" + adamw("w", gw) +
           ",\n" + adamw("b", gb);
  if (withC)
    steps += ",\n" + adamw("c", gc);
  return R"({
  "format": "llm-opt-plan", "version": 1, "world_size": 1,
  "mesh": {"dp": 1},
  "inputs": [{"name": "tokens", "shape": [1, 2], "dtype": "i32"},
             {"name": "labels", "shape": [1, 2], "dtype": "i32"}],
  "params": [)" +
         params + R"(],
  "programs": [{"name": "train_step", "ranks": [0], "arena_bytes": 64, "num_micro_batches": 1,
    "outputs": {"loss": )" +
         buf(0, "[]") + R"(, "grad_norm": )" + norm + R"(},
    "micro_batch_instructions": [],
    "step_instructions": [)" +
         steps + R"(]}]
})";
}

/// A directory of this test's own (ctest runs tests in parallel).
std::string tempDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/llmopt-checkpoint-" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" + name;
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  return dir;
}

Plan loadTestPlan(bool withC = false) {
  std::string dir = tempDir(withC ? "plan3" : "plan2"), text = planText(withC);
  std::ofstream(dir + "/plan.json") << text;
  std::ofstream(dir + "/checksums.sha256") << sha256Hex(text) << "  plan.json\n";
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

std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void spit(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

/// Replaces `from` by `to` in `stepDir`'s manifest.json (it must occur) and,
/// with `reseal`, lists the edited manifest's SHA-256 in checksums.sha256
/// (as one who edits a checkpoint on purpose would).
void editManifest(const std::string &stepDir, const std::string &from, const std::string &to,
                  bool reseal = true) {
  std::string text = slurp(stepDir + "/manifest.json");
  size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << text;
  text.replace(at, from.size(), to);
  spit(stepDir + "/manifest.json", text);
  if (!reseal)
    return;
  std::string sums = slurp(stepDir + "/checksums.sha256");
  size_t line = sums.find("  manifest.json\n");
  if (line != std::string::npos)
    sums.erase(line - 64, 64 + std::strlen("  manifest.json\n"));
  spit(stepDir + "/checksums.sha256", sums + sha256Hex(text) + "  manifest.json\n");
}

/// The manifest's "key": value text as written.
std::string field(const std::string &stepDir, const std::string &key) {
  std::string text = slurp(stepDir + "/manifest.json");
  size_t at = text.find("\"" + key + "\": ");
  EXPECT_NE(at, std::string::npos) << key;
  size_t end = text.find_first_of(",\n", at);
  return text.substr(at, end - at);
}

/// A fresh run's checkpoint of step `n` in `dir` (one rank).
void savedRun(const Plan &plan, const std::string &dir, int n, uint64_t seed = 7,
              const SaveOptions &options = {}) {
  CpuExecutor exe;
  std::string error;
  ASSERT_TRUE(exe.init(plan, 0, seed, error)) << error;
  SingleRank one;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(steps(exe, 1));
    ASSERT_TRUE(saveCheckpoint(dir, exe, plan, one, error, options)) << error;
  }
}

/// Resumes `dir` into a fresh executor: "" when it resumes, else the error.
std::string resumeError(const Plan &plan, const std::string &dir,
                        ResumedCheckpoint *resumed = nullptr) {
  CpuExecutor exe;
  std::string error;
  EXPECT_TRUE(exe.init(plan, 0, 99, error)) << error;
  return loadCheckpoint(dir, exe, plan, 0, 1, error, nullptr, resumed) ? "" : error;
}

#define EXPECT_HAS(text, part)                                                                     \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                                       \
      << "'" << (text) << "' lacks '" << (part) << "'"

/// A fresh run names itself at its first save and keeps the name; a resume
/// takes the checkpoint's, and says which checkpoint it was (the manifest's
/// SHA-256, what the ranks of a job compare).
TEST(Checkpoint, RunIdIsDrawnOnceAndKeptByAResume) {
  Plan plan = loadTestPlan();
  CpuExecutor exe;
  std::string error;
  ASSERT_TRUE(exe.init(plan, 0, 7, error)) << error;
  EXPECT_TRUE(exe.runId.empty());
  SingleRank one;
  std::string dir = tempDir("ck");
  ASSERT_TRUE(steps(exe, 1));
  ASSERT_TRUE(saveCheckpoint(dir, exe, plan, one, error)) << error;
  std::string id = exe.runId;
  ASSERT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  ASSERT_TRUE(steps(exe, 1));
  ASSERT_TRUE(saveCheckpoint(dir, exe, plan, one, error)) << error;
  EXPECT_EQ(exe.runId, id);
  EXPECT_EQ(field(dir + "/step-00000001", "run_id"), "\"run_id\": \"" + id + "\"");
  EXPECT_EQ(field(dir + "/step-00000002", "run_id"), "\"run_id\": \"" + id + "\"");
  EXPECT_EQ(field(dir + "/step-00000002", "version"), "\"version\": 2");

  CpuExecutor resumed;
  ASSERT_TRUE(resumed.init(plan, 0, 99, error)) << error;
  ResumedCheckpoint which;
  ASSERT_TRUE(loadCheckpoint(dir, resumed, plan, 0, 1, error, nullptr, &which)) << error;
  EXPECT_EQ(resumed.runId, id);
  EXPECT_EQ(which.runId, id);
  EXPECT_EQ(which.step, 2);
  EXPECT_EQ(which.stepDir, dir + "/step-00000002");
  EXPECT_EQ(which.manifestSha256, sha256Hex(slurp(dir + "/step-00000002/manifest.json")));
  ResumedCheckpoint inspected;
  ASSERT_TRUE(inspectCheckpoint(dir, inspected, error)) << error;
  EXPECT_EQ(inspected.manifestSha256, which.manifestSha256);

  // Another fresh run of the same plan, seed and step is another run.
  std::string other = tempDir("other");
  savedRun(plan, other, 2);
  ResumedCheckpoint theirs;
  ASSERT_TRUE(inspectCheckpoint(other, theirs, error)) << error;
  EXPECT_NE(theirs.runId, id);
  EXPECT_NE(theirs.manifestSha256, which.manifestSha256);
}

/// The manifest is checked against checksums.sha256 before it is read, and
/// its numbers against what this runtime can have written.
TEST(Checkpoint, ManifestChecksumAndNumbersAreChecked) {
  Plan plan = loadTestPlan();
  std::string dir = tempDir("ck"), step = dir + "/step-00000002";
  savedRun(plan, dir, 2);
  std::string pristine = slurp(step + "/manifest.json"), sums = slurp(step + "/checksums.sha256");
  auto restore = [&] {
    spit(step + "/manifest.json", pristine);
    spit(step + "/checksums.sha256", sums);
  };
  EXPECT_EQ(resumeError(plan, dir), "");

  // Edited without its checksum: corrupt.
  editManifest(step, "\"loss_scale\": 65536", "\"loss_scale\": 0", /*reseal=*/false);
  EXPECT_HAS(resumeError(plan, dir), "step-00000002/manifest.json: checksum mismatch");
  restore();
  // Not listed at all in a version-2 checkpoint.
  spit(step + "/checksums.sha256", sums.substr(0, sums.find('\n') + 1));
  EXPECT_HAS(resumeError(plan, dir), "checksums.sha256: does not list manifest.json");
  restore();

  // Resealed, the numbers are still checked (each of these resumed before,
  // loss_scale 0 skipping every later step).
  struct Case {
    std::string from, to, message;
  };
  const std::string power = "; it must be a power of two from 2^-126 to 2^127";
  std::vector<Case> cases = {
      {"\"loss_scale\": 65536", "\"loss_scale\": 0", "loss_scale is 0" + power},
      {"\"loss_scale\": 65536", "\"loss_scale\": -1", "loss_scale is -1" + power},
      {"\"loss_scale\": 65536", "\"loss_scale\": 1e38", "loss_scale is 1e+38" + power},
      {"\"loss_scale\": 65536", "\"loss_scale\": 3", "loss_scale is 3" + power},
      {"\"loss_scale\": 65536", "\"loss_scale\": 1e-300", "loss_scale is 1e-300" + power},
      {"\"loss_scale\": 65536", "\"loss_scale\": \"big\"", "loss_scale is not a number"},
      {"\"skipped_steps\": 0", "\"skipped_steps\": 3",
       "skipped_steps is 3; it must be from 0 to the step (2)"},
      {"\"skipped_steps\": 0", "\"skipped_steps\": -1", "skipped_steps is -1"},
      {"\"loss_scale_good_steps\": 0", "\"loss_scale_good_steps\": -4",
       "loss_scale_good_steps is -4; it must be from 0 to 1999"},
      {"\"loss_scale_good_steps\": 0", "\"loss_scale_good_steps\": 2000",
       "loss_scale_good_steps is 2000"},
      {"\"world_size\": 1", "\"world_size\": 0", "world_size is 0; it must be from 1 to 16777216"},
      {"\"step\": 2", "\"step\": -2", "step is -2; it must be 0 or more"},
      {"\"run_id\": \"", "\"run_id\": \"x", "run_id must be 32 hex digits"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.to);
    editManifest(step, c.from, c.to);
    EXPECT_HAS(resumeError(plan, dir), "step-00000002/manifest.json: " + c.message);
    restore();
  }
  // A number past a double is not JSON this reader takes.
  editManifest(step, "\"loss_scale\": 65536", "\"loss_scale\": 1e999");
  EXPECT_HAS(resumeError(plan, dir), "bad number '1e999'");
  restore();
  // The checks that still pass: a scale the scaler can reach.
  editManifest(step, "\"loss_scale\": 65536", "\"loss_scale\": 0.5");
  EXPECT_EQ(resumeError(plan, dir), "");
  restore();
  // llm-ckpt's reader makes the same checks.
  editManifest(step, "\"loss_scale\": 65536", "\"loss_scale\": 0");
  Plan written;
  int64_t at = 0;
  std::vector<WholeTensor> tensors;
  std::string error;
  EXPECT_FALSE(readWholeCheckpoint(dir, written, at, tensors, error));
  EXPECT_HAS(error, "loss_scale is 0");
}

/// Each rank file says which rank wrote it: a file under another rank's
/// name (renamed, or swapped with its manifest digest) is refused, on resume
/// and by llm-ckpt's reader.
TEST(Checkpoint, RankFileOfAnotherRankIsRefused) {
  Plan plan = loadTestPlan();
  std::string dir = tempDir("ck"), step = dir + "/step-00000001";
  savedRun(plan, dir, 1);
  std::string bin = slurp(step + "/rank-0.bin");
  ASSERT_EQ(bin.substr(0, 8), "LLMCKPT3");
  // The header: magic, step, rank, world size, count (int64 each).
  int64_t header[4];
  std::memcpy(header, bin.data() + 8, sizeof(header));
  EXPECT_EQ(header[0], 1);
  EXPECT_EQ(header[1], 0);
  EXPECT_EQ(header[2], 1);
  EXPECT_EQ(header[3], 2);
  int64_t rank1 = 1;
  std::string other = bin;
  std::memcpy(other.data() + 16, &rank1, 8);
  spit(step + "/rank-0.bin", other);
  // Without its digest: corrupt; with it: named as rank 1's.
  EXPECT_HAS(resumeError(plan, dir), "rank-0.bin: checksum mismatch");
  editManifest(step, sha256Hex(bin), sha256Hex(other));
  EXPECT_HAS(resumeError(plan, dir),
             "step-00000001/rank-0.bin: holds rank 1's state, not rank 0's: the rank files were "
             "renamed or swapped");
  Plan written;
  int64_t at = 0;
  std::vector<WholeTensor> tensors;
  std::string error;
  EXPECT_FALSE(readWholeCheckpoint(dir, written, at, tensors, error));
  EXPECT_HAS(error, "holds rank 1's state, not rank 0's");
  // A file of another step, likewise.
  std::string later = bin;
  int64_t two = 2;
  std::memcpy(later.data() + 8, &two, 8);
  spit(step + "/rank-0.bin", later);
  editManifest(step, sha256Hex(other), sha256Hex(later));
  EXPECT_HAS(resumeError(plan, dir),
             "rank-0.bin: holds step 2, but the manifest is of step 1: the file belongs to "
             "another checkpoint");
}

/// A checkpoint of a model with a parameter more (a layer more) is refused
/// by a plan without it, as the reverse was: nothing is dropped silently.
TEST(Checkpoint, ParameterThePlanLacksIsRefused) {
  Plan two = loadTestPlan(false), three = loadTestPlan(true);
  std::string dir3 = tempDir("ck3"), dir2 = tempDir("ck2");
  savedRun(three, dir3, 1);
  savedRun(two, dir2, 1);
  EXPECT_HAS(resumeError(two, dir3),
             "step-00000001: the checkpoint holds parameter 'c', which this plan's model does "
             "not have: the checkpoint is of another model");
  EXPECT_HAS(resumeError(three, dir2),
             "step-00000001: parameter 'c' is missing or has another shape: the checkpoint is of "
             "another model");
  // Each resumes into its own plan.
  EXPECT_EQ(resumeError(three, dir3), "");
  EXPECT_EQ(resumeError(two, dir2), "");
}

std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> out;
  std::string listing = dir + "/.listing";
  std::system(("ls -A " + dir + " > " + listing).c_str());
  std::ifstream f(listing);
  for (std::string line; std::getline(f, line);)
    if (line != ".listing")
      out.push_back(line);
  std::remove(listing.c_str());
  return out;
}

/// A run that replaces another (llm-run --overwrite) leaves none of that
/// run's step directories beside its own, but only once its own first
/// checkpoint is in place; retention drops an abandoned continuation.
TEST(Checkpoint, ReplacingARunRemovesItsStepsAfterTheFirstSave) {
  Plan plan = loadTestPlan();
  std::string dir = tempDir("ck");
  savedRun(plan, dir, 4);
  ASSERT_EQ(entries(dir), (std::vector<std::string>{"LATEST", "step-00000001", "step-00000002",
                                                    "step-00000003", "step-00000004"}));
  std::string oldId = field(dir + "/step-00000004", "run_id");

  // The new run: its step-1 replaces the old one's, and the old steps 2-4
  // go (before, --keep-last 1 kept the old step 4 as the newest).
  SaveOptions replace;
  replace.replaceOtherRuns = true;
  replace.keepLast = 1;
  savedRun(plan, dir, 1, 8, replace);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"LATEST", "step-00000001"}));
  EXPECT_NE(field(dir + "/step-00000001", "run_id"), oldId);
  EXPECT_EQ(slurp(dir + "/LATEST"), "step-00000001\n");

  // Without --keep-last too.
  std::string dir2 = tempDir("ck2");
  savedRun(plan, dir2, 3);
  replace.keepLast = 0;
  savedRun(plan, dir2, 1, 8, replace);
  EXPECT_EQ(entries(dir2), (std::vector<std::string>{"LATEST", "step-00000001"}));

  // A run continuing itself keeps its own steps under replaceOtherRuns.
  std::string dir3 = tempDir("ck3");
  savedRun(plan, dir3, 2);
  {
    CpuExecutor exe;
    std::string error;
    ASSERT_TRUE(exe.init(plan, 0, 99, error)) << error;
    ASSERT_TRUE(loadCheckpoint(dir3, exe, plan, 0, 1, error)) << error;
    ASSERT_TRUE(steps(exe, 1));
    SingleRank one;
    ASSERT_TRUE(saveCheckpoint(dir3, exe, plan, one, error, replace)) << error;
  }
  EXPECT_EQ(entries(dir3), (std::vector<std::string>{"LATEST", "step-00000001", "step-00000002",
                                                     "step-00000003"}));

  // Retention after a resume of an earlier step (LATEST moved back): the
  // abandoned later steps go rather than count as the newest.
  std::string dir4 = tempDir("ck4");
  savedRun(plan, dir4, 4);
  spit(dir4 + "/LATEST", "step-00000001\n");
  {
    CpuExecutor exe;
    std::string error;
    ASSERT_TRUE(exe.init(plan, 0, 99, error)) << error;
    ASSERT_TRUE(loadCheckpoint(dir4, exe, plan, 0, 1, error)) << error;
    ASSERT_TRUE(steps(exe, 1));
    SingleRank one;
    SaveOptions keep;
    keep.keepLast = 2;
    ASSERT_TRUE(saveCheckpoint(dir4, exe, plan, one, error, keep)) << error;
  }
  EXPECT_EQ(entries(dir4), (std::vector<std::string>{"LATEST", "step-00000001", "step-00000002"}));
}

/// A version-1 checkpoint (what this runtime wrote before run ids: no
/// run_id, no manifest line in checksums.sha256, LLMCKPT2 rank files without
/// rank or world size) still resumes, its numbers checked too.
TEST(Checkpoint, VersionOneCheckpointsStillResume) {
  Plan plan = loadTestPlan();
  std::string dir = tempDir("ck"), step = dir + "/step-00000002";
  savedRun(plan, dir, 2);
  CpuExecutor saved;
  std::string error;
  ASSERT_TRUE(saved.init(plan, 0, 99, error)) << error;
  ASSERT_TRUE(loadCheckpoint(dir, saved, plan, 0, 1, error)) << error;

  // Rewritten as version 1.
  std::string bin = slurp(step + "/rank-0.bin"), v1 = bin;
  v1.erase(16, 16); // rank and world size
  v1[7] = '2';
  spit(step + "/rank-0.bin", v1);
  std::string text = slurp(step + "/manifest.json");
  std::string id = field(step, "run_id");
  text.replace(text.find(id + ",\n  "), id.size() + 4, "");
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 1");
  text.replace(text.find(sha256Hex(bin)), 64, sha256Hex(v1));
  spit(step + "/manifest.json", text);
  std::string sums = slurp(step + "/checksums.sha256");
  spit(step + "/checksums.sha256", sums.substr(0, sums.find('\n') + 1));

  CpuExecutor resumed;
  ASSERT_TRUE(resumed.init(plan, 0, 99, error)) << error;
  ResumedCheckpoint which;
  ASSERT_TRUE(loadCheckpoint(dir, resumed, plan, 0, 1, error, nullptr, &which)) << error;
  EXPECT_EQ(which.runId, "");
  EXPECT_EQ(resumed.steps, 2);
  for (const char *name : {"w", "b"}) {
    EXPECT_EQ(resumed.params.at(name).value, saved.params.at(name).value) << name;
    EXPECT_EQ(resumed.params.at(name).m, saved.params.at(name).m) << name;
  }
  // Its first save names a run and writes version 2.
  SingleRank one;
  ASSERT_TRUE(steps(resumed, 1));
  ASSERT_TRUE(saveCheckpoint(dir, resumed, plan, one, error)) << error;
  EXPECT_EQ(resumed.runId.size(), 32u);
  EXPECT_EQ(field(dir + "/step-00000003", "version"), "\"version\": 2");

  // A version-1 manifest's numbers are checked too (it has no checksum).
  spit(dir + "/LATEST", "step-00000002\n");
  editManifest(step, "\"loss_scale\": 65536", "\"loss_scale\": 0", /*reseal=*/false);
  EXPECT_HAS(resumeError(plan, dir), "manifest.json: loss_scale is 0");
  // A version-1 manifest with a version-2 rank file, and the reverse, are
  // refused.
  editManifest(step, "\"loss_scale\": 0", "\"loss_scale\": 65536", false);
  spit(step + "/rank-0.bin", bin);
  editManifest(step, sha256Hex(v1), sha256Hex(bin), false);
  EXPECT_HAS(resumeError(plan, dir),
             "rank-0.bin: not a rank file of a version-1 checkpoint (it does not begin with "
             "LLMCKPT2)");
}

} // namespace
