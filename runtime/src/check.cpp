//===- check.cpp - kernel calls consistent with their buffers -------------===//
//
// The loader checks every buffer against the arena; this checks that a
// kernel's buffers and parameters agree with each other the way the kernels
// index them (a weight's size against its input's features, heads x head
// dimension against the features, ...), so that a tampered or corrupt plan
// is refused with the place named instead of reading past a buffer.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/plan.h"

#include <cmath>
#include <string>

namespace llmopt::runtime {
namespace {

using kernels::KernelId;

int64_t last(const Buffer &b) { return b.shape.empty() ? 1 : b.shape.back(); }
int64_t rows(const Buffer &b) { return last(b) ? b.elements / last(b) : 0; }

struct Checker {
  const Instruction &ins;
  std::string &why;

  bool fail(const std::string &msg) {
    why = msg;
    return false;
  }
  bool count(size_t ins0, size_t ins1, size_t outs0, size_t outs1) {
    if (ins.ins.size() < ins0 || ins.ins.size() > ins1 || ins.outs.size() < outs0 ||
        ins.outs.size() > outs1)
      return fail("wrong number of buffers");
    return true;
  }
  /// A parameter the kernel uses as a size: an integer in [1, 2^31).
  bool size(const char *name, int64_t v, int64_t &out) {
    if (v < 1 || v >= (int64_t(1) << 31))
      return fail(std::string("params.") + name + " must be a positive integer");
    out = v;
    return true;
  }
  bool same(const Buffer &a, const Buffer &b, const char *what) {
    if (a.elements != b.elements)
      return fail(std::string(what) + " must have as many elements as its input");
    return true;
  }
  bool rank(const Buffer &b, size_t r, const char *what) {
    if (b.shape.size() != r)
      return fail(std::string(what) + " must have rank " + std::to_string(r));
    return true;
  }
  bool ids(const Buffer &b, const char *what) {
    if (b.dtype != DType::I32)
      return fail(std::string(what) + " must be i32");
    return true;
  }

  bool run() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    switch (ins.kernel->id) {
    case KernelId::Add:
      return same(in[0], out[0], "outs[0]") && same(in[1], out[0], "ins[1]");
    case KernelId::Copy:
    case KernelId::Scale:
    case KernelId::Sqrt:
    case KernelId::GeluFwd:
      return same(in[0], out[0], "outs[0]");
    case KernelId::GeluBwd:
      return same(in[0], in[1], "ins[0]") && same(in[1], out[0], "outs[0]");
    case KernelId::SwiGLUFwd:
      return same(in[0], in[1], "ins[1]") && same(in[0], out[0], "outs[0]");
    case KernelId::SwiGLUBwd:
      return same(in[1], in[0], "ins[0]") && same(in[1], in[2], "ins[2]") &&
             same(in[1], out[0], "outs[0]") && same(in[1], out[1], "outs[1]");
    case KernelId::BiasAdd:
      if (in[1].elements < 1 || in[0].elements % in[1].elements != 0)
        return fail("the bias must divide the input");
      return same(in[0], out[0], "outs[0]");
    case KernelId::SumRows:
      if (out[0].elements < 1 || in[0].elements % out[0].elements != 0)
        return fail("the output must divide the input");
      return true;
    case KernelId::EmbeddingFwd:
      return ids(in[0], "ins[0]") && rank(in[1], 2, "ins[1]") &&
             (out[0].elements == in[0].elements * in[1].shape[1] && last(out[0]) == in[1].shape[1]
                  ? true
                  : fail("outs[0] must be the tokens x the table's width"));
    case KernelId::EmbeddingBwd:
      return ids(in[0], "ins[0]") && rank(out[0], 2, "outs[0]") &&
             (in[1].elements == in[0].elements * out[0].shape[1]
                  ? true
                  : fail("ins[1] must be the tokens x the table's width"));
    case KernelId::PositionEmbeddingFwd:
    case KernelId::PositionEmbeddingBwd: {
      bool fwd = ins.kernel->id == KernelId::PositionEmbeddingFwd;
      const Buffer &x = in[0], &table = fwd ? in[1] : out[0];
      if (!rank(x, 3, "ins[0]") || !rank(table, 2, fwd ? "ins[1]" : "outs[0]"))
        return false;
      if (table.shape[1] != x.shape[2] || table.shape[0] < x.shape[1])
        return fail("the position table must be [positions >= seq, hidden]");
      return !fwd || same(x, out[0], "outs[0]");
    }
    case KernelId::LayerNormFwd:
    case KernelId::RMSNormFwd: {
      if (ins.kernel->id == KernelId::LayerNormFwd && !count(2, 3, 1, 1))
        return false;
      for (size_t i = 1; i < in.size(); ++i)
        if (in[i].elements != last(in[0]))
          return fail("ins[" + std::to_string(i) + "] must have the features' size");
      return same(in[0], out[0], "outs[0]");
    }
    case KernelId::LayerNormBwd:
    case KernelId::RMSNormBwd: {
      if (ins.kernel->id == KernelId::LayerNormBwd && !count(3, 3, 2, 3))
        return false;
      if (in[2].elements != last(in[1]))
        return fail("ins[2] must have the features' size");
      for (size_t i = 1; i < out.size(); ++i)
        if (out[i].elements != last(in[1]))
          return fail("outs[" + std::to_string(i) + "] must have the features' size");
      return same(in[1], in[0], "ins[0]") && same(in[1], out[0], "outs[0]");
    }
    case KernelId::LinearFwd:
    case KernelId::LinearBwd: {
      bool fwd = ins.kernel->id == KernelId::LinearFwd;
      if (fwd ? !count(2, 3, 1, 2) : !count(3, 3, 2, 3))
        return false;
      const Buffer &x = in[fwd ? 0 : 1], &w = in[fwd ? 1 : 2];
      if (!rank(w, 2, "the weight"))
        return false;
      bool tr = ins.args.transposed;
      int64_t inF = tr ? w.shape[0] : w.shape[1], outF = tr ? w.shape[1] : w.shape[0];
      if (last(x) != inF)
        return fail("the input's features must match the weight");
      if (fwd) {
        if (in.size() > 2 && in[2].elements != outF)
          return fail("the bias must have the output's features");
        for (const Buffer &o : out)
          if (o.elements != rows(x) * outF)
            return fail("an output must be rows x the weight's output features");
        return true;
      }
      if (in[0].elements != rows(x) * outF)
        return fail("ins[0] must be rows x the weight's output features");
      if (out.size() > 2 && out[2].elements != outF)
        return fail("outs[2] must have the output's features");
      if (ins.args.accumulate)
        for (size_t i = 1; i < out.size(); ++i)
          if (out[i].dtype != DType::F32 || out[i].space != Buffer::Space::Accum)
            return fail("accumulate adds the weight and bias gradients into f32 accumulators");
      return same(x, out[0], "outs[0]") && same(w, out[1], "outs[1]");
    }
    case KernelId::Split:
    case KernelId::Concat: {
      bool split = ins.kernel->id == KernelId::Split;
      if (split ? out.empty() : in.empty())
        return fail("wrong number of buffers");
      const Buffer &whole = split ? in[0] : out[0];
      int64_t sum = 0;
      for (const Buffer &p : split ? out : in) {
        if (rows(p) != rows(whole))
          return fail("every piece must have the whole's rows");
        sum += last(p);
      }
      return sum == last(whole) ? true : fail("the pieces' features must add up to the whole's");
    }
    case KernelId::Rotary: {
      int64_t hd = 0;
      if (!size("head_dim", ins.args.head_dim, hd))
        return false;
      if (hd % 2 != 0)
        return fail("params.head_dim must be even");
      for (size_t i = 0; i < 2; ++i) {
        if (!rank(in[i], 3, i ? "ins[1]" : "ins[0]"))
          return false;
        if (last(in[i]) % hd != 0)
          return fail("the features must be whole heads of params.head_dim");
        if (out[i].shape != in[i].shape)
          return fail("outs[" + std::to_string(i) + "] must have its input's shape");
      }
      if (in[0].shape[0] != in[1].shape[0] || in[0].shape[1] != in[1].shape[1])
        return fail("q and k must have one batch and sequence");
      return true;
    }
    case KernelId::AttentionFwd:
    case KernelId::AttentionBwd: {
      bool fwd = ins.kernel->id == KernelId::AttentionFwd;
      int64_t h = 0, kv = 0, d = 0;
      if (!size("heads", ins.args.heads, h) || !size("kv_heads", ins.args.kv_heads, kv) || !size("head_dim", ins.args.head_dim, d))
        return false;
      if (h % kv != 0)
        return fail("params.heads must be a multiple of params.kv_heads");
      const Buffer &q = in[fwd ? 0 : 1], &k = in[fwd ? 1 : 2], &v = in[fwd ? 2 : 3];
      if (!rank(q, 3, "q") || !rank(k, 3, "k"))
        return false;
      if (last(q) != h * d || last(k) != kv * d || v.shape != k.shape ||
          q.shape[0] != k.shape[0])
        return fail("q must be [b, s, heads x head_dim] and k, v [b, s', kv_heads x head_dim]");
      if (fwd)
        return out[0].shape == q.shape ? true : fail("outs[0] must have q's shape");
      if (in[0].shape != q.shape || in[4].shape != q.shape || out[0].shape != q.shape ||
          out[1].shape != k.shape || out[2].shape != k.shape)
        return fail("gradients and the output must have q's (k's, v's) shapes");
      return true;
    }
    case KernelId::CrossEntropyFwd:
    case KernelId::CrossEntropyBwd:
      if (!ids(in[1], "ins[1] (labels)"))
        return false;
      if (in[1].elements != rows(in[0]))
        return fail("one label per row of logits");
      if (ins.kernel->id == KernelId::CrossEntropyBwd)
        return (in[2].elements >= 1 ? true : fail("ins[2] must hold the loss gradient")) &&
               same(in[0], out[0], "outs[0]");
      return out[0].elements >= 1 ? true : fail("outs[0] must hold the loss");
    case KernelId::VPCEStats:
      if (!ids(in[1], "ins[1] (labels)"))
        return false;
      if (in[1].elements != rows(in[0]) || out[0].elements != rows(in[0]) ||
          out[1].elements != rows(in[0]))
        return fail("labels and both outputs need one entry per row of logits");
      return true;
    case KernelId::VPCELoss:
      if (!ids(in[2], "ins[2] (labels)"))
        return false;
      if (in[1].elements < 1 || in[2].elements != in[1].elements ||
          in[0].elements % in[1].elements != 0 || out[0].elements < 1)
        return fail("the log-sum-exps must be parts x rows, with one target and label per row");
      return true;
    case KernelId::VPCEBwd:
      if (!ids(in[1], "ins[1] (labels)"))
        return false;
      if (in[1].elements != rows(in[0]) || in[1].elements < 1 ||
          in[2].elements % in[1].elements != 0 || in[3].elements < 1)
        return fail("labels and log-sum-exps must match the logits' rows");
      return same(in[0], out[0], "outs[0]");
    case KernelId::MoERouterFwd:
    case KernelId::MoERouterBwd: {
      bool fwd = ins.kernel->id == KernelId::MoERouterFwd;
      if (!fwd && !count(5, 6, 2, 2))
        return false;
      int64_t k = 0;
      if (!size("top_k", ins.args.top_k, k))
        return false;
      const Buffer &x = in[fwd ? 0 : 1], &gate = in[fwd ? 1 : 2];
      const Buffer &w = fwd ? out[0] : in[3], &idx = fwd ? out[1] : in[4];
      if (!rank(gate, 2, "the gate") || gate.shape[1] != last(x) || k > gate.shape[0])
        return fail("the gate must be [experts >= top_k, features]");
      if (!ids(idx, "the indices") || w.elements != rows(x) * k || idx.elements != w.elements)
        return fail("weights and indices must be rows x top_k");
      if (!fwd && (!same(x, out[0], "outs[0]") || !same(gate, out[1], "outs[1]") ||
                   !same(w, in[0], "ins[0]")))
        return false;
      return true;
    }
    case KernelId::MoEExpertCounts: {
      int64_t k = 0;
      return size("top_k", ins.args.top_k, k) && ids(in[0], "ins[0]") &&
             (in[0].elements % k == 0 ? true : fail("params.top_k must divide the indices"));
    }
    case KernelId::MoEDispatchFwd:
    case KernelId::MoEDispatchBwd:
    case KernelId::MoECombineFwd:
    case KernelId::MoECombineBwd: {
      KernelId id = ins.kernel->id;
      const Buffer &routes = ins.moeIndices(), &slots = ins.moeRows();
      const Buffer &tokens = id == KernelId::MoEDispatchFwd || id == KernelId::MoECombineBwd
                                 ? in[0]
                                 : out[0];
      if (!ids(routes, "the indices") || !rank(slots, 3, "the expert rows") || last(routes) < 1)
        return false;
      if (last(tokens) != slots.shape[2] || rows(tokens) * last(routes) != routes.elements)
        return fail("tokens, indices and expert rows must agree (rows x top_k, hidden)");
      return true;
    }
    case KernelId::MoEExpertsFwd:
    case KernelId::MoEExpertsBwd: {
      bool fwd = ins.kernel->id == KernelId::MoEExpertsFwd;
      size_t first = fwd ? 1 : 2, n = ins.args.swiglu ? 3 : 2;
      if (!count(first + n, first + n, fwd ? 1 : 1 + n, fwd ? 1 : 1 + n))
        return false;
      const Buffer &x = in[fwd ? 0 : 1];
      if (!rank(x, 3, "the expert rows"))
        return false;
      // [E, ffn, hidden] up (and gate), [E, hidden, ffn] down.
      for (size_t i = 0; i < n; ++i) {
        const Buffer &w = in[first + i];
        bool down = i == n - 1;
        if (!rank(w, 3, "an expert weight"))
          return false;
        if (w.shape[0] != x.shape[0] || w.shape[down ? 1 : 2] != x.shape[2] ||
            w.shape[down ? 2 : 1] != in[first].shape[1])
          return fail("expert weights must be [experts, ffn, hidden] and [experts, hidden, ffn]");
        if (!fwd && !same(w, out[1 + i], "a weight gradient"))
          return false;
        if (!fwd && ins.args.accumulate &&
            (out[1 + i].dtype != DType::F32 || out[1 + i].space != Buffer::Space::Accum))
          return fail("accumulate adds the weight gradients into f32 accumulators");
      }
      return same(x, out[0], "outs[0]") && (fwd || same(x, in[0], "ins[0]"));
    }
    case KernelId::AdamW:
      if (!count(2, 3, 0, 0))
        return false;
      return in[1].elements >= 1 ? true : fail("ins[1] must hold the gradient norm");
    case KernelId::GlobalNorm:
    case KernelId::SumSquares:
    case KernelId::LossUnscale:
    case KernelId::Fill:
    case KernelId::LossScaleFill:
      return out.empty() || out[0].elements >= 1 ? true : fail("outs[0] must hold a value");
    default:
      return true;
    }
  }
};

} // namespace

bool checkKernel(const Instruction &ins, std::string &why) {
  if (!ins.kernel)
    return true;
  for (const std::vector<Buffer> *list : {&ins.ins, &ins.outs})
    for (const Buffer &b : *list)
      if (b.elements < 0 || (b.elements > 0 && b.shape.empty() && b.elements != 1))
        return (why = "a buffer has a bad shape", false);
  // Arity first (the kernels index these lists).
  if ((ins.kernel->inputs >= 0 && int(ins.ins.size()) != ins.kernel->inputs) ||
      (ins.kernel->outputs >= 0 && int(ins.outs.size()) != ins.kernel->outputs))
    return (why = "wrong number of buffers", false);
  Checker c{ins, why};
  return c.run();
}

} // namespace llmopt::runtime
