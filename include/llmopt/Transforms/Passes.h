//===- Passes.h - lowering passes -------------------------------*- C++ -*-===//

#ifndef LLMOPT_TRANSFORMS_PASSES_H
#define LLMOPT_TRANSFORMS_PASSES_H

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Pass/Pass.h"

namespace llmopt {

#define GEN_PASS_DECL
#include "llmopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "llmopt/Transforms/Passes.h.inc"

} // namespace llmopt

#endif // LLMOPT_TRANSFORMS_PASSES_H
