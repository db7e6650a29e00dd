//===- loss.cpp - softmax cross-entropy over the vocabulary ---------------===//
//
// Per row: lse = max + log sum exp(l - max), loss = lse - l[label]; the mean
// over rows whose label is not ignored. Backward: softmax - onehot, scaled.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <algorithm>
#include <cmath>

namespace llmopt::kernels::cpu {

static float rowLogSumExp(const float *row, int64_t vocab) {
  float m = row[0];
  for (int64_t j = 1; j < vocab; ++j)
    m = std::max(m, row[j]);
  float sum = 0;
  for (int64_t j = 0; j < vocab; ++j)
    sum += std::exp(row[j] - m);
  return m + std::log(sum);
}

bool crossEntropyForward(const float *logits, const int32_t *labels, int64_t n, int64_t vocab,
                         int64_t ignoreIndex, float *loss, int64_t *counted) {
  float total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (labels[r] == ignoreIndex)
      continue;
    if (labels[r] < 0 || labels[r] >= vocab)
      return false;
    const float *row = logits + r * vocab;
    total += rowLogSumExp(row, vocab) - row[labels[r]];
    ++count;
  }
  *loss = count ? total / float(count) : 0.0f;
  *counted = count;
  return true;
}

void crossEntropyBackward(const float *logits, const int32_t *labels, float dloss, int64_t counted,
                          float *dlogits, int64_t n, int64_t vocab, int64_t ignoreIndex) {
  float scale = counted ? dloss / float(counted) : 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    float *d = dlogits + r * vocab;
    if (labels[r] == ignoreIndex) {
      std::fill(d, d + vocab, 0.0f);
      continue;
    }
    const float *row = logits + r * vocab;
    float l = rowLogSumExp(row, vocab);
    for (int64_t j = 0; j < vocab; ++j)
      d[j] = std::exp(row[j] - l) * scale;
    d[labels[r]] -= scale;
  }
}

} // namespace llmopt::kernels::cpu
