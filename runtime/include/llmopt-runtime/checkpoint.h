//===- checkpoint.h - atomic, checksummed, resumable checkpoints ----*- C++ -*-===//
//
// DIR/step-00000005/{manifest.json, plan.json, checksums.sha256, rank-0.bin,
// rank-1.bin, ...} and
// DIR/LATEST naming the newest complete one. Every rank writes its own file
// into DIR/.step-00000005.partial; rank 0 then writes the manifest (step,
// world size, the plan's SHA-256, each file's SHA-256), renames the
// directory into place and replaces LATEST, so a crash at any point leaves
// the previous checkpoint intact. Resuming checks all of it and restores
// parameters, AdamW moments and the step: training continues bit-exactly.
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

/// Collective: every rank calls it after step `exe.steps`.
/// `plan` must come from loadPlan: its text travels with the checkpoint.
/// With `keepLast` > 0, only that many newest step directories stay (older
/// ones are removed after LATEST names the new one).
bool saveCheckpoint(const std::string &dir, const ParamStore &store, const Plan &plan,
                    Communicator &comm, std::string &error, int64_t keepLast = 0);

/// Restores this rank's state from the newest checkpoint in `dir`. A
/// checkpoint of another plan of the same model (other dp, tp, ZeRO) is
/// resharded from the plan stored with it. A checkpoint that cannot be
/// opened or does not fit the plan is refused before the state is touched;
/// `changed` (if given) says whether a failure came after the store's state
/// was released or partly replaced (a file that verifies but does not parse,
/// a store laid out otherwise), which leaves the store unusable.
bool loadCheckpoint(const std::string &dir, ParamStore &store, const Plan &plan, int rank,
                    int worldSize, std::string &error, bool *changed = nullptr);

/// A parameter as the unpartitioned model holds it, with its AdamW moments.
struct WholeTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value, m, v;
};

/// Reads the newest checkpoint in `dir` as whole tensors, whatever plan wrote
/// it (`plan` is set to that plan), in its plan's parameter order.
bool readWholeCheckpoint(const std::string &dir, Plan &plan, int64_t &step,
                         std::vector<WholeTensor> &tensors, std::string &error);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_CHECKPOINT_H
