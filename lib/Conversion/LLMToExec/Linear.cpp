//===- Linear.cpp - GEMMs: linears, the LM head, bias gradients ---------===//

#include "Lowering.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::lowering;

LogicalResult llmopt::lowering::fp8GemmParams(Lowering &l, Operation *op, std::optional<Type> gemm,
                                              StringRef recipe,
                                              SmallVectorImpl<NamedAttribute> &params,
                                              std::optional<ValueRange> experts) {
  if (!gemm)
    return success();
  if (!isa<Float8E4M3FNType>(*gemm))
    return op->emitOpError() << "convert-llm-to-exec: " << *gemm
                             << " GEMMs are not lowered; fp8 GEMMs take f8E4M3FN (the "
                                "backward uses f8E5M2 for gradients)";
  params.push_back(l.text("fp8", recipe));
  SmallVector<StringRef> axes;
  if (experts) {
    auto tpSplit = [](Value w) {
      if (auto g = w.getDefiningOp<ZeroGatherOp>())
        w = g.getParam();
      auto p = w.getDefiningOp<ParamOp>();
      auto shard = p ? p->getAttrOfType<ShardAttr>("llm.shard") : ShardAttr();
      return shard && shard.getAxis() == "tp";
    };
    if (llvm::any_of(*experts, tpSplit))
      axes.push_back("tp");
  } else {
    if (l.tp > 1)
      axes.push_back("tp");
    if (l.cp > 1)
      axes.push_back("cp");
  }
  if (!axes.empty())
    params.push_back(l.text("amax_axis", llvm::join(axes, ",")));
  return success();
}

void llmopt::lowering::populateLinearLowerings(LoweringPatternSet &set) {
  set.add<LinearOp>([](LinearOp op, Lowering &l) -> LogicalResult {
    SmallVector<NamedAttribute> params = {l.flag("transposed", op.getTransposed())};
    if (failed(fp8GemmParams(l, op, op.getGemm(), "e4m3", params)))
      return failure();
    SmallVector<Value> ins = {op.getInput(), op.getWeight()};
    if (op.getBias())
      ins.push_back(op.getBias());
    return l.kernel(op.getLoc(), "linear_fwd", ins, op.getResult(), params);
  });
  set.add<LinearGradOp>([](LinearGradOp g, Lowering &l) -> LogicalResult {
    SmallVector<Value> outs = {g.getInputGrad(), g.getWeightGrad()};
    if (g.getBiasGrad())
      outs.push_back(g.getBiasGrad());
    SmallVector<NamedAttribute> params = {l.flag("transposed", g.getTransposed())};
    if (failed(fp8GemmParams(l, g, g.getGemm(), "hybrid", params)))
      return failure();
    return l.kernel(g.getLoc(), "linear_bwd", {g.getGrad(), g.getInput(), g.getWeight()}, outs,
                    params);
  });
  set.add<LMHeadOp>([](LMHeadOp h, Lowering &l) {
    return l.kernel(h.getLoc(), "linear_fwd", {h.getInput(), h.getWeight()}, h.getResult(),
                    {l.flag("transposed", false)});
  });
  set.add<LMHeadGradOp>([](LMHeadGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "linear_bwd", {g.getGrad(), g.getInput(), g.getWeight()},
                    {g.getInputGrad(), g.getWeightGrad()}, {l.flag("transposed", false)});
  });
  set.add<BiasGradOp>([](BiasGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "sum_rows", g.getGrad(), g.getResult());
  });
}
