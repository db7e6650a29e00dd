//===- cudnn_attention.h - attention through cuDNN's fused SDPA -*- C++ -*-===//
//
// bf16 attention forward and backward with cuDNN's fused (flash) scaled
// dot-product attention, through the cuDNN frontend's graph API: the same
// contract as attentionForward / attentionBackward in cuda.h (q [b, s, h, d],
// k / v [b, s, hk, d], the log-sum-exps [b, h, s] fp32, dk / dv written).
// One graph per shape and direction, built on first use and cached.
// Causal (top-left) or unmasked attention; no sliding window (the plans
// with one keep the GEMM attention). Built only where the cuDNN frontend's
// headers and libcudnn are found (LLMOPT_HAVE_CUDNN); checked against the
// CPU reference on an H100 (Cuda.AttentionCudnn), llm-run's default for
// bf16 plans (LLMOPT_CUDA_ATTENTION=gemm chooses the GEMM attention).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_CUDNN_ATTENTION_H
#define LLMOPT_KERNELS_CUDNN_ATTENTION_H

#include "llmopt-kernels/cuda.h"

#include <memory>
#include <string>

namespace llmopt::kernels::cuda {

class CudnnAttention {
public:
  /// A cuDNN handle on the current device, or null with `error` set.
  static std::unique_ptr<CudnnAttention> create(std::string &error);
  virtual ~CudnnAttention() = default;
  /// Whether these dimensions are ones this path takes (head_dim a multiple
  /// of 8 up to 128, kv heads dividing heads, no window).
  static bool supports(const AttentionDims &d);
  virtual bool forward(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *out, float *lse,
                       const AttentionDims &d, cudaStream_t stream, std::string &error) = 0;
  virtual bool backward(const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                        const bf16 *out, const float *lse, bf16 *dq, bf16 *dk, bf16 *dv,
                        const AttentionDims &d, cudaStream_t stream, std::string &error) = 0;
};

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_CUDNN_ATTENTION_H
