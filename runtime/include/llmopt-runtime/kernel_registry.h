//===- kernel_registry.h - what the runtime knows of each kernel ---*- C++ -*-===//
//
// One definition per kernel of the ABI (llmopt-kernels/abi.h gives its name,
// buffer counts, typed parameters and whether it is row-wise): the check of a
// call's buffers against each other, run when a plan is loaded, and the cost
// model of --profile. Each backend keeps its implementations in its own table
// by KernelId (CpuExecutor::kernelTable: every kernel; the CUDA backend's:
// those it runs, the others refused before anything is allocated). Adding a
// kernel: docs/adding-an-op.md.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_KERNEL_REGISTRY_H
#define LLMOPT_RUNTIME_KERNEL_REGISTRY_H

#include "llmopt-kernels/abi.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::runtime {

struct Instruction;

struct KernelDef {
  /// Whether the call's buffers and parameters agree the way the kernels
  /// index them; `why` says what does not. Never null.
  using CheckFn = bool (*)(const Instruction &ins, std::string &why);
  /// --profile: the shape the call's time is grouped by and its FLOPs;
  /// null for a memory-bound kernel (grouped by name, bytes only).
  using CostFn = void (*)(const Instruction &ins, std::vector<int64_t> &dims, double &flops);

  const kernels::KernelInfo *info = nullptr;
  CheckFn check = nullptr;
  CostFn cost = nullptr;
};

/// The definition of kernel `id`.
const KernelDef &kernelDef(kernels::KernelId id);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_KERNEL_REGISTRY_H
