//===- norm.cpp - layer norm and RMS norm, forward and backward -----------===//
//
// Statistics per row in fp32; backward from the saved mean / rstd:
//   xhat = (x - mean) * rstd,  dxhat = dout * w,
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
// (RMS norm drops the mean terms).
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <cmath>

namespace llmopt::kernels::cpu {

void layerNormForward(const float *x, const float *weight, const float *bias, float *out,
                      float *mean, float *rstd, int64_t n, int64_t c, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + r * c;
    float m = 0;
    for (int64_t i = 0; i < c; ++i)
      m += xr[i];
    m /= float(c);
    float var = 0;
    for (int64_t i = 0; i < c; ++i)
      var += (xr[i] - m) * (xr[i] - m);
    var /= float(c);
    float rs = 1.0f / std::sqrt(var + eps);
    float *o = out + r * c;
    for (int64_t i = 0; i < c; ++i)
      o[i] = (xr[i] - m) * rs * weight[i] + (bias ? bias[i] : 0.0f);
    mean[r] = m;
    rstd[r] = rs;
  }
}

void layerNormBackward(const float *dout, const float *x, const float *weight, const float *mean,
                       const float *rstd, float *dx, float *dweight, float *dbias, int64_t n,
                       int64_t c) {
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + r * c, *g = dout + r * c;
    float m = mean[r], rs = rstd[r];
    float meanD = 0, meanDX = 0;
    for (int64_t i = 0; i < c; ++i) {
      float xhat = (xr[i] - m) * rs;
      float d = g[i] * weight[i];
      meanD += d;
      meanDX += d * xhat;
      dweight[i] += g[i] * xhat;
      if (dbias)
        dbias[i] += g[i];
    }
    meanD /= float(c);
    meanDX /= float(c);
    float *o = dx + r * c;
    for (int64_t i = 0; i < c; ++i) {
      float xhat = (xr[i] - m) * rs;
      o[i] = rs * (g[i] * weight[i] - meanD - xhat * meanDX);
    }
  }
}

void rmsNormForward(const float *x, const float *weight, float *out, float *rstd, int64_t n,
                    int64_t c, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + r * c;
    float ms = 0;
    for (int64_t i = 0; i < c; ++i)
      ms += xr[i] * xr[i];
    ms /= float(c);
    float rs = 1.0f / std::sqrt(ms + eps);
    float *o = out + r * c;
    for (int64_t i = 0; i < c; ++i)
      o[i] = xr[i] * rs * weight[i];
    rstd[r] = rs;
  }
}

void rmsNormBackward(const float *dout, const float *x, const float *weight, const float *rstd,
                     float *dx, float *dweight, int64_t n, int64_t c) {
  for (int64_t r = 0; r < n; ++r) {
    const float *xr = x + r * c, *g = dout + r * c;
    float rs = rstd[r];
    float meanDX = 0;
    for (int64_t i = 0; i < c; ++i) {
      float xhat = xr[i] * rs;
      meanDX += g[i] * weight[i] * xhat;
      dweight[i] += g[i] * xhat;
    }
    meanDX /= float(c);
    float *o = dx + r * c;
    for (int64_t i = 0; i < c; ++i)
      o[i] = rs * (g[i] * weight[i] - xr[i] * rs * meanDX);
  }
}

} // namespace llmopt::kernels::cpu
