//===- Passes.h - exec dialect passes ---------------------------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_EXEC_TRANSFORMS_PASSES_H
#define LLMOPT_DIALECT_EXEC_TRANSFORMS_PASSES_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmopt::exec {

#define GEN_PASS_DECL
#include "llmopt/Dialect/Exec/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "llmopt/Dialect/Exec/Transforms/Passes.h.inc"

} // namespace llmopt::exec

#endif // LLMOPT_DIALECT_EXEC_TRANSFORMS_PASSES_H
