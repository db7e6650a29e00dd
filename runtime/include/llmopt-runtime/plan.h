//===- plan.h - loading and validating a plan directory ------------*- C++ -*-===//
//
// Reads DIR/plan.json (docs/plan-format.md), checks DIR/checksums.sha256,
// and validates everything before anything runs: format and version, every
// buffer (space, shape, dtype, bounds inside the arena, parameter names and
// shapes, input numbers), every kernel against the kernel ABI, and that the
// programs cover each rank exactly once. Errors name the instruction and the
// field.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_PLAN_H
#define LLMOPT_RUNTIME_PLAN_H

#include "llmopt-kernels/abi.h"
#include "llmopt-runtime/json.h"
#include "llmopt-runtime/kernel_args.h"

#include "llmopt-runtime/schedule.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llmopt::runtime {

enum class DType { F32, BF16, F16, I32, I64 };
int64_t bytesOf(DType d);

struct Buffer {
  /// Temp: value `offset` of a fused kernel's f32 temporaries.
  /// Stash: at `offset` in the stash of the micro-batch running (pipeline
  /// stages: what its forward keeps for its backward).
  enum class Space { Arena, Stash, Input, State, Accum, Temp } space = Space::Arena;
  int64_t offset = 0;
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  int64_t elements = 1;
  int64_t bytes = 0;
};

/// A ZeRO-2/3 gradient accumulator (`grad_shard:<param>`): this rank's chunk
/// of the gradient, zero-padded to ceil(n / d); kernels with a `shard` treat
/// the whole buffer as the chunk.
/// Whether a kernel call's buffers and parameters agree the way the kernels
/// index them (sizes, ranks, heads x head_dim, ...); `why` says what does
/// not. The loader runs it on every kernel instruction.
struct Instruction;
bool checkKernel(const Instruction &ins, std::string &why);

inline bool isGradShard(const Buffer &b) {
  return b.space == Buffer::Space::Accum && b.name.rfind("grad_shard:", 0) == 0;
}

struct Instruction {
  enum class Kind {
    Kernel,
    AllReduce,
    BucketAllReduce,
    BucketWait,
    ReduceScatter,
    AllGather,
    SeqAllGather,
    SeqReduceScatter,
    SeqSplit,
    CPAllGather,
    CPReduceScatter,
    CPRingAttentionFwd,
    CPRingAttentionBwd,
    EPDispatch,
    EPCombine,
    Send,
    Recv,
    ParamGather,
    ParamWait,
    GradReduceScatter
  } kind = Kind::Kernel;
  int peer = 0;       // Send / Recv: the other pipeline stage
  int tag = 0;        // Send / Recv: pairs the two sides of one transfer
  int bucket = -1;    // BucketAllReduce / BucketWait / GradReduceScatter: the gradient bucket
  bool flush = false; // GradReduceScatter: the bucket's last member starts its collective
  int event = -1;     // ParamGather (a prefetch) / ParamWait: pairs the two
  const kernels::KernelInfo *kernel = nullptr;
  std::vector<Buffer> ins, outs;
  /// The kernel's parameters (and a ring attention's), decoded at load.
  KernelArgs args;
  std::string axis, reduce;
  std::vector<Buffer> buffers;
  /// A fused kernel (`fused`): its generated name and the row-wise kernels
  /// it runs, over its own buffers and temporaries (Space::Temp).
  std::string fusedName;
  std::vector<Instruction> body;
  std::vector<std::vector<int64_t>> temps;
  /// A fused body entry: its buffers' numbers among the fused instruction's
  /// (its ins, then its outs, then its temporaries), as `ins` and `outs`.
  std::vector<int64_t> insRefs, outsRefs;

  /// An MoE dispatch or combine (forward or backward): its expert indices
  /// [tokens, top_k] and its expert rows [experts, capacity, hidden].
  const Buffer &moeIndices() const;
  const Buffer &moeRows() const;
};

struct Program {
  std::string name;
  std::vector<int> ranks;
  int64_t arenaBytes = 0;
  /// Pipeline stages: bytes of one micro-batch's stash (0: none; every
  /// buffer is in the arena, of which each micro-batch in flight then has
  /// its own copy, as older plans assume).
  int64_t stashBytes = 0;
  int64_t numMicroBatches = 1;
  Buffer loss, gradNorm;
  /// Run once per micro-batch, then `step` once.
  std::vector<Instruction> microBatch, step;
  /// Pipeline stages: microBatch[backwardStart..] is the backward half, run
  /// by `schedule` ("1f1b", "gpipe", "interleaved" or "sequential"); -1: the
  /// micro-batches run whole.
  int64_t backwardStart = -1;
  std::string schedule;
  /// Interleaved stages: model chunk c's instructions begin at index `begin`
  /// (until the next entry); before the first entry, chunk 0's.
  struct ChunkStart {
    int64_t chunk = 0, begin = 0;
  };
  std::vector<ChunkStart> chunks;
  /// The schedule spelled out: (micro-batch, chunk, backward) parts in the
  /// order the stage runs them (pipeline plans; empty in older plans, whose
  /// order follows from `schedule`).
  using Part = schedule::Pass;
  std::vector<Part> order;
  /// Micro-batches in flight at once under `order` (arena copies needed).
  int64_t maxInFlight() const;
  /// Model chunks of the stage (1 + the largest chunk number).
  int64_t numChunks() const;
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  std::string init;
  double stddev = 0;
  int64_t elements = 1;
  /// A tensor-parallel part (shardDim >= 0): `shape` is the part; the whole
  /// tensor has `shardParts` times its size along `shardDim`, made of
  /// `shardBlocks` equal blocks of which this rank keeps part `axis index`.
  std::string shardAxis;
  int64_t shardDim = -1, shardBlocks = 1, shardParts = 1;
  /// The whole tensor's real size along `shardDim` when it was padded to
  /// split (the vocabulary: `shard.whole`, one block): the parts together
  /// hold `shardParts` x the part's size, the rows past `shardWhole` are
  /// padding (zero, never read as the model's). -1: no padding.
  int64_t shardWhole = -1;
  /// The whole tensor's size along `shardDim` (without padding).
  int64_t wholeDim() const {
    return shardWhole >= 0 ? shardWhole : shape[size_t(shardDim)] * shardParts;
  }
};

struct Plan {
  int version = 0;
  std::string model;
  int64_t microBatch = 0, seqLen = 0;
  int worldSize = 1;
  /// Model FLOPs per token (6N + attention), 0 when the plan does not say.
  double trainFlopsPerToken = 0;
  std::map<std::string, int> mesh;
  std::vector<Buffer> inputs;
  std::vector<ParamSpec> params;
  std::vector<Program> programs;
  /// The plan.json bytes and their SHA-256, as loadPlan read and verified
  /// them (empty for a plan parsed from memory): checkpoints record and
  /// carry exactly these.
  std::string text, sha256;

  const Program *programFor(int rank) const;
  const ParamSpec *param(const std::string &name) const;
  /// Ranks along mesh axis `name` (1 when the plan has no such axis).
  int axisSize(const std::string &name) const;
  /// Whether collectives may name `axis`: a mesh axis, `pp_tied` (first and
  /// last pipeline stage) or `edp` (the data-parallel ranks holding the same
  /// experts: dp / ep of them).
  bool hasAxis(const std::string &axis) const;
  /// Position of world rank `rank` on `axis` and the axis size. Ranks form a
  /// pp x dp x tp mesh, rank = (pp index x dp + dp index) x tp + tp index;
  /// `ep` splits dp: ep index = dp index mod ep, edp index = dp index / ep.
  /// False for an axis the CPU backend cannot place.
  bool place(const std::string &axis, int rank, int &index, int &size) const;
  /// The same, with `error` naming the axis it cannot place.
  bool place(const std::string &axis, int rank, int &index, int &size, std::string &error) const;
};

/// Reads a whole regular file; false if it cannot be opened or is not a
/// regular file (a FIFO, a device: readRegularFile in file.h).
bool readFile(const std::string &path, std::string &out);

/// Loads and validates the plan in `dir`. On failure returns false with
/// `error` saying what is wrong and where.
bool loadPlan(const std::string &dir, Plan &plan, std::string &error);

/// Validates an already parsed plan.json (`loadPlan` without the files),
/// ending with verifyPlanInvariants.
bool parsePlan(const json::Value &root, Plan &plan, std::string &error);

/// What keeps a plan's ranks alike (runtime/src/plan_invariants.cpp;
/// docs/runtime.md, "What a plan directory may contain and what the loader
/// verifies"): each parameter's gradient reduced over every axis it is
/// replicated over before its update, the gradient norm and overflow flag
/// alike on every rank, every parameter alike on its replicas at the end of
/// the step, no kernel reading a ZeRO-3 chunk, and nothing read from an
/// arena or stash before one instruction of the same micro-batch wrote it
/// (a gathered parameter before its param_gather). False with `error` naming
/// the instruction, the parameter and the axis.
bool verifyPlanInvariants(const Plan &plan, std::string &error);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_PLAN_H
