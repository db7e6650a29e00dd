//===- Norm.cpp - LayerNorm and RMSNorm ---------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::lowering;

void llmopt::lowering::populateNormLowerings(LoweringPatternSet &set) {
  set.add<LayerNormOp>([](LayerNormOp n, Lowering &l) {
    SmallVector<Value> ins = {n.getInput(), n.getWeight()};
    if (n.getBias())
      ins.push_back(n.getBias());
    return l.kernel(n.getLoc(), "layer_norm_fwd", ins, n.getResult(),
                    {l.f64("eps", n.getEps().convertToDouble())});
  });
  set.add<LayerNormGradOp>([](LayerNormGradOp g, Lowering &l) {
    SmallVector<Value> outs = {g.getInputGrad(), g.getWeightGrad()};
    if (g.getBiasGrad())
      outs.push_back(g.getBiasGrad());
    return l.kernel(g.getLoc(), "layer_norm_bwd", {g.getGrad(), g.getInput(), g.getWeight()}, outs,
                    {l.f64("eps", g.getEps().convertToDouble())});
  });
  set.add<RMSNormOp>([](RMSNormOp n, Lowering &l) {
    return l.kernel(n.getLoc(), "rms_norm_fwd", {n.getInput(), n.getWeight()}, n.getResult(),
                    {l.f64("eps", n.getEps().convertToDouble())});
  });
  set.add<RMSNormGradOp>([](RMSNormGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "rms_norm_bwd", {g.getGrad(), g.getInput(), g.getWeight()},
                    {g.getInputGrad(), g.getWeightGrad()},
                    {l.f64("eps", g.getEps().convertToDouble())});
  });
}
