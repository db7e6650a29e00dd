//===- device_math.cuh - device math of every CUDA kernel -----------*- C++ -*-===//
//
// The activations and block reductions of the hand-written CUDA kernels
// (kernels/cuda, through common.cuh) and of the fused kernels llm-emit-plan
// generates into a plan's kernels.cu: lib/Target/Plan/CudaSource.cpp embeds
// this file's text at build time, so that the two cannot drift apart (they
// once differed, `__expf` against `expf`). Self-contained: CUDA's own headers
// only, nothing of this project.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_DEVICE_MATH_CUH
#define LLMOPT_KERNELS_DEVICE_MATH_CUH

#include <cuda_runtime.h>

namespace llmopt_device {

/// `v` reduced over the thread block with `op` (identity `init`), every
/// thread getting the result. Blocks of at most 1024 threads, a multiple of
/// 32; `red` is 32 floats of shared memory, free again on return.
template <typename Op>
__device__ __forceinline__ float blockReduce(float v, float *red, float init, Op op) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  float t = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : init;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1)
      t = op(t, __shfl_xor_sync(0xffffffffu, t, o));
  __syncthreads();
  if (threadIdx.x == 0)
    red[0] = t;
  __syncthreads();
  float r = red[0];
  __syncthreads();
  return r;
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float blockSum(float v, float *red) {
  return blockReduce(v, red, 0.0f, SumOp());
}

__device__ __forceinline__ float blockMax(float v, float *red) {
  return blockReduce(v, red, -INFINITY, MaxOp());
}

/// GeLU, exact (erf) or with the tanh approximation, and its derivative, as
/// the CPU reference kernels compute them (kernels/cpu/activation.cpp).
__device__ __forceinline__ float gelu(float x, bool tanhApprox) {
  if (tanhApprox)
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

__device__ __forceinline__ float geluGrad(float x, bool tanhApprox) {
  if (tanhApprox) {
    float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
  }
  return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) +
         x * 0.3989422804014327f * expf(-0.5f * x * x);
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

} // namespace llmopt_device

#endif // LLMOPT_KERNELS_DEVICE_MATH_CUH
