//===- attention.cpp - scaled dot-product attention, forward and backward -===//
//
// Row by row, keeping the log-sum-exp of each query's scores (as a fused
// kernel does):
//   forward:  p_j = exp(s_j - lse),  out = sum_j p_j v_j
//   backward: dp_j = dout . v_j,  D = dout . out,  ds_j = p_j (dp_j - D)
//             dq = scale sum_j ds_j k_j,  dk_j += scale ds_j q,  dv_j += p_j dout
// Query head h reads kv head h / (heads / kvHeads); a causal query at position
// p sees keys j <= p, and with a window only j > p - window. Under context
// parallelism the queries are this rank's chunks (positions qPos) and the keys
// the whole sequence.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace llmopt::kernels::cpu {

namespace {
struct Index {
  const AttentionShape &a;
  int64_t qRow(int64_t b, int64_t s, int64_t h) const {
    return ((b * a.seq + s) * a.heads + h) * a.headDim;
  }
  int64_t keys() const { return a.kvSeq > 0 ? a.kvSeq : a.seq; }
  int64_t kvRow(int64_t b, int64_t s, int64_t h) const {
    return ((b * keys() + s) * a.kvHeads + h) * a.headDim;
  }
  /// Keys query i may see, by its position in the key sequence (with
  /// explicit key positions: all, filtered by `visible`).
  void keyRange(int64_t i, int64_t &first, int64_t &last) const {
    int64_t pos = a.qPos ? a.qPos[i] : i;
    first = 0;
    last = a.causal && !a.kPos ? pos : keys() - 1;
    if (a.causal && a.window > 0 && !a.kPos)
      first = std::max<int64_t>(0, pos - a.window + 1);
  }
  bool visible(int64_t i, int64_t j) const {
    if (!a.kPos || !a.causal)
      return true;
    int64_t q = a.qPos ? a.qPos[i] : i, k = a.kPos[j];
    return k <= q && (a.window <= 0 || k > q - a.window);
  }
};
} // namespace

void attentionForward(const float *q, const float *k, const float *v, float *out, float *lse,
                      const AttentionShape &a) {
  Index ix{a};
  int64_t group = a.heads / a.kvHeads;
  std::vector<float> scores(static_cast<size_t>(ix.keys()));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t kvh = h / group;
      for (int64_t i = 0; i < a.seq; ++i) {
        const float *qi = q + ix.qRow(b, i, h);
        int64_t first, last;
        ix.keyRange(i, first, last);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = first; j <= last; ++j) {
          if (!ix.visible(i, j))
            continue;
          const float *kj = k + ix.kvRow(b, j, kvh);
          float s = 0;
          for (int64_t d = 0; d < a.headDim; ++d)
            s += qi[d] * kj[d];
          scores[j] = s * a.scale;
          m = std::max(m, scores[j]);
        }
        float sum = 0;
        for (int64_t j = first; j <= last; ++j)
          if (ix.visible(i, j))
            sum += std::exp(scores[j] - m);
        // No visible key (a block of a ring): log-sum-exp -inf, output 0.
        float l = sum > 0 ? m + std::log(sum) : -std::numeric_limits<float>::infinity();
        lse[(b * a.heads + h) * a.seq + i] = l;
        float *o = out + ix.qRow(b, i, h);
        for (int64_t d = 0; d < a.headDim; ++d)
          o[d] = 0;
        for (int64_t j = first; j <= last && sum > 0; ++j) {
          if (!ix.visible(i, j))
            continue;
          float p = std::exp(scores[j] - l);
          const float *vj = v + ix.kvRow(b, j, kvh);
          for (int64_t d = 0; d < a.headDim; ++d)
            o[d] += p * vj[d];
        }
      }
    }
}

void attentionBackward(const float *dout, const float *q, const float *k, const float *v,
                       const float *out, const float *lse, float *dq, float *dk, float *dv,
                       const AttentionShape &a) {
  Index ix{a};
  int64_t group = a.heads / a.kvHeads;
  int64_t qCount = a.batch * a.seq * a.heads * a.headDim;
  int64_t kvCount = a.batch * ix.keys() * a.kvHeads * a.headDim;
  std::fill(dq, dq + qCount, 0.0f);
  std::fill(dk, dk + kvCount, 0.0f);
  std::fill(dv, dv + kvCount, 0.0f);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t kvh = h / group;
      for (int64_t i = 0; i < a.seq; ++i) {
        const float *qi = q + ix.qRow(b, i, h);
        const float *go = dout + ix.qRow(b, i, h);
        const float *oi = out + ix.qRow(b, i, h);
        float *dqi = dq + ix.qRow(b, i, h);
        float l = lse[(b * a.heads + h) * a.seq + i];
        float D = 0;
        for (int64_t d = 0; d < a.headDim; ++d)
          D += go[d] * oi[d];
        int64_t first, last;
        ix.keyRange(i, first, last);
        for (int64_t j = first; j <= last; ++j) {
          if (!ix.visible(i, j))
            continue;
          const float *kj = k + ix.kvRow(b, j, kvh);
          const float *vj = v + ix.kvRow(b, j, kvh);
          float s = 0, dp = 0;
          for (int64_t d = 0; d < a.headDim; ++d) {
            s += qi[d] * kj[d];
            dp += go[d] * vj[d];
          }
          float p = std::exp(s * a.scale - l);
          float ds = p * (dp - D);
          float *dkj = dk + ix.kvRow(b, j, kvh);
          float *dvj = dv + ix.kvRow(b, j, kvh);
          for (int64_t d = 0; d < a.headDim; ++d) {
            dqi[d] += a.scale * ds * kj[d];
            dkj[d] += a.scale * ds * qi[d];
            dvj[d] += p * go[d];
          }
        }
      }
    }
}

} // namespace llmopt::kernels::cpu
