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
#include "llmopt-kernels/device_math.cuh"

#include <cstdint>

namespace llmopt::kernels::cuda {

constexpr int kThreads = 256;

/// cuBLASLt's name of a storage type.
template <typename T> cudaDataType_t typeOf();
template <> inline cudaDataType_t typeOf<float>() { return CUDA_R_32F; }
template <> inline cudaDataType_t typeOf<bf16>() { return CUDA_R_16BF; }

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16(v); }

/// Blocks of kThreads for a grid-stride loop over `count` elements.
inline unsigned gridFor(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return unsigned(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                        \
       i += int64_t(blockDim.x) * gridDim.x)

// Block reductions: the device math every CUDA kernel shares, generated
// fused kernels included.
using llmopt_device::blockMax;
using llmopt_device::blockReduce;
using llmopt_device::blockSum;

/// An elementwise map over `n` elements: NI inputs and NO outputs of T,
/// computed in fp32 by `op(const float *in, float *out)`.
template <typename T, int NI, int NO> struct MapArgs {
  const T *in[NI];
  T *out[NO];
};

/// V elements per thread and step, read and written as one 16-byte word
/// each when V > 1 (then every pointer is 16-byte aligned; the tail of
/// fewer than V elements is done element by element).
template <int V, typename T, int NI, int NO, typename Op>
__global__ void mapKernel(MapArgs<T, NI, NO> a, int64_t n, Op op) {
  struct alignas(16) Word {
    T e[V];
  };
  int64_t words = n / V;
  GRID_STRIDE(w, words) {
    float x[NI][V], y[NO][V];
#pragma unroll
    for (int k = 0; k < NI; ++k) {
      Word raw = reinterpret_cast<const Word *>(a.in[k])[w];
#pragma unroll
      for (int v = 0; v < V; ++v)
        x[k][v] = ld(&raw.e[v]);
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float xi[NI], yo[NO];
#pragma unroll
      for (int k = 0; k < NI; ++k)
        xi[k] = x[k][v];
      op(xi, yo);
#pragma unroll
      for (int k = 0; k < NO; ++k)
        y[k][v] = yo[k];
    }
#pragma unroll
    for (int k = 0; k < NO; ++k) {
      Word raw;
#pragma unroll
      for (int v = 0; v < V; ++v)
        st(&raw.e[v], y[k][v]);
      reinterpret_cast<Word *>(a.out[k])[w] = raw;
    }
  }
  if (V > 1 && blockIdx.x == 0)
    for (int64_t i = words * V + threadIdx.x; i < n; i += blockDim.x) {
      float xi[NI], yo[NO];
      for (int k = 0; k < NI; ++k)
        xi[k] = ld(a.in[k] + i);
      op(xi, yo);
      for (int k = 0; k < NO; ++k)
        st(a.out[k] + i, yo[k]);
    }
}

/// Launches mapKernel on 16-byte words where every pointer allows, else
/// element by element.
template <typename T, int NI, int NO, typename Op>
cudaError_t launchMap(const MapArgs<T, NI, NO> &a, int64_t n, Op op, cudaStream_t s) {
  if (n == 0)
    return cudaSuccess;
  constexpr int V = 16 / sizeof(T);
  bool aligned = true;
  for (const T *p : a.in)
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  for (T *p : a.out)
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (aligned && n >= V)
    mapKernel<V><<<gridFor(n / V), kThreads, 0, s>>>(a, n, op);
  else
    mapKernel<1><<<gridFor(n), kThreads, 0, s>>>(a, n, op);
  return cudaGetLastError();
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

/// Calls f(j, v) for each element j < count of `row` with v its value in
/// fp32, the block's threads sharing the work: the elements before the first
/// 16-byte boundary one by one, then 16-byte words (V elements a load),
/// then the tail. `f` sees a word's V elements in a row (calls with `word`
/// true; `wordDone(maxOfWord)` before them, for online reductions).
template <typename T, typename Begin, typename F>
__device__ __forceinline__ void forRow(const T *row, int64_t count, Begin wordBegin, F f) {
  constexpr int V = 16 / sizeof(T);
  struct alignas(16) Word {
    T e[V];
  };
  int64_t head = int64_t((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T));
  if (reinterpret_cast<uintptr_t>(row) % sizeof(T) != 0 || head > count)
    head = count;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    f(j, ld(row + j));
  int64_t words = (count - head) / V;
  const Word *w = reinterpret_cast<const Word *>(row + head);
  for (int64_t k = threadIdx.x; k < words; k += blockDim.x) {
    Word raw = w[k];
    float v[V];
#pragma unroll
    for (int i = 0; i < V; ++i)
      v[i] = ld(&raw.e[i]);
    wordBegin(v);
#pragma unroll
    for (int i = 0; i < V; ++i)
      f(head + k * V + i, v[i]);
  }
  for (int64_t j = head + words * V + threadIdx.x; j < count; j += blockDim.x)
    f(j, ld(row + j));
}

/// log sum_j exp(row[j]) in one pass over the row: each thread keeps a
/// running maximum and a sum scaled to it (rescaled when the maximum grows,
/// once per 16-byte word), then the block combines them at the block's
/// maximum.
template <typename T> __device__ float rowLogSumExp(const T *row, int64_t vocab, float *red) {
  float m = -INFINITY, s = 0;
  auto raise = [&](float top) {
    if (top > m) {
      s *= expf(m - top); // 0 while m is -inf (s is 0 then)
      m = top;
    }
  };
  forRow(
      row, vocab,
      [&](const float *v) {
        float top = v[0];
        for (int i = 1; i < int(16 / sizeof(T)); ++i)
          top = fmaxf(top, v[i]);
        raise(top);
      },
      [&](int64_t, float v) {
        if (v == -INFINITY)
          return;
        raise(v);
        s += expf(v - m);
      });
  float top = blockMax(m, red);
  float total = blockSum(m == -INFINITY ? 0.0f : s * expf(m - top), red);
  return top + logf(total);
}

} // namespace llmopt::kernels::cuda

#endif // LLMOPT_KERNELS_CUDA_COMMON_CUH
