//===- LLMParallelOps.cpp - tensor-parallel ops: verifiers, costs, grads --===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace llmopt::llm;

static RankedTensorType ty(Value v) { return cast<RankedTensorType>(v.getType()); }

static LogicalResult verifyAxis(Operation *op, StringRef axis) {
  if (axis.empty())
    return op->emitOpError() << "needs a mesh axis name";
  return success();
}

/// A bias matches the last dimension and element type of `x`.
static LogicalResult verifyBias(Operation *op, Value x, Value bias) {
  RankedTensorType b = ty(bias), t = ty(x);
  if (b.getRank() != 1 || b.getDimSize(0) != t.getDimSize(t.getRank() - 1) ||
      b.getElementType() != t.getElementType())
    return op->emitOpError() << "bias " << b << " must be a vector of the last dimension of "
                             << t;
  return success();
}

LogicalResult TPCopyOp::verify() { return verifyAxis(*this, getAxis()); }
LogicalResult AllReduceOp::verify() { return verifyAxis(*this, getAxis()); }

LogicalResult TPReduceOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return getBias() ? verifyBias(*this, getInput(), getBias()) : success();
}

LogicalResult BiasGradOp::verify() { return verifyBias(*this, getGrad(), getResult()); }

/// Communication is costed by the planner's collective model, not per op:
/// these count only the bytes they touch.
static OpCost touches(Value in, Value out, const CostContext &c) {
  OpCost k;
  k.fwdBytesRead = tensorBytes(in.getType(), c);
  k.fwdBytesWritten = tensorBytes(out.getType(), c);
  return k;
}

OpCost TPCopyOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost TPReduceOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost AllReduceOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost BiasGradOp::getCost(const CostContext &c) {
  OpCost k = touches(getGrad(), getResult(), c);
  k.fwdFlops = tensorElements(getGrad().getType(), c);
  return k;
}

LogicalResult TPCopyOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                     SmallVectorImpl<Value> &out) {
  out.assign({(Value)AllReduceOp::create(b, getLoc(), grads[0].getType(), grads[0],
                                         getAxisAttr())});
  return success();
}

LogicalResult TPReduceOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                       SmallVectorImpl<Value> &out) {
  out.assign({grads[0]});
  if (getBias())
    out.push_back(BiasGradOp::create(b, getLoc(), getBias().getType(), grads[0]));
  return success();
}
