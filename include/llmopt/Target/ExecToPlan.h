//===- ExecToPlan.h - the plan file from an exec module ---------*- C++ -*-===//
//
// A plan file (docs/plan-format.md) is a translation of the exec module
// alone: exec.plan (mesh, ranks, ZeRO stage, inputs, model facts),
// exec.param (the trainable tensors) and the exec.program ops (each class
// of ranks' instructions, a pipeline stage's schedule and order). Nothing
// of the llm dialect is read.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_TARGET_EXECTOPLAN_H
#define LLMOPT_TARGET_EXECTOPLAN_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace llmopt {

/// plan.json's text for `module`, its number of ranks, and its fused kernels
/// (whose CUDA source goes beside it). Errors at the module or the op.
mlir::LogicalResult translateExecToPlan(mlir::ModuleOp module, std::string &text, int64_t &world,
                                        llvm::SmallVectorImpl<exec::FusedOp> &fusedOps);

/// `llm-translate --exec-to-plan` (an exec module to plan.json's text) and
/// `--exec-to-cuda` (to kernels.cu, the exec.fused ops' CUDA source).
void registerExecToPlanTranslation();

} // namespace llmopt

#endif // LLMOPT_TARGET_EXECTOPLAN_H
