//===- LLMInterfaces.h - llm op interfaces ----------------------*- C++ -*-===//
//
// Cost conventions (CostOpInterface):
//  - FLOPs count a multiply-add as 2. `fwdFlops` is the forward pass of one
//    micro-batch; `bwdFlops` is the backward pass (input and weight gradients;
//    2x forward for GEMMs). Recomputation is not included: the planner adds it.
//  - Bytes are HBM traffic of a straightforward (unfused) implementation.
//  - `params` counts the scalars an op owns: only `llm.param` owns any, so a
//    tied weight is counted once.
//  - `saved` lists the SSA tensors the op's backward reads; the model-level
//    total counts each tensor once however many ops keep it. `savedExtraBytes`
//    are buffers that are not SSA values (norm statistics, softmax
//    log-sum-exp, expert intermediates). `selectiveDropBytes` is the part of
//    `savedExtraBytes` that selective recomputation (Korthikanti et al. 2022)
//    recomputes instead of keeping: the attention softmax of a non-fused
//    kernel.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_H
#define LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_H

#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>

namespace llmopt::llm {

/// The micro-batch shape and precision costs are evaluated for.
struct CostContext {
  /// Replaces the batch dimension (dimension 0 of activations).
  int64_t batch = 1;
  /// Replaces the sequence dimension (dimension 1 of activations).
  int64_t seqLen = 1;
  /// Bytes per element of activations and weights; 0 keeps each tensor's
  /// element type.
  unsigned dtypeBytes = 0;
  /// True for a fused (flash) attention kernel that keeps only the log-sum-exp
  /// of the softmax; false for one that keeps the probabilities.
  bool fusedAttention = true;

  /// Tokens in the micro-batch. A double: batch * seqLen can exceed 64 bits
  /// for option values nobody trains with, and every cost is a double anyway.
  double tokens() const { return static_cast<double>(batch) * static_cast<double>(seqLen); }
};

/// One tensor an op keeps for its backward pass.
struct SavedTensor {
  mlir::Value value;
  double bytes = 0;
};

/// The analytical cost of one op for one micro-batch.
struct OpCost {
  double fwdFlops = 0;
  double bwdFlops = 0;
  double fwdBytesRead = 0;
  double fwdBytesWritten = 0;
  double bwdBytesRead = 0;
  double bwdBytesWritten = 0;
  int64_t params = 0;
  llvm::SmallVector<SavedTensor, 4> saved;
  double savedExtraBytes = 0;
  double selectiveDropBytes = 0;

  /// Activation bytes kept for backward, counting this op's saved tensors as
  /// if no other op kept them.
  double savedBytes() const {
    double total = savedExtraBytes;
    for (const SavedTensor &t : saved)
      total += t.bytes;
    return total;
  }
};

/// Bytes of a value of type `type` in context `ctx`: dynamic dimensions 0 and
/// 1 take the batch and the sequence length.
double tensorBytes(mlir::Type type, const CostContext &ctx);
/// Number of elements of `type` with dynamic dimensions as in tensorBytes.
double tensorElements(mlir::Type type, const CostContext &ctx);
/// Bytes per element of `type` in context `ctx`.
double elementBytes(mlir::Type type, const CostContext &ctx);

} // namespace llmopt::llm

#include "llmopt/Dialect/LLM/IR/LLMInterfaces.h.inc"

#endif // LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_H
