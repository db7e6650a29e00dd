//===- Passes.h - passes that write a target --------------------*- C++ -*-===//

#ifndef LLMOPT_TARGET_PASSES_H
#define LLMOPT_TARGET_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace llmopt {

#define GEN_PASS_DECL
#include "llmopt/Target/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "llmopt/Target/Passes.h.inc"

} // namespace llmopt

#endif // LLMOPT_TARGET_PASSES_H
