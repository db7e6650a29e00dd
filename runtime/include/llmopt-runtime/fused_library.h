//===- fused_library.h - the plan's generated fused kernels -----*- C++ -*-===//
//
// A plan directory's kernels.cu (llm-emit-plan's fused row-wise kernels)
// compiled by nvcc into a shared library and loaded, so that the CUDA
// backend runs each fused instruction as the one kernel the compiler
// generated for it. Built once per kernels.cu content and GPU architecture
// into a cache directory (LLMOPT_CACHE_DIR, else $XDG_CACHE_HOME/llm-opt,
// else ~/.cache/llm-opt), written under a temporary name and renamed, so
// that ranks sharing a file system may race harmlessly; `llm-run PLAN
// --compile-fused SM` builds it ahead of a job. nvcc: LLMOPT_NVCC, else
// $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, or the PATH's.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_FUSED_LIBRARY_H
#define LLMOPT_RUNTIME_FUSED_LIBRARY_H

#include <string>

namespace llmopt::runtime {

/// The kernel cache directory (LLMOPT_CACHE_DIR, else
/// $XDG_CACHE_HOME/llm-opt, else ~/.cache/llm-opt), created if missing;
/// empty when it cannot be.
std::string kernelCacheDirectory();

class FusedLibrary {
public:
  /// kernels.cu's launcher: cudaError_t NAME(const void *const *ins,
  /// void *const *outs, long long rows, long long cols, cudaStream_t).
  using Launcher = int (*)(const void *const *ins, void *const *outs, long long rows,
                           long long cols, void *stream);

  FusedLibrary() = default;
  FusedLibrary(const FusedLibrary &) = delete;
  FusedLibrary &operator=(const FusedLibrary &) = delete;
  ~FusedLibrary();

  /// Compiles (unless cached) and loads PLAN_DIR/kernels.cu for `sm`
  /// (compute capability as digits, e.g. "80", "90"); the file must have
  /// `sha256` (the plan's checksums.sha256 entry).
  bool load(const std::string &planDir, const std::string &sm, const std::string &sha256,
            std::string &error);
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
