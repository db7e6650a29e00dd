//===- common.cuh - helpers shared by the CUDA kernel files ---------*- C++ -*-===//
//
// Loads and stores that compute in fp32 whatever the storage type, the
// grid-stride loop and its grid size, and block-wide reductions (blocks of
// at most 1024 threads, a multiple of 32; `red` is 32 floats of shared
// memory, free again when the reduction returns).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_CUDA_COMMON_CUH
#define LLMOPT_KERNELS_CUDA_COMMON_CUH

#include "llmopt-kernels/cuda.h"

#include <cstdint>

namespace llmopt::kernels::cuda {

constexpr int kThreads = 256;

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16(v); }

/// Blocks of kThreads for a grid-stride loop over `count` elements.
inline unsigned gridFor(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return unsigned(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

#define GRID_STRIDE(i, n)                                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                \
       i += int64_t(blockDim.x) * gridDim.x)

/// `v` reduced over the block with `op` (identity `init`), every thread
/// getting the result.
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

__device__ __forceinline__ float blockSum(float v, float *red) {
  return blockReduce(v, red, 0.0f, [](float a, float b) { return a + b; });
}

__device__ __forceinline__ float blockMax(float v, float *red) {
  return blockReduce(v, red, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
}


/// Sum over the block by a tree in `red` (blockDim.x entries of shared
/// memory, a power of two): the same order every run. The result is in
/// every thread.
template <typename T> __device__ __forceinline__ T blockTreeSum(T v, T *red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (int(threadIdx.x) < o)
      red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  T r = red[0];
  __syncthreads();
  return r;
}

/// log sum_j exp(row[j]) in one pass over the row: each thread keeps a
/// running maximum and a sum scaled to it (rescaled when the maximum grows),
/// then the block combines them at the block's maximum.
template <typename T>
__device__ float rowLogSumExp(const T *row, int64_t vocab, float *red) {
  float m = -INFINITY, s = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float v = ld(row + j);
    if (v == -INFINITY)
      continue;
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  float top = blockMax(m, red);
  float total = blockSum(m == -INFINITY ? 0.0f : s * expf(m - top), red);
  return top + logf(total);
}

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_CUDA_COMMON_CUH
