//===- padded_logits.h - the LM head's logits in padded rows -----*- C++ -*-===//
//
// Logits of a vocabulary whose rows are not a multiple of 16 bytes (GPT-2's
// 50257) slow cuBLASLt down: the CUDA backend runs such an LM head on
// zero-padded weights, and without this analysis copies its output out of
// padded rows and its output gradient back into them (3 of GPT-2 124M's
// 42 ms on an H100). Where the logits' only readers are the cross-entropy's
// forward and backward, and the gradient's only reader is the LM head's
// linear_bwd, both can stay in one buffer of padded rows instead.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_PADDED_LOGITS_H
#define LLMOPT_RUNTIME_PADDED_LOGITS_H

#include "llmopt-runtime/plan.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace llmopt::runtime {

struct PaddedLogits {
  /// The LM head (writes the logits), the cross-entropy forward and
  /// backward (read them; the backward writes their gradient) and the LM
  /// head's backward (reads the gradient), in program order.
  const Instruction *linearFwd = nullptr, *lossFwd = nullptr, *lossBwd = nullptr,
                    *linearBwd = nullptr;
  int64_t rows = 0, vocab = 0, pitch = 0;
};

/// The first LM head of `prog`'s micro-batch list whose logits can live in
/// rows of `pitch(vocab)` elements (a pitch other than vocab): the logits
/// read only, and exactly, by one cross_entropy_fwd then one
/// cross_entropy_bwd (input 0), their gradient (that backward's output 0)
/// only by one linear_bwd (input 0), no other instruction reading any of
/// their bytes while they are live. Fused bodies count as readers.
std::optional<PaddedLogits> findPaddedLogits(const Program &prog,
                                             const std::function<int64_t(int64_t)> &pitch);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_PADDED_LOGITS_H
