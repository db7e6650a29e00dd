//===- ExecOps.h - exec dialect ---------------------------------*- C++ -*-===//

#ifndef LLMOPT_DIALECT_EXEC_IR_EXECOPS_H
#define LLMOPT_DIALECT_EXEC_IR_EXECOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"

#include "llmopt/Dialect/Exec/IR/ExecDialect.h.inc"
#include "llmopt/Dialect/Exec/IR/ExecEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "llmopt/Dialect/Exec/IR/ExecAttrs.h.inc"

#define GET_OP_CLASSES
#include "llmopt/Dialect/Exec/IR/ExecOps.h.inc"

#endif // LLMOPT_DIALECT_EXEC_IR_EXECOPS_H
