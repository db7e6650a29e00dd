//===- embedding.cpp - token and learned position embeddings --------------===//
//
// Gathers rows forward and scatter-adds them backward (tokens that repeat
// accumulate, in token order).
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <cstring>

namespace llmopt::kernels::cpu {

bool embeddingForward(const int32_t *tokens, const float *table, float *out, int64_t n,
                      int64_t vocab, int64_t hidden) {
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return false;
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * hidden, table + int64_t(tokens[i]) * hidden, sizeof(float) * hidden);
  return true;
}

void embeddingForwardPart(const int32_t *tokens, const float *table, float *out, int64_t n,
                          int64_t start, int64_t rows, int64_t hidden) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = int64_t(tokens[i]) - start;
    if (t >= 0 && t < rows)
      std::memcpy(out + i * hidden, table + t * hidden, sizeof(float) * hidden);
    else
      std::memset(out + i * hidden, 0, sizeof(float) * hidden);
  }
}

void embeddingBackwardPart(const int32_t *tokens, const float *dout, float *dtable, int64_t n,
                           int64_t start, int64_t rows, int64_t hidden) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = int64_t(tokens[i]) - start;
    if (t < 0 || t >= rows)
      continue;
    float *row = dtable + t * hidden;
    const float *g = dout + i * hidden;
    for (int64_t c = 0; c < hidden; ++c)
      row[c] += g[c];
  }
}

void embeddingBackward(const int32_t *tokens, const float *dout, float *dtable, int64_t n,
                       int64_t hidden) {
  for (int64_t i = 0; i < n; ++i) {
    float *row = dtable + int64_t(tokens[i]) * hidden;
    const float *g = dout + i * hidden;
    for (int64_t c = 0; c < hidden; ++c)
      row[c] += g[c];
  }
}

void positionEmbeddingForward(const float *x, const float *table, float *out, int64_t batch,
                              int64_t seq, int64_t hidden, const int32_t *positions) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const float *xr = x + (b * seq + s) * hidden;
      const float *tr = table + (positions ? positions[s] : s) * hidden;
      float *o = out + (b * seq + s) * hidden;
      for (int64_t c = 0; c < hidden; ++c)
        o[c] = xr[c] + tr[c];
    }
}

void positionEmbeddingBackward(const float *dout, float *dtable, int64_t batch, int64_t seq,
                               int64_t hidden, const int32_t *positions) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const float *g = dout + (b * seq + s) * hidden;
      float *t = dtable + (positions ? positions[s] : s) * hidden;
      for (int64_t c = 0; c < hidden; ++c)
        t[c] += g[c];
    }
}

} // namespace llmopt::kernels::cpu
