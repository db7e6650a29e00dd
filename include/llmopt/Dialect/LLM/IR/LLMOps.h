//===- LLMOps.h - llm dialect operations ------------------------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMOPS_H
#define LLMOPT_DIALECT_LLM_IR_LLMOPS_H

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMInterfaces.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llmopt/Dialect/LLM/IR/LLMEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMAttrs.h.inc"

#define GET_OP_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMOps.h.inc"

#endif // LLMOPT_DIALECT_LLM_IR_LLMOPS_H
