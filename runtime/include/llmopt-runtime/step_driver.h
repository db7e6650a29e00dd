//===- step_driver.h - one training step, for every backend ---------*- C++ -*-===//
//
// The part of running a plan that is the same on every backend, written
// once: the micro-batch loop and the pipeline stage's order (the shared
// schedule's, schedule.h) with an arena slot per micro-batch in flight, and
// the instructions that move data between ranks: all-reduces (bucketed ones
// started in the last micro-batch and waited on in the step), ZeRO's
// parameter gathers (prefetched by event) and gradient reduce-scatters
// (started as each gradient is made, bucketed, completed before the
// accumulator's next use and before the step phase), reduce-scatters and
// all-gathers of ZeRO-1, and the pipeline's sends and receives.
//
// It also runs the collectives inside a computation: sequence and context
// parallelism's gathers, reduce-scatters and splits, the experts'
// all-to-alls (their layouts: layouts.h) and context parallelism's ring
// attention (the blocks' journey round the ring, their merge and their
// gradients' way home).
//
// A backend gives it memory (its own: host for the CPU, device for CUDA,
// which the communicator it is handed works on), a few memory operations and
// everything that computes: the kernels, and ring attention's three block
// computations.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_STEP_DRIVER_H
#define LLMOPT_RUNTIME_STEP_DRIVER_H

#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/layouts.h"
#include "llmopt-runtime/plan.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace llmopt::runtime {

/// `n` floats of a backend's memory, held as long as the handle (a started
/// collective's buffers).
struct BackendFloats {
  float *p = nullptr;
  int64_t n = 0;
  std::shared_ptr<void> owner;
};

/// What the step driver needs from a backend. What can fail on a device
/// (an allocation, a copy, an upload) returns false with `error` set.
class StepBackend {
public:
  virtual ~StepBackend() = default;
  /// Buffer `b` as fp32 in the backend's memory, for the instruction
  /// running (a 16-bit buffer: the wide copy `widen` made for it; a
  /// parameter: its fp32 master).
  virtual float *data(const Buffer &b) = 0;
  /// Writes `values` (fp32, backend memory) into `b` in its dtype, outside
  /// any instruction's wide copies.
  virtual bool store(const Buffer &b, const float *values, std::string &error) = 0;
  /// Parameter `name` as this rank holds it: whole, or its ZeRO-3 chunk.
  virtual bool paramValue(const std::string &name, const float *&value, int64_t &count,
                          std::string &error) = 0;
  /// `n` zeroed floats.
  virtual bool allocate(int64_t n, BackendFloats &out, std::string &error) = 0;
  virtual bool copy(float *dst, const float *src, int64_t n, std::string &error) = 0;
  /// dst += scale x src.
  virtual bool addScaled(float *dst, const float *src, float scale, int64_t n,
                         std::string &error) = 0;
  /// `n` floats set to `value`.
  virtual bool fill(float *dst, float value, int64_t n, std::string &error) = 0;
  /// A strided copy (layouts.h) from src's to dst's floats.
  virtual bool copyStrided(float *dst, const float *src, const StridedCopy &copy,
                           std::string &error) = 0;
  /// Ring attention's blocks (`ins` a cp_ring_attention_*, fp32 buffers of
  /// its shapes): this rank's queries `q` against the keys and values of
  /// the ring's rank `keysRank` (its chunks' positions) into the block's
  /// output and log-sum-exp; a block merged into the running output and
  /// log-sum-exp by log-sum-exp; and a block's backward from the whole
  /// output and log-sum-exp (dq, dk, dv written, not added).
  virtual bool ringForward(const Instruction &ins, const float *q, const float *k, const float *v,
                           int keysRank, float *out, float *lse, std::string &error) = 0;
  virtual bool ringMerge(const Instruction &ins, float *out, float *lse, const float *blockOut,
                         const float *blockLse, std::string &error) = 0;
  virtual bool ringBackward(const Instruction &ins, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, const float *lse,
                            int keysRank, float *dq, float *dk, float *dv, std::string &error) = 0;
  /// Zeroes every gradient accumulator (a step starts).
  virtual bool clearAccumulators(std::string &error) = 0;
  /// The micro-batch the next instructions belong to: its inputs, and the
  /// arena slot it has (pipeline stages keep one per micro-batch in flight).
  virtual bool select(const std::vector<int32_t> &tokens, const std::vector<int32_t> &labels,
                      size_t slot, std::string &error) = 0;
  /// Wide (fp32) copies of the 16-bit buffers of an instruction the driver
  /// runs, and their results rounded back after it.
  virtual bool widen(const Instruction &ins, std::string &error) = 0;
  virtual bool narrow(const Instruction &ins, std::string &error) = 0;
  /// Everything else: the kernels.
  virtual bool compute(const Instruction &ins, Communicator &comm, std::string &error) = 0;
  /// `count` consecutive instructions from `first`, none of them one the
  /// driver runs: one by one through `compute`, unless the backend runs
  /// them otherwise (the CUDA backend: as one captured CUDA graph).
  virtual bool computeRun(const Instruction *first, size_t count, Communicator &comm,
                          std::string &error) {
    for (size_t i = 0; i < count; ++i)
      if (!compute(first[i], comm, error))
        return false;
    return true;
  }
};

class StepDriver {
public:
  /// Lays out `program` (rank `rank`'s of `plan`): its pipeline order, and
  /// how many micro-batches it has in flight at most (`slots`, each with its
  /// own arena or stash).
  bool init(const Plan &plan, const Program &program, int rank, std::string &error);
  size_t slots() const { return numSlots; }
  /// Whether the driver runs instructions of this kind itself.
  static bool runs(Instruction::Kind kind);

  /// One step over this rank's micro-batches on `backend`, whose memory
  /// `comm` works on.
  bool step(StepBackend &backend, const std::vector<std::vector<int32_t>> &tokens,
            const std::vector<std::vector<int32_t>> &labels, Communicator &comm,
            std::string &error);

private:
  const Plan *plan = nullptr;
  const Program *program = nullptr;
  int rank = 0;
  size_t numSlots = 1;
  /// Pipeline stages: the order of the micro-batches' parts.
  std::vector<Program::Part> order;
  /// The micro-batch running (bucketed all-reduces start in the last one).
  int64_t microBatch = 0;

  bool axis(const std::string &name, int &index, int &size, std::string &error) const;
  bool run(StepBackend &backend, const Instruction &ins, Communicator &comm, std::string &error);
  /// Instructions [begin, end) of `list`: the driver's own one by one, the
  /// runs of others between them through the backend's computeRun.
  bool runRange(StepBackend &backend, const std::vector<Instruction> &list, size_t begin,
                size_t end, Communicator &comm, std::string &error);
  bool move(StepBackend &backend, const Instruction &ins, Communicator &comm, std::string &error);
  /// The collectives inside a computation (see above).
  bool sequence(StepBackend &backend, const Instruction &ins, Communicator &comm,
                std::string &error);
  bool experts(StepBackend &backend, const Instruction &ins, Communicator &comm,
               std::string &error);
  bool ringAttention(StepBackend &backend, const Instruction &ins, Communicator &comm,
                     std::string &error);
  /// Completes everything still in flight and forgets it (before a step).
  bool drain(Communicator &comm, std::string &error);

  /// Prefetched ZeRO-3 gathers in flight, by event.
  struct PendingGather {
    BackendFloats mine, all;
    Buffer out;
  };
  std::map<int, PendingGather> gathers;
  /// ZeRO-2/3 gradient reduce-scatters in flight, by handle: one gradient,
  /// or a bucket of them (each rank's chunks of the members side by side).
  /// Each completes (the chunks added to their accumulators) before the
  /// next scatter into one of its accumulators and before the step phase.
  struct PendingScatter {
    int handle = 0;
    BackendFloats all, mine;
    std::vector<Buffer> accums; // the members, in order
    float scale = 1;
  };
  std::map<int, PendingScatter> scatters;
  std::map<std::string, int> scatterOf; // accumulator -> handle in flight
  /// A bucket still taking gradients: each member's zero-padded copy.
  struct OpenBucket {
    std::string axis;
    int size = 1;
    float scale = 1;
    std::vector<Buffer> accums;
    std::vector<BackendFloats> pieces;
  };
  std::map<int, OpenBucket> openBuckets;
  /// Bucketed all-reduces started and not yet waited on.
  std::set<int> runningBuckets;
  int nextScatter = 0;
  bool startScatter(StepBackend &backend, PendingScatter p, const std::string &axis,
                    Communicator &comm, std::string &error);
  bool finishScatter(StepBackend &backend, const std::string &accum, Communicator &comm,
                     std::string &error);
  bool finishScatters(StepBackend &backend, Communicator &comm, std::string &error);
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_STEP_DRIVER_H
