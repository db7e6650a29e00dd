//===- LLMGradients.cpp - GradientOpInterface implementations -------------===//
//
// The backward of each forward op, as the ops of LLMGradOps.td. Operand
// gradients that do not exist (token ids, labels) are null.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace llmopt::llm;

namespace {
/// Creates op `OpTy` from result types, operands and inherent attributes.
template <typename OpTy>
Operation *make(OpBuilder &b, Location loc, TypeRange types, ValueRange operands,
                ArrayRef<NamedAttribute> attrs = {}) {
  OperationState state(loc, OpTy::getOperationName());
  state.addTypes(types);
  state.addOperands(operands);
  state.addAttributes(attrs);
  return b.create(state);
}

/// Fails unless every result has a gradient (multi-result ops whose results
/// are all needed downstream).
LogicalResult needAll(Operation *op, ArrayRef<Value> grads) {
  for (auto [i, g] : llvm::enumerate(grads))
    if (!g)
      return op->emitOpError() << "result " << i
                               << " is unused: its gradient would be zero; remove it";
  return success();
}
} // namespace

LogicalResult EmbeddingOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  auto g = EmbeddingGradOp::create(b, getLoc(), getTable().getType(), getTokens(), grads[0]);
  // A vocabulary-parallel table gets the gradient of its rows only.
  if (Attribute axis = (*this)->getAttr("llm.vocab_axis"))
    g->setAttr("llm.vocab_axis", axis);
  out.assign({Value(), (Value)g});
  return success();
}

LogicalResult PositionEmbeddingOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                                SmallVectorImpl<Value> &out) {
  out.assign({grads[0],
              (Value)PositionEmbeddingGradOp::create(b, getLoc(), getTable().getType(), grads[0])});
  return success();
}

LogicalResult RotaryOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  if (failed(needAll(*this, grads)))
    return failure();
  auto inv = RotaryOp::create(b, getLoc(), getQ().getType(), getK().getType(), grads[0], grads[1],
                              getHeadDimAttr(), getThetaAttr(), getScalingAttr(),
                              getInverse() ? UnitAttr() : b.getUnitAttr());
  out.assign({inv.getQOut(), inv.getKOut()});
  return success();
}

LogicalResult LayerNormOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  SmallVector<Type> types = {getInput().getType(), getWeight().getType()};
  SmallVector<NamedAttribute> attrs = {b.getNamedAttr("eps", getEpsAttr())};
  if (getBias()) {
    types.push_back(getBias().getType());
    attrs.push_back(b.getNamedAttr("bias", b.getUnitAttr()));
  }
  Operation *g =
      make<LayerNormGradOp>(b, getLoc(), types, {grads[0], getInput(), getWeight()}, attrs);
  out.assign({g->getResult(0), g->getResult(1)});
  if (getBias())
    out.push_back(g->getResult(2));
  return success();
}

LogicalResult RMSNormOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                      SmallVectorImpl<Value> &out) {
  auto g = RMSNormGradOp::create(b, getLoc(), getInput().getType(), getWeight().getType(), grads[0],
                                 getInput(), getWeight(), getEpsAttr());
  out.assign({g.getInputGrad(), g.getWeightGrad()});
  return success();
}

LogicalResult LinearOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  SmallVector<Type> types = {getInput().getType(), getWeight().getType()};
  SmallVector<NamedAttribute> attrs;
  if (getTransposed())
    attrs.push_back(b.getNamedAttr("transposed", b.getUnitAttr()));
  if (getBias()) {
    types.push_back(getBias().getType());
    attrs.push_back(b.getNamedAttr("bias", b.getUnitAttr()));
  }
  if (std::optional<Type> gemm = getGemm())
    attrs.push_back(b.getNamedAttr("gemm", TypeAttr::get(*gemm)));
  Operation *g = make<LinearGradOp>(b, getLoc(), types, {grads[0], getInput(), getWeight()}, attrs);
  out.assign({g->getResult(0), g->getResult(1)});
  if (getBias())
    out.push_back(g->getResult(2));
  return success();
}

LogicalResult SplitOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                    SmallVectorImpl<Value> &out) {
  if (failed(needAll(*this, grads)))
    return failure();
  out.assign({(Value)ConcatOp::create(b, getLoc(), getInput().getType(), grads)});
  return success();
}

LogicalResult AttentionOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  auto g = AttentionGradOp::create(b, getLoc(), getQ().getType(), getK().getType(),
                                   getV().getType(), grads[0], getQ(), getK(), getV(), getResult(),
                                   getNumHeadsAttr(), getNumKvHeadsAttr(), getHeadDimAttr(),
                                   getScaleAttr(), getCausalAttr(), getWindowAttr());
  // Ring attention (context parallelism) runs its backward around the ring.
  if (Attribute ring = (*this)->getAttr("llm.cp_ring"))
    g->setAttr("llm.cp_ring", ring);
  out.assign({g.getQGrad(), g.getKGrad(), g.getVGrad()});
  return success();
}

LogicalResult GeluOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                   SmallVectorImpl<Value> &out) {
  out.assign({(Value)GeluGradOp::create(b, getLoc(), getInput().getType(), grads[0], getInput(),
                                        getApproximateAttr())});
  return success();
}

LogicalResult SwiGLUOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  auto g = SwiGLUGradOp::create(b, getLoc(), getGate().getType(), getUp().getType(), grads[0],
                                getGate(), getUp());
  out.assign({g.getGateGrad(), g.getUpGrad()});
  return success();
}

LogicalResult AddOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                  SmallVectorImpl<Value> &out) {
  out.assign({grads[0], grads[0]});
  return success();
}

LogicalResult LMHeadOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  auto g = LMHeadGradOp::create(b, getLoc(), getInput().getType(), getWeight().getType(), grads[0],
                                getInput(), getWeight());
  out.assign({g.getInputGrad(), g.getWeightGrad()});
  return success();
}

LogicalResult CrossEntropyOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                           SmallVectorImpl<Value> &out) {
  out.assign({(Value)CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(), getLogits(),
                                                getLabels(), grads[0], getIgnoreIndexAttr(),
                                                getVocabAxisAttr(), getVocabSizeAttr()),
              Value()});
  return success();
}

LogicalResult MoERouterOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  // Indices carry no gradient; without one for the weights the router
  // contributes none (and its gate is reported as untrained).
  if (!grads[0]) {
    out.assign({Value(), Value()});
    return success();
  }
  auto g = MoERouterGradOp::create(b, getLoc(), getInput().getType(), getGate().getType(), grads[0],
                                   getInput(), getGate(), getWeights(), getIndices(), getTopKAttr(),
                                   getNormalizeAttr(), getAuxLossAttr());
  out.assign({g.getInputGrad(), g.getGateGrad()});
  return success();
}

LogicalResult MoEDispatchOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                          SmallVectorImpl<Value> &out) {
  out.assign(
      {(Value)MoEDispatchGradOp::create(b, getLoc(), getInput().getType(), grads[0], getIndices()),
       Value()});
  return success();
}

LogicalResult MoEExpertsOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                         SmallVectorImpl<Value> &out) {
  auto g =
      MoEExpertsGradOp::create(b, getLoc(), getInput().getType(), getWeights().getTypes(), grads[0],
                               getInput(), getWeights(), getActivationAttr(), getGemmAttr());
  out.assign({g.getInputGrad()});
  llvm::append_range(out, g.getWeightGrads());
  return success();
}

LogicalResult MoECombineOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                         SmallVectorImpl<Value> &out) {
  auto g = MoECombineGradOp::create(b, getLoc(), getInput().getType(), getWeights().getType(),
                                    grads[0], getInput(), getWeights(), getIndices());
  out.assign({g.getExpertOutGrad(), g.getWeightsGrad(), Value()});
  return success();
}
