//===- elementwise.cu - CUDA kernels: the plan's small kernels ------------===//
//
// The rest of the kernel ABI the plans use, with the CPU references'
// semantics: residual add, copy, scale, fill, bias add and its gradient,
// split / concat of the features, learned position embeddings, sums of
// squares (the gradient norm), the vocabulary-parallel cross-entropy's
// three steps and the MoE dispatch / combine (token <-> expert slot
// permutations). Grid-stride loops, fp32 arithmetic on float or bf16
// storage; gradients of weights accumulate into fp32.
//
//===----------------------------------------------------------------------===//

#include "common.cuh"

#include <cub/block/block_scan.cuh>

#include <algorithm>

#include <cmath>

namespace llmopt::kernels::cuda {
namespace {

struct Add {
  __device__ void operator()(const float *in, float *out) const { out[0] = in[0] + in[1]; }
};
struct Scale {
  float f;
  __device__ void operator()(const float *in, float *out) const { out[0] = in[0] * f; }
};
template <typename T> __global__ void toFloatKernel(const T *x, float *y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = ld(x + i);
}
template <typename T> __global__ void fromFloatKernel(const float *x, T *y, int64_t n) {
  GRID_STRIDE(i, n) st(y + i, x[i]);
}
template <typename T>
__global__ void addIntoKernel(float *acc, const T *x, int64_t n, float scale) {
  // The product rounded apart (no fused multiply-add): as the CPU backend.
  GRID_STRIDE(i, n) acc[i] += __fmul_rn(ld(x + i), scale);
}
template <typename T> __global__ void fillKernel(T *y, int64_t n, float v) {
  GRID_STRIDE(i, n) st(y + i, v);
}
template <typename T>
__global__ void biasAddKernel(const T *x, const T *bias, T *y, int64_t n, int64_t c) {
  GRID_STRIDE(i, n) st(y + i, ld(x + i) + ld(bias + i % c));
}
/// Column sums (bias gradients), deterministic: a block per 32 columns and
/// chunk of rows, 32 row lanes each summing every 32nd row of the chunk in
/// double, the lanes then added in order; coalesced reads (a warp reads 32
/// neighbouring columns). With one chunk the block writes `out`; with
/// several each writes its chunk's partial sums and sumChunksKernel adds
/// them in chunk order. (A block per 32 columns over every row kept too few
/// loads in flight: GPT-2 124M's 768-wide gradients ran on 24 blocks.)
template <typename T>
__global__ void sumRowsKernel(const T *g, float *out, double *partial, int64_t rows, int64_t c,
                              int64_t chunkRows, bool add) {
  __shared__ double part[32][33];
  int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  int64_t r0 = int64_t(blockIdx.y) * chunkRows, r1 = min(rows, r0 + chunkRows);
  double s = 0;
  if (j < c)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 32)
      s += double(ld(g + r * c + j));
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    double t = 0;
    for (int y = 0; y < 32; ++y)
      t += part[y][threadIdx.x];
    if (partial)
      partial[blockIdx.y * c + j] = t;
    else
      out[j] = add ? out[j] + float(t) : float(t);
  }
}
__global__ void sumChunksKernel(const double *partial, float *out, int64_t chunks, int64_t c,
                                bool add) {
  GRID_STRIDE(j, c) {
    double t = 0;
    for (int64_t k = 0; k < chunks; ++k)
      t += partial[k * c + j];
    out[j] = add ? out[j] + float(t) : float(t);
  }
}
/// Row chunks of about 512 rows, at most 64 (the partial sums' scratch).
int64_t sumRowsChunks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(64, rows / 512));
}
template <typename T>
cudaError_t launchSumRows(const T *g, float *out, int64_t rows, int64_t c, bool add, void *scratch,
                          cudaStream_t s) {
  if (c == 0)
    return cudaSuccess;
  int64_t chunks = scratch ? sumRowsChunks(rows) : 1;
  int64_t chunkRows = (rows + chunks - 1) / chunks;
  auto *partial = chunks > 1 ? static_cast<double *>(scratch) : nullptr;
  sumRowsKernel<<<dim3(unsigned((c + 31) / 32), unsigned(chunks)), dim3(32, 32), 0, s>>>(
      g, out, partial, rows, c, chunkRows, add);
  if (partial)
    sumChunksKernel<<<gridFor(c), kThreads, 0, s>>>(partial, out, chunks, c, add);
  return cudaGetLastError();
}
/// Columns [offset, offset + size) of x [rows, c] to / from y [rows, size].
template <typename T>
__global__ void columnsKernel(const T *x, T *y, int64_t rows, int64_t c, int64_t offset,
                              int64_t size, bool gather) {
  GRID_STRIDE(i, rows * size) {
    int64_t r = i / size, j = i % size;
    if (gather)
      y[i] = x[r * c + offset + j];
    else
      y[r * c + offset + j] = x[i];
  }
}
/// columnsKernel on 16-byte words where rows, offset and pointers allow
/// (GPT-2's Q/K/V split and the gradients' concat: 2-byte copies ran at
/// about a quarter of an H100's bandwidth).
template <typename T>
cudaError_t launchColumns(const T *x, T *y, int64_t rows, int64_t c, int64_t offset, int64_t size,
                          bool gather, cudaStream_t s) {
  constexpr int64_t per = 16 / sizeof(T);
  if (c % per == 0 && offset % per == 0 && size % per == 0 &&
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0) {
    columnsKernel<<<gridFor(rows * size / per), kThreads, 0, s>>>(
        reinterpret_cast<const uint4 *>(x), reinterpret_cast<uint4 *>(y), rows, c / per,
        offset / per, size / per, gather);
  } else {
    columnsKernel<<<gridFor(rows * size), kThreads, 0, s>>>(x, y, rows, c, offset, size, gather);
  }
  return cudaGetLastError();
}
template <typename T>
__global__ void positionFwdKernel(const T *x, const T *table, T *out, int64_t batch, int64_t seq,
                                  int64_t h, const int32_t *pos) {
  GRID_STRIDE(i, batch * seq * h) {
    int64_t c = i % h, s = (i / h) % seq;
    st(out + i, ld(x + i) + ld(table + int64_t(pos ? pos[s] : s) * h + c));
  }
}
template <typename T>
__global__ void positionBwdKernel(const T *d, float *dtable, int64_t batch, int64_t seq, int64_t h,
                                  const int32_t *pos) {
  if (!pos) {
    // Positions 0..seq-1: a thread per (position, column) summing the batch
    // in order (deterministic).
    GRID_STRIDE(i, seq * h) {
      float sum = 0;
      for (int64_t b = 0; b < batch; ++b)
        sum += ld(d + b * seq * h + i);
      dtable[i] += sum;
    }
    return;
  }
  GRID_STRIDE(i, batch * seq * h) {
    int64_t c = i % h, s = (i / h) % seq;
    atomicAdd(dtable + int64_t(pos[s]) * h + c, ld(d + i));
  }
}
/// Per-block partial sums of sumSquaresKernel and the count of blocks done
/// (zero between launches: launches of it must not run concurrently on two
/// streams of one device; the backend runs them on one stream).
__device__ double squaresPartials[1024];
__device__ unsigned squaresDone;

/// *out += sum of x^2, deterministically: each block's sum (a fixed tree)
/// goes to its slot, and the last block to finish adds the slots in block
/// order (a fixed tree again), for a grid that depends on n only. (Blocks
/// adding their sums with atomics made the result depend on their order.)
__global__ void sumSquaresKernel(const float *x, int64_t n, double *out) {
  __shared__ double red[kThreads];
  __shared__ bool last;
  double s = 0;
  // 16-byte words where x allows, then the rest.
  int64_t words = reinterpret_cast<uintptr_t>(x) % 16 == 0 ? n / 4 : 0;
  GRID_STRIDE(w, words) {
    float4 q = reinterpret_cast<const float4 *>(x)[w];
    s += double(q.x) * double(q.x) + double(q.y) * double(q.y) + double(q.z) * double(q.z) +
         double(q.w) * double(q.w);
  }
  for (int64_t i = words * 4 + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    s += double(x[i]) * double(x[i]);
  s = blockTreeSum(s, red);
  if (threadIdx.x == 0) {
    squaresPartials[blockIdx.x] = s;
    __threadfence();
    last = atomicAdd(&squaresDone, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  double t = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
    t += static_cast<volatile double *>(squaresPartials)[b];
  t = blockTreeSum(t, red);
  if (threadIdx.x == 0) {
    *out += t;
    squaresDone = 0;
  }
}
/// One chunk's sum of squares per block (sumSquaresChunks' first launch):
/// a fixed tree over the block's threads, so that the same chunks give the
/// same sums.
__global__ void chunkSquaresKernel(const SquaresChunk *chunks, double *partials) {
  __shared__ double red[kThreads];
  const SquaresChunk c = chunks[blockIdx.x];
  double s = 0;
  int64_t words = reinterpret_cast<uintptr_t>(c.x) % 16 == 0 ? c.n / 4 : 0;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
    float4 q = reinterpret_cast<const float4 *>(c.x)[w];
    s += double(q.x) * double(q.x) + double(q.y) * double(q.y) + double(q.z) * double(q.z) +
         double(q.w) * double(q.w);
  }
  for (int64_t i = words * 4 + threadIdx.x; i < c.n; i += blockDim.x)
    s += double(c.x[i]) * double(c.x[i]);
  s = blockTreeSum(s, red);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = s;
}
/// *sum += the partials in chunk order (a fixed tree: one block).
__global__ void addPartialsKernel(const double *partials, int64_t count, double *sum) {
  __shared__ double red[kThreads];
  double t = 0;
  for (int64_t b = threadIdx.x; b < count; b += blockDim.x)
    t += partials[b];
  t = blockTreeSum(t, red);
  if (threadIdx.x == 0)
    *sum += t;
}
__global__ void finishSquaresKernel(const double *sum, float *out, bool root) {
  *out = root ? float(sqrt(*sum)) : float(*sum);
}

// --- vocabulary-parallel cross-entropy -------------------------------------------

/// One block per row: log-sum-exp of this rank's part of the logits and the
/// target's logit when the label falls in the part.
template <typename T>
__global__ void vpStatsKernel(const T *z, const int32_t *labels, float *lse, float *target,
                              int64_t part, int64_t real, int64_t offset, int64_t ignore) {
  __shared__ float red[32];
  int64_t r = blockIdx.x;
  const T *row = z + r * part;
  // Only the part's first `real` entries are the vocabulary's (the rest
  // pads it); a part of padding alone has log-sum-exp -inf.
  float logSumExp = real > 0 ? rowLogSumExp(row, real, red) : -INFINITY;
  if (threadIdx.x == 0) {
    lse[r] = logSumExp;
    int64_t l = labels[r];
    target[r] = l != ignore && l >= offset && l < offset + part ? ld(row + (l - offset)) : 0.0f;
  }
}
__device__ float gatheredLse(const float *all, int64_t rows, int64_t parts, int64_t r) {
  float m = all[r];
  for (int64_t p = 1; p < parts; ++p)
    m = fmaxf(m, all[p * rows + r]);
  float s = 0;
  for (int64_t p = 0; p < parts; ++p)
    s += expf(all[p * rows + r] - m);
  return m + logf(s);
}
/// One thread: the mean over counted rows (deterministic order).
__global__ void vpLossKernel(const float *all, const float *target, const int32_t *labels,
                             float *loss, int64_t rows, int64_t parts, int64_t ignore) {
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] == ignore)
      continue;
    total += double(gatheredLse(all, rows, parts, r)) - double(target[r]);
    ++counted;
  }
  *loss = counted ? float(total / double(counted)) : 0.0f;
}
template <typename T>
__global__ void vpBwdKernel(const T *z, const int32_t *labels, const float *all, const float *dloss,
                            T *g, int64_t rows, int64_t part, int64_t real, int64_t parts,
                            int64_t offset, int64_t ignore, int64_t counted) {
  GRID_STRIDE(i, rows * part) {
    int64_t r = i / part, j = i % part;
    if (labels[r] == ignore || counted == 0 || j >= real) { // padding: no gradient
      st(g + i, 0.0f);
      continue;
    }
    float p = expf(ld(z + i) - gatheredLse(all, rows, parts, r));
    st(g + i, (p - (offset + j == labels[r] ? 1.0f : 0.0f)) * (*dloss / float(counted)));
  }
}
__global__ void countKernel(const int32_t *labels, int64_t rows, int64_t ignore,
                            unsigned long long *counted) {
  GRID_STRIDE(r, rows) if (labels[r] != ignore) atomicAdd(counted, 1ull);
}

// --- MoE dispatch / combine -------------------------------------------------------

/// Each expert's slots in token order (the CPU reference's moeSlots): a
/// block per expert scans the choices a block-width at a time (an exclusive
/// prefix sum of "is this expert"); -1 past the capacity, and *bad set for
/// an index outside the experts. (A thread per expert walking every choice
/// took milliseconds per call at 32K choices.)
__global__ void slotsKernel(const int32_t *idx, int64_t choices, int64_t experts, int64_t capacity,
                            int64_t *slots, int *bad) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  int64_t e = blockIdx.x, load = 0;
  for (int64_t start = 0; start < choices; start += kThreads) {
    int64_t i = start + threadIdx.x;
    int32_t x = i < choices ? idx[i] : 0;
    if (e == 0 && i < choices && (x < 0 || x >= experts)) {
      slots[i] = -1; // dropped
      if (bad)
        *bad = 1;
    }
    int mine = i < choices && x == e ? 1 : 0, before = 0, total = 0;
    Scan(scan).ExclusiveSum(mine, before, total);
    if (mine)
      slots[i] = load + before < capacity ? load + before : -1;
    load += total;
    __syncthreads(); // the scan's storage is reused
  }
}
template <typename T>
__global__ void dispatchKernel(const T *x, const int32_t *idx, const int64_t *slots, T *rows, T *dx,
                               int64_t choices, int64_t topK, int64_t h, int64_t capacity,
                               bool backward) {
  // Forward: copy each choice's token into its slot. Backward: each token's
  // copies' gradients (rows -> x) summed, one thread per token feature.
  if (!backward) {
    GRID_STRIDE(i, choices * h) {
      int64_t c = i / h, f = i % h;
      if (slots[c] >= 0)
        rows[(int64_t(idx[c]) * capacity + slots[c]) * h + f] = x[(c / topK) * h + f];
    }
  } else {
    GRID_STRIDE(i, (choices / topK) * h) {
      int64_t t = i / h, f = i % h;
      float s = 0;
      for (int64_t k = 0; k < topK; ++k) {
        int64_t c = t * topK + k;
        if (slots[c] >= 0)
          s += ld(rows + (int64_t(idx[c]) * capacity + slots[c]) * h + f);
      }
      st(dx + i, s);
    }
  }
}
template <typename T>
__global__ void combineFwdKernel(const T *e, const float *w, const int32_t *idx,
                                 const int64_t *slots, T *out, int64_t tokens, int64_t topK,
                                 int64_t h, int64_t capacity) {
  GRID_STRIDE(i, tokens * h) {
    int64_t t = i / h, f = i % h;
    float s = 0;
    for (int64_t k = 0; k < topK; ++k) {
      int64_t c = t * topK + k;
      if (slots[c] >= 0)
        s += w[c] * ld(e + (int64_t(idx[c]) * capacity + slots[c]) * h + f);
    }
    st(out + i, s);
  }
}
/// One block per choice: its slot's gradient (w x dout) and the weight's
/// gradient (dout . expert row).
template <typename T>
__global__ void combineBwdKernel(const T *d, const T *e, const float *w, const int32_t *idx,
                                 const int64_t *slots, T *de, float *dw, int64_t topK, int64_t h,
                                 int64_t capacity) {
  __shared__ float red[kThreads];
  int64_t c = blockIdx.x;
  float acc = 0;
  if (slots[c] >= 0) {
    int64_t row = (int64_t(idx[c]) * capacity + slots[c]) * h;
    const T *g = d + (c / topK) * h;
    for (int64_t f = threadIdx.x; f < h; f += blockDim.x) {
      st(de + row + f, w[c] * ld(g + f));
      acc += ld(g + f) * ld(e + row + f);
    }
  }
  acc = blockTreeSum(acc, red);
  if (threadIdx.x == 0)
    dw[c] = acc;
}

/// Slots into `slots` (device, choices entries), false when an index is out
/// of range (checked on the host after a synchronizing copy).
cudaError_t computeSlots(const int32_t *idx, int64_t choices, int64_t experts, int64_t capacity,
                         int64_t *slots, int *bad, cudaStream_t s, bool &ok) {
  ok = true;
  if (bad)
    if (cudaError_t e = cudaMemsetAsync(bad, 0, sizeof(int), s); e != cudaSuccess)
      return e;
  if (experts > 0)
    slotsKernel<<<unsigned(experts), kThreads, 0, s>>>(idx, choices, experts, capacity, slots, bad);
  if (!bad)
    return cudaGetLastError();
  int host = 0;
  if (cudaError_t e = cudaMemcpyAsync(&host, bad, sizeof(int), cudaMemcpyDeviceToHost, s);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess)
    return e;
  ok = host == 0;
  return cudaGetLastError();
}

} // namespace

size_t sumRowsScratchBytes(int64_t rows, int64_t c) {
  int64_t chunks = sumRowsChunks(rows);
  return chunks > 1 ? size_t(chunks * c) * sizeof(double) : 0;
}

#define LLMOPT_CUDA_DEFINE_SMALL(T)                                                                \
  cudaError_t toFloat(const T *x, float *y, int64_t n, cudaStream_t s) {                           \
    toFloatKernel<<<gridFor(n), kThreads, 0, s>>>(x, y, n);                                        \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t fromFloat(const float *x, T *y, int64_t n, cudaStream_t s) {                         \
    fromFloatKernel<<<gridFor(n), kThreads, 0, s>>>(x, y, n);                                      \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t addInto(float *acc, const T *x, int64_t n, cudaStream_t s, float scale) {            \
    addIntoKernel<<<gridFor(n), kThreads, 0, s>>>(acc, x, n, scale);                               \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t add(const T *a, const T *b, T *y, int64_t n, cudaStream_t s) {                       \
    return launchMap(MapArgs<T, 2, 1>{{a, b}, {y}}, n, Add{}, s);                                  \
  }                                                                                                \
  cudaError_t scale(const T *x, T *y, int64_t n, float f, cudaStream_t s) {                        \
    return launchMap(MapArgs<T, 1, 1>{{x}, {y}}, n, Scale{f}, s);                                  \
  }                                                                                                \
  cudaError_t fill(T *y, int64_t n, float v, cudaStream_t s) {                                     \
    fillKernel<<<gridFor(n), kThreads, 0, s>>>(y, n, v);                                           \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t biasAdd(const T *x, const T *bias, T *y, int64_t n, int64_t c, cudaStream_t s) {     \
    biasAddKernel<<<gridFor(n), kThreads, 0, s>>>(x, bias, y, n, c);                               \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t sumRows(const T *g, float *out, int64_t rows, int64_t c, cudaStream_t s,             \
                      void *scratch) {                                                             \
    return launchSumRows(g, out, rows, c, false, scratch, s);                                      \
  }                                                                                                \
  cudaError_t sumRowsInto(const T *g, float *out, int64_t rows, int64_t c, cudaStream_t s,         \
                          void *scratch) {                                                         \
    return launchSumRows(g, out, rows, c, true, scratch, s);                                       \
  }                                                                                                \
  cudaError_t columns(const T *x, T *y, int64_t rows, int64_t c, int64_t offset, int64_t size,     \
                      bool gather, cudaStream_t s) {                                               \
    return launchColumns(x, y, rows, c, offset, size, gather, s);                                  \
  }                                                                                                \
  cudaError_t positionEmbeddingForward(const T *x, const T *table, T *out, int64_t batch,          \
                                       int64_t seq, int64_t h, const int32_t *pos,                 \
                                       cudaStream_t s) {                                           \
    positionFwdKernel<<<gridFor(batch *seq *h), kThreads, 0, s>>>(x, table, out, batch, seq, h,    \
                                                                  pos);                            \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t positionEmbeddingBackward(const T *d, float *dtable, int64_t batch, int64_t seq,     \
                                        int64_t h, const int32_t *pos, cudaStream_t s) {           \
    positionBwdKernel<<<gridFor(batch *seq *h), kThreads, 0, s>>>(d, dtable, batch, seq, h, pos);  \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t vpCrossEntropyStats(const T *z, const int32_t *labels, float *lse, float *target,    \
                                  int64_t rows, int64_t part, int64_t real, int64_t offset,        \
                                  int64_t ignore, cudaStream_t s) {                                \
    if (rows == 0)                                                                                 \
      return cudaSuccess;                                                                          \
    vpStatsKernel<<<unsigned(rows), kThreads, 0, s>>>(z, labels, lse, target, part, real, offset,  \
                                                      ignore);                                     \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t vpCrossEntropyBackward(const T *z, const int32_t *labels, const float *all,          \
                                     const float *dloss, T *g, int64_t rows, int64_t part,         \
                                     int64_t real, int64_t parts, int64_t offset, int64_t ignore,  \
                                     unsigned long long *scratch, cudaStream_t s) {                \
    if (cudaError_t e = cudaMemsetAsync(scratch, 0, sizeof(*scratch), s); e != cudaSuccess)        \
      return e;                                                                                    \
    countKernel<<<gridFor(rows), kThreads, 0, s>>>(labels, rows, ignore, scratch);                 \
    unsigned long long counted = 0;                                                                \
    if (cudaError_t e =                                                                            \
            cudaMemcpyAsync(&counted, scratch, sizeof(counted), cudaMemcpyDeviceToHost, s);        \
        e != cudaSuccess)                                                                          \
      return e;                                                                                    \
    if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess)                                \
      return e;                                                                                    \
    vpBwdKernel<<<gridFor(rows *part), kThreads, 0, s>>>(                                          \
        z, labels, all, dloss, g, rows, part, real, parts, offset, ignore, int64_t(counted));      \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  static cudaError_t dispatch(const T *x, const int32_t *idx, T *rows, T *dx, int64_t tokens,      \
                              int64_t topK, int64_t h, int64_t experts, int64_t capacity,          \
                              int64_t *slots, int *bad, bool backward, cudaStream_t s, bool &ok) { \
    if (cudaError_t e = computeSlots(idx, tokens * topK, experts, capacity, slots, bad, s, ok);    \
        e != cudaSuccess || !ok)                                                                   \
      return e;                                                                                    \
    if (!backward)                                                                                 \
      if (cudaError_t e = cudaMemsetAsync(rows, 0, sizeof(T) * experts * capacity * h, s);         \
          e != cudaSuccess)                                                                        \
        return e;                                                                                  \
    int64_t work = backward ? tokens * h : tokens * topK * h;                                      \
    dispatchKernel<<<gridFor(work), kThreads, 0, s>>>(x, idx, slots, rows, dx, tokens * topK,      \
                                                      topK, h, capacity, backward);                \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t moeDispatchForward(const T *x, const int32_t *idx, T *rows, int64_t tokens,          \
                                 int64_t h, int64_t topK, int64_t experts, int64_t capacity,       \
                                 int64_t *slots, int *bad, cudaStream_t s, bool &ok) {             \
    return dispatch(x, idx, rows, nullptr, tokens, topK, h, experts, capacity, slots, bad, false,  \
                    s, ok);                                                                        \
  }                                                                                                \
  cudaError_t moeDispatchBackward(const T *drows, const int32_t *idx, T *dx, int64_t tokens,       \
                                  int64_t h, int64_t topK, int64_t experts, int64_t capacity,      \
                                  int64_t *slots, int *bad, cudaStream_t s, bool &ok) {            \
    return dispatch(static_cast<const T *>(nullptr), idx, const_cast<T *>(drows), dx, tokens,      \
                    topK, h, experts, capacity, slots, bad, true, s, ok);                          \
  }                                                                                                \
  cudaError_t moeCombineForward(const T *e, const float *w, const int32_t *idx, T *out,            \
                                int64_t tokens, int64_t topK, int64_t h, int64_t experts,          \
                                int64_t capacity, int64_t *slots, int *bad, cudaStream_t s,        \
                                bool &ok) {                                                        \
    if (cudaError_t err = computeSlots(idx, tokens * topK, experts, capacity, slots, bad, s, ok);  \
        err != cudaSuccess || !ok)                                                                 \
      return err;                                                                                  \
    combineFwdKernel<<<gridFor(tokens *h), kThreads, 0, s>>>(e, w, idx, slots, out, tokens, topK,  \
                                                             h, capacity);                         \
    return cudaGetLastError();                                                                     \
  }                                                                                                \
  cudaError_t moeCombineBackward(const T *d, const T *e, const float *w, const int32_t *idx,       \
                                 T *de, float *dw, int64_t tokens, int64_t topK, int64_t h,        \
                                 int64_t experts, int64_t capacity, int64_t *slots, int *bad,      \
                                 cudaStream_t s, bool &ok) {                                       \
    if (cudaError_t err = computeSlots(idx, tokens * topK, experts, capacity, slots, bad, s, ok);  \
        err != cudaSuccess || !ok)                                                                 \
      return err;                                                                                  \
    if (cudaError_t err = cudaMemsetAsync(de, 0, sizeof(T) * experts * capacity * h, s);           \
        err != cudaSuccess)                                                                        \
      return err;                                                                                  \
    if (tokens * topK == 0)                                                                        \
      return cudaSuccess;                                                                          \
    combineBwdKernel<<<unsigned(tokens * topK), kThreads, 0, s>>>(d, e, w, idx, slots, de, dw,     \
                                                                  topK, h, capacity);              \
    return cudaGetLastError();                                                                     \
  }
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DEFINE_SMALL)
#undef LLMOPT_CUDA_DEFINE_SMALL

/// Reductions into one double: at most 1024 blocks (their parts added by the
/// last block; squaresPartials has 1024 slots), not a block per 256 elements
/// -- a million blocks' atomics on one address took about 10 ms per step for
/// a 1B-parameter model's norm.
static unsigned reduceGrid(int64_t n) { return std::min(gridFor(n), 1024u); }

cudaError_t sumSquares(const float *x, int64_t n, double *scratch, float *out, bool root,
                       cudaStream_t s) {
  if (cudaError_t e = cudaMemsetAsync(scratch, 0, sizeof(double), s); e != cudaSuccess)
    return e;
  if (n > 0)
    sumSquaresKernel<<<reduceGrid(n), kThreads, 0, s>>>(x, n, scratch);
  finishSquaresKernel<<<1, 1, 0, s>>>(scratch, out, root);
  return cudaGetLastError();
}

cudaError_t floatOfSum(const double *sum, float *out, cudaStream_t s) {
  finishSquaresKernel<<<1, 1, 0, s>>>(sum, out, false);
  return cudaGetLastError();
}

cudaError_t sqrtOfSum(const double *sum, float *out, cudaStream_t s) {
  finishSquaresKernel<<<1, 1, 0, s>>>(sum, out, true);
  return cudaGetLastError();
}

cudaError_t sumSquaresAccumulate(const float *x, int64_t n, double *sum, cudaStream_t s) {
  if (n > 0)
    sumSquaresKernel<<<reduceGrid(n), kThreads, 0, s>>>(x, n, sum);
  return cudaGetLastError();
}

std::vector<SquaresChunk> squaresChunks(const std::vector<const float *> &arrays,
                                        const std::vector<int64_t> &counts) {
  std::vector<SquaresChunk> chunks;
  for (size_t a = 0; a < arrays.size() && a < counts.size(); ++a)
    for (int64_t b = 0; b < counts[a]; b += kSquaresChunk)
      chunks.push_back({arrays[a] + b, std::min(counts[a] - b, kSquaresChunk)});
  return chunks;
}

cudaError_t sumSquaresChunks(const SquaresChunk *chunks, int64_t count, double *partials,
                             double *sum, cudaStream_t s) {
  if (count == 0)
    return cudaSuccess;
  chunkSquaresKernel<<<unsigned(count), kThreads, 0, s>>>(chunks, partials);
  addPartialsKernel<<<1, kThreads, 0, s>>>(partials, count, sum);
  return cudaGetLastError();
}

cudaError_t vpCrossEntropyLoss(const float *all, const float *target, const int32_t *labels,
                               float *loss, int64_t rows, int64_t parts, int64_t ignore,
                               cudaStream_t s) {
  vpLossKernel<<<1, 1, 0, s>>>(all, target, labels, loss, rows, parts, ignore);
  return cudaGetLastError();
}

} // namespace llmopt::kernels::cuda
