//===- ModelDesc.h - the planner's view of an llm module --------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_LLM_ANALYSIS_MODELDESC_H
#define LLMOPT_DIALECT_LLM_ANALYSIS_MODELDESC_H

#include "llmopt/CostModel/Model.h"

#include "mlir/Support/LLVM.h"

namespace mlir::func {
class FuncOp;
}

namespace llmopt::llm {

/// Extracts the per-layer shapes and exact parameter counts the cost model
/// needs. Emits an error on the offending op and fails when a layer is not a
/// transformer block the planner can reason about (no attention, two MLPs).
mlir::FailureOr<cost::ModelDesc> extractModelDesc(mlir::func::FuncOp func);

} // namespace llmopt::llm

#endif // LLMOPT_DIALECT_LLM_ANALYSIS_MODELDESC_H
