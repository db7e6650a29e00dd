//===- checkpoint.h - atomic, checksummed, resumable checkpoints ----*- C++ -*-===//
//
// DIR/step-00000005/{manifest.json, plan.json, checksums.sha256, rank-0.bin,
// rank-1.bin, ...} and
// DIR/LATEST naming the newest complete one. Every rank writes its own file
// (headed by its step, rank and world size) into DIR/.step-00000005.partial;
// rank 0 then writes the manifest (the run's id, step, world size, the
// plan's SHA-256, each file's SHA-256) and checksums.sha256 (the plan's and
// the manifest's SHA-256), renames the directory into place and replaces
// LATEST, so a crash at any point leaves the previous checkpoint intact.
// Resuming checks all of it and restores parameters, AdamW moments and the
// step: training continues bit-exactly.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_CHECKPOINT_H
#define LLMOPT_RUNTIME_CHECKPOINT_H

#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/param_store.h"
#include "llmopt-runtime/plan.h"

#include <string>
#include <vector>

namespace llmopt::runtime {

/// How a save treats the step directories already in the checkpoint
/// directory. Nothing is removed before LATEST names the new checkpoint.
struct SaveOptions {
  /// > 0: only that many newest step directories stay, and step directories
  /// later than the new one (an abandoned continuation) go.
  int64_t keepLast = 0;
  /// The run replaces whatever run the directory held (llm-run
  /// --overwrite): step directories of another run (another run_id, or
  /// none) are removed.
  bool replaceOtherRuns = false;
};

/// Collective: every rank calls it after step `store.steps`.
/// `plan` must come from loadPlan: its text travels with the checkpoint.
/// A store without a run id (a fresh run) gets one on rank 0 (which writes
/// the manifest), kept for the run's later saves.
bool saveCheckpoint(const std::string &dir, ParamStore &store, const Plan &plan, Communicator &comm,
                    std::string &error, const SaveOptions &options = {});

/// Which checkpoint a resume restored: what every rank of a job must agree
/// on.
struct ResumedCheckpoint {
  /// DIR/step-XXXXXXXX.
  std::string stepDir;
  /// The SHA-256 of its manifest.json (which names the run, the step, the
  /// plan and every rank file's SHA-256).
  std::string manifestSha256;
  /// The run it belongs to (32 hex digits; empty for a version-1 checkpoint).
  std::string runId;
  int64_t step = 0;
};

/// Restores this rank's state from the newest checkpoint in `dir`. A
/// checkpoint of another plan of the same model (other dp, tp, ZeRO) is
/// resharded from the plan stored with it; one of another model (a
/// parameter missing on either side, or of another shape) is refused. A
/// checkpoint that cannot be opened or does not fit the plan is refused
/// before the state is touched; `changed` (if given) says whether a failure
/// came after the store's state was released or partly replaced (a file
/// that verifies but does not parse, a store laid out otherwise), which
/// leaves the store unusable. The store takes the checkpoint's run id;
/// `resumed` (if given) says which checkpoint it was.
bool loadCheckpoint(const std::string &dir, ParamStore &store, const Plan &plan, int rank,
                    int worldSize, std::string &error, bool *changed = nullptr,
                    ResumedCheckpoint *resumed = nullptr);

/// Opens and checks the newest checkpoint in `dir` (LATEST, the manifest,
/// its checksum and numbers) without reading the rank files. False with
/// `error` when there is none or it is malformed.
bool inspectCheckpoint(const std::string &dir, ResumedCheckpoint &info, std::string &error);

/// A parameter as the unpartitioned model holds it, with its AdamW moments.
struct WholeTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value, m, v;
};

/// Reads the newest checkpoint in `dir` as whole tensors, whatever plan wrote
/// it (`plan` is set to that plan), in its plan's parameter order, with the
/// checks a resume makes (checksums, the manifest's numbers, each rank file
/// the rank it is named for). `info` (if given) says which checkpoint it was.
bool readWholeCheckpoint(const std::string &dir, Plan &plan, int64_t &step,
                         std::vector<WholeTensor> &tensors, std::string &error,
                         ResumedCheckpoint *info = nullptr);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_CHECKPOINT_H
