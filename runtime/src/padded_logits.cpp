//===- padded_logits.cpp - the LM head's logits in padded rows ------------===//
//
// See padded_logits.h.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/padded_logits.h"

#include "llmopt-kernels/abi.h"

#include <algorithm>
#include <vector>

using namespace llmopt::runtime;
using llmopt::kernels::KernelId;

namespace {
int64_t lastDim(const Buffer &b) { return b.shape.empty() ? 1 : b.shape.back(); }
} // namespace

std::optional<PaddedLogits>
llmopt::runtime::findPaddedLogits(const Program &prog,
                                  const std::function<int64_t(int64_t)> &pitchOf) {
  // The micro-batch's instructions in order, fused bodies after their
  // instruction (they name the same buffers).
  std::vector<const Instruction *> flat;
  std::function<void(const Instruction &)> walk = [&](const Instruction &ins) {
    flat.push_back(&ins);
    for (const Instruction &sub : ins.body)
      walk(sub);
  };
  for (const Instruction &ins : prog.microBatch)
    walk(ins);
  auto same = [](const Buffer &a, const Buffer &b) {
    return a.space == b.space && a.offset == b.offset && a.name == b.name &&
           a.elements == b.elements;
  };
  auto overlaps = [](const Buffer &a, const Buffer &b) {
    if (a.space != b.space || a.name != b.name)
      return false;
    if (a.space != Buffer::Space::Arena && a.space != Buffer::Space::Stash)
      return a.offset == b.offset;
    return a.offset < b.offset + std::max<int64_t>(b.bytes, 1) &&
           b.offset < a.offset + std::max<int64_t>(a.bytes, 1);
  };
  auto is = [](const Instruction *ins, KernelId id) {
    return ins->kind == Instruction::Kind::Kernel && ins->kernel && ins->kernel->id == id;
  };
  // The readers of `b`, written by flat[from], until a write over it after
  // the last wanted reader: each must read exactly `b` at input 0 and be
  // one of `ok`, and nothing else may read any of its bytes. Empty when
  // that fails.
  auto readers = [&](size_t from, const Buffer &b, std::vector<KernelId> ok) {
    std::vector<const Instruction *> found;
    for (size_t j = from + 1; j < flat.size() && !ok.empty(); ++j) {
      const Instruction *ins = flat[j];
      for (size_t k = 0; k < ins->ins.size(); ++k) {
        if (!overlaps(ins->ins[k], b))
          continue;
        if (k != 0 || !same(ins->ins[k], b) || !is(ins, ok.front()))
          return std::vector<const Instruction *>{};
        found.push_back(ins);
        ok.erase(ok.begin());
        break;
      }
      if (ok.empty())
        break;
      // A write over it, or a data-moving instruction (a collective, a
      // transfer) touching it: its padded rows would be missed.
      for (const std::vector<Buffer> *list : {&ins->outs, &ins->buffers})
        for (const Buffer &o : *list)
          if (overlaps(o, b))
            return std::vector<const Instruction *>{};
    }
    return ok.empty() ? found : std::vector<const Instruction *>{};
  };
  for (size_t i = 0; i < flat.size(); ++i) {
    const Instruction *head = flat[i];
    if (!is(head, KernelId::LinearFwd) || head->outs.size() != 1 || !head->args.epilogue.empty() ||
        !head->args.fp8.empty())
      continue;
    const Buffer &logits = head->outs[0];
    int64_t vocab = lastDim(logits), pitch = pitchOf(vocab);
    if (pitch == vocab)
      continue;
    // logits: read by the cross-entropy forward and backward; their
    // gradient: read by one linear_bwd.
    auto ce = readers(i, logits, {KernelId::CrossEntropyFwd, KernelId::CrossEntropyBwd});
    if (ce.size() != 2 || ce[1]->outs.empty() || lastDim(ce[1]->outs[0]) != vocab)
      continue;
    const Buffer &grad = ce[1]->outs[0];
    size_t at = size_t(std::find(flat.begin(), flat.end(), ce[1]) - flat.begin());
    auto bwd = readers(at, grad, {KernelId::LinearBwd});
    if (bwd.size() != 1)
      continue;
    PaddedLogits p;
    p.linearFwd = head;
    p.lossFwd = ce[0];
    p.lossBwd = ce[1];
    p.linearBwd = bwd[0];
    p.vocab = vocab;
    p.pitch = pitch;
    p.rows = vocab ? logits.elements / vocab : 0;
    return p;
  }
  return std::nullopt;
}
