//===- CudaSource.h - CUDA source of a plan's fused kernels -----*- C++ -*-===//

#ifndef LLMOPT_TARGET_PLAN_CUDASOURCE_H
#define LLMOPT_TARGET_PLAN_CUDASOURCE_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"

#include <string>

namespace llmopt {
/// kernels.cu for the distinct (by name) fused kernels of a plan, as the
/// runtime generates it from plan.json (llmopt-runtime/fused_source.h);
/// an error on the first op for a description the generator refuses.
mlir::LogicalResult fusedKernelsCudaSource(llvm::ArrayRef<exec::FusedOp> fused,
                                           std::string &source);
} // namespace llmopt

#endif // LLMOPT_TARGET_PLAN_CUDASOURCE_H
