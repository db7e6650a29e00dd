//===- shard.h - tensor-parallel parts of whole tensors ---------------*- C++ -*-===//
//
// A parameter with a `shard` spec (plan-format.md) is part `index` of a whole
// tensor: along `shardDim`, the whole has `shardParts` times the part's size
// and is made of `shardBlocks` equal blocks, of each of which the part keeps
// slice `index`. A padded tensor (the vocabulary split over tp when tp does
// not divide it: `shard.whole`) is whole without its padding: the last
// parts' rows past it are zeros. Used to initialize parts from whole
// tensors and to reshard checkpoints between plans.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_SHARD_H
#define LLMOPT_RUNTIME_SHARD_H

#include "llmopt-runtime/plan.h"

#include <algorithm>

namespace llmopt::runtime {

/// Copies part `index` of `whole` into `part` (toPart), or back (!toPart).
inline void copyPart(const ParamSpec &s, int index, float *whole, float *part, bool toPart) {
  if (s.shardDim < 0) {
    if (toPart)
      std::copy_n(whole, s.elements, part);
    else
      std::copy_n(part, s.elements, whole);
    return;
  }
  int64_t dim = s.shardDim, outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= s.shape[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.shape.size(); ++d)
    inner *= s.shape[d];
  // `whole` holds the real rows only; a padded part's rows past them are
  // zero (toPart) or dropped (!toPart).
  int64_t local = s.shape[size_t(dim)], whole_ = local * s.shardParts, real = s.wholeDim();
  int64_t slice = local / s.shardBlocks, block = whole_ / s.shardBlocks;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t bk = 0; bk < s.shardBlocks; ++bk)
      for (int64_t j = 0; j < slice; ++j) {
        int64_t row = bk * block + index * slice + j;
        float *p = part + ((o * local) + bk * slice + j) * inner;
        if (row >= real) {
          if (toPart)
            std::fill_n(p, inner, 0.0f);
          continue;
        }
        float *w = whole + ((o * real) + row) * inner;
        if (toPart)
          std::copy_n(w, inner, p);
        else
          std::copy_n(p, inner, w);
      }
}

/// Elements of the whole tensor (without padding).
inline int64_t wholeElements(const ParamSpec &s) {
  return s.shardDim < 0 ? s.elements : s.elements / s.shape[size_t(s.shardDim)] * s.wholeDim();
}

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_SHARD_H
