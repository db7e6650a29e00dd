//===- activation.cpp - GeLU and SwiGLU, forward and backward -------------===//
//
// GeLU exact: 0.5 x (1 + erf(x / sqrt 2)); tanh approximation (GPT-2's
// gelu_new): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// SwiGLU: silu(gate) * up with silu(g) = g * sigmoid(g).
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <cmath>

namespace llmopt::kernels::cpu {

static constexpr float kSqrt2OverPi = 0.7978845608028654f;
static constexpr float kInvSqrt2 = 0.7071067811865476f;
static constexpr float kInvSqrt2Pi = 0.3989422804014327f;

void geluForward(const float *x, float *out, int64_t count, bool tanhApprox) {
  for (int64_t i = 0; i < count; ++i) {
    float v = x[i];
    out[i] = tanhApprox ? 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)))
                        : 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
  }
}

void geluBackward(const float *dout, const float *x, float *dx, int64_t count, bool tanhApprox) {
  for (int64_t i = 0; i < count; ++i) {
    float v = x[i], d;
    if (tanhApprox) {
      float t = std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v));
      d = 0.5f * (1.0f + t) +
          0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * v * v);
    } else {
      d = 0.5f * (1.0f + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
    }
    dx[i] = dout[i] * d;
  }
}

static float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

void swigluForward(const float *gate, const float *up, float *out, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

void swigluBackward(const float *dout, const float *gate, const float *up, float *dgate, float *dup,
                    int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    float g = gate[i], s = sigmoid(g);
    float silu = g * s;
    dgate[i] = dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
    dup[i] = dout[i] * silu;
  }
}

} // namespace llmopt::kernels::cpu
