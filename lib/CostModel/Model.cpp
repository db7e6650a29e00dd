//===- Model.cpp - model description helpers ------------------------------===//

#include "llmopt/CostModel/Model.h"

#include <algorithm>

using namespace llmopt::cost;

double LayerDesc::gemmParamsPerToken() const {
  double attn =
      static_cast<double>(hidden) * (qDim() + 2 * kvDim()) + static_cast<double>(qDim()) * hidden;
  double mlpOne = (gatedMlp ? 3.0 : 2.0) * hidden * ffn;
  if (!isMoE())
    return attn + mlpOne;
  return attn + static_cast<double>(hidden) * experts + topK * mlpOne;
}

bool ModelDesc::hasMoE() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerDesc &l) { return l.isMoE(); });
}

double ModelDesc::totalParams() const {
  double p = embeddingParams + headParams + finalNormParams;
  for (const LayerDesc &l : layers)
    p += l.params();
  return p;
}

double ModelDesc::trainFlopsPerToken(int64_t seqLen) const {
  double n = static_cast<double>(vocab) * hidden; // LM head GEMM
  double attn = 0;
  for (const LayerDesc &l : layers) {
    n += l.gemmParamsPerToken();
    double s = static_cast<double>(seqLen);
    if (l.window > 0)
      s = std::min<double>(s, l.window);
    attn += 12.0 * s * l.heads * l.headDim;
  }
  return 6.0 * n + attn;
}

ModelDesc ModelDesc::gpt(const std::string &name, int64_t numLayers, int64_t h, int64_t heads,
                         int64_t vocab, int64_t positions) {
  ModelDesc m;
  m.name = name;
  m.vocab = vocab;
  m.hidden = h;
  m.positions = positions;
  m.tiedEmbeddings = true;
  m.embeddingParams = static_cast<double>(vocab + positions) * h;
  m.finalNormParams = 2.0 * h;
  LayerDesc l;
  l.hidden = h;
  l.heads = l.kvHeads = heads;
  l.headDim = h / heads;
  l.ffn = 4 * h;
  // qkv 3h^2+3h, proj h^2+h, fc1 4h^2+4h, fc2 4h^2+h, two layer norms 4h.
  l.denseParams = 12.0 * h * h + 13.0 * h;
  m.layers.assign(numLayers, l);
  return m;
}
