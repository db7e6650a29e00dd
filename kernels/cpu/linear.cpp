//===- linear.cpp - affine layers, forward and backward -------------------===//
//
// Plain loops in the order that keeps the inner loop contiguous; fp32
// accumulation in a register per output.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

namespace llmopt::kernels::cpu {

void linearForward(const float *x, const float *weight, const float *bias, float *out, int64_t n,
                   int64_t in, int64_t outF, bool transposed) {
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + r * in;
    float *o = out + r * outF;
    if (!transposed) {
      for (int64_t j = 0; j < outF; ++j) {
        const float *w = weight + j * in;
        float acc = 0;
        for (int64_t i = 0; i < in; ++i)
          acc += xr[i] * w[i];
        o[j] = acc + (bias ? bias[j] : 0.0f);
      }
    } else {
      for (int64_t j = 0; j < outF; ++j)
        o[j] = bias ? bias[j] : 0.0f;
      for (int64_t i = 0; i < in; ++i) {
        const float *w = weight + i * outF;
        float xi = xr[i];
        for (int64_t j = 0; j < outF; ++j)
          o[j] += xi * w[j];
      }
    }
  }
}

void linearBackward(const float *dout, const float *x, const float *weight, float *dx,
                    float *dweight, float *dbias, int64_t n, int64_t in, int64_t outF,
                    bool transposed) {
  for (int64_t r = 0; r < n; ++r) {
    const float *g = dout + r * outF;
    const float *xr = x + r * in;
    if (dx) {
      float *d = dx + r * in;
      for (int64_t i = 0; i < in; ++i)
        d[i] = 0;
      for (int64_t j = 0; j < outF; ++j) {
        float gj = g[j];
        for (int64_t i = 0; i < in; ++i)
          d[i] += gj * (transposed ? weight[i * outF + j] : weight[j * in + i]);
      }
    }
    for (int64_t j = 0; j < outF; ++j) {
      float gj = g[j];
      if (dbias)
        dbias[j] += gj;
      for (int64_t i = 0; i < in; ++i)
        (transposed ? dweight[i * outF + j] : dweight[j * in + i]) += gj * xr[i];
    }
  }
}

} // namespace llmopt::kernels::cpu
