//===- Lowering.h - convert-llm-to-exec's parts -----------------*- C++ -*-===//
//
// convert-llm-to-exec in parts:
//  - BufferAssignment: where every value of a memory-planned @train_step
//    lives (an analysis of llm-plan-memory's result);
//  - Lowering: the exec builder a lowering pattern emits through (kernel
//    calls and collectives on placed buffers);
//  - LoweringPatternSet: one lowering per llm op, registered by the op-family
//    files (Elementwise, Embedding, Norm, Linear, Attention, MoE, Loss,
//    Collectives, Fused);
//  - lowerStepPhase (Optimizer.cpp): the step phase of a program.
// The pass (LLMToExec.cpp) lays out the programs and the micro-batch phase.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_LIB_CONVERSION_LLMTOEXEC_LOWERING_H
#define LLMOPT_LIB_CONVERSION_LLMTOEXEC_LOWERING_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <functional>
#include <optional>

namespace llmopt::lowering {

/// Where each value of a memory-planned @train_step lives: a step input by
/// its argument number, a parameter in its state by name, a transient at the
/// arena offset llm-plan-memory gave it (`llm.offsets`) or in the stash
/// (`llm.stashed`), or the buffer it was redirected to (a weight gradient a
/// GEMM adds straight into its accumulator). Accumulators and scratch
/// buffers are named fp32 buffers of the accumulator space.
class BufferAssignment {
public:
  explicit BufferAssignment(mlir::func::FuncOp step);

  /// The buffer of `v`; an error at `v` if the memory plan placed none.
  mlir::FailureOr<exec::BufAttr> lookup(mlir::Value v) const;
  mlir::FailureOr<mlir::ArrayAttr> lookup(mlir::ValueRange values) const;
  /// From now on `v` lives in `to`.
  void redirect(mlir::Value v, exec::BufAttr to) { redirected[v] = to; }

  /// The fp32 accumulator-space buffer `name` of `shape`.
  exec::BufAttr accumulator(llvm::StringRef name, llvm::ArrayRef<int64_t> shape) const;
  /// ... of `like`'s shape.
  exec::BufAttr accumulator(llvm::StringRef name, mlir::Value like) const;

private:
  mlir::MLIRContext *ctx;
  llvm::DenseMap<mlir::Value, int64_t> offsets;
  llvm::DenseSet<mlir::Value> stashed;
  llvm::DenseMap<mlir::Value, exec::BufAttr> redirected;
};

class Lowering;

/// One llm op's lowering: appends its kernels and collectives through `l`.
using LowerFn = std::function<mlir::LogicalResult(mlir::Operation *, Lowering &)>;

/// The lowerings convert-llm-to-exec knows, one per op name. An op without
/// one is refused by name ("no kernel for this op yet").
class LoweringPatternSet {
public:
  template <typename OpTy, typename Fn> LoweringPatternSet &add(Fn fn) {
    return add(OpTy::getOperationName(),
               [fn](mlir::Operation *op, Lowering &l) { return fn(mlir::cast<OpTy>(op), l); });
  }
  LoweringPatternSet &add(llvm::StringRef opName, LowerFn fn);
  const LowerFn *lookup(mlir::Operation *op) const;

private:
  llvm::StringMap<LowerFn> table;
};

/// The op families' lowerings (one file each).
void populateElementwiseLowerings(LoweringPatternSet &set);
void populateEmbeddingLowerings(LoweringPatternSet &set);
void populateNormLowerings(LoweringPatternSet &set);
void populateLinearLowerings(LoweringPatternSet &set);
void populateAttentionLowerings(LoweringPatternSet &set);
void populateMoELowerings(LoweringPatternSet &set);
void populateLossLowerings(LoweringPatternSet &set);
void populateCollectiveLowerings(LoweringPatternSet &set);
void populateFusedLowerings(LoweringPatternSet &set);

/// All of them.
void populateLLMToExecLowerings(LoweringPatternSet &set);

/// The exec builder lowerings emit through: the insertion point (a block of
/// the program being built), the buffers, the mesh facts kernels depend on,
/// and, while an llm.fused body is lowered, the capture of its kernels as
/// body entries over numbered buffers.
class Lowering {
public:
  Lowering(mlir::func::FuncOp step, const LoweringPatternSet &patterns, BufferAssignment &buffers,
           int64_t tp, int64_t cp);

  /// Lowers `op` with its pattern, after waiting for prefetched ZeRO-3
  /// gathers it reads.
  mlir::LogicalResult lower(mlir::Operation *op);

  /// One kernel call: `name` on the buffers of `ins` / `outs`.
  mlir::LogicalResult kernel(mlir::Location loc, llvm::StringRef name, mlir::ValueRange ins,
                             mlir::ValueRange outs,
                             llvm::ArrayRef<mlir::NamedAttribute> params = {});
  /// One kernel call on buffers already placed.
  exec::KernelOp kernelOn(mlir::Location loc, llvm::StringRef name,
                          llvm::ArrayRef<mlir::Attribute> ins, llvm::ArrayRef<mlir::Attribute> outs,
                          llvm::ArrayRef<mlir::NamedAttribute> params = {});
  mlir::LogicalResult allReduce(mlir::Location loc, llvm::StringRef axis, mlir::Value v);
  void allReduceOn(mlir::Location loc, llvm::StringRef axis, exec::ReduceKind kind,
                   llvm::ArrayRef<mlir::Attribute> buffers);
  mlir::LogicalResult seq(mlir::Location loc, exec::SeqKind kind, llvm::StringRef axis,
                          mlir::Value in, mlir::Value out);

  mlir::NamedAttribute f64(llvm::StringRef k, double v) {
    return b.getNamedAttr(k, b.getF64FloatAttr(v));
  }
  mlir::NamedAttribute i64(llvm::StringRef k, int64_t v) {
    return b.getNamedAttr(k, b.getI64IntegerAttr(v));
  }
  mlir::NamedAttribute flag(llvm::StringRef k, bool v) {
    return b.getNamedAttr(k, b.getBoolAttr(v));
  }
  mlir::NamedAttribute text(llvm::StringRef k, llvm::StringRef v) {
    return b.getNamedAttr(k, b.getStringAttr(v));
  }

  mlir::Builder b;
  /// Where instructions go: a block of the program being built.
  mlir::OpBuilder ob;
  BufferAssignment &buffers;
  /// Tensor parallelism (the vocabulary's parts) and context parallelism.
  int64_t tp = 1, cp = 1;

  /// ZeRO-3 gathers started ahead (`llm.prefetch`) and not yet waited for,
  /// by gathered value, and the next event number.
  llvm::DenseMap<mlir::Value, int64_t> pendingGathers;
  int64_t gatherEvents = 0;

  /// While an llm.fused body is lowered: its kernels as body entries, over
  /// the buffer numbers of `refs`.
  llvm::SmallVector<mlir::Attribute> *captured = nullptr;
  llvm::DenseMap<mlir::Value, int64_t> refs;

private:
  const LoweringPatternSet &patterns;
};

/// The kernel parameters of a GEMM with `gemm` input type: fp8 `recipe`
/// ("e4m3" forward, "hybrid" backward) with per-tensor scaling whose amax is
/// taken over the axes that split its operands (tensor parallelism: the
/// weight and some activations; context parallelism: the sequence). Fails
/// for 16-bit GEMMs of a 32-bit model, which are not lowered. `experts`: the
/// weights of MoE experts, which scale activations per row (no amax over the
/// sequence's chunks) and need the amax over `tp` only where tensor
/// parallelism splits their ffn.
mlir::LogicalResult fp8GemmParams(Lowering &l, mlir::Operation *op, std::optional<mlir::Type> gemm,
                                  llvm::StringRef recipe,
                                  llvm::SmallVectorImpl<mlir::NamedAttribute> &params,
                                  std::optional<mlir::ValueRange> experts = std::nullopt);

/// The pipeline stage `op` was placed on (`llm.stage`); -2 without a
/// pipeline.
int64_t stageOf(mlir::Operation *op);

/// What the partition passes decided for each parameter: its pipeline stage
/// (-2: no pipeline), shared by the first and the last stage (`tied`), a TP
/// part (its squares sum over tp in the norm), an expert part (ep), applied
/// to sequence chunks (SP: one partial gradient per chunk).
struct ParamFacts {
  llvm::StringMap<int64_t> stage;
  llvm::StringSet<> tied, tpSharded, epSharded, spPartial;
  explicit ParamFacts(mlir::func::FuncOp step);
};

/// The step phase of one program (after the micro-batches): average the
/// gradient and loss accumulators over the micro-batches, the context and
/// data-parallel ranks, sum shared weights' parts and SP partial gradients,
/// unscale under loss scaling, the global norm, AdamW for `updates`. The
/// form is ZeRO-0's; exec-shard-optimizer shards it.
struct StepPhase {
  llvm::ArrayRef<llm::AdamWOp> updates;
  llvm::ArrayRef<mlir::Attribute> gradAccs;
  exec::BufAttr loss, norm;
  const ParamFacts &params;
  int64_t stage = -2, dp = 1, tp = 1, pp = 1, cp = 1, ep = 1, micro = 1;
  bool lossScaling = false;
};
void lowerStepPhase(Lowering &l, mlir::Location loc, const StepPhase &step);

} // namespace llmopt::lowering

#endif // LLMOPT_LIB_CONVERSION_LLMTOEXEC_LOWERING_H
