//===- CudaSource.h - CUDA source of a plan's fused kernels -----*- C++ -*-===//

#ifndef LLMOPT_TARGET_PLAN_CUDASOURCE_H
#define LLMOPT_TARGET_PLAN_CUDASOURCE_H

#include "llmopt/Dialect/Exec/IR/ExecOps.h"

#include <string>

namespace llmopt {
/// kernels.cu for the distinct (by name) fused kernels of a plan.
std::string fusedKernelsCudaSource(llvm::ArrayRef<exec::FusedOp> fused);
} // namespace llmopt

#endif // LLMOPT_TARGET_PLAN_CUDASOURCE_H
