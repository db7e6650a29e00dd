//===- Attention.cpp - attention, local or around the cp ring -----------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

template <typename AttnOp> static SmallVector<NamedAttribute> attnParams(AttnOp a, Lowering &l) {
  return {l.i64("heads", a.getNumHeadsAttr().getInt()),
          l.i64("kv_heads", a.getNumKvHeadsAttr().getInt()),
          l.i64("head_dim", a.getHeadDimAttr().getInt()),
          l.f64("scale", a.getScale().convertToDouble()),
          l.flag("causal", a.getCausal()),
          l.i64("window", a.getWindowAttr() ? a.getWindowAttr().getInt() : 0)};
}

/// Context parallelism's ring attention (`llm.cp_ring`): key / value blocks
/// travel around the axis' ranks.
static LogicalResult ringAttention(Lowering &l, Location loc, Direction kind, SymbolRefAttr axis,
                                   ValueRange ins, ValueRange outs,
                                   ArrayRef<NamedAttribute> params) {
  FailureOr<ArrayAttr> i = l.buffers.lookup(ins), o = l.buffers.lookup(outs);
  if (failed(i) || failed(o))
    return failure();
  RingAttentionOp::create(l.ob, loc, DirectionAttr::get(l.b.getContext(), kind),
                          l.b.getStringAttr(axisName(axis)), *i, *o, l.b.getDictionaryAttr(params));
  return success();
}

void llmopt::lowering::populateAttentionLowerings(LoweringPatternSet &set) {
  set.add<AttentionOp>([](AttentionOp a, Lowering &l) {
    SmallVector<Value> ins = {a.getQ(), a.getK(), a.getV()};
    if (auto ring = a->getAttrOfType<SymbolRefAttr>("llm.cp_ring"))
      return ringAttention(l, a.getLoc(), Direction::fwd, ring, ins, a.getResult(),
                           attnParams(a, l));
    return l.kernel(a.getLoc(), "attention_fwd", ins, a.getResult(), attnParams(a, l));
  });
  set.add<AttentionGradOp>([](AttentionGradOp g, Lowering &l) {
    SmallVector<Value> ins = {g.getGrad(), g.getQ(), g.getK(), g.getV(), g.getOut()},
                       outs = {g.getQGrad(), g.getKGrad(), g.getVGrad()};
    if (auto ring = g->getAttrOfType<SymbolRefAttr>("llm.cp_ring"))
      return ringAttention(l, g.getLoc(), Direction::bwd, ring, ins, outs, attnParams(g, l));
    return l.kernel(g.getLoc(), "attention_bwd", ins, outs, attnParams(g, l));
  });
}
