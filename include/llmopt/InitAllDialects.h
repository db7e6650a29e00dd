//===- InitAllDialects.h - dialects llm-opt knows ---------------*- C++ -*-===//

#ifndef LLMOPT_INITALLDIALECTS_H
#define LLMOPT_INITALLDIALECTS_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"
#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

namespace llmopt {

/// Our dialects and the upstream ones our pipelines produce.
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<llm::LLMDialect, exec::ExecDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
}

} // namespace llmopt

#endif // LLMOPT_INITALLDIALECTS_H
