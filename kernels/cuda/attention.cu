//===- attention.cu - attention baseline: one thread per query row --------===//
//
// The CPU reference's algorithm on the GPU (scores against every visible
// key, log-sum-exp, weighted values; backward from the saved log-sum-exp),
// one thread per (batch, head, query): correct for every mask the plans use
// (context parallelism's positions included: the CUDA backend's ring
// attention runs on it) and slow. The CUDA backend's speed needs a flash-style kernel (or cuDNN's
// fused SDPA); this one is what those are tested against on the device.
//
//===----------------------------------------------------------------------===//

#include "common.cuh"

namespace llmopt::kernels::cuda {
namespace {

constexpr int kMaxHeadDim = 256;

struct Rows {
  AttentionDims d;
  __device__ int64_t keyCount() const { return d.kvSeq > 0 ? d.kvSeq : d.seq; }
  __device__ int64_t q(int64_t b, int64_t s, int64_t h) const {
    return ((b * d.seq + s) * d.heads + h) * d.headDim;
  }
  __device__ int64_t kv(int64_t b, int64_t s, int64_t h) const {
    return ((b * keyCount() + s) * d.kvHeads + h) * d.headDim;
  }
  /// The keys query i may see, by its position among them (with the keys'
  /// own positions: all of them, filtered by `visible`).
  __device__ void keys(int64_t i, int64_t &first, int64_t &last) const {
    int64_t pos = d.qPos ? d.qPos[i] : i;
    first = 0;
    last = d.causal && !d.kPos ? pos : keyCount() - 1;
    if (d.causal && d.window > 0 && !d.kPos && pos - d.window + 1 > 0)
      first = pos - d.window + 1;
  }
  __device__ bool visible(int64_t i, int64_t j) const {
    if (!d.kPos || !d.causal)
      return true;
    int64_t qp = d.qPos ? d.qPos[i] : i, kp = d.kPos[j];
    return kp <= qp && (d.window <= 0 || kp > qp - d.window);
  }
};

template <typename T>
__global__ void attnFwdKernel(const T *q, const T *k, const T *v, T *out, float *lse,
                              AttentionDims d) {
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= d.batch * d.heads * d.seq)
    return;
  int64_t i = t % d.seq, h = (t / d.seq) % d.heads, b = t / (d.seq * d.heads);
  int64_t kvh = h / (d.heads / d.kvHeads);
  Rows ix{d};
  const T *qi = q + ix.q(b, i, h);
  int64_t first, last;
  ix.keys(i, first, last);
  float acc[kMaxHeadDim];
  for (int64_t c = 0; c < d.headDim; ++c)
    acc[c] = 0;
  float m = -INFINITY, sum = 0;
  for (int64_t j = first; j <= last; ++j) {
    if (!ix.visible(i, j))
      continue;
    const T *kj = k + ix.kv(b, j, kvh), *vj = v + ix.kv(b, j, kvh);
    float s = 0;
    for (int64_t c = 0; c < d.headDim; ++c)
      s += ld(qi + c) * ld(kj + c);
    s *= d.scale;
    // Online softmax: rescale what was summed when the maximum grows.
    float mNew = fmaxf(m, s), r = expf(m - mNew), p = expf(s - mNew);
    sum = sum * r + p;
    for (int64_t c = 0; c < d.headDim; ++c)
      acc[c] = acc[c] * r + p * ld(vj + c);
    m = mNew;
  }
  T *o = out + ix.q(b, i, h);
  for (int64_t c = 0; c < d.headDim; ++c)
    st(o + c, sum > 0 ? acc[c] / sum : 0.0f);
  lse[(b * d.heads + h) * d.seq + i] = sum > 0 ? m + logf(sum) : -INFINITY;
}

template <typename T>
__global__ void attnBwdKernel(const T *dout, const T *q, const T *k, const T *v, const T *out,
                              const float *lse, T *dq, float *dk, float *dv, AttentionDims d) {
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= d.batch * d.heads * d.seq)
    return;
  int64_t i = t % d.seq, h = (t / d.seq) % d.heads, b = t / (d.seq * d.heads);
  int64_t kvh = h / (d.heads / d.kvHeads);
  Rows ix{d};
  const T *qi = q + ix.q(b, i, h), *go = dout + ix.q(b, i, h), *oi = out + ix.q(b, i, h);
  float l = lse[(b * d.heads + h) * d.seq + i], D = 0;
  for (int64_t c = 0; c < d.headDim; ++c)
    D += ld(go + c) * ld(oi + c);
  float dqi[kMaxHeadDim];
  for (int64_t c = 0; c < d.headDim; ++c)
    dqi[c] = 0;
  int64_t first, last;
  ix.keys(i, first, last);
  for (int64_t j = first; j <= last; ++j) {
    if (!ix.visible(i, j))
      continue;
    const T *kj = k + ix.kv(b, j, kvh), *vj = v + ix.kv(b, j, kvh);
    float s = 0, dp = 0;
    for (int64_t c = 0; c < d.headDim; ++c) {
      s += ld(qi + c) * ld(kj + c);
      dp += ld(go + c) * ld(vj + c);
    }
    float p = expf(s * d.scale - l), ds = p * (dp - D);
    float *dkj = dk + ix.kv(b, j, kvh), *dvj = dv + ix.kv(b, j, kvh);
    for (int64_t c = 0; c < d.headDim; ++c) {
      dqi[c] += d.scale * ds * ld(kj + c);
      atomicAdd(dkj + c, d.scale * ds * ld(qi + c));
      atomicAdd(dvj + c, p * ld(go + c));
    }
  }
  T *dqo = dq + ix.q(b, i, h);
  for (int64_t c = 0; c < d.headDim; ++c)
    st(dqo + c, dqi[c]);
}

__global__ void mergeKernel(float *out, float *lse, const float *ob, const float *lb,
                            AttentionDims d) {
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= d.batch * d.heads * d.seq)
    return;
  int64_t i = t % d.seq, h = (t / d.seq) % d.heads, b = t / (d.seq * d.heads);
  float l0 = lse[t], l1 = lb[t];
  if (l1 == -INFINITY)
    return;
  float m = fmaxf(l0, l1), l = m + logf(expf(l0 - m) + expf(l1 - m));
  float wa = expf(l0 - l), wb = expf(l1 - l);
  int64_t o = ((b * d.seq + i) * d.heads + h) * d.headDim;
  for (int64_t c = 0; c < d.headDim; ++c)
    out[o + c] = out[o + c] * wa + ob[o + c] * wb;
  lse[t] = l;
}

template <typename T> __global__ void castKernel(const float *x, T *y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    st(y + i, x[i]);
}

unsigned blocksFor(int64_t n) { return unsigned((n + 127) / 128 > 0 ? (n + 127) / 128 : 1); }

} // namespace

#define LLMOPT_CUDA_DEFINE_ATTENTION(T)                                                            \
  cudaError_t attentionForward(const T *q, const T *k, const T *v, T *out, float *lse,             \
                               const AttentionDims &d, cudaStream_t s) {                           \
    if (d.headDim > kMaxHeadDim || d.heads % d.kvHeads)                                            \
      return cudaErrorInvalidValue;                                                                \
    attnFwdKernel<<<blocksFor(d.batch *d.heads *d.seq), 128, 0, s>>>(q, k, v, out, lse, d);        \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t attentionBackward(const T *dout, const T *q, const T *k, const T *v, const T *out,   \
                                const float *lse, T *dq, T *dk, T *dv, float *scratch,             \
                                const AttentionDims &d, cudaStream_t s) {                          \
    if (d.headDim > kMaxHeadDim || d.heads % d.kvHeads)                                            \
      return cudaErrorInvalidValue;                                                                \
    int64_t kvCount = d.batch * (d.kvSeq > 0 ? d.kvSeq : d.seq) * d.kvHeads * d.headDim;           \
    float *dk32 = scratch, *dv32 = scratch + kvCount;                                              \
    if (cudaError_t e = cudaMemsetAsync(scratch, 0, 2 * kvCount * sizeof(float), s))               \
      return e;                                                                                    \
    attnBwdKernel<<<blocksFor(d.batch *d.heads *d.seq), 128, 0, s>>>(dout, q, k, v, out, lse, dq,  \
                                                                     dk32, dv32, d);               \
    castKernel<<<blocksFor(kvCount), 128, 0, s>>>(dk32, dk, kvCount);                              \
    castKernel<<<blocksFor(kvCount), 128, 0, s>>>(dv32, dv, kvCount);                              \
    return cudaGetLastError();                                                                     \
  }
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DEFINE_ATTENTION)
#undef LLMOPT_CUDA_DEFINE_ATTENTION

cudaError_t attentionMerge(float *out, float *lse, const float *ob, const float *lb,
                           const AttentionDims &d, cudaStream_t s) {
  mergeKernel<<<blocksFor(d.batch * d.heads * d.seq), 128, 0, s>>>(out, lse, ob, lb, d);
  return cudaGetLastError();
}

} // namespace llmopt::kernels::cuda
