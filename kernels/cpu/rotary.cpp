//===- rotary.cpp - rotary position embedding ------------------------------===//
//
// Rotates the pair (x[i], x[i + d/2]) of each head by position * inv_freq[i],
// inv_freq[i] = theta^(-2i/d) (Su et al. 2021, in the Hugging Face layout),
// with linear position scaling (Hugging Face's "linear": every frequency
// over the factor) or Llama 3's frequency-dependent context extension. A rotation's transpose
// rotates back: backward is the inverse.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <cmath>
#include <vector>

namespace llmopt::kernels::cpu {

std::vector<double> ropeInverseFrequencies(int64_t headDim, float theta,
                                           const RopeScaling &scaling) {
  std::vector<double> inv(headDim / 2);
  for (int64_t i = 0; i < headDim / 2; ++i) {
    double f =
        std::pow(double(theta), -2.0 * double(i) / double(headDim)) / double(scaling.linearFactor);
    if (scaling.factor > 0) {
      const double pi = 3.14159265358979323846;
      double lowWavelen = scaling.originalMaxPositions / scaling.lowFreqFactor;
      double highWavelen = scaling.originalMaxPositions / scaling.highFreqFactor;
      double wavelen = 2 * pi / f;
      if (wavelen > lowWavelen) {
        f /= scaling.factor;
      } else if (wavelen >= highWavelen) {
        double smooth = (scaling.originalMaxPositions / wavelen - scaling.lowFreqFactor) /
                        (scaling.highFreqFactor - scaling.lowFreqFactor);
        f = (1 - smooth) * f / scaling.factor + smooth * f;
      }
    }
    inv[i] = f;
  }
  return inv;
}

void rotary(const float *x, float *out, int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
            float theta, const RopeScaling &scaling, bool inverse, const int32_t *positions) {
  std::vector<double> inv = ropeInverseFrequencies(headDim, theta, scaling);
  int64_t half = headDim / 2;
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t i = 0; i < half; ++i) {
      double angle = double(positions ? positions[s] : s) * inv[i];
      float c = float(std::cos(angle)), sn = float(std::sin(angle));
      if (inverse)
        sn = -sn;
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h) {
          int64_t base = ((b * seq + s) * heads + h) * headDim;
          float x1 = x[base + i], x2 = x[base + i + half];
          out[base + i] = x1 * c - x2 * sn;
          out[base + i + half] = x2 * c + x1 * sn;
        }
    }
}

} // namespace llmopt::kernels::cpu
