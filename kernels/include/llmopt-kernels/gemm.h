//===- gemm.h - linear layers through cuBLASLt ---------------------*- C++ -*-===//
//
// The GEMMs of `linear_fwd` / `linear_bwd` on the GPU: row-major activations
// [n, in] and weights [out, in] (or [in, out] when `transposed`, GPT-2's
// Conv1D), fp32 accumulation, the bias folded in as a cuBLASLt epilogue.
// Weight gradients are fp32 and accumulate (beta = 1), as the CPU
// references do. The algorithm for each problem is chosen once by
// cuBLASLt's heuristic and cached.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_GEMM_H
#define LLMOPT_KERNELS_GEMM_H

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace llmopt::kernels::cuda {

struct LinearShape {
  int64_t n = 1, in = 1, out = 1;
  bool transposed = false;
  /// Storage type of activations and weights (CUDA_R_32F or CUDA_R_16BF).
  cudaDataType_t type = CUDA_R_32F;
};

class Gemm {
public:
  /// A cuBLASLt handle and a workspace on the current device, or null with
  /// `error` set.
  static std::unique_ptr<Gemm> create(std::string &error);
  virtual ~Gemm() = default;
  /// y = x W^T (+ bias). With `preActivation` (the GeLU epilogue,
  /// `linear_fwd`'s `gelu_tanh`): preActivation = x W^T (+ bias) and y its
  /// tanh-approximated GeLU, in one GEMM (cuBLASLt's GELU_AUX epilogue).
  virtual bool linearForward(const void *x, const void *w, const void *bias, void *y,
                             const LinearShape &s, cudaStream_t stream, std::string &error,
                             void *preActivation = nullptr) = 0;
  /// dx = dy W (written; skipped when null), dW += dy^T x (fp32).
  virtual bool linearBackward(const void *dy, const void *x, const void *w, void *dx,
                              float *dw, const LinearShape &s, cudaStream_t stream,
                              std::string &error) = 0;
  /// fp8 (sm_89 / sm_90): y = (xq wq^T) * xScaleInv * wScaleInv (`bias`
  /// must be null: cuBLASLt's fp8 bias epilogue needs a bf16 bias),
  /// with xq [n, in] and wq [out, in] E4M3 bytes from quantizeFp8 and the
  /// scales device pointers; y in `s.type`. Weights must be [out, in]
  /// (cuBLASLt's fp8 GEMMs take the "TN" layout only).
  virtual bool linearForwardFp8(const uint8_t *xq, const uint8_t *wq, const float *xScaleInv,
                                const float *wScaleInv, const void *bias, void *y,
                                const LinearShape &s, cudaStream_t stream,
                                std::string &error) = 0;
  /// Problems whose algorithm the heuristic has chosen (the cache's size).
  virtual size_t cachedAlgorithms() const = 0;
};

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_GEMM_H
