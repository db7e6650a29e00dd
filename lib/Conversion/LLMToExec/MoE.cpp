//===- MoE.cpp - router, dispatch, experts, combine ---------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

/// The router's backward. With the load-balancing loss, where the router saw
/// a chunk of the sequence (SP over tp, CP over cp), the loss counts the
/// whole sequence's choices (`moe_expert_counts` summed over the chunks),
/// and under CP, whose gradients are averaged over the chunks, each chunk's
/// share is scaled by cp.
static LogicalResult lowerRouterGrad(MoERouterGradOp g, Lowering &l) {
  Location loc = g.getLoc();
  SmallVector<NamedAttribute> params = {l.i64("top_k", g.getTopKAttr().getInt()),
                                        l.flag("normalize", g.getNormalize())};
  SmallVector<Value> ins = {g.getGrad(), g.getInput(), g.getGate(), g.getWeights(), g.getIndices()};
  std::optional<APFloat> aux = g.getAuxLoss();
  if (aux)
    params.push_back(l.f64("aux_loss", aux->convertToDouble()));
  int64_t sp = seqParts(g.getInput().getType());
  if (!aux || (sp == 1 && l.cp == 1))
    return l.kernel(loc, "moe_router_bwd", ins, {g.getInputGrad(), g.getGateGrad()}, params);
  FailureOr<ArrayAttr> io = l.buffers.lookup(ins);
  FailureOr<ArrayAttr> oo = l.buffers.lookup(ValueRange{g.getInputGrad(), g.getGateGrad()});
  if (failed(io) || failed(oo))
    return failure();
  int64_t experts = cast<RankedTensorType>(g.getGate().getType()).getDimSize(0);
  BufAttr counts = l.buffers.accumulator("scratch:moe_counts", {experts});
  l.kernelOn(loc, "moe_expert_counts", {(*io)[4]}, {counts},
             {l.i64("top_k", g.getTopKAttr().getInt())});
  for (auto [axis, parts] : {std::pair<StringRef, int64_t>{"tp", sp}, {"cp", l.cp}})
    if (parts > 1)
      l.allReduceOn(loc, axis, ReduceKind::sum, {counts});
  int64_t tokens = 1;
  for (int64_t d : cast<BufAttr>((*io)[1]).getShape().asArrayRef().drop_back())
    tokens *= d;
  params.push_back(l.i64("aux_tokens", tokens * sp * l.cp));
  params.push_back(l.f64("aux_scale", double(l.cp)));
  SmallVector<Attribute> all((*io).begin(), (*io).end());
  all.push_back(counts);
  l.kernelOn(loc, "moe_router_bwd", all, (*oo).getValue(), params);
  return success();
}

void llmopt::lowering::populateMoELowerings(LoweringPatternSet &set) {
  set.add<MoERouterOp>([](MoERouterOp r, Lowering &l) {
    return l.kernel(
        r.getLoc(), "moe_router_fwd", {r.getInput(), r.getGate()}, {r.getWeights(), r.getIndices()},
        {l.i64("top_k", r.getTopKAttr().getInt()), l.flag("normalize", r.getNormalize())});
  });
  set.add<MoERouterGradOp>(lowerRouterGrad);
  set.add<MoEDispatchOp>([](MoEDispatchOp d, Lowering &l) {
    return l.kernel(d.getLoc(), "moe_dispatch_fwd", {d.getInput(), d.getIndices()}, d.getResult());
  });
  set.add<MoEDispatchGradOp>([](MoEDispatchGradOp d, Lowering &l) {
    return l.kernel(d.getLoc(), "moe_dispatch_bwd", {d.getGrad(), d.getIndices()}, d.getResult());
  });
  set.add<MoEExpertsOp>([](MoEExpertsOp e, Lowering &l) -> LogicalResult {
    SmallVector<Value> ins = {e.getInput()};
    llvm::append_range(ins, e.getWeights());
    SmallVector<NamedAttribute> params = {
        l.flag("swiglu", e.getActivation() == ExpertActivation::swiglu)};
    if (failed(fp8GemmParams(l, e, e.getGemm(), "e4m3", params, e.getWeights())))
      return failure();
    return l.kernel(e.getLoc(), "moe_experts_fwd", ins, e.getResult(), params);
  });
  set.add<MoEExpertsGradOp>([](MoEExpertsGradOp e, Lowering &l) -> LogicalResult {
    SmallVector<Value> ins = {e.getGrad(), e.getInput()}, outs = {e.getInputGrad()};
    llvm::append_range(ins, e.getWeights());
    llvm::append_range(outs, e.getWeightGrads());
    SmallVector<NamedAttribute> params = {
        l.flag("swiglu", e.getActivation() == ExpertActivation::swiglu)};
    if (failed(fp8GemmParams(l, e, e.getGemm(), "hybrid", params, e.getWeights())))
      return failure();
    return l.kernel(e.getLoc(), "moe_experts_bwd", ins, outs, params);
  });
  set.add<MoECombineOp>([](MoECombineOp c, Lowering &l) {
    return l.kernel(c.getLoc(), "moe_combine_fwd", {c.getInput(), c.getWeights(), c.getIndices()},
                    c.getResult());
  });
  set.add<MoECombineGradOp>([](MoECombineGradOp c, Lowering &l) {
    return l.kernel(c.getLoc(), "moe_combine_bwd",
                    {c.getGrad(), c.getExpertOut(), c.getWeights(), c.getIndices()},
                    {c.getExpertOutGrad(), c.getWeightsGrad()});
  });
}
