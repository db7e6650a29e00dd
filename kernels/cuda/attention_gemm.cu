//===- attention_gemm.cu - attention as batched GEMMs and row kernels -----===//
//
// Attention with its score matrices materialized, chunk by chunk of
// (batch, head) pairs: heads are packed to [b, h, s, d] (K and V repeated
// over each group of query heads), S = scale Q K^T and O = P V are strided
// batched cuBLASLt products, and the masked softmax (log-sum-exp kept for
// the backward) is a row kernel. The backward rebuilds P from S and the
// log-sum-exp, then dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)),
// dQ = scale dS K, dK = scale dS^T Q, and sums dK, dV over each group.
// Exact (the same algorithm as the CPU reference up to summation order);
// the causal half of S is computed and masked, not skipped. The tensor
// cores do the products; the cost over a fused (flash) kernel is the
// S / P round trips through memory, bounded by kChunkBytes of scores.
//
//===----------------------------------------------------------------------===//

#include "common.cuh"
#include "llmopt-kernels/gemm.h"

#include <algorithm>

namespace llmopt::kernels::cuda {
namespace {

constexpr int64_t kChunkBytes = int64_t(1) << 30; // fp32 scores per chunk at most

/// Keys row i of a (batch, head) sees: [first, last].
__device__ __forceinline__ void visible(const AttentionDims &d, int64_t i, int64_t &first,
                                        int64_t &last) {
  first = 0;
  last = d.causal ? i : d.seq - 1;
  if (d.causal && d.window > 0 && i - d.window + 1 > 0)
    first = i - d.window + 1;
}

/// xt[((b H + h) s + i) d + c] = x[((b s + i) srcHeads + h / group) d + c].
template <typename T>
__global__ void packKernel(const T *x, T *xt, int64_t batch, int64_t seq, int64_t srcHeads,
                           int64_t group, int64_t hd) {
  int64_t heads = srcHeads * group, n = batch * heads * seq * hd;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(blockDim.x) * gridDim.x) {
    int64_t c = t % hd, i = (t / hd) % seq, h = (t / (hd * seq)) % heads,
            b = t / (hd * seq * heads);
    xt[t] = x[((b * seq + i) * srcHeads + h / group) * hd + c];
  }
}

/// x[((b s + i) H + h) d + c] = xt[((b H + h) s + i) d + c].
template <typename T>
__global__ void unpackKernel(const T *xt, T *x, int64_t batch, int64_t seq, int64_t heads,
                             int64_t hd) {
  int64_t n = batch * heads * seq * hd;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(blockDim.x) * gridDim.x) {
    int64_t c = t % hd, h = (t / hd) % heads, i = (t / (hd * heads)) % seq,
            b = t / (hd * heads * seq);
    x[t] = xt[((b * heads + h) * seq + i) * hd + c];
  }
}

/// K / V gradients: the packed per-query-head parts summed over each group.
template <typename T>
__global__ void groupSumKernel(const float *xt, T *x, int64_t batch, int64_t seq, int64_t kvHeads,
                               int64_t group, int64_t hd) {
  int64_t n = batch * seq * kvHeads * hd, heads = kvHeads * group;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(blockDim.x) * gridDim.x) {
    int64_t c = t % hd, j = (t / hd) % kvHeads, i = (t / (hd * kvHeads)) % seq,
            b = t / (hd * kvHeads * seq);
    float s = 0;
    for (int64_t r = 0; r < group; ++r)
      s += xt[((b * heads + j * group + r) * seq + i) * hd + c];
    st(x + t, s);
  }
}

/// One block per score row: the masked softmax P and its log-sum-exp.
template <typename T>
__global__ void softmaxKernel(const float *S, T *P, float *lse, int64_t rowBase, AttentionDims d) {
  __shared__ float red[32];
  int64_t r = blockIdx.x, g = rowBase + r, i = g % d.seq, first, last;
  visible(d, i, first, last);
  const float *row = S + r * d.seq;
  T *p = P + r * d.seq;
  float m = -INFINITY;
  for (int64_t j = first + threadIdx.x; j <= last; j += blockDim.x)
    m = fmaxf(m, row[j]);
  m = blockMax(m, red);
  float sum = 0;
  for (int64_t j = first + threadIdx.x; j <= last; j += blockDim.x)
    sum += expf(row[j] - m);
  sum = blockSum(sum, red);
  float inv = sum > 0 ? 1.0f / sum : 0.0f;
  for (int64_t j = threadIdx.x; j < d.seq; j += blockDim.x)
    st(p + j, j >= first && j <= last ? expf(row[j] - m) * inv : 0.0f);
  if (threadIdx.x == 0)
    lse[g] = sum > 0 ? m + logf(sum) : -INFINITY;
}

/// P again from the scores and the forward's log-sum-exp.
template <typename T>
__global__ void probsKernel(const float *S, const float *lse, T *P, int64_t rowBase,
                            AttentionDims d) {
  int64_t r = blockIdx.x, g = rowBase + r, i = g % d.seq, first, last;
  visible(d, i, first, last);
  float l = lse[g];
  for (int64_t j = threadIdx.x; j < d.seq; j += blockDim.x)
    st(P + r * d.seq + j,
       j >= first && j <= last && l > -INFINITY ? expf(S[r * d.seq + j] - l) : 0.0f);
}

/// dS = P (dP - D), over P.
template <typename T>
__global__ void dsoftmaxKernel(const float *dP, T *P, const float *D, int64_t rowBase,
                               int64_t seq) {
  int64_t r = blockIdx.x;
  float dr = D[rowBase + r];
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    int64_t at = r * seq + j;
    st(P + at, ld(P + at) * (dP[at] - dr));
  }
}

/// D[(b H + h) s + i] = sum_c dO[b, i, h, c] O[b, i, h, c], a warp per row.
template <typename T>
__global__ void rowDotKernel(const T *dout, const T *out, float *D, int64_t batch, int64_t seq,
                             int64_t heads, int64_t hd) {
  int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (w >= batch * seq * heads)
    return;
  float s = 0;
  for (int64_t c = lane; c < hd; c += 32)
    s += ld(dout + w * hd + c) * ld(out + w * hd + c);
  for (int o = 16; o > 0; o /= 2)
    s += __shfl_xor_sync(0xffffffffu, s, o);
  int64_t h = w % heads, i = (w / heads) % seq, b = w / (heads * seq);
  if (lane == 0)
    D[(b * heads + h) * seq + i] = s;
}

size_t roundUp(size_t n) { return (n + 255) / 256 * 256; }

/// The scratch's parts, 256-byte aligned.
struct Layout {
  int64_t bh, chunk;
  size_t qt, kt, vt, ot, dkt, dvt, D, S, P, total;
  Layout(const AttentionDims &d, size_t elem) {
    bh = d.batch * d.heads;
    chunk = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(d.seq * d.seq * 4, 1), 1, bh);
    // Chunks start 256-byte aligned in the packed buffers (cuBLASLt's
    // heuristic assumes it): a multiple of 256 / gcd(s d 2, 256) pairs.
    int64_t rowBytes = d.seq * d.headDim * 2, g = 256;
    for (int64_t a = rowBytes % 256; a; std::swap(a, g))
      g %= a;
    int64_t align = 256 / g;
    if (chunk < bh)
      chunk = std::min(bh, std::max(align, chunk / align * align));
    size_t n = size_t(bh * d.seq * d.headDim), at = 0;
    auto take = [&](size_t bytes) {
      size_t here = at;
      at += roundUp(bytes);
      return here;
    };
    qt = take(n * elem);
    kt = take(n * elem);
    vt = take(n * elem);
    ot = take(n * elem); // O in the forward, dO in the backward
    dkt = take(n * 4);
    dvt = take(n * 4);
    D = take(size_t(bh * d.seq) * 4);
    S = take(size_t(chunk * d.seq * d.seq) * 4);
    P = take(size_t(chunk * d.seq * d.seq) * elem);
    total = at;
  }
};

/// Heads that split into kv_heads groups, or `error`.
bool groupsOf(const AttentionDims &d, std::string &error) {
  if (d.kvHeads <= 0 || d.heads % d.kvHeads) {
    error = "attention: heads must be a multiple of kv_heads";
    return false;
  }
  return true;
}

/// The scratch's parts as typed pointers (`ot` holds O in the forward, dO
/// in the backward), and the sizes the products use.
template <typename T> struct Parts {
  Layout L;
  T *qt, *kt, *vt, *ot, *P;
  float *S, *D, *dkt, *dvt;
  int64_t group, n, sd, ss;
  Parts(const AttentionDims &d, void *scratch) : L(d, sizeof(T)) {
    char *base = static_cast<char *>(scratch);
    qt = reinterpret_cast<T *>(base + L.qt);
    kt = reinterpret_cast<T *>(base + L.kt);
    vt = reinterpret_cast<T *>(base + L.vt);
    ot = reinterpret_cast<T *>(base + L.ot);
    P = reinterpret_cast<T *>(base + L.P);
    S = reinterpret_cast<float *>(base + L.S);
    D = reinterpret_cast<float *>(base + L.D);
    dkt = reinterpret_cast<float *>(base + L.dkt);
    dvt = reinterpret_cast<float *>(base + L.dvt);
    group = d.heads / d.kvHeads;
    n = L.bh * d.seq * d.headDim;
    sd = d.seq * d.headDim;
    ss = d.seq * d.seq;
  }
  /// Q, K and V packed per (batch, head), K and V repeated over each group.
  void pack(const T *q, const T *k, const T *v, const AttentionDims &d, cudaStream_t s) {
    packKernel<<<gridFor(n), kThreads, 0, s>>>(q, qt, d.batch, d.seq, d.heads, 1, d.headDim);
    packKernel<<<gridFor(n), kThreads, 0, s>>>(k, kt, d.batch, d.seq, d.kvHeads, group, d.headDim);
    packKernel<<<gridFor(n), kThreads, 0, s>>>(v, vt, d.batch, d.seq, d.kvHeads, group, d.headDim);
  }
  /// S = scale Q K^T for the `cn` pairs from `c0` (fp32).
  bool scores(Gemm &gemm, int64_t c0, int64_t cn, const AttentionDims &d, cudaStream_t s,
              std::string &error) {
    BatchedShape qk{d.seq, d.seq, d.headDim, false, true,        d.headDim,  d.headDim, d.seq,
                    sd,    sd,    ss,        cn,    typeOf<T>(), CUDA_R_32F, d.scale,   0.0f};
    return gemm.batched(qt + c0 * sd, kt + c0 * sd, S, qk, s, error);
  }
};

template <typename T>
bool forward(Gemm &gemm, const T *q, const T *k, const T *v, T *out, float *lse,
             const AttentionDims &d, void *scratch, cudaStream_t s, std::string &error) {
  if (!groupsOf(d, error))
    return false;
  Parts<T> t(d, scratch);
  const Layout &L = t.L;
  int64_t sd = t.sd, ss = t.ss;
  t.pack(q, k, v, d, s);
  for (int64_t c0 = 0; c0 < L.bh; c0 += L.chunk) {
    int64_t cn = std::min(L.chunk, L.bh - c0);
    if (!t.scores(gemm, c0, cn, d, s, error))
      return false;
    softmaxKernel<<<unsigned(cn * d.seq), kThreads, 0, s>>>(t.S, t.P, lse, c0 * d.seq, d);
    BatchedShape pv{d.seq, d.headDim, d.seq, false, false,       d.seq,       d.headDim, d.headDim,
                    ss,    sd,        sd,    cn,    typeOf<T>(), typeOf<T>(), 1.0f,      0.0f};
    if (!gemm.batched(t.P, t.vt + c0 * sd, t.ot + c0 * sd, pv, s, error))
      return false;
  }
  unpackKernel<<<gridFor(t.n), kThreads, 0, s>>>(t.ot, out, d.batch, d.seq, d.heads, d.headDim);
  if (cudaError_t e = cudaGetLastError()) {
    error = std::string("attention: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

template <typename T>
bool backward(Gemm &gemm, const T *dout, const T *q, const T *k, const T *v, const T *out,
              const float *lse, T *dq, T *dk, T *dv, const AttentionDims &d, void *scratch,
              cudaStream_t s, std::string &error) {
  if (!groupsOf(d, error))
    return false;
  Parts<T> t(d, scratch);
  const Layout &L = t.L;
  T *qt = t.qt, *kt = t.kt, *vt = t.vt, *dot = t.ot, *P = t.P;
  float *S = t.S, *D = t.D, *dkt = t.dkt, *dvt = t.dvt;
  int64_t group = t.group, n = t.n, sd = t.sd, ss = t.ss, rows = L.bh * d.seq;
  t.pack(q, k, v, d, s);
  packKernel<<<gridFor(n), kThreads, 0, s>>>(dout, dot, d.batch, d.seq, d.heads, 1, d.headDim);
  rowDotKernel<<<unsigned((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      dout, out, D, d.batch, d.seq, d.heads, d.headDim);
  // dQ of chunk c goes into Qt's place once chunk c has read it (no other
  // chunk does).
  for (int64_t c0 = 0; c0 < L.bh; c0 += L.chunk) {
    int64_t cn = std::min(L.chunk, L.bh - c0);
    auto shape = [&](int64_t m, int64_t nn, int64_t kk, bool ta, bool tb, int64_t lda, int64_t ldb,
                     int64_t ldc, int64_t sa, int64_t sb, int64_t sc, cudaDataType_t c,
                     float alpha) {
      return BatchedShape{m,  nn, kk, ta, tb,          lda, ldb,   ldc,
                          sa, sb, sc, cn, typeOf<T>(), c,   alpha, 0.0f};
    };
    T *qc = qt + c0 * sd, *kc = kt + c0 * sd, *vc = vt + c0 * sd, *doc = dot + c0 * sd;
    if (!t.scores(gemm, c0, cn, d, s, error))
      return false;
    probsKernel<<<unsigned(cn * d.seq), kThreads, 0, s>>>(S, lse, P, c0 * d.seq, d);
    // dV = P^T dO.
    if (!gemm.batched(P, doc, dvt + c0 * sd,
                      shape(d.seq, d.headDim, d.seq, true, false, d.seq, d.headDim, d.headDim, ss,
                            sd, sd, CUDA_R_32F, 1.0f),
                      s, error))
      return false;
    // dP = dO V^T, over S.
    if (!gemm.batched(doc, vc, S,
                      shape(d.seq, d.seq, d.headDim, false, true, d.headDim, d.headDim, d.seq, sd,
                            sd, ss, CUDA_R_32F, 1.0f),
                      s, error))
      return false;
    dsoftmaxKernel<<<unsigned(cn * d.seq), kThreads, 0, s>>>(S, P, D, c0 * d.seq, d.seq);
    // dK = scale dS^T Q (before Q's place takes dQ).
    if (!gemm.batched(P, qc, dkt + c0 * sd,
                      shape(d.seq, d.headDim, d.seq, true, false, d.seq, d.headDim, d.headDim, ss,
                            sd, sd, CUDA_R_32F, d.scale),
                      s, error))
      return false;
    // dQ = scale dS K, into Q's place.
    if (!gemm.batched(P, kc, qc,
                      shape(d.seq, d.headDim, d.seq, false, false, d.seq, d.headDim, d.headDim, ss,
                            sd, sd, typeOf<T>(), d.scale),
                      s, error))
      return false;
  }
  unpackKernel<<<gridFor(n), kThreads, 0, s>>>(qt, dq, d.batch, d.seq, d.heads, d.headDim);
  int64_t kn = d.batch * d.seq * d.kvHeads * d.headDim;
  groupSumKernel<<<gridFor(kn), kThreads, 0, s>>>(dkt, dk, d.batch, d.seq, d.kvHeads, group,
                                                  d.headDim);
  groupSumKernel<<<gridFor(kn), kThreads, 0, s>>>(dvt, dv, d.batch, d.seq, d.kvHeads, group,
                                                  d.headDim);
  if (cudaError_t e = cudaGetLastError()) {
    error = std::string("attention backward: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

} // namespace

size_t attentionGemmScratchBytes(const AttentionDims &d, size_t elementBytes) {
  return Layout(d, elementBytes).total;
}

#define LLMOPT_CUDA_DEFINE_ATTENTION_GEMM(T)                                                       \
  bool attentionForwardGemm(Gemm &gemm, const T *q, const T *k, const T *v, T *out, float *lse,    \
                            const AttentionDims &d, void *scratch, cudaStream_t stream,            \
                            std::string &error) {                                                  \
    return forward(gemm, q, k, v, out, lse, d, scratch, stream, error);                            \
  }                                                                                                \
  bool attentionBackwardGemm(Gemm &gemm, const T *dout, const T *q, const T *k, const T *v,        \
                             const T *out, const float *lse, T *dq, T *dk, T *dv,                  \
                             const AttentionDims &d, void *scratch, cudaStream_t stream,           \
                             std::string &error) {                                                 \
    return backward(gemm, dout, q, k, v, out, lse, dq, dk, dv, d, scratch, stream, error);         \
  }
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DEFINE_ATTENTION_GEMM)
#undef LLMOPT_CUDA_DEFINE_ATTENTION_GEMM

} // namespace llmopt::kernels::cuda
