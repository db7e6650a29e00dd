//===- adamw.cpp - AdamW and gradient norms -------------------------------===//
//
// Decoupled weight decay (Loshchilov and Hutter 2019) as PyTorch applies it:
//   g = grad * gradScale
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <cmath>

namespace llmopt::kernels::cpu {

double sumOfSquares(const float *x, int64_t count) {
  double s = 0;
  for (int64_t i = 0; i < count; ++i)
    s += double(x[i]) * double(x[i]);
  return s;
}

void adamw(float *param, const float *grad, float *m, float *v, int64_t count,
           const AdamWParams &p) {
  float bc1 = 1.0f - std::pow(p.beta1, float(p.step));
  float bc2 = 1.0f - std::pow(p.beta2, float(p.step));
  for (int64_t i = 0; i < count; ++i) {
    float g = grad[i] * p.gradScale;
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    float mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] = param[i] * (1.0f - p.lr * p.weightDecay) - p.lr * mhat / (std::sqrt(vhat) + p.eps);
  }
}

} // namespace llmopt::kernels::cpu
