//===- LLMDialect.cpp - llm dialect ---------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

using namespace mlir;
using namespace llmopt::llm;

#include "llmopt/Dialect/LLM/IR/LLMOpsDialect.cpp.inc"

void LLMDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "llmopt/Dialect/LLM/IR/LLMOps.cpp.inc"
      >();
}
