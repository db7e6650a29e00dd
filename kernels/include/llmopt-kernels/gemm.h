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
  /// The row pitch, in elements, of y (forward) or dy (backward): 0 for
  /// `out`, or linearPaddedOut(out, type) where `out` is odd that way: y is
  /// then written in padded rows without a copy, and dy is read from padded
  /// rows whose padding the caller has zeroed.
  int64_t ld = 0;
};

/// `out` rounded up to a multiple of 128 where rows of `out` elements of
/// `type` are not a multiple of 16 bytes (such linears run on zero-padded
/// weights: cuBLASLt ran GPT-2's LM head, out = 50257, at a ninth of the
/// speed of out = 50304 on an H100), else `out`.
int64_t linearPaddedOut(int64_t out, cudaDataType_t type);

/// A strided batched product of row-major matrices:
///   C[i] = alpha op(A[i]) op(B[i]) + beta C[i],  i < batch,
/// op(A) m x k (A stored m x k, or k x m when transA), op(B) k x n (B stored
/// k x n, or n x k when transB); leading dimensions and batch strides in
/// elements. A and B are `ab`, C is `c` (CUDA_R_32F for an fp32 result of
/// 16-bit inputs); fp32 accumulation.
struct BatchedShape {
  int64_t m = 1, n = 1, k = 1;
  bool transA = false, transB = false;
  int64_t lda = 1, ldb = 1, ldc = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0;
  int64_t batch = 1;
  cudaDataType_t ab = CUDA_R_32F, c = CUDA_R_32F;
  float alpha = 1, beta = 0;
};

/// cuBLASLt's version (cublasLtGetVersion), to name algorithm caches by.
size_t cublasLtVersion();

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
  virtual bool linearBackward(const void *dy, const void *x, const void *w, void *dx, float *dw,
                              const LinearShape &s, cudaStream_t stream, std::string &error) = 0;
  /// fp8 (sm_89 / sm_90): y = (xq wq^T) * xScaleInv * wScaleInv (`bias`
  /// must be null: cuBLASLt's fp8 bias epilogue needs a bf16 bias),
  /// with xq [n, in] and wq [out, in] E4M3 bytes from quantizeFp8 and the
  /// scales device pointers; y in `s.type`. Weights must be [out, in]
  /// (cuBLASLt's fp8 GEMMs take the "TN" layout only).
  virtual bool linearForwardFp8(const uint8_t *xq, const uint8_t *wq, const float *xScaleInv,
                                const float *wScaleInv, const void *bias, void *y,
                                const LinearShape &s, cudaStream_t stream, std::string &error) = 0;
  /// fp8 (sm_89 / sm_90): y [n, out] = (aq bq^T) * aScaleInv * bScaleInv
  /// (+ beta y), with aq [n, k] and bq [out, k] fp8 bytes from quantizeFp8
  /// (E4M3, or E5M2 for at most one of them), y in `yType` (16-bit, or
  /// fp32 for weight gradients): cuBLASLt's TN layout, so a backward
  /// product reads transposed copies (quantizeFp8Transposed).
  virtual bool fp8Product(const uint8_t *aq, bool aE5M2, const uint8_t *bq, bool bE5M2,
                          const float *aScaleInv, const float *bScaleInv, void *y, int64_t n,
                          int64_t k, int64_t out, cudaDataType_t yType, float beta,
                          cudaStream_t stream, std::string &error) = 0;
  /// The strided batched product above (attention's QK^T, PV and their
  /// gradients).
  virtual bool batched(const void *a, const void *b, void *c, const BatchedShape &s,
                       cudaStream_t stream, std::string &error) = 0;
  /// Problems whose algorithm the heuristic has chosen (the cache's size).
  virtual size_t cachedAlgorithms() const = 0;
  /// The heuristic's choices kept across runs in a file (the caller names it
  /// per GPU and cuBLASLt version): `loadAlgorithms` adds a file's entries
  /// (false, and nothing added, when it is missing or not such a file);
  /// `saveAlgorithms` writes every entry (a temporary file renamed).
  virtual bool loadAlgorithms(const std::string &path) = 0;
  virtual bool saveAlgorithms(const std::string &path, std::string &error) const = 0;
};

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_GEMM_H
