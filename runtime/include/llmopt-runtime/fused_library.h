//===- fused_library.h - the plan's generated fused kernels -----*- C++ -*-===//
//
// The CUDA source of a plan's fused row-wise kernels, generated from
// plan.json's description of them (fused_source.h: the text llm-emit-plan
// writes as kernels.cu, for reading; the directory's file is never read),
// compiled by nvcc into a shared library and loaded, so that the CUDA
// backend runs each fused instruction as one kernel. Built once per source
// and GPU architecture into a cache directory (LLMOPT_CACHE_DIR, else
// $XDG_CACHE_HOME/llm-opt, else ~/.cache/llm-opt), written under a
// temporary name and renamed, so that ranks sharing a file system may race
// harmlessly; `llm-run PLAN --compile-fused SM` builds it ahead of a job.
// nvcc: LLMOPT_NVCC, else $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, or
// the PATH's.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_FUSED_LIBRARY_H
#define LLMOPT_RUNTIME_FUSED_LIBRARY_H

#include <set>
#include <string>

namespace llmopt::runtime {

struct Plan;

/// The CUDA source of the plan's fused kernels (every program's), generated
/// from plan.json's description of each fused instruction, and their names
/// (none: an empty source). False with `error` for a description the
/// generator does not take. In LLMOptRuntime: no CUDA needed.
bool fusedKernelsSource(const Plan &plan, std::string &source, std::set<std::string> &names,
                        std::string &error);

/// The kernel cache directory (LLMOPT_CACHE_DIR, else
/// $XDG_CACHE_HOME/llm-opt, else ~/.cache/llm-opt), created if missing;
/// empty when it cannot be.
std::string kernelCacheDirectory();

class FusedLibrary {
public:
  /// A fused kernel's launcher: cudaError_t NAME(const void *const *ins,
  /// void *const *outs, long long rows, long long cols, cudaStream_t).
  using Launcher = int (*)(const void *const *ins, void *const *outs, long long rows,
                           long long cols, void *stream);

  FusedLibrary() = default;
  FusedLibrary(const FusedLibrary &) = delete;
  FusedLibrary &operator=(const FusedLibrary &) = delete;
  ~FusedLibrary();

  /// Generates the plan's fused kernels (fusedKernelsSource), compiles them
  /// (unless cached) for `sm` (compute capability as digits, e.g. "80",
  /// "90") and loads them.
  bool load(const Plan &plan, const std::string &sm, std::string &error);
  /// The launcher of fused kernel `name`, or null.
  Launcher find(const std::string &name) const;
  /// The shared library loaded.
  const std::string &path() const { return file; }

private:
  void *handle = nullptr;
  std::string file;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_FUSED_LIBRARY_H
