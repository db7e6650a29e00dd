//===- Passes.h - llm dialect passes ----------------------------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_H
#define LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_H

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "mlir/Pass/Pass.h"

namespace llmopt::llm {

#define GEN_PASS_DECL
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"

} // namespace llmopt::llm

#endif // LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_H
