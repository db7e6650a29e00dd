//===- schedule.h - the order a pipeline stage runs its passes ---*- C++ -*-===//
//
// One definition of the pipeline schedules, shared by the planner's timeline,
// the plan emitter (which writes each stage's order into the plan) and the
// runtime (which follows it). Plain C++17: the runtime builds without LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_SCHEDULE_H
#define LLMOPT_RUNTIME_SCHEDULE_H

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::schedule {

enum class Kind {
  /// Each micro-batch forward then backward (one stage, or interleaved
  /// stages whose micro-batch count is not a multiple of the stage count).
  Sequential,
  /// Every forward, then every backward.
  GPipe,
  /// 1F1B (Narayanan et al. 2021): the forwards that fill the stages below,
  /// then one forward and one backward, then the remaining backwards.
  OneFOneB,
  /// Megatron-LM's interleaved 1F1B over model chunks: the k-th forward of
  /// a stage runs chunk (k / stages) % chunks of micro-batch
  /// (k / (stages * chunks)) * stages + k % stages; backwards visit the
  /// chunks in reverse.
  Interleaved,
};

/// The plan file's names: "sequential", "gpipe", "1f1b", "interleaved".
const char *name(Kind kind);
/// Reads a plan file's name; false for an unknown one.
bool parse(const std::string &text, Kind &kind);

/// One forward or backward pass of one micro-batch through one model chunk.
struct Pass {
  int64_t microBatch = 0;
  int64_t chunk = 0;
  bool backward = false;
  bool operator==(const Pass &o) const {
    return microBatch == o.microBatch && chunk == o.chunk && backward == o.backward;
  }
};

/// The order stage `stage` of `stages` runs the forward and backward passes
/// of `microBatches` micro-batches through its `chunks` model chunks (1
/// unless interleaved): every pass exactly once, a micro-batch's backward
/// after its forward, each chunk's backwards in micro-batch order (so that
/// gradients accumulate as they would without a pipeline). Empty for
/// inputs no schedule runs: non-positive counts, a stage out of range,
/// chunks > 1 other than interleaved, or interleaved with a micro-batch count
/// that is not a multiple of the stage count.
std::vector<Pass> stageOrder(Kind kind, int64_t microBatches, int64_t stages, int64_t stage,
                             int64_t chunks);

/// The most micro-batches of `order` started and not yet finished at once:
/// the activation copies the stage keeps.
int64_t maxInFlight(const std::vector<Pass> &order, int64_t chunks);

} // namespace llmopt::schedule

#endif // LLMOPT_RUNTIME_SCHEDULE_H
