//===- moe.cpp - mixture-of-experts routing, dispatch, experts, combine ---===//
//
// Slot assignment (shared by dispatch, combine and their backward): tokens
// are scanned in order n = 0..N-1 and, within a token, in top-k order; each
// routed copy takes the next free row of its expert, and copies past the
// expert's capacity are dropped. The assignment is a pure function of the
// indices, so every kernel recomputes it instead of storing it.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace llmopt::kernels::cpu {

bool moeSlots(const int32_t *indices, int64_t n, int64_t topK, int64_t experts, int64_t capacity,
              int64_t *slots) {
  std::vector<int64_t> load(static_cast<size_t>(experts), 0);
  for (int64_t i = 0; i < n * topK; ++i) {
    int32_t e = indices[i];
    if (e < 0 || e >= experts)
      return false;
    int64_t s = load[size_t(e)]++;
    slots[i] = s < capacity ? s : -1;
  }
  return true;
}

/// Router logits [experts] of one token and their softmax, in fp32.
static void routerProbs(const float *x, const float *gate, int64_t hidden, int64_t experts,
                        float *probs) {
  float mx = -INFINITY;
  for (int64_t e = 0; e < experts; ++e) {
    const float *w = gate + e * hidden;
    float acc = 0;
    for (int64_t i = 0; i < hidden; ++i)
      acc += x[i] * w[i];
    probs[e] = acc;
    mx = std::max(mx, acc);
  }
  float sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += probs[e] = std::exp(probs[e] - mx);
  for (int64_t e = 0; e < experts; ++e)
    probs[e] /= sum;
}

void moeRouterForward(const float *x, const float *gate, float *weights, int32_t *indices,
                      int64_t n, int64_t hidden, int64_t experts, int64_t topK, bool normalize) {
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t r = 0; r < n; ++r) {
    routerProbs(x + r * hidden, gate, hidden, experts, p.data());
    for (int64_t e = 0; e < experts; ++e)
      order[size_t(e)] = int32_t(e);
    // Highest probability first; ties go to the lower expert number.
    std::partial_sort(order.begin(), order.begin() + topK, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float kept = 0;
    for (int64_t j = 0; j < topK; ++j)
      kept += p[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < topK; ++j) {
      indices[r * topK + j] = order[size_t(j)];
      float w = p[size_t(order[size_t(j)])];
      weights[r * topK + j] = normalize ? w / kept : w;
    }
  }
}

void moeExpertCounts(const int32_t *indices, float *counts, int64_t n, int64_t experts,
                     int64_t topK) {
  std::fill_n(counts, experts, 0.0f);
  for (int64_t i = 0; i < n * topK; ++i)
    if (indices[i] >= 0 && indices[i] < experts)
      counts[indices[i]] += 1.0f;
}

namespace {
std::vector<float> expertCounts(const int32_t *indices, int64_t n, int64_t experts, int64_t topK) {
  std::vector<float> c(static_cast<size_t>(experts));
  moeExpertCounts(indices, c.data(), n, experts, topK);
  return c;
}
} // namespace

float moeAuxLoss(const float *x, const float *gate, const int32_t *indices, int64_t n,
                 int64_t hidden, int64_t experts, int64_t topK, float auxLossCoef) {
  std::vector<float> counts = expertCounts(indices, n, experts, topK),
                     p(static_cast<size_t>(experts));
  double sum = 0;
  for (int64_t r = 0; r < n; ++r) {
    routerProbs(x + r * hidden, gate, hidden, experts, p.data());
    for (int64_t e = 0; e < experts; ++e)
      sum += double(p[size_t(e)]) * counts[size_t(e)];
  }
  return float(double(auxLossCoef) * double(experts) * sum /
               (double(n) * double(n) * double(topK)));
}

void moeRouterBackward(const float *dweights, const float *x, const float *gate,
                       const float *weights, const int32_t *indices, float *dx, float *dgate,
                       int64_t n, int64_t hidden, int64_t experts, int64_t topK, bool normalize,
                       float auxLossCoef, const float *auxCounts, int64_t auxTokens,
                       float auxScale) {
  std::vector<float> p(static_cast<size_t>(experts)), dlogit(static_cast<size_t>(experts));
  // d aux / d P_e(token) = coef * E * count_e / (N^2 * topK), N the tokens
  // counted.
  std::vector<float> auxGrad;
  if (auxLossCoef > 0) {
    auxGrad = auxCounts ? std::vector<float>(auxCounts, auxCounts + experts)
                        : expertCounts(indices, n, experts, topK);
    double tokens = auxCounts ? double(auxTokens) : double(n);
    float c = float(double(auxLossCoef) * double(auxScale) * double(experts) /
                    (tokens * tokens * double(topK)));
    for (float &g : auxGrad)
      g *= c;
  }
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + r * hidden;
    const float *dw = dweights + r * topK, *w = weights + r * topK;
    const int32_t *idx = indices + r * topK;
    std::fill(dlogit.begin(), dlogit.end(), 0.0f);
    if (normalize) {
      // The kept weights are a softmax over the kept logits.
      float s = 0;
      for (int64_t j = 0; j < topK; ++j)
        s += w[j] * dw[j];
      for (int64_t j = 0; j < topK; ++j)
        dlogit[size_t(idx[j])] = w[j] * (dw[j] - s);
    } else {
      // The kept weights are entries of the softmax over every expert.
      routerProbs(xr, gate, hidden, experts, p.data());
      std::vector<float> dp(static_cast<size_t>(experts), 0.0f);
      for (int64_t j = 0; j < topK; ++j)
        dp[size_t(idx[j])] += dw[j];
      float s = 0;
      for (int64_t e = 0; e < experts; ++e)
        s += p[size_t(e)] * dp[size_t(e)];
      for (int64_t e = 0; e < experts; ++e)
        dlogit[size_t(e)] = p[size_t(e)] * (dp[size_t(e)] - s);
    }
    if (!auxGrad.empty()) {
      // Through the softmax over every expert.
      routerProbs(xr, gate, hidden, experts, p.data());
      float s = 0;
      for (int64_t e = 0; e < experts; ++e)
        s += p[size_t(e)] * auxGrad[size_t(e)];
      for (int64_t e = 0; e < experts; ++e)
        dlogit[size_t(e)] += p[size_t(e)] * (auxGrad[size_t(e)] - s);
    }
    float *d = dx + r * hidden;
    std::fill_n(d, hidden, 0.0f);
    for (int64_t e = 0; e < experts; ++e) {
      float g = dlogit[size_t(e)];
      if (g == 0.0f)
        continue;
      const float *wr = gate + e * hidden;
      float *dg = dgate + e * hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        d[i] += g * wr[i];
        dg[i] += g * xr[i];
      }
    }
  }
}

bool moeDispatchForward(const float *x, const int32_t *indices, float *out, int64_t n,
                        int64_t hidden, int64_t topK, int64_t experts, int64_t capacity) {
  std::vector<int64_t> slots(size_t(n * topK));
  if (!moeSlots(indices, n, topK, experts, capacity, slots.data()))
    return false;
  std::fill_n(out, experts * capacity * hidden, 0.0f);
  for (int64_t i = 0; i < n * topK; ++i)
    if (slots[size_t(i)] >= 0)
      std::copy_n(x + (i / topK) * hidden, hidden,
                  out + (indices[i] * capacity + slots[size_t(i)]) * hidden);
  return true;
}

bool moeDispatchBackward(const float *dout, const int32_t *indices, float *dx, int64_t n,
                         int64_t hidden, int64_t topK, int64_t experts, int64_t capacity) {
  std::vector<int64_t> slots(size_t(n * topK));
  if (!moeSlots(indices, n, topK, experts, capacity, slots.data()))
    return false;
  std::fill_n(dx, n * hidden, 0.0f);
  for (int64_t i = 0; i < n * topK; ++i) {
    if (slots[size_t(i)] < 0)
      continue;
    const float *g = dout + (indices[i] * capacity + slots[size_t(i)]) * hidden;
    float *d = dx + (i / topK) * hidden;
    for (int64_t c = 0; c < hidden; ++c)
      d[c] += g[c];
  }
  return true;
}

bool moeCombineForward(const float *expertOut, const float *weights, const int32_t *indices,
                       float *out, int64_t n, int64_t hidden, int64_t topK, int64_t experts,
                       int64_t capacity) {
  std::vector<int64_t> slots(size_t(n * topK));
  if (!moeSlots(indices, n, topK, experts, capacity, slots.data()))
    return false;
  std::fill_n(out, n * hidden, 0.0f);
  for (int64_t i = 0; i < n * topK; ++i) {
    if (slots[size_t(i)] < 0)
      continue;
    const float *e = expertOut + (indices[i] * capacity + slots[size_t(i)]) * hidden;
    float *o = out + (i / topK) * hidden, w = weights[i];
    for (int64_t c = 0; c < hidden; ++c)
      o[c] += w * e[c];
  }
  return true;
}

bool moeCombineBackward(const float *dout, const float *expertOut, const float *weights,
                        const int32_t *indices, float *dexpertOut, float *dweights, int64_t n,
                        int64_t hidden, int64_t topK, int64_t experts, int64_t capacity) {
  std::vector<int64_t> slots(size_t(n * topK));
  if (!moeSlots(indices, n, topK, experts, capacity, slots.data()))
    return false;
  std::fill_n(dexpertOut, experts * capacity * hidden, 0.0f);
  for (int64_t i = 0; i < n * topK; ++i) {
    dweights[i] = 0;
    if (slots[size_t(i)] < 0)
      continue;
    int64_t row = (indices[i] * capacity + slots[size_t(i)]) * hidden;
    const float *g = dout + (i / topK) * hidden, *e = expertOut + row;
    float *de = dexpertOut + row, w = weights[i], acc = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      de[c] = w * g[c];
      acc += g[c] * e[c];
    }
    dweights[i] = acc;
  }
  return true;
}

/// Rows of an expert's [capacity, cols] block up to its last nonzero row
/// (of `a` or, when given, `b`). A dispatch fills each expert's slots from
/// the first and leaves the rest zero, and zero rows stay zero through the
/// experts (no biases; GeLU and SwiGLU of zero are zero) and give zero
/// gradients, so the experts compute the used rows only: a dropless
/// dispatch sizes every expert for all tokens, E / top_k times the routed
/// rows. Exact: each row is computed on its own.
static int64_t usedRows(const float *a, const float *b, int64_t rows, int64_t cols) {
  for (int64_t r = rows; r > 0; --r)
    for (const float *m : {a, b})
      if (m && std::any_of(m + (r - 1) * cols, m + r * cols, [](float v) { return v != 0.0f; }))
        return r;
  return 0;
}

namespace {
/// The experts' fp8 inputs (MoEExpertShape::fp8): rounded copies of one
/// expert's GEMM operands, or the operands themselves without fp8.
struct Fp8Inputs {
  const MoEExpertShape &s;
  /// Weight `wi` of expert e (n elements at `w`), E4M3 per tensor.
  const float *weight(const float *w, int wi, int64_t e, int64_t n, std::vector<float> &buf) const {
    if (!s.fp8)
      return w;
    buf.resize(size_t(n));
    fakeQuantizeFp8(w, buf.data(), n, Fp8::E4M3,
                    s.weightAmax ? s.weightAmax[wi * s.experts + e] : absMax(w, n));
    return buf.data();
  }
  /// rows x cols activations (or gradients, `grad`) per row; `ffn`: the
  /// columns are the ffn, whose rows' amaxes are made whole over the ranks
  /// splitting it.
  bool quantize(const float *x, int64_t rows, int64_t cols, bool grad, bool ffn,
                std::vector<float> &buf, const float *&out) const {
    out = x;
    if (!s.fp8)
      return true;
    std::vector<float> amax(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      amax[size_t(r)] = absMax(x + r * cols, cols);
    if (ffn && s.rowAmax && !s.rowAmax(s.rowAmaxContext, amax.data(), rows))
      return false;
    buf.resize(size_t(rows * cols));
    fakeQuantizeFp8Rows(x, buf.data(), rows, cols, grad && s.fp8 == 2 ? Fp8::E5M2 : Fp8::E4M3,
                        amax.data());
    out = buf.data();
    return true;
  }
};

/// One expert's hidden activations h (and u) and a on its used rows, from
/// its (rounded) rows and weights.
void expertHidden(const float *xq, const float *w1, const float *w3, float *h, float *u, float *a,
                  int64_t rows, const MoEExpertShape &s) {
  linearForward(xq, w1, nullptr, h, rows, s.hidden, s.ffn, false);
  if (s.swiglu) {
    linearForward(xq, w3, nullptr, u, rows, s.hidden, s.ffn, false);
    swigluForward(h, u, a, rows * s.ffn);
  } else {
    geluForward(h, a, rows * s.ffn, false);
  }
}
} // namespace

bool moeExpertsForward(const float *x, const float *const *weights, float *out,
                       const MoEExpertShape &s) {
  int64_t cap = s.capacity, f = s.ffn, wn = f * s.hidden;
  std::vector<float> h(size_t(cap * f)), u, a(size_t(cap * f)), xb, ab, w1b, w3b, w2b;
  if (s.swiglu)
    u.resize(size_t(cap * f));
  Fp8Inputs q{s};
  int down = s.swiglu ? 2 : 1;
  for (int64_t e = 0; e < s.experts; ++e) {
    const float *xe = x + e * cap * s.hidden, *xq = nullptr, *aq = nullptr;
    int64_t rows = usedRows(xe, nullptr, cap, s.hidden);
    std::fill(out + (e * cap + rows) * s.hidden, out + (e + 1) * cap * s.hidden, 0.0f);
    if (!q.quantize(xe, rows, s.hidden, false, false, xb, xq))
      return false;
    expertHidden(xq, q.weight(weights[0] + e * wn, 0, e, wn, w1b),
                 s.swiglu ? q.weight(weights[1] + e * wn, 1, e, wn, w3b) : nullptr, h.data(),
                 u.data(), a.data(), rows, s);
    if (!q.quantize(a.data(), rows, f, false, true, ab, aq))
      return false;
    linearForward(aq, q.weight(weights[down] + e * wn, down, e, wn, w2b), nullptr,
                  out + e * cap * s.hidden, rows, f, s.hidden, false);
  }
  return true;
}

bool moeExpertsBackward(const float *dout, const float *x, const float *const *weights, float *dx,
                        float *const *dweights, const MoEExpertShape &s) {
  int64_t cap = s.capacity, f = s.ffn, wn = f * s.hidden;
  std::vector<float> h(size_t(cap * f)), u, a(size_t(cap * f)), da(size_t(cap * f)),
      dh(size_t(cap * f)), du, dxu, xb, ab, gb, dhb, dub, w1b, w3b, w2b;
  if (s.swiglu) {
    u.resize(size_t(cap * f));
    du.resize(size_t(cap * f));
    dxu.resize(size_t(cap * s.hidden));
  }
  Fp8Inputs q{s};
  int down = s.swiglu ? 2 : 1, count = s.swiglu ? 3 : 2;
  std::vector<float> apart(s.addApart ? size_t(count * wn) : 0);
  for (int64_t e = 0; e < s.experts; ++e) {
    // This expert's weight gradients: apart (then added), or in place.
    float *dwe[3] = {};
    for (int i = 0; i < count; ++i)
      dwe[i] = s.addApart ? apart.data() + i * wn : dweights[i] + e * wn;
    std::fill(apart.begin(), apart.end(), 0.0f);
    const float *xe = x + e * cap * s.hidden, *ge = dout + e * cap * s.hidden;
    int64_t rows = usedRows(xe, ge, cap, s.hidden);
    std::fill(dx + (e * cap + rows) * s.hidden, dx + (e + 1) * cap * s.hidden, 0.0f);
    const float *xq = nullptr, *aq = nullptr, *gq = nullptr, *dhq = nullptr, *duq = nullptr;
    const float *w1 = q.weight(weights[0] + e * wn, 0, e, wn, w1b);
    const float *w3 = s.swiglu ? q.weight(weights[1] + e * wn, 1, e, wn, w3b) : nullptr;
    const float *w2 = q.weight(weights[down] + e * wn, down, e, wn, w2b);
    // The expert's hidden activations are recomputed, not stored.
    if (!q.quantize(xe, rows, s.hidden, false, false, xb, xq))
      return false;
    expertHidden(xq, w1, w3, h.data(), u.data(), a.data(), rows, s);
    if (!q.quantize(a.data(), rows, f, false, true, ab, aq) ||
        !q.quantize(ge, rows, s.hidden, true, false, gb, gq))
      return false;
    linearBackward(gq, aq, w2, da.data(), dwe[down], nullptr, rows, f, s.hidden, false);
    if (s.swiglu)
      swigluBackward(da.data(), h.data(), u.data(), dh.data(), du.data(), rows * f);
    else
      geluBackward(da.data(), h.data(), dh.data(), rows * f, false);
    if (!q.quantize(dh.data(), rows, f, true, true, dhb, dhq) ||
        (s.swiglu && !q.quantize(du.data(), rows, f, true, true, dub, duq)))
      return false;
    float *dxe = dx + e * cap * s.hidden;
    linearBackward(dhq, xq, w1, dxe, dwe[0], nullptr, rows, s.hidden, f, false);
    if (s.swiglu) {
      linearBackward(duq, xq, w3, dxu.data(), dwe[1], nullptr, rows, s.hidden, f, false);
      for (int64_t i = 0; i < rows * s.hidden; ++i)
        dxe[i] += dxu[size_t(i)];
    }
    for (int i = 0; s.addApart && i < count; ++i) {
      float *acc = dweights[i] + e * wn;
      for (int64_t j = 0; j < wn; ++j)
        acc[j] += dwe[i][j];
    }
  }
  return true;
}

} // namespace llmopt::kernels::cpu
