//===- moe.cu - MoE router, expert counts and the experts' GEMMs -----------===//
//
// The router's logits x gate^T are one cuBLASLt product (fp32 result), the
// softmax and top-k a thread per token (E is small: 8 for Mixtral); its
// backward rebuilds the logits, forms each token's logit gradients (in the
// storage type, as every activation gradient of a 16-bit plan) and makes dx
// and the gate's gradient two more products. The experts' MLPs are strided
// batched products over groups of experts ([experts, capacity, hidden]
// rows), their hidden activations kept in scratch for one group at a time
// and recomputed by the backward, as the CPU reference does. Semantics:
// cpu.h's moeRouterForward / moeRouterBackward / moeExpertCounts /
// moeExpertsForward / moeExpertsBackward, to summation order and the
// storage type's rounding of the hidden activations.
//
//===----------------------------------------------------------------------===//

#include "common.cuh"
#include "llmopt-kernels/gemm.h"

#include <algorithm>

namespace llmopt::kernels::cuda {
namespace {

/// Row pitch of the router's logits and their gradients: E rounded up to 8
/// elements (16-byte rows in bf16, as cuBLASLt wants them).
int64_t routerPitch(int64_t experts) { return (experts + 7) / 8 * 8; }

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

/// Softmax over row r's logits: the maximum and the sum of exponentials.
__device__ __forceinline__ void softmaxStats(const float *z, int64_t experts, float &mx,
                                             float &sum) {
  mx = -INFINITY;
  for (int64_t e = 0; e < experts; ++e)
    mx = fmaxf(mx, z[e]);
  sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += expf(z[e] - mx);
}

/// Top-k of each token's softmax, highest first, ties to the lower expert
/// (the CPU reference's partial sort), renormalized when `normalize`.
__global__ void routerTopKKernel(const float *logits, int64_t ld, float *weights, int32_t *indices,
                                 int64_t tokens, int64_t experts, int64_t topK, bool normalize) {
  GRID_STRIDE(r, tokens) {
    const float *z = logits + r * ld;
    float mx, sum;
    softmaxStats(z, experts, mx, sum);
    int32_t *idx = indices + r * topK;
    float *w = weights + r * topK, kept = 0;
    for (int64_t j = 0; j < topK; ++j) {
      int32_t best = -1;
      float bestP = -1;
      for (int64_t e = 0; e < experts; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i)
          taken |= idx[i] == e;
        float p = expf(z[e] - mx) / sum;
        if (!taken && p > bestP) {
          bestP = p;
          best = int32_t(e);
        }
      }
      idx[j] = best;
      w[j] = bestP;
      kept += bestP;
    }
    if (normalize)
      for (int64_t j = 0; j < topK; ++j)
        w[j] /= kept;
  }
}

/// Each token's logit gradients (row pitch ld, padding zeroed): through the
/// renormalized top-k softmax (`normalize`) or the softmax over every
/// expert, plus, with `counts`, the load-balancing loss's gradient
/// auxC * counts[e] through the softmax over every expert.
template <typename T>
__global__ void routerDlogitsKernel(const float *logits, const float *dweights,
                                    const float *weights, const int32_t *indices,
                                    const float *counts, float auxC, T *dlogits, int64_t ld,
                                    int64_t tokens, int64_t experts, int64_t topK, bool normalize) {
  GRID_STRIDE(r, tokens) {
    const float *z = logits + r * ld;
    const float *dw = dweights + r * topK, *w = weights + r * topK;
    const int32_t *idx = indices + r * topK;
    float mx, sum;
    softmaxStats(z, experts, mx, sum);
    // s: sum_j w_j dw_j (normalize), else sum_e p_e dp_e; a: sum_e p_e aux_e.
    float s = 0, a = 0;
    if (normalize)
      for (int64_t j = 0; j < topK; ++j)
        s += w[j] * dw[j];
    for (int64_t e = 0; e < experts; ++e) {
      float p = expf(z[e] - mx) / sum;
      if (!normalize) {
        float dp = 0;
        for (int64_t j = 0; j < topK; ++j)
          dp += idx[j] == e ? dw[j] : 0.0f;
        s += p * dp;
      }
      if (counts)
        a += p * counts[e] * auxC;
    }
    T *d = dlogits + r * ld;
    for (int64_t e = 0; e < ld; ++e) {
      float g = 0;
      if (e < experts) {
        float p = expf(z[e] - mx) / sum;
        if (normalize) {
          for (int64_t j = 0; j < topK; ++j)
            if (idx[j] == e)
              g = w[j] * (dw[j] - s);
        } else {
          float dp = 0;
          for (int64_t j = 0; j < topK; ++j)
            dp += idx[j] == e ? dw[j] : 0.0f;
          g = p * (dp - s);
        }
        if (counts)
          g += p * (counts[e] * auxC - a);
      }
      st(d + e, g);
    }
  }
}

/// count_e of the routed choices (exact: integer counts in fp32).
__global__ void countsKernel(const int32_t *indices, float *counts, int64_t choices,
                             int64_t experts) {
  GRID_STRIDE(i, choices) {
    int32_t e = indices[i];
    if (e >= 0 && e < experts)
      atomicAdd(counts + e, 1.0f);
  }
}

/// The router's scratch: fp32 logits, then the logit gradients (T) and the
/// local expert counts (aux loss).
struct RouterParts {
  float *logits, *counts;
  void *dlogits;
  int64_t ld;
  RouterParts(const MoERouterDims &d, size_t elementBytes, void *scratch) {
    ld = routerPitch(d.experts);
    char *base = static_cast<char *>(scratch);
    logits = reinterpret_cast<float *>(base);
    size_t off = aligned(size_t(d.tokens * ld) * 4);
    dlogits = base + off;
    off += aligned(size_t(d.tokens * ld) * elementBytes);
    counts = reinterpret_cast<float *>(base + off);
  }
  static size_t bytes(const MoERouterDims &d, size_t elementBytes) {
    int64_t ld = routerPitch(d.experts);
    return aligned(size_t(d.tokens * ld) * 4) + aligned(size_t(d.tokens * ld) * elementBytes) +
           aligned(size_t(d.experts) * 4);
  }
};

/// `e` (else the last launch's status) is success, or `error` says what failed.
bool launched(const char *what, std::string &error, cudaError_t e = cudaSuccess) {
  if (e == cudaSuccess)
    e = cudaGetLastError();
  if (e != cudaSuccess) {
    error = std::string(what) + ": " + cudaGetErrorString(e);
    return false;
  }
  return true;
}

template <typename T>
bool routerLogits(Gemm &gemm, const T *x, const T *gate, const RouterParts &p,
                  const MoERouterDims &d, cudaStream_t s, std::string &error) {
  // logits [tokens, E] = x [tokens, hidden] gate^T, fp32.
  BatchedShape z{d.tokens, d.experts, d.hidden, false, true,        d.hidden,   d.hidden, p.ld,
                 0,        0,         0,        1,     typeOf<T>(), CUDA_R_32F, 1.0f,     0.0f};
  return gemm.batched(x, gate, p.logits, z, s, error);
}

template <typename T>
bool routerForward(Gemm &gemm, const T *x, const T *gate, float *weights, int32_t *indices,
                   const MoERouterDims &d, void *scratch, cudaStream_t s, std::string &error) {
  if (d.topK < 1 || d.topK > d.experts) {
    error = "moe router: top_k must be in [1, experts]";
    return false;
  }
  RouterParts p(d, sizeof(T), scratch);
  if (!routerLogits(gemm, x, gate, p, d, s, error))
    return false;
  routerTopKKernel<<<gridFor(d.tokens), kThreads, 0, s>>>(p.logits, p.ld, weights, indices,
                                                          d.tokens, d.experts, d.topK, d.normalize);
  return launched("moe router", error);
}

template <typename T>
bool routerBackward(Gemm &gemm, const float *dweights, const T *x, const T *gate,
                    const float *weights, const int32_t *indices, T *dx, float *dgate,
                    const MoERouterDims &d, const MoEAux &aux, void *scratch, cudaStream_t s,
                    std::string &error) {
  RouterParts p(d, sizeof(T), scratch);
  if (!routerLogits(gemm, x, gate, p, d, s, error))
    return false;
  const float *counts = nullptr;
  float auxC = 0;
  if (aux.coef > 0) {
    // d aux / d P_e = coef * scale * E * count_e / (N^2 topK), N the tokens
    // counted (the whole sequence's when the counts come from outside).
    double n = aux.counts ? double(aux.tokens) : double(d.tokens);
    auxC =
        float(double(aux.coef) * double(aux.scale) * double(d.experts) / (n * n * double(d.topK)));
    counts = aux.counts;
    if (!counts) {
      if (!launched("moe router backward", error,
                    cudaMemsetAsync(p.counts, 0, size_t(d.experts) * 4, s)))
        return false;
      countsKernel<<<gridFor(d.tokens * d.topK), kThreads, 0, s>>>(indices, p.counts,
                                                                   d.tokens * d.topK, d.experts);
      counts = p.counts;
    }
  }
  T *dl = static_cast<T *>(p.dlogits);
  routerDlogitsKernel<<<gridFor(d.tokens), kThreads, 0, s>>>(p.logits, dweights, weights, indices,
                                                             counts, auxC, dl, p.ld, d.tokens,
                                                             d.experts, d.topK, d.normalize);
  if (!launched("moe router backward", error))
    return false;
  // dx [tokens, hidden] = dlogits [tokens, E] gate [E, hidden].
  BatchedShape bx{d.tokens,    d.hidden,    d.experts, false, false, p.ld,
                  d.hidden,    d.hidden,    0,         0,     0,     1,
                  typeOf<T>(), typeOf<T>(), 1.0f,      0.0f};
  // dgate [E, hidden] += dlogits^T x (fp32).
  BatchedShape bg{d.experts, d.hidden, d.tokens, true, false,       p.ld,       d.hidden, d.hidden,
                  0,         0,        0,        1,    typeOf<T>(), CUDA_R_32F, 1.0f,     1.0f};
  return gemm.batched(dl, gate, dx, bx, s, error) && gemm.batched(dl, x, dgate, bg, s, error);
}

/// Experts per group and the scratch's parts for a group: the hidden
/// activations h (gate / fc1), u (up), a (activation), and for the backward
/// their gradients da, dh, du, and dx in fp32.
struct ExpertParts {
  int64_t group;
  size_t hidden, rows; // bytes of one expert's [capacity, ffn] (T), [capacity, hidden] (fp32)
  ExpertParts(const MoEExpertDims &d, size_t elementBytes) {
    hidden = aligned(size_t(d.capacity * d.ffn) * elementBytes);
    rows = aligned(size_t(d.capacity * d.hidden) * 4);
    size_t per = std::max<size_t>(1, 6 * hidden + rows);
    size_t budget = d.scratchBudget ? d.scratchBudget : kBudget;
    group = std::max<int64_t>(1, std::min<int64_t>(d.experts, int64_t(budget / per)));
  }
  size_t bytes() const { return size_t(group) * (6 * hidden + rows); }
  template <typename T> T *part(void *scratch, int i) const {
    return reinterpret_cast<T *>(static_cast<char *>(scratch) + size_t(i) * group * hidden);
  }
  float *dx(void *scratch) const {
    return reinterpret_cast<float *>(static_cast<char *>(scratch) + 6 * group * hidden);
  }
  /// Scratch for the hidden activations of at most this many bytes (unless
  /// the dims say otherwise), or one expert's when that is more.
  static constexpr size_t kBudget = size_t(1) << 30;
};

/// A [g, m, n] = op(A) op(B) product over the group's experts.
template <typename T>
BatchedShape grouped(int64_t g, int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t lda,
                     int64_t ldb, int64_t ldc, int64_t sa, int64_t sb, int64_t sc, cudaDataType_t c,
                     float beta) {
  return BatchedShape{m, n, k, ta, tb, lda, ldb, ldc, sa, sb, sc, g, typeOf<T>(), c, 1.0f, beta};
}

/// The rows of each expert computed: `d.rows` (a dropless dispatch sizes
/// every expert for all tokens; the rest are zero), else all.
int64_t usedRows(const MoEExpertDims &d) {
  return d.rows > 0 && d.rows < d.capacity ? d.rows : d.capacity;
}

/// Calls `launch(at, count)` over the used rows of experts [0, g), `width`
/// values a row and `C` rows an expert: one call over all g * C rows where every
/// row is used (R = C), else one call per expert over its first R rows.
template <typename Launch>
bool overUsedRows(int64_t g, int64_t R, int64_t C, int64_t width, const char *what,
                  std::string &error, Launch launch) {
  bool all = R >= C;
  for (int64_t e = 0; e < (all ? 1 : g); ++e)
    if (!launched(what, error, launch(e * C * width, (all ? g * C : R) * width)))
      return false;
  return true;
}

/// h (and u), a for experts [e0, e0 + g): the group's hidden activations.
template <typename T>
bool expertHidden(Gemm &gemm, const T *x, const T *const *w, const MoEExpertDims &d,
                  const ExpertParts &p, void *scratch, int64_t e0, int64_t g, cudaStream_t s,
                  std::string &error) {
  int64_t C = d.capacity, R = usedRows(d), H = d.hidden, F = d.ffn;
  T *h = p.part<T>(scratch, 0), *u = p.part<T>(scratch, 1), *a = p.part<T>(scratch, 2);
  const T *xe = x + e0 * C * H;
  // h = x W1^T, u = x W3^T: [R, F] per expert (rows past R are not read).
  BatchedShape up =
      grouped<T>(g, R, F, H, false, true, H, H, F, C * H, F * H, C * F, typeOf<T>(), 0.0f);
  if (!gemm.batched(xe, w[0] + e0 * F * H, h, up, s, error))
    return false;
  if (d.swiglu && !gemm.batched(xe, w[1] + e0 * F * H, u, up, s, error))
    return false;
  // The activation over each expert's R rows.
  return overUsedRows(g, R, C, F, "moe experts", error, [&](int64_t at, int64_t count) {
    return d.swiglu ? swigluForward(h + at, u + at, a + at, count, s)
                    : geluForward(h + at, a + at, count, false, s);
  });
}

template <typename T>
bool expertsForward(Gemm &gemm, const T *x, const T *const *w, T *out, const MoEExpertDims &d,
                    void *scratch, cudaStream_t s, std::string &error) {
  ExpertParts p(d, sizeof(T));
  int64_t C = d.capacity, R = usedRows(d), H = d.hidden, F = d.ffn;
  const T *down = w[d.swiglu ? 2 : 1];
  if (R < C && !launched("moe experts", error,
                         cudaMemsetAsync(out, 0, size_t(d.experts * C * H) * sizeof(T), s)))
    return false;
  for (int64_t e0 = 0; e0 < d.experts; e0 += p.group) {
    int64_t g = std::min(p.group, d.experts - e0);
    if (!expertHidden(gemm, x, w, d, p, scratch, e0, g, s, error))
      return false;
    // out = a W2^T: [R, H] per expert.
    BatchedShape dn =
        grouped<T>(g, R, H, F, false, true, F, F, H, C * F, H * F, C * H, typeOf<T>(), 0.0f);
    if (!gemm.batched(p.part<T>(scratch, 2), down + e0 * H * F, out + e0 * C * H, dn, s, error))
      return false;
  }
  return true;
}

template <typename T>
bool expertsBackward(Gemm &gemm, const T *dout, const T *x, const T *const *w, T *dx,
                     float *const *dw, const MoEExpertDims &d, void *scratch, cudaStream_t s,
                     std::string &error) {
  ExpertParts p(d, sizeof(T));
  int64_t C = d.capacity, R = usedRows(d), H = d.hidden, F = d.ffn;
  int down = d.swiglu ? 2 : 1;
  if (R < C && !launched("moe experts backward", error,
                         cudaMemsetAsync(dx, 0, size_t(d.experts * C * H) * sizeof(T), s)))
    return false;
  T *h = p.part<T>(scratch, 0), *u = p.part<T>(scratch, 1), *a = p.part<T>(scratch, 2),
    *da = p.part<T>(scratch, 3), *dh = p.part<T>(scratch, 4), *du = p.part<T>(scratch, 5);
  for (int64_t e0 = 0; e0 < d.experts; e0 += p.group) {
    int64_t g = std::min(p.group, d.experts - e0);
    const T *dy = dout + e0 * C * H, *xe = x + e0 * C * H;
    if (!expertHidden(gemm, x, w, d, p, scratch, e0, g, s, error))
      return false;
    // da = dy W2: [R, F]; dW2 += dy^T a: [H, F] over the R rows.
    if (!gemm.batched(
            dy, w[down] + e0 * H * F, da,
            grouped<T>(g, R, F, H, false, false, H, F, F, C * H, H * F, C * F, typeOf<T>(), 0.0f),
            s, error) ||
        !gemm.batched(
            dy, a, dw[down] + e0 * H * F,
            grouped<T>(g, H, F, R, true, false, H, F, F, C * H, C * F, H * F, CUDA_R_32F, 1.0f), s,
            error))
      return false;
    if (!overUsedRows(g, R, C, F, "moe experts backward", error, [&](int64_t at, int64_t count) {
          return d.swiglu ? swigluBackward(da + at, h + at, u + at, dh + at, du + at, count, s)
                          : geluBackward(da + at, h + at, dh + at, count, false, s);
        }))
      return false;
    // dx = dh W1 (+ du W3): [C, H] in fp32; dW1 += dh^T x, dW3 += du^T x.
    float *dx32 = p.dx(scratch);
    for (int i = 0; i < (d.swiglu ? 2 : 1); ++i) {
      const T *dhi = i == 0 ? dh : du;
      if (!gemm.batched(dhi, w[i] + e0 * F * H, dx32,
                        grouped<T>(g, R, H, F, false, false, F, H, H, C * F, F * H, C * H,
                                   CUDA_R_32F, i == 0 ? 0.0f : 1.0f),
                        s, error) ||
          !gemm.batched(
              dhi, xe, dw[i] + e0 * F * H,
              grouped<T>(g, F, H, R, true, false, F, H, H, C * F, C * H, F * H, CUDA_R_32F, 1.0f),
              s, error))
        return false;
    }
    // The R rows of each expert (the rest of dx stays zero).
    T *dxe = dx + e0 * C * H;
    if (!overUsedRows(g, R, C, H, "moe experts backward", error, [&](int64_t at, int64_t count) {
          return fromFloat(dx32 + at, dxe + at, count, s);
        }))
      return false;
  }
  return true;
}

} // namespace

size_t moeRouterScratchBytes(const MoERouterDims &d, size_t elementBytes) {
  return RouterParts::bytes(d, elementBytes);
}

size_t moeExpertsScratchBytes(const MoEExpertDims &d, size_t elementBytes) {
  return ExpertParts(d, elementBytes).bytes();
}

cudaError_t moeExpertCounts(const int32_t *indices, float *counts, int64_t tokens, int64_t experts,
                            int64_t topK, cudaStream_t stream) {
  if (cudaError_t e = cudaMemsetAsync(counts, 0, size_t(experts) * 4, stream))
    return e;
  if (tokens * topK == 0)
    return cudaSuccess;
  countsKernel<<<gridFor(tokens * topK), kThreads, 0, stream>>>(indices, counts, tokens * topK,
                                                                experts);
  return cudaGetLastError();
}

#define LLMOPT_CUDA_DEFINE_MOE(T)                                                                  \
  bool moeRouterForwardGemm(Gemm &gemm, const T *x, const T *gate, float *weights,                 \
                            int32_t *indices, const MoERouterDims &d, void *scratch,               \
                            cudaStream_t stream, std::string &error) {                             \
    return routerForward(gemm, x, gate, weights, indices, d, scratch, stream, error);              \
  }                                                                                                \
  bool moeRouterBackwardGemm(Gemm &gemm, const float *dweights, const T *x, const T *gate,         \
                             const float *weights, const int32_t *indices, T *dx, float *dgate,    \
                             const MoERouterDims &d, const MoEAux &aux, void *scratch,             \
                             cudaStream_t stream, std::string &error) {                            \
    return routerBackward(gemm, dweights, x, gate, weights, indices, dx, dgate, d, aux, scratch,   \
                          stream, error);                                                          \
  }                                                                                                \
  bool moeExpertsForwardGemm(Gemm &gemm, const T *x, const T *const *weights, T *out,              \
                             const MoEExpertDims &d, void *scratch, cudaStream_t stream,           \
                             std::string &error) {                                                 \
    return expertsForward(gemm, x, weights, out, d, scratch, stream, error);                       \
  }                                                                                                \
  bool moeExpertsBackwardGemm(Gemm &gemm, const T *dout, const T *x, const T *const *weights,      \
                              T *dx, float *const *dweights, const MoEExpertDims &d,               \
                              void *scratch, cudaStream_t stream, std::string &error) {            \
    return expertsBackward(gemm, dout, x, weights, dx, dweights, d, scratch, stream, error);       \
  }
LLMOPT_CUDA_FOR_TYPES(LLMOPT_CUDA_DEFINE_MOE)
#undef LLMOPT_CUDA_DEFINE_MOE

} // namespace llmopt::kernels::cuda
