//===- param_store.h - where a backend keeps the training state -*- C++ -*-===//
//
// A rank's parameters and optimizer state live with the backend that
// computes with them: host memory for the CPU backend, device memory for a
// GPU one. Checkpoints (save, resume, resharding resume) reach them only
// through this interface, one tensor at a time, so that a device store
// needs no host copy of its state: a save holds one tensor's value and
// moments in host memory at a time; a resume reads this rank's file (a
// resharding one every rank's) and hands the tensors over one by one.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_PARAM_STORE_H
#define LLMOPT_RUNTIME_PARAM_STORE_H

#include "llmopt-runtime/comm.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::runtime {

/// One parameter's state as this rank holds it.
struct ParamState {
  std::vector<float> value;
  /// AdamW moments: the whole parameter, or under ZeRO this rank's chunk
  /// (elements [shard.begin, shard.end) of `value`).
  std::vector<float> m, v;
  Chunk shard;
  /// ZeRO-3: `value` too holds only this rank's chunk.
  bool valueChunked = false;
};

/// Dynamic loss scaling state (Micikevicius et al. 2018): halve the scale
/// and skip the update when a gradient overflows, double it after
/// `kGrowthInterval` clean steps. Checkpointed.
struct LossScaleState {
  static constexpr int64_t kGrowthInterval = 2000;
  float scale = 65536.0f;
  int64_t goodSteps = 0;
  /// Steps whose update was skipped (AdamW's bias correction counts the
  /// others).
  int64_t skipped = 0;
  bool lastSkipped = false;
};

class ParamStore {
public:
  virtual ~ParamStore() = default;

  /// Whether this rank holds parameter `name` (a pipeline stage holds its
  /// own).
  virtual bool holds(const std::string &name) const = 0;
  /// How this rank holds `name`: the chunk of the moments (the whole
  /// tensor without ZeRO) and whether the value is chunked too (ZeRO-3).
  virtual void layout(const std::string &name, Chunk &shard, bool &valueChunked) const = 0;
  /// Copies this rank's value and moments of `name` into `out` (host
  /// memory), with its layout.
  virtual bool read(const std::string &name, ParamState &out, std::string &error) const = 0;
  /// Replaces them by `in` (of the layout `layout` gives).
  virtual bool write(const std::string &name, ParamState &&in, std::string &error) = 0;
  /// Frees the host memory the state takes, before a resume replaces it
  /// (so that it is in host memory once, not twice). Nothing by default.
  virtual void release() {}

  /// Optimizer steps taken, and the loss scaling: checkpointed with the
  /// state.
  int64_t steps = 0;
  LossScaleState lossScale;
  /// The training run this state belongs to (32 hex digits, in every
  /// checkpoint's manifest): empty in a fresh state until its first save
  /// (rank 0's, which writes the manifest) draws one; a resume sets it to
  /// the checkpoint's.
  std::string runId;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_PARAM_STORE_H
