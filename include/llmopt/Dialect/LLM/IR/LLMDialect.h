//===- LLMDialect.h - llm dialect -------------------------------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMDIALECT_H
#define LLMOPT_DIALECT_LLM_IR_LLMDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "llmopt/Dialect/LLM/IR/LLMOpsDialect.h.inc"

#endif // LLMOPT_DIALECT_LLM_IR_LLMDIALECT_H
