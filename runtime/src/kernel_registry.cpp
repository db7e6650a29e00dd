//===- kernel_registry.cpp - what the runtime knows of each kernel --------===//
//
// One definition per kernel family beside the kernel ABI: the check that a
// call's buffers and parameters agree the way the kernels index them (a
// weight's size against its input's features, heads x head dimension
// against the features, ...), so that a tampered or corrupt plan is refused
// with the place named instead of reading past a buffer; and the FLOP model
// of --profile. The backends' implementations are their own tables
// (CpuExecutor::kernelTable, the CUDA backend's kernelTable).
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/kernel_registry.h"

#include "llmopt-runtime/plan.h"

#include <array>
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

  // One check per kernel family (the buffer counts of fixed-arity kernels
  // are checked before, from the ABI).
  bool add() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return same(in[0], out[0], "outs[0]") && same(in[1], out[0], "ins[1]");
  }

  bool unary() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return same(in[0], out[0], "outs[0]");
  }

  bool geluBwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return same(in[0], in[1], "ins[0]") && same(in[1], out[0], "outs[0]");
  }

  bool swiGLUFwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return same(in[0], in[1], "ins[1]") && same(in[0], out[0], "outs[0]");
  }

  bool swiGLUBwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return same(in[1], in[0], "ins[0]") && same(in[1], in[2], "ins[2]") &&
           same(in[1], out[0], "outs[0]") && same(in[1], out[1], "outs[1]");
  }

  bool biasAdd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (in[1].elements < 1 || in[0].elements % in[1].elements != 0)
      return fail("the bias must divide the input");
    return same(in[0], out[0], "outs[0]");
  }

  bool sumRows() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (out[0].elements < 1 || in[0].elements % out[0].elements != 0)
      return fail("the output must divide the input");
    return true;
  }

  bool embeddingFwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return ids(in[0], "ins[0]") && rank(in[1], 2, "ins[1]") &&
           (out[0].elements == in[0].elements * in[1].shape[1] && last(out[0]) == in[1].shape[1]
                ? true
                : fail("outs[0] must be the tokens x the table's width"));
  }

  bool embeddingBwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    return ids(in[0], "ins[0]") && rank(out[0], 2, "outs[0]") &&
           (in[1].elements == in[0].elements * out[0].shape[1]
                ? true
                : fail("ins[1] must be the tokens x the table's width"));
  }

  bool positionEmbedding() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    bool fwd = ins.kernel->id == KernelId::PositionEmbeddingFwd;
    const Buffer &x = in[0], &table = fwd ? in[1] : out[0];
    if (!rank(x, 3, "ins[0]") || !rank(table, 2, fwd ? "ins[1]" : "outs[0]"))
      return false;
    if (table.shape[1] != x.shape[2] || table.shape[0] < x.shape[1])
      return fail("the position table must be [positions >= seq, hidden]");
    return !fwd || same(x, out[0], "outs[0]");
  }

  bool normFwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (ins.kernel->id == KernelId::LayerNormFwd && !count(2, 3, 1, 1))
      return false;
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].elements != last(in[0]))
        return fail("ins[" + std::to_string(i) + "] must have the features' size");
    return same(in[0], out[0], "outs[0]");
  }

  bool normBwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (ins.kernel->id == KernelId::LayerNormBwd && !count(3, 3, 2, 3))
      return false;
    if (in[2].elements != last(in[1]))
      return fail("ins[2] must have the features' size");
    for (size_t i = 1; i < out.size(); ++i)
      if (out[i].elements != last(in[1]))
        return fail("outs[" + std::to_string(i) + "] must have the features' size");
    return same(in[1], in[0], "ins[0]") && same(in[1], out[0], "outs[0]");
  }

  bool linear() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
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

  bool splitConcat() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
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

  bool rotary() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
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

  bool attention() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    bool fwd = ins.kernel->id == KernelId::AttentionFwd;
    int64_t h = 0, kv = 0, d = 0;
    if (!size("heads", ins.args.heads, h) || !size("kv_heads", ins.args.kv_heads, kv) ||
        !size("head_dim", ins.args.head_dim, d))
      return false;
    if (h % kv != 0)
      return fail("params.heads must be a multiple of params.kv_heads");
    const Buffer &q = in[fwd ? 0 : 1], &k = in[fwd ? 1 : 2], &v = in[fwd ? 2 : 3];
    if (!rank(q, 3, "q") || !rank(k, 3, "k"))
      return false;
    if (last(q) != h * d || last(k) != kv * d || v.shape != k.shape || q.shape[0] != k.shape[0])
      return fail("q must be [b, s, heads x head_dim] and k, v [b, s', kv_heads x head_dim]");
    if (fwd)
      return out[0].shape == q.shape ? true : fail("outs[0] must have q's shape");
    if (in[0].shape != q.shape || in[4].shape != q.shape || out[0].shape != q.shape ||
        out[1].shape != k.shape || out[2].shape != k.shape)
      return fail("gradients and the output must have q's (k's, v's) shapes");
    return true;
  }

  bool crossEntropy() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (!ids(in[1], "ins[1] (labels)"))
      return false;
    if (in[1].elements != rows(in[0]))
      return fail("one label per row of logits");
    if (ins.kernel->id == KernelId::CrossEntropyBwd)
      return (in[2].elements >= 1 ? true : fail("ins[2] must hold the loss gradient")) &&
             same(in[0], out[0], "outs[0]");
    return out[0].elements >= 1 ? true : fail("outs[0] must hold the loss");
  }

  bool vpceStats() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (!ids(in[1], "ins[1] (labels)"))
      return false;
    if (in[1].elements != rows(in[0]) || out[0].elements != rows(in[0]) ||
        out[1].elements != rows(in[0]))
      return fail("labels and both outputs need one entry per row of logits");
    return classes();
  }

  /// A padded vocabulary's real size (entries past it are padding), or -1
  /// (none).
  bool classes() {
    int64_t c = ins.args.classes;
    if (c != -1 && c < 1)
      return fail("classes must be the vocabulary's size (positive), or -1 for no padding");
    return true;
  }

  bool vpceLoss() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (!ids(in[2], "ins[2] (labels)"))
      return false;
    if (in[1].elements < 1 || in[2].elements != in[1].elements ||
        in[0].elements % in[1].elements != 0 || out[0].elements < 1)
      return fail("the log-sum-exps must be parts x rows, with one target and label per row");
    return true;
  }

  bool vpceBwd() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    if (!ids(in[1], "ins[1] (labels)"))
      return false;
    if (in[1].elements != rows(in[0]) || in[1].elements < 1 ||
        in[2].elements % in[1].elements != 0 || in[3].elements < 1)
      return fail("labels and log-sum-exps must match the logits' rows");
    return same(in[0], out[0], "outs[0]") && classes();
  }

  bool moeRouter() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
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

  bool moeExpertCounts() {
    const std::vector<Buffer> &in = ins.ins;
    int64_t k = 0;
    return size("top_k", ins.args.top_k, k) && ids(in[0], "ins[0]") &&
           (in[0].elements % k == 0 ? true : fail("params.top_k must divide the indices"));
  }

  bool moeDispatchCombine() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
    KernelId id = ins.kernel->id;
    const Buffer &routes = ins.moeIndices(), &slots = ins.moeRows();
    const Buffer &tokens =
        id == KernelId::MoEDispatchFwd || id == KernelId::MoECombineBwd ? in[0] : out[0];
    if (!ids(routes, "the indices") || !rank(slots, 3, "the expert rows") || last(routes) < 1)
      return false;
    if (last(tokens) != slots.shape[2] || rows(tokens) * last(routes) != routes.elements)
      return fail("tokens, indices and expert rows must agree (rows x top_k, hidden)");
    return true;
  }

  bool moeExperts() {
    const std::vector<Buffer> &in = ins.ins, &out = ins.outs;
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

  bool adamW() {
    const std::vector<Buffer> &in = ins.ins;
    if (!count(2, 3, 0, 0))
      return false;
    return in[1].elements >= 1 ? true : fail("ins[1] must hold the gradient norm");
  }

  bool scalarOut() {
    const std::vector<Buffer> &out = ins.outs;
    return out.empty() || out[0].elements >= 1 ? true : fail("outs[0] must hold a value");
  }

  bool tpSlice() {
    // The whole tensor and its part along the last dimension.
    bool slice = ins.kernel->id == KernelId::TPSlice;
    const Buffer &whole = slice ? ins.ins[0] : ins.outs[0],
                 &part = slice ? ins.outs[0] : ins.ins[0];
    int64_t parts = 0;
    if (!size("parts", ins.args.parts, parts))
      return false;
    if (whole.shape.empty() || part.shape.size() != whole.shape.size() ||
        last(whole) % parts != 0 || last(part) != last(whole) / parts ||
        part.elements * parts != whole.elements)
      return fail("the part must be the whole tensor with its last dimension divided by parts");
    return true;
  }

  bool lossScaleUpdate() {
    return ins.ins[0].elements >= 1 ? true : fail("ins[0] must hold found_inf");
  }
};

template <bool (Checker::*Check)()> bool checkWith(const Instruction &ins, std::string &why) {
  Checker c{ins, why};
  return (c.*Check)();
}

bool noCheck(const Instruction &, std::string &) { return true; }

/// A GEMM: [rows, in, out]; 2 x rows x in x out FLOPs forward, twice that
/// backward (the input's and the weight's gradients).
void gemmCost(const Instruction &ins, std::vector<int64_t> &dims, double &flops) {
  bool fwd = ins.kernel->id == KernelId::LinearFwd;
  const Buffer &x = ins.ins[fwd ? 0 : 1], &w = ins.ins[fwd ? 1 : 2];
  bool tr = ins.args.transposed;
  int64_t inF = tr ? w.shape[0] : w.shape[1], outF = tr ? w.shape[1] : w.shape[0];
  dims = {rows(x), inF, outF};
  flops = (fwd ? 2.0 : 4.0) * double(rows(x)) * double(inF) * double(outF);
}

/// Attention: [b, heads, sq, sk, d]; QK^T and PV are 4 b h sq sk d FLOPs
/// (half of it under a causal mask); the backward about 2.5 times the
/// forward.
void attentionCost(const Instruction &ins, std::vector<int64_t> &dims, double &flops) {
  bool fwd = ins.kernel->id == KernelId::AttentionFwd;
  const Buffer &q = ins.ins[fwd ? 0 : 1], &k = ins.ins[fwd ? 1 : 2];
  int64_t heads = ins.args.heads, d = ins.args.head_dim;
  dims = {q.shape[0], heads, q.shape[1], k.shape[1], d};
  flops = 4.0 * double(q.shape[0]) * double(heads) * double(q.shape[1]) * double(k.shape[1]) *
          double(d) * (ins.args.causal ? 0.5 : 1.0) * (fwd ? 1.0 : 2.5);
}

} // namespace

const KernelDef &kernelDef(KernelId id) {
  static const std::array<KernelDef, size_t(KernelId::NumKernels)> table = [] {
    std::array<KernelDef, size_t(KernelId::NumKernels)> t{};
    auto def = [&](KernelId k, KernelDef::CheckFn check, KernelDef::CostFn cost = nullptr) {
      t[size_t(k)] = KernelDef{&kernels::kKernels[size_t(k)], check, cost};
    };
    def(KernelId::EmbeddingFwd, &checkWith<&Checker::embeddingFwd>);
    def(KernelId::EmbeddingBwd, &checkWith<&Checker::embeddingBwd>);
    def(KernelId::PositionEmbeddingFwd, &checkWith<&Checker::positionEmbedding>);
    def(KernelId::PositionEmbeddingBwd, &checkWith<&Checker::positionEmbedding>);
    def(KernelId::LayerNormFwd, &checkWith<&Checker::normFwd>);
    def(KernelId::LayerNormBwd, &checkWith<&Checker::normBwd>);
    def(KernelId::RMSNormFwd, &checkWith<&Checker::normFwd>);
    def(KernelId::RMSNormBwd, &checkWith<&Checker::normBwd>);
    def(KernelId::LinearFwd, &checkWith<&Checker::linear>, &gemmCost);
    def(KernelId::LinearBwd, &checkWith<&Checker::linear>, &gemmCost);
    def(KernelId::Split, &checkWith<&Checker::splitConcat>);
    def(KernelId::Concat, &checkWith<&Checker::splitConcat>);
    def(KernelId::Rotary, &checkWith<&Checker::rotary>);
    def(KernelId::AttentionFwd, &checkWith<&Checker::attention>, &attentionCost);
    def(KernelId::AttentionBwd, &checkWith<&Checker::attention>, &attentionCost);
    def(KernelId::GeluFwd, &checkWith<&Checker::unary>);
    def(KernelId::GeluBwd, &checkWith<&Checker::geluBwd>);
    def(KernelId::SwiGLUFwd, &checkWith<&Checker::swiGLUFwd>);
    def(KernelId::SwiGLUBwd, &checkWith<&Checker::swiGLUBwd>);
    def(KernelId::Add, &checkWith<&Checker::add>);
    def(KernelId::Copy, &checkWith<&Checker::unary>);
    def(KernelId::BiasAdd, &checkWith<&Checker::biasAdd>);
    def(KernelId::SumRows, &checkWith<&Checker::sumRows>);
    def(KernelId::Fill, &checkWith<&Checker::scalarOut>);
    def(KernelId::Scale, &checkWith<&Checker::unary>);
    def(KernelId::CrossEntropyFwd, &checkWith<&Checker::crossEntropy>);
    def(KernelId::CrossEntropyBwd, &checkWith<&Checker::crossEntropy>);
    def(KernelId::VPCEStats, &checkWith<&Checker::vpceStats>);
    def(KernelId::VPCELoss, &checkWith<&Checker::vpceLoss>);
    def(KernelId::VPCEBwd, &checkWith<&Checker::vpceBwd>);
    def(KernelId::MoERouterFwd, &checkWith<&Checker::moeRouter>);
    def(KernelId::MoERouterBwd, &checkWith<&Checker::moeRouter>);
    def(KernelId::MoEExpertCounts, &checkWith<&Checker::moeExpertCounts>);
    def(KernelId::MoEDispatchFwd, &checkWith<&Checker::moeDispatchCombine>);
    def(KernelId::MoEDispatchBwd, &checkWith<&Checker::moeDispatchCombine>);
    def(KernelId::MoEExpertsFwd, &checkWith<&Checker::moeExperts>);
    def(KernelId::MoEExpertsBwd, &checkWith<&Checker::moeExperts>);
    def(KernelId::MoECombineFwd, &checkWith<&Checker::moeDispatchCombine>);
    def(KernelId::MoECombineBwd, &checkWith<&Checker::moeDispatchCombine>);
    def(KernelId::TPSlice, &checkWith<&Checker::tpSlice>);
    def(KernelId::TPUnslice, &checkWith<&Checker::tpSlice>);
    // Its body's kernels are checked one by one.
    def(KernelId::Fused, &noCheck);
    def(KernelId::GlobalNorm, &checkWith<&Checker::scalarOut>);
    def(KernelId::SumSquares, &checkWith<&Checker::scalarOut>);
    def(KernelId::Sqrt, &checkWith<&Checker::unary>);
    def(KernelId::LossScaleFill, &checkWith<&Checker::scalarOut>);
    def(KernelId::LossUnscale, &checkWith<&Checker::scalarOut>);
    def(KernelId::LossScaleUpdate, &checkWith<&Checker::lossScaleUpdate>);
    def(KernelId::AdamW, &checkWith<&Checker::adamW>);
    return t;
  }();
  return table[size_t(id)];
}

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
  return kernelDef(ins.kernel->id).check(ins, why);
}

} // namespace llmopt::runtime
