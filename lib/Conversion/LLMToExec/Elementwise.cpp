//===- Elementwise.cpp - constants, adds, activations, splits -----------===//

#include "Lowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::lowering;

void llmopt::lowering::populateElementwiseLowerings(LoweringPatternSet &set) {
  // Parameters live in the state; reading one emits nothing.
  set.add<ParamOp>([](ParamOp, Lowering &) { return success(); });
  set.add<arith::ConstantOp>([](arith::ConstantOp c, Lowering &l) -> LogicalResult {
    if (c->hasAttr("llm.loss_scale_seed"))
      return l.kernel(c.getLoc(), "loss_scale_fill", {}, c.getResult());
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
      return c.emitOpError() << "convert-llm-to-exec: only splat float constants";
    return l.kernel(c.getLoc(), "fill", {}, c.getResult(),
                    {l.f64("value", dense.getSplatValue<APFloat>().convertToDouble())});
  });
  set.add<AddOp>([](AddOp a, Lowering &l) {
    return l.kernel(a.getLoc(), "add", {a.getLhs(), a.getRhs()}, a.getResult());
  });
  set.add<GeluOp>([](GeluOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "gelu_fwd", g.getInput(), g.getResult(),
                    {l.flag("tanh", g.getApproximate() == GeluApprox::tanh)});
  });
  set.add<GeluGradOp>([](GeluGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "gelu_bwd", {g.getGrad(), g.getInput()}, g.getResult(),
                    {l.flag("tanh", g.getApproximate() == GeluApprox::tanh)});
  });
  set.add<SwiGLUOp>([](SwiGLUOp s, Lowering &l) {
    return l.kernel(s.getLoc(), "swiglu_fwd", {s.getGate(), s.getUp()}, s.getResult());
  });
  set.add<SwiGLUGradOp>([](SwiGLUGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "swiglu_bwd", {g.getGrad(), g.getGate(), g.getUp()},
                    {g.getGateGrad(), g.getUpGrad()});
  });
  set.add<SplitOp>([](SplitOp s, Lowering &l) {
    return l.kernel(s.getLoc(), "split", s.getInput(), s.getResults());
  });
  set.add<ConcatOp>([](ConcatOp c, Lowering &l) {
    return l.kernel(c.getLoc(), "concat", c.getInputs(), c.getResult());
  });
}
