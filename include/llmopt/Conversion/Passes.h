//===- Passes.h - conversions -----------------------------------*- C++ -*-===//

#ifndef LLMOPT_CONVERSION_PASSES_H
#define LLMOPT_CONVERSION_PASSES_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"
#include "mlir/Pass/Pass.h"

namespace llmopt {

#define GEN_PASS_DECL
#include "llmopt/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "llmopt/Conversion/Passes.h.inc"

} // namespace llmopt

#endif // LLMOPT_CONVERSION_PASSES_H
