//===- kernels.cu - CUDA kernels: norms, activations, loss, AdamW ---------===//
//
// One thread block per row for the row-wise kernels (norms, softmax
// cross-entropy), grid-stride loops for the elementwise ones; fp32
// arithmetic on float or bf16 storage; weight gradients accumulate into fp32
// with atomicAdd (their order is not deterministic; the CPU references are
// the deterministic definition, the tests compare within tolerances).
//
//===----------------------------------------------------------------------===//

#include "common.cuh"

#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace llmopt::kernels::cuda {
namespace {

// --- norms ----------------------------------------------------------------------

template <typename T>
__global__ void rmsNormFwdKernel(const T *x, const T *w, T *out, float *rstd, int64_t c,
                                 float eps) {
  __shared__ float red[32];
  const T *xr = x + blockIdx.x * c;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    float v = ld(xr + i);
    ss += v * v;
  }
  float rs = rsqrtf(blockSum(ss, red) / float(c) + eps);
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
    st(out + blockIdx.x * c + i, ld(xr + i) * rs * ld(w + i));
  if (threadIdx.x == 0)
    rstd[blockIdx.x] = rs;
}

template <typename T>
__global__ void rmsNormBwdKernel(const T *dout, const T *x, const T *w, const float *rstd, T *dx,
                                 float *dw, float *terms, int64_t c) {
  __shared__ float red[32];
  const T *xr = x + blockIdx.x * c, *g = dout + blockIdx.x * c;
  float rs = rstd[blockIdx.x], dot = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    float xh = ld(xr + i) * rs, dxh = ld(g + i) * ld(w + i);
    dot += dxh * xh;
    // The weight gradient's row terms, summed by column afterwards, or
    // added at once.
    if (terms)
      terms[blockIdx.x * c + i] = ld(g + i) * xh;
    else
      atomicAdd(dw + i, ld(g + i) * xh);
  }
  float mean = blockSum(dot, red) / float(c);
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    float xh = ld(xr + i) * rs, dxh = ld(g + i) * ld(w + i);
    st(dx + blockIdx.x * c + i, rs * (dxh - xh * mean));
  }
}

template <typename T>
__global__ void layerNormFwdKernel(const T *x, const T *w, const T *b, T *out, float *mean,
                                   float *rstd, int64_t c, float eps) {
  __shared__ float red[32];
  const T *xr = x + blockIdx.x * c;
  float s = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
    s += ld(xr + i);
  float m = blockSum(s, red) / float(c), v = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    float d = ld(xr + i) - m;
    v += d * d;
  }
  float rs = rsqrtf(blockSum(v, red) / float(c) + eps);
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x)
    st(out + blockIdx.x * c + i, (ld(xr + i) - m) * rs * ld(w + i) + (b ? ld(b + i) : 0.0f));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
}

template <typename T>
__global__ void layerNormBwdKernel(const T *dout, const T *x, const T *w, const float *mean,
                                   const float *rstd, T *dx, float *dw, float *db, float *terms,
                                   int64_t c) {
  __shared__ float red[32];
  const T *xr = x + blockIdx.x * c, *g = dout + blockIdx.x * c;
  float m = mean[blockIdx.x], rs = rstd[blockIdx.x], sd = 0, sdx = 0;
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    float xh = (ld(xr + i) - m) * rs, go = ld(g + i), dxh = go * ld(w + i);
    sd += dxh;
    sdx += dxh * xh;
    if (terms) {
      terms[blockIdx.x * c + i] = go * xh;
    } else {
      atomicAdd(dw + i, go * xh);
      if (db)
        atomicAdd(db + i, go);
    }
  }
  float meanD = blockSum(sd, red) / float(c), meanDX = blockSum(sdx, red) / float(c);
  for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
    float xh = (ld(xr + i) - m) * rs, dxh = ld(g + i) * ld(w + i);
    st(dx + blockIdx.x * c + i, rs * (dxh - meanD - xh * meanDX));
  }
}

/// The norms' backward on 16-byte words, a warp per row, for rows of a
/// multiple of 16 bytes and at most W words per lane: each lane keeps its
/// columns' weight (and bias) gradient terms in registers over the block's
/// rows, the block adds its warps' sums in warp order into its partial sums
/// [block, c] (the bias partials after all the weight partials), and
/// sumRowsInto adds the blocks' partials in order: deterministic, and
/// without the row terms' round trip through memory. RMSNorm when `mean`
/// is null. (A first version kept each warp's sums in shared memory: too
/// little of it for more than four warps a block, and latency-bound.)
constexpr int kNormWarps = 8;
constexpr int64_t kNormRowsPerBlock = 32;
template <typename T, int W, bool BIAS>
__global__ void __launch_bounds__(kNormWarps * 32)
    normBwdWarpKernel(const T *dout, const T *x, const T *w, const float *mean, const float *rstd,
                      T *dx, float *partial, int64_t n, int64_t c) {
  constexpr int V = 16 / sizeof(T);
  struct alignas(16) Word {
    T e[V];
  };
  extern __shared__ float4 sumWords[];
  float *sums = reinterpret_cast<float *>(sumWords); // [c] weight, then [c] bias
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float aw[W][V], ab[W][V];
#pragma unroll
  for (int t = 0; t < W; ++t)
#pragma unroll
    for (int e = 0; e < V; ++e)
      aw[t][e] = ab[t][e] = 0;
  int64_t words = c / V, r0 = int64_t(blockIdx.x) * kNormRowsPerBlock;
  int64_t r1 = min(n, r0 + kNormRowsPerBlock);
  const Word *ww = reinterpret_cast<const Word *>(w);
  for (int64_t r = r0 + warp; r < r1; r += kNormWarps) {
    const Word *xr = reinterpret_cast<const Word *>(x + r * c);
    const Word *gr = reinterpret_cast<const Word *>(dout + r * c);
    float m = mean ? mean[r] : 0.0f, rs = rstd[r], sd = 0, sdx = 0;
#pragma unroll
    for (int t = 0; t < W; ++t) {
      int64_t k = lane + 32 * t;
      if (k < words) {
        Word xv = xr[k], gv = gr[k], wv = ww[k];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          float xh = (ld(&xv.e[e]) - m) * rs, go = ld(&gv.e[e]), dxh = go * ld(&wv.e[e]);
          sd += dxh;
          sdx += dxh * xh;
          aw[t][e] += go * xh;
          if (BIAS)
            ab[t][e] += go;
        }
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      sd += __shfl_xor_sync(0xffffffffu, sd, o);
      sdx += __shfl_xor_sync(0xffffffffu, sdx, o);
    }
    float meanD = mean ? sd / float(c) : 0.0f, meanDX = sdx / float(c);
    Word *dr = reinterpret_cast<Word *>(dx + r * c);
#pragma unroll
    for (int t = 0; t < W; ++t) {
      int64_t k = lane + 32 * t;
      if (k < words) {
        Word xv = xr[k], gv = gr[k], wv = ww[k], out;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          float xh = (ld(&xv.e[e]) - m) * rs, dxh = ld(&gv.e[e]) * ld(&wv.e[e]);
          st(&out.e[e], rs * (dxh - meanD - xh * meanDX));
        }
        dr[k] = out;
      }
    }
  }
  // The warps' sums in warp order.
  for (int v = 0; v < kNormWarps; ++v) {
    if (warp == v)
#pragma unroll
      for (int t = 0; t < W; ++t) {
        int64_t k = lane + 32 * t;
        if (k < words)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            int64_t j = k * V + e;
            sums[j] = v == 0 ? aw[t][e] : sums[j] + aw[t][e];
            if (BIAS)
              sums[c + j] = v == 0 ? ab[t][e] : sums[c + j] + ab[t][e];
          }
      }
    __syncthreads();
  }
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    partial[blockIdx.x * c + j] = sums[j];
    if (BIAS)
      partial[(gridDim.x + blockIdx.x) * c + j] = sums[c + j];
  }
}

/// Blocks of normBwdWarpKernel for n rows (a function of n only, so that
/// the sums' order is the same on every GPU).
int64_t normBlocks(int64_t n) { return (n + kNormRowsPerBlock - 1) / kNormRowsPerBlock; }

template <typename T, int W, bool BIAS>
void launchNormWords(const T *d, const T *x, const T *w, const float *mean, const float *rstd,
                     T *dx, float *partial, int64_t n, int64_t c, cudaStream_t s) {
  normBwdWarpKernel<T, W, BIAS>
      <<<unsigned(normBlocks(n)), kNormWarps * 32, size_t(c) * sizeof(float) * (BIAS ? 2 : 1), s>>>(
          d, x, w, mean, rstd, dx, partial, n, c);
}

/// normBwdWarpKernel where the rows are words, at most 8 a lane; false
/// where the caller should use the row-term kernels.
template <typename T>
bool normBackwardWords(const T *d, const T *x, const T *w, const float *mean, const float *rstd,
                       T *dx, float *dw, float *db, int64_t n, int64_t c, cudaStream_t s,
                       float *scratch, cudaError_t &err) {
  constexpr int V = 16 / sizeof(T);
  auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  int64_t perLane = (c / V + 31) / 32;
  bool bias = db != nullptr;
  // With a bias gradient, 8 words a lane (2048 bf16 columns) ran slower than
  // the row terms on an H100 (0.269 vs 0.255 ms for 16384 rows): 128 fp32
  // sums a lane do not stay in registers.
  if (!scratch || c % V != 0 || perLane > (bias ? 4 : 8) || !aligned(d) || !aligned(x) ||
      !aligned(w) || !aligned(dx))
    return false;
#define LLMOPT_NORM_WORDS(W)                                                                       \
  if (perLane <= W) {                                                                              \
    if (bias)                                                                                      \
      launchNormWords<T, W, true>(d, x, w, mean, rstd, dx, scratch, n, c, s);                      \
    else                                                                                           \
      launchNormWords<T, W, false>(d, x, w, mean, rstd, dx, scratch, n, c, s);                     \
  } else
  LLMOPT_NORM_WORDS(1) LLMOPT_NORM_WORDS(2) LLMOPT_NORM_WORDS(4) LLMOPT_NORM_WORDS(8) {}
#undef LLMOPT_NORM_WORDS
  int64_t blocks = normBlocks(n);
  err = sumRowsInto(static_cast<const float *>(scratch), dw, blocks, c, s);
  if (err == cudaSuccess && db)
    err = sumRowsInto(static_cast<const float *>(scratch + blocks * c), db, blocks, c, s);
  if (err == cudaSuccess)
    err = cudaGetLastError();
  return true;
}

// --- activations ----------------------------------------------------------------

using llmopt_device::gelu;
using llmopt_device::geluGrad;
using llmopt_device::sigmoid;

struct GeluFwd {
  bool t;
  __device__ void operator()(const float *in, float *out) const { out[0] = gelu(in[0], t); }
};
struct GeluBwd { // in: dout, x
  bool t;
  __device__ void operator()(const float *in, float *out) const {
    out[0] = in[0] * geluGrad(in[1], t);
  }
};
struct SwigluFwd { // in: gate, up
  __device__ void operator()(const float *in, float *out) const {
    out[0] = in[0] * sigmoid(in[0]) * in[1];
  }
};
struct SwigluBwd { // in: dout, gate, up; out: dgate, dup
  __device__ void operator()(const float *in, float *out) const {
    float g = in[1], s = sigmoid(g);
    out[0] = in[0] * in[2] * s * (1.0f + g * (1.0f - s));
    out[1] = in[0] * g * s;
  }
};

// --- embeddings and rotary ------------------------------------------------------

template <typename T>
__global__ void embeddingFwdKernel(const int32_t *tok, const T *table, T *out, int64_t n,
                                   int64_t h) {
  GRID_STRIDE(i, n * h) out[i] = table[int64_t(tok[i / h]) * h + i % h];
}
/// A vocabulary-parallel part: rows [offset, offset + part) of the table;
/// other tokens' rows are zero.
template <typename T>
__global__ void embeddingFwdPartKernel(const int32_t *tok, const T *table, T *out, int64_t n,
                                       int64_t h, int64_t offset, int64_t part) {
  GRID_STRIDE(i, n * h) {
    int64_t t = int64_t(tok[i / h]) - offset;
    st(out + i, t >= 0 && t < part ? ld(table + t * h + i % h) : 0.0f);
  }
}
template <typename T>
__global__ void embeddingBwdKernel(const int32_t *tok, const T *d, float *dt, int64_t n,
                                   int64_t h) {
  GRID_STRIDE(i, n * h) atomicAdd(dt + int64_t(tok[i / h]) * h + i % h, ld(d + i));
}
/// The embedding's backward in token order (embeddingOrder's layout): a
/// block per chunk of at most `rowsPerChunk` positions of one token sums
/// their rows in position order into `partial` [chunk, h], then a block per
/// token adds its chunks in order into the token's row. Grid-stride over
/// the counts read on the device, so that a captured graph serves every
/// micro-batch. Deterministic, and frequent tokens spread over many blocks.
template <typename T>
__global__ void embeddingChunksKernel(const int32_t *order, const T *d, float *partial, int64_t n,
                                      int64_t h) {
  const int32_t *groups = order + n;
  const int32_t *chunks = groups + 1 + groups[0] + 1; // [C][C + 1 starts]
  int64_t count = chunks[0];
  const int32_t *starts = chunks + 1;
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x)
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      float sum = 0;
      for (int32_t p = starts[c]; p < starts[c + 1]; ++p)
        sum += ld(d + int64_t(order[p]) * h + j);
      partial[c * h + j] = sum;
    }
}
/// With `Part`, the table is the vocabulary part [offset, offset + part):
/// the other tokens' groups are left out.
template <bool Part>
__global__ void embeddingGroupsKernel(const int32_t *tok, const int32_t *order,
                                      const float *partial, float *dt, int64_t n, int64_t h,
                                      int64_t offset, int64_t part) {
  const int32_t *groups = order + n;
  int64_t count = groups[0];
  const int32_t *firstChunk = groups + 1;
  const int32_t *chunkStarts = groups + 1 + count + 1 + 1;
  for (int64_t g = blockIdx.x; g < count; g += gridDim.x) {
    int64_t token = int64_t(tok[order[chunkStarts[firstChunk[g]]]]);
    if constexpr (Part) {
      token -= offset;
      if (token < 0 || token >= part)
        continue;
    }
    int64_t row = token * h;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      float sum = 0;
      for (int32_t c = firstChunk[g]; c < firstChunk[g + 1]; ++c)
        sum += partial[int64_t(c) * h + j];
      dt[row + j] += sum;
    }
  }
}
/// The ordered backward's two launches (the whole table, or with `Part`
/// its vocabulary part [offset, offset + part)).
template <bool Part, typename T>
cudaError_t embeddingBackwardInOrder(const int32_t *tok, const int32_t *order, const T *d,
                                     float *dt, int64_t n, int64_t h, float *scratch,
                                     int64_t offset, int64_t part, cudaStream_t s) {
  if (n == 0)
    return cudaSuccess;
  unsigned blocks = unsigned(std::min<int64_t>(n, 2048));
  embeddingChunksKernel<<<blocks, kThreads, 0, s>>>(order, d, scratch, n, h);
  embeddingGroupsKernel<Part>
      <<<blocks, kThreads, 0, s>>>(tok, order, scratch, dt, n, h, offset, part);
  return cudaGetLastError();
}
/// Index type I: int32_t where the work fits (64-bit divisions made the
/// kernel several times slower than its memory traffic).
template <typename T, typename I>
__global__ void rotaryKernel(const T *x, T *out, I rows, I seq, I heads, I headDim,
                             const float *cosSin, bool inverse) {
  I half = headDim / 2, total = rows * heads * half;
  for (I k = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); k < total;
       k += I(blockDim.x) * I(gridDim.x)) {
    I i = k % half, h = (k / half) % heads, r = k / (half * heads);
    float2 cs = reinterpret_cast<const float2 *>(cosSin)[(r % seq) * half + i];
    float c = cs.x, s = cs.y;
    if (inverse)
      s = -s;
    I base = (r * heads + h) * headDim;
    float x1 = ld(x + base + i), x2 = ld(x + base + i + half);
    st(out + base + i, x1 * c - x2 * s);
    st(out + base + i + half, x2 * c + x1 * s);
  }
}

// --- softmax cross-entropy ------------------------------------------------------

template <typename T>
__global__ void ceRowKernel(const T *logits, const int32_t *labels, float *rowLoss, float *rowLse,
                            int64_t vocab, int64_t pitch, int64_t ignore) {
  __shared__ float red[32];
  int32_t y = labels[blockIdx.x];
  if (y == ignore) {
    if (threadIdx.x == 0)
      rowLoss[blockIdx.x] = 0;
    return;
  }
  const T *row = logits + blockIdx.x * pitch;
  float l = rowLogSumExp(row, vocab, red);
  if (threadIdx.x == 0) {
    rowLoss[blockIdx.x] = l - ld(row + y);
    if (rowLse)
      rowLse[blockIdx.x] = l;
  }
}

/// Sum of row losses and count of counted rows, in one block.
__global__ void ceMeanKernel(const float *rowLoss, const int32_t *labels, float *loss, int64_t n,
                             int64_t ignore) {
  __shared__ float red[32];
  float s = 0, c = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x)
    if (labels[r] != ignore) {
      s += rowLoss[r];
      c += 1;
    }
  s = blockSum(s, red);
  c = blockSum(c, red);
  if (threadIdx.x == 0)
    loss[0] = c > 0 ? s / c : 0.0f;
}

/// dloss / (counted rows), for the backward.
__global__ void ceScaleKernel(const int32_t *labels, const float *dloss, float *scale, int64_t n,
                              int64_t ignore) {
  __shared__ float red[32];
  float c = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x)
    c += labels[r] != ignore ? 1.0f : 0.0f;
  c = blockSum(c, red);
  if (threadIdx.x == 0)
    scale[0] = c > 0 ? dloss[0] / c : 0.0f;
}

/// The rows' log-sum-exps from the forward (`rowLse`) or again; 16-byte
/// words where the logits and their gradient are equally aligned. Rows
/// `pitch` (logits) and `pitchD` (gradient) elements apart; the gradient's
/// padding [vocab, pitchD) is zeroed.
template <typename T>
__global__ void ceBwdKernel(const T *logits, const int32_t *labels, const float *scale,
                            const float *rowLse, T *dlogits, int64_t vocab, int64_t pitch,
                            int64_t pitchD, int64_t ignore) {
  __shared__ float red[32];
  int32_t y = labels[blockIdx.x];
  T *d = dlogits + blockIdx.x * pitchD;
  for (int64_t j = vocab + threadIdx.x; j < pitchD; j += blockDim.x)
    st(d + j, 0.0f);
  if (y == ignore) {
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      st(d + j, 0.0f);
    return;
  }
  const T *row = logits + blockIdx.x * pitch;
  float l = rowLse ? rowLse[blockIdx.x] : rowLogSumExp(row, vocab, red), sc = scale[0];
  auto grad = [&](int64_t j, float v) { return (expf(v - l) - (j == y ? 1.0f : 0.0f)) * sc; };
  constexpr int V = 16 / sizeof(T);
  struct alignas(16) Word {
    T e[V];
  };
  uintptr_t ra = reinterpret_cast<uintptr_t>(row), da = reinterpret_cast<uintptr_t>(d);
  int64_t head = int64_t((16 - ra % 16) % 16 / sizeof(T));
  if (ra % 16 != da % 16 || ra % sizeof(T) != 0 || head > vocab)
    head = vocab;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    st(d + j, grad(j, ld(row + j)));
  int64_t words = (vocab - head) / V;
  const Word *in = reinterpret_cast<const Word *>(row + head);
  Word *out = reinterpret_cast<Word *>(d + head);
  for (int64_t k = threadIdx.x; k < words; k += blockDim.x) {
    Word a = in[k], b;
#pragma unroll
    for (int i = 0; i < V; ++i)
      st(&b.e[i], grad(head + k * V + i, ld(&a.e[i])));
    out[k] = b;
  }
  for (int64_t j = head + words * V + threadIdx.x; j < vocab; j += blockDim.x)
    st(d + j, grad(j, ld(row + j)));
}

// --- AdamW ----------------------------------------------------------------------

__device__ __forceinline__ float adamwOne(float p, float g, float &m, float &v, const AdamWArgs &a,
                                          float scale, float bc1, float bc2) {
  float gi = g * scale;
  m = a.beta1 * m + (1.0f - a.beta1) * gi;
  v = a.beta2 * v + (1.0f - a.beta2) * gi * gi;
  return p * (1.0f - a.lr * a.weightDecay) - a.lr * (m / bc1) / (sqrtf(v / bc2) + a.eps);
}

/// In 16-byte words (4 parameters a load of each state) where every
/// pointer allows, then element by element; this thread's words and
/// elements are first, first + stride, ...
__device__ __forceinline__ void adamwSpan(float *p, const float *g, float *m, float *v,
                                          bf16 *working, int64_t n, const AdamWArgs &a, float scale,
                                          float bc1, float bc2, int64_t first, int64_t stride) {
  auto aligned = [](const void *q, int bytes) {
    return reinterpret_cast<uintptr_t>(q) % bytes == 0;
  };
  int64_t words = aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16) &&
                          (!working || aligned(working, 8))
                      ? n / 4
                      : 0;
  for (int64_t w = first; w < words; w += stride) {
    float4 pw = reinterpret_cast<float4 *>(p)[w], gw = reinterpret_cast<const float4 *>(g)[w];
    float4 mw = reinterpret_cast<float4 *>(m)[w], vw = reinterpret_cast<float4 *>(v)[w];
    pw.x = adamwOne(pw.x, gw.x, mw.x, vw.x, a, scale, bc1, bc2);
    pw.y = adamwOne(pw.y, gw.y, mw.y, vw.y, a, scale, bc1, bc2);
    pw.z = adamwOne(pw.z, gw.z, mw.z, vw.z, a, scale, bc1, bc2);
    pw.w = adamwOne(pw.w, gw.w, mw.w, vw.w, a, scale, bc1, bc2);
    reinterpret_cast<float4 *>(p)[w] = pw;
    reinterpret_cast<float4 *>(m)[w] = mw;
    reinterpret_cast<float4 *>(v)[w] = vw;
    if (working) {
      __nv_bfloat162 lo = __floats2bfloat162_rn(pw.x, pw.y);
      __nv_bfloat162 hi = __floats2bfloat162_rn(pw.z, pw.w);
      uint2 packed{*reinterpret_cast<unsigned *>(&lo), *reinterpret_cast<unsigned *>(&hi)};
      reinterpret_cast<uint2 *>(working)[w] = packed;
    }
  }
  for (int64_t i = words * 4 + first; i < n; i += stride) {
    float mi = m[i], vi = v[i];
    float pi = adamwOne(p[i], g[i], mi, vi, a, scale, bc1, bc2);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if (working)
      working[i] = __float2bfloat16(pi);
  }
}

/// adamwSpan over the whole grid.
__device__ __forceinline__ void adamwUpdate(float *p, const float *g, float *m, float *v,
                                            bf16 *working, int64_t n, const AdamWArgs &a,
                                            float scale, float bc1, float bc2) {
  adamwSpan(p, g, m, v, working, n, a, scale, bc1, bc2,
            int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(blockDim.x) * gridDim.x);
}

/// Multi-tensor AdamW: a block per chunk of a tensor (the same update as
/// adamwKernel / adamwDeviceKernel element by element: bit-identical). The
/// clipping factor and bias corrections from `norm` and `step` on the
/// device, or (norm null) from `a.gradScale` and the host's bc1, bc2.
__global__ void adamwMultiKernel(const AdamWTensor *tensors, const AdamWChunk *chunks, AdamWArgs a,
                                 float bc1, float bc2, const float *norm, double maxNorm,
                                 const int64_t *step) {
  __shared__ float k[3];
  if (threadIdx.x == 0) {
    if (norm) {
      float t = float(*step);
      k[0] = maxNorm > 0 ? float(fmin(1.0, maxNorm / (double(*norm) + 1e-6))) : 1.0f;
      k[1] = 1.0f - powf(a.beta1, t);
      k[2] = 1.0f - powf(a.beta2, t);
    } else {
      k[0] = a.gradScale;
      k[1] = bc1;
      k[2] = bc2;
    }
  }
  __syncthreads();
  AdamWChunk c = chunks[blockIdx.x];
  AdamWTensor t = tensors[c.tensor];
  AdamWArgs ta = a;
  ta.weightDecay = t.weightDecay;
  int64_t b = c.begin;
  adamwSpan(t.param + b, t.grad + b, t.m + b, t.v + b, t.working ? t.working + b : nullptr,
            c.end - b, ta, k[0], k[1], k[2], threadIdx.x, blockDim.x);
}

__global__ void adamwKernel(float *p, const float *g, float *m, float *v, bf16 *working, int64_t n,
                            AdamWArgs a, float bc1, float bc2) {
  adamwUpdate(p, g, m, v, working, n, a, a.gradScale, bc1, bc2);
}

/// The clipping factor and bias corrections from device memory (the global
/// norm and the step), computed by each block's first thread.
__global__ void adamwDeviceKernel(float *p, const float *g, float *m, float *v, bf16 *working,
                                  int64_t n, AdamWArgs a, const float *norm, double maxNorm,
                                  const int64_t *step) {
  __shared__ float k[3];
  if (threadIdx.x == 0) {
    float t = float(*step);
    k[0] = maxNorm > 0 ? float(fmin(1.0, maxNorm / (double(*norm) + 1e-6))) : 1.0f;
    k[1] = 1.0f - powf(a.beta1, t);
    k[2] = 1.0f - powf(a.beta2, t);
  }
  __syncthreads();
  adamwUpdate(p, g, m, v, working, n, a, k[0], k[1], k[2]);
}

// --- fp8 ------------------------------------------------------------------------

/// max |x| into *amax (zeroed before): non-negative floats order like their
/// bits, so an unsigned atomicMax does.
template <typename T> __global__ void amaxKernel(const T *x, int64_t n, float *amax) {
  __shared__ float red[32];
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(ld(x + i)));
  m = blockMax(m, red);
  if (threadIdx.x == 0)
    atomicMax(reinterpret_cast<unsigned *>(amax), __float_as_uint(m));
}

template <typename T>
__global__ void castFp8Kernel(const T *x, int64_t n, bool e5m2, uint8_t *out, const float *amax,
                              float *scaleInv) {
  float a = *amax, top = e5m2 ? 57344.0f : 448.0f;
  float scale = a > 0.0f && isfinite(a) ? fminf(top / a, FLT_MAX) : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *scaleInv = 1.0f / scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(ld(x + i) * scale, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

/// castFp8Kernel into the transpose: out[c * rows + r] = fp8(x[r * cols + c]),
/// through 32 x 32 tiles of shared memory (reads and writes coalesced).
template <typename T>
__global__ void castFp8TransposedKernel(const T *x, int64_t rows, int64_t cols, bool e5m2,
                                        uint8_t *out, const float *amax, float *scaleInv) {
  __shared__ float tile[32][33];
  float a = *amax, top = e5m2 ? 57344.0f : 448.0f;
  float scale = a > 0.0f && isfinite(a) ? fminf(top / a, FLT_MAX) : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *scaleInv = 1.0f / scale;
  // Row tiles on x (up to 2^31 - 1 of them), column tiles on y (65535).
  int64_t r0 = int64_t(blockIdx.x) * 32, c0 = int64_t(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      tile[i][threadIdx.x] = ld(x + r * cols + c);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols)
      out[c * rows + r] = __nv_cvt_float_to_fp8(tile[threadIdx.x][i] * scale, __NV_SATFINITE,
                                                e5m2 ? __NV_E5M2 : __NV_E4M3);
  }
}

} // namespace

#define LLMOPT_CUDA_DEFINE_FP8(T)                                                                  \
  cudaError_t quantizeFp8(const T *x, int64_t n, bool e5m2, uint8_t *out, float *amax,             \
                          float *scaleInv, const float *amaxOverride, cudaStream_t s) {            \
    if (!amaxOverride) {                                                                           \
      if (cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s); e != cudaSuccess)            \
        return e;                                                                                  \
      amaxKernel<<<std::min(gridFor(n), 1024u), kThreads, 0, s>>>(x, n, amax);                     \
    }                                                                                              \
    castFp8Kernel<<<gridFor(n), kThreads, 0, s>>>(x, n, e5m2, out,                                 \
                                                  amaxOverride ? amaxOverride : amax, scaleInv);   \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t quantizeFp8Transposed(const T *x, int64_t rows, int64_t cols, bool e5m2,             \
                                    uint8_t *out, float *amax, float *scaleInv,                    \
                                    const float *amaxOverride, cudaStream_t s) {                   \
    int64_t n = rows * cols;                                                                       \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    if (!amaxOverride) {                                                                           \
      if (cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s); e != cudaSuccess)            \
        return e;                                                                                  \
      amaxKernel<<<std::min(gridFor(n), 1024u), kThreads, 0, s>>>(x, n, amax);                     \
    }                                                                                              \
    dim3 grid(unsigned((rows + 31) / 32), unsigned((cols + 31) / 32)), block(32, 8);               \
    castFp8TransposedKernel<<<grid, block, 0, s>>>(x, rows, cols, e5m2, out,                       \
                                                   amaxOverride ? amaxOverride : amax, scaleInv);  \
    return cudaGetLastError();                                                                     \
  }
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DEFINE_FP8)
#undef LLMOPT_CUDA_DEFINE_FP8

std::vector<int32_t> embeddingOrder(const int32_t *tokens, int64_t n, int64_t rowsPerChunk) {
  // A counting sort by token (stable: positions in order within a token;
  // a comparison sort took 0.8 ms for 16384 tokens, the GPU waiting).
  int32_t top = 0;
  for (int64_t i = 0; i < n; ++i)
    top = std::max(top, tokens[i]);
  std::vector<int32_t> next(size_t(top) + 2, 0), pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ++next[size_t(tokens[i]) + 1];
  for (size_t t = 1; t < next.size(); ++t)
    next[t] += next[t - 1];
  for (int64_t i = 0; i < n; ++i)
    pos[size_t(next[size_t(tokens[i])]++)] = int32_t(i);
  std::vector<int32_t> firstChunk, chunkStarts;
  for (int64_t i = 0; i < n; ++i) {
    bool newGroup = i == 0 || tokens[pos[size_t(i)]] != tokens[pos[size_t(i - 1)]];
    if (newGroup)
      firstChunk.push_back(int32_t(chunkStarts.size()));
    if (newGroup || i - chunkStarts.back() >= rowsPerChunk)
      chunkStarts.push_back(int32_t(i));
  }
  int32_t groups = int32_t(firstChunk.size()), chunks = int32_t(chunkStarts.size());
  firstChunk.push_back(chunks);
  chunkStarts.push_back(int32_t(n));
  std::vector<int32_t> out = std::move(pos);
  out.push_back(groups);
  out.insert(out.end(), firstChunk.begin(), firstChunk.end());
  out.push_back(chunks);
  out.insert(out.end(), chunkStarts.begin(), chunkStarts.end());
  return out;
}

std::vector<float> rotaryTable(const std::vector<double> &invFreq, int64_t seq) {
  size_t half = invFreq.size();
  std::vector<float> t(size_t(seq) * half * 2);
  for (int64_t p = 0; p < seq; ++p)
    for (size_t i = 0; i < half; ++i) {
      double angle = double(p) * invFreq[i];
      t[(size_t(p) * half + i) * 2] = float(std::cos(angle));
      t[(size_t(p) * half + i) * 2 + 1] = float(std::sin(angle));
    }
  return t;
}

bool deviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

size_t normBackwardScratchBytes(int64_t n, int64_t c) {
  size_t terms = (size_t(n * c) * sizeof(float) + 255) / 256 * 256 + sumRowsScratchBytes(n, c);
  return std::max(terms, size_t(2 * normBlocks(n) * c) * sizeof(float));
}

/// The column sums' partials after the norms' row terms in their scratch
/// (normBackwardScratchBytes).
static void *sumsScratch(void *scratch, int64_t n, int64_t c) {
  return sumRowsScratchBytes(n, c)
             ? static_cast<char *>(scratch) + (size_t(n * c) * sizeof(float) + 255) / 256 * 256
             : nullptr;
}

#define LLMOPT_CUDA_DEFINE(T)                                                                      \
  cudaError_t rmsNormForward(const T *x, const T *w, T *out, float *rstd, int64_t n, int64_t c,    \
                             float eps, cudaStream_t s) {                                          \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    rmsNormFwdKernel<<<unsigned(n), kThreads, 0, s>>>(x, w, out, rstd, c, eps);                    \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t rmsNormBackward(const T *d, const T *x, const T *w, const float *rstd, T *dx,        \
                              float *dw, int64_t n, int64_t c, cudaStream_t s, float *scratch) {   \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    if (cudaError_t e; normBackwardWords(d, x, w, static_cast<const float *>(nullptr), rstd, dx,   \
                                         dw, static_cast<float *>(nullptr), n, c, s, scratch, e))  \
      return e;                                                                                    \
    rmsNormBwdKernel<<<unsigned(n), kThreads, 0, s>>>(d, x, w, rstd, dx, dw, scratch, c);          \
    if (scratch)                                                                                   \
      return sumRowsInto(static_cast<const float *>(scratch), dw, n, c, s,                         \
                         sumsScratch(scratch, n, c));                                              \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t layerNormForward(const T *x, const T *w, const T *b, T *out, float *mean,            \
                               float *rstd, int64_t n, int64_t c, float eps, cudaStream_t s) {     \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    layerNormFwdKernel<<<unsigned(n), kThreads, 0, s>>>(x, w, b, out, mean, rstd, c, eps);         \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t layerNormBackward(const T *d, const T *x, const T *w, const float *mean,             \
                                const float *rstd, T *dx, float *dw, float *db, int64_t n,         \
                                int64_t c, cudaStream_t s, float *scratch) {                       \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    if (cudaError_t e; normBackwardWords(d, x, w, mean, rstd, dx, dw, db, n, c, s, scratch, e))    \
      return e;                                                                                    \
    layerNormBwdKernel<<<unsigned(n), kThreads, 0, s>>>(d, x, w, mean, rstd, dx, dw, db, scratch,  \
                                                        c);                                        \
    if (!scratch)                                                                                  \
      return cudaGetLastError();                                                                   \
    if (cudaError_t e = sumRowsInto(static_cast<const float *>(scratch), dw, n, c, s,              \
                                    sumsScratch(scratch, n, c)))                                   \
      return e;                                                                                    \
    return db ? sumRowsInto(d, db, n, c, s, sumsScratch(scratch, n, c)) : cudaGetLastError();      \
  }                                                                                                \
  cudaError_t geluForward(const T *x, T *o, int64_t n, bool t, cudaStream_t s) {                   \
    return launchMap(MapArgs<T, 1, 1>{{x}, {o}}, n, GeluFwd{t}, s);                                \
  }                                                                                                \
  cudaError_t geluBackward(const T *g, const T *x, T *dx, int64_t n, bool t, cudaStream_t s) {     \
    return launchMap(MapArgs<T, 2, 1>{{g, x}, {dx}}, n, GeluBwd{t}, s);                            \
  }                                                                                                \
  cudaError_t swigluForward(const T *g, const T *u, T *o, int64_t n, cudaStream_t s) {             \
    return launchMap(MapArgs<T, 2, 1>{{g, u}, {o}}, n, SwigluFwd{}, s);                            \
  }                                                                                                \
  cudaError_t swigluBackward(const T *d, const T *g, const T *u, T *dg, T *du, int64_t n,          \
                             cudaStream_t s) {                                                     \
    return launchMap(MapArgs<T, 3, 2>{{d, g, u}, {dg, du}}, n, SwigluBwd{}, s);                    \
  }                                                                                                \
  cudaError_t embeddingForward(const int32_t *tok, const T *table, T *out, int64_t n, int64_t h,   \
                               cudaStream_t s) {                                                   \
    embeddingFwdKernel<<<gridFor(n *h), kThreads, 0, s>>>(tok, table, out, n, h);                  \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t embeddingBackwardOrdered(const int32_t *tok, const int32_t *order, const T *d,       \
                                       float *dt, int64_t n, int64_t h, float *scratch,            \
                                       cudaStream_t s) {                                           \
    return embeddingBackwardInOrder<false>(tok, order, d, dt, n, h, scratch, 0, 0, s);             \
  }                                                                                                \
  cudaError_t embeddingForwardPart(const int32_t *tok, const T *table, T *out, int64_t n,          \
                                   int64_t h, int64_t offset, int64_t part, cudaStream_t s) {      \
    embeddingFwdPartKernel<<<gridFor(n *h), kThreads, 0, s>>>(tok, table, out, n, h, offset,       \
                                                              part);                               \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t embeddingBackwardOrderedPart(const int32_t *tok, const int32_t *order, const T *d,   \
                                           float *dt, int64_t n, int64_t h, float *scratch,        \
                                           int64_t offset, int64_t part, cudaStream_t s) {         \
    return embeddingBackwardInOrder<true>(tok, order, d, dt, n, h, scratch, offset, part, s);      \
  }                                                                                                \
  cudaError_t embeddingBackward(const int32_t *tok, const T *d, float *dt, int64_t n, int64_t h,   \
                                cudaStream_t s) {                                                  \
    embeddingBwdKernel<<<gridFor(n *h), kThreads, 0, s>>>(tok, d, dt, n, h);                       \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t rotary(const T *x, T *out, int64_t batch, int64_t seq, int64_t heads,                \
                     int64_t headDim, const float *inv, bool inverse, cudaStream_t s) {            \
    int64_t work = batch * seq * heads * (headDim / 2);                                            \
    if (batch * seq * heads * headDim < (int64_t(1) << 31))                                        \
      rotaryKernel<T, int32_t><<<gridFor(work), kThreads, 0, s>>>(x, out, int32_t(batch * seq),    \
                                                                  int32_t(seq), int32_t(heads),    \
                                                                  int32_t(headDim), inv, inverse); \
    else                                                                                           \
      rotaryKernel<T, int64_t><<<gridFor(work), kThreads, 0, s>>>(x, out, batch * seq, seq, heads, \
                                                                  headDim, inv, inverse);          \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t crossEntropyForward(const T *logits, const int32_t *labels, float *rowLoss,          \
                                  float *loss, int64_t n, int64_t vocab, int64_t ignore,           \
                                  cudaStream_t s, float *rowLse, int64_t ld) {                     \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    ceRowKernel<<<unsigned(n), kThreads, 0, s>>>(logits, labels, rowLoss, rowLse, vocab,           \
                                                 ld ? ld : vocab, ignore);                         \
    ceMeanKernel<<<1, kThreads, 0, s>>>(rowLoss, labels, loss, n, ignore);                         \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t crossEntropyBackward(const T *logits, const int32_t *labels, const float *dloss,     \
                                   float *scratch, T *dlogits, int64_t n, int64_t vocab,           \
                                   int64_t ignore, cudaStream_t s, const float *rowLse,            \
                                   int64_t ld, int64_t ldD) {                                      \
    if (n == 0)                                                                                    \
      return cudaSuccess;                                                                          \
    ceScaleKernel<<<1, kThreads, 0, s>>>(labels, dloss, scratch, n, ignore);                       \
    ceBwdKernel<<<unsigned(n), kThreads, 0, s>>>(logits, labels, scratch, rowLse, dlogits, vocab,  \
                                                 ld ? ld : vocab, ldD ? ldD : vocab, ignore);      \
    return cudaGetLastError();                                                                     \
  }
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DEFINE)
#undef LLMOPT_CUDA_DEFINE

cudaError_t adamw(float *param, const float *grad, float *m, float *v, bf16 *working, int64_t count,
                  const AdamWArgs &a, cudaStream_t s) {
  float bc1 = 1.0f - std::pow(a.beta1, float(a.step));
  float bc2 = 1.0f - std::pow(a.beta2, float(a.step));
  adamwKernel<<<gridFor((count + 3) / 4), kThreads, 0, s>>>(param, grad, m, v, working, count, a,
                                                            bc1, bc2);
  return cudaGetLastError();
}

cudaError_t adamwDevice(float *param, const float *grad, float *m, float *v, bf16 *working,
                        int64_t count, const AdamWArgs &a, const float *norm, double maxNorm,
                        const int64_t *step, cudaStream_t s) {
  if (count == 0)
    return cudaSuccess;
  adamwDeviceKernel<<<gridFor((count + 3) / 4), kThreads, 0, s>>>(param, grad, m, v, working, count,
                                                                  a, norm, maxNorm, step);
  return cudaGetLastError();
}

std::vector<AdamWChunk> adamwChunks(const std::vector<int64_t> &counts) {
  std::vector<AdamWChunk> chunks;
  for (size_t t = 0; t < counts.size(); ++t)
    for (int64_t b = 0; b < counts[t]; b += kAdamWChunk)
      chunks.push_back({int32_t(t), b, std::min(counts[t], b + kAdamWChunk)});
  return chunks;
}

cudaError_t adamwMulti(const AdamWTensor *tensors, const AdamWChunk *chunks, int64_t count,
                       const AdamWArgs &a, const float *norm, double maxNorm, const int64_t *step,
                       cudaStream_t s) {
  if (count == 0)
    return cudaSuccess;
  float bc1 = 1.0f - std::pow(a.beta1, float(a.step));
  float bc2 = 1.0f - std::pow(a.beta2, float(a.step));
  adamwMultiKernel<<<unsigned(count), kThreads, 0, s>>>(tensors, chunks, a, bc1, bc2, norm, maxNorm,
                                                        step);
  return cudaGetLastError();
}

} // namespace llmopt::kernels::cuda
