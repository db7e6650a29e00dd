//===- LLMGradOps.cpp - backward and optimizer ops: verifiers and costs ---===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <cmath>

using namespace mlir;
using namespace llmopt::llm;

static RankedTensorType ty(Value v) { return cast<RankedTensorType>(v.getType()); }

static double elems(Value v, const CostContext &c) { return tensorElements(v.getType(), c); }
static double bytes(Value v, const CostContext &c) { return tensorBytes(v.getType(), c); }

/// The gradient of an activation has its type.
static LogicalResult sameType(Operation *op, StringRef a, Value x, StringRef b, Value y) {
  if (x.getType() != y.getType())
    return op->emitOpError() << a << " type " << x.getType() << " does not match " << b << " type "
                             << y.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  RankedTensorType first = ty(getInputs().front());
  int64_t total = 0;
  for (Value in : getInputs()) {
    RankedTensorType t = ty(in);
    if (t.getRank() != 3 || t.isDynamicDim(2) || t.getElementType() != first.getElementType())
      return emitOpError() << "inputs must be [batch, seq, features] of one element type, got "
                           << t;
    total += t.getDimSize(2);
  }
  RankedTensorType r = getType();
  if (r.getRank() != 3 || r.getDimSize(2) != total)
    return emitOpError() << "result must have " << total << " features, got " << r;
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  if (getType().getRank() != 2 || ty(getGrad()).getRank() != 3 ||
      getType().getDimSize(1) != ty(getGrad()).getDimSize(2))
    return emitOpError() << "result must be [vocab, " << ty(getGrad()).getDimSize(2) << "], got "
                         << getType();
  return success();
}

LogicalResult PositionEmbeddingGradOp::verify() {
  if (getType().getRank() != 2 || ty(getGrad()).getRank() != 3 ||
      getType().getDimSize(1) != ty(getGrad()).getDimSize(2))
    return emitOpError() << "result must be [positions, " << ty(getGrad()).getDimSize(2)
                         << "], got " << getType();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(sameType(*this, "gradient", getGrad(), "input", getInput())))
    return failure();
  if (getBias() != bool(getBiasGrad()))
    return emitOpError() << "has a bias gradient exactly when `bias` is set";
  if (getBiasGrad() && getBiasGrad().getType() != getWeight().getType())
    return emitOpError() << "bias gradient must have the weight's type";
  return success();
}

LogicalResult RMSNormGradOp::verify() {
  return sameType(*this, "gradient", getGrad(), "input", getInput());
}

LogicalResult LinearGradOp::verify() {
  RankedTensorType w = ty(getWeight());
  if (w.getRank() != 2)
    return emitOpError() << "weight must be rank 2, got " << w;
  int64_t in = getTransposed() ? w.getDimSize(0) : w.getDimSize(1);
  int64_t out = getTransposed() ? w.getDimSize(1) : w.getDimSize(0);
  if (ty(getInput()).getRank() != 3 || ty(getInput()).getDimSize(2) != in)
    return emitOpError() << "input must have " << in << " features";
  if (ty(getGrad()).getRank() != 3 || ty(getGrad()).getDimSize(2) != out)
    return emitOpError() << "gradient must have " << out << " features";
  if (getBias() != bool(getBiasGrad()))
    return emitOpError() << "has a bias gradient exactly when `bias` is set";
  if (getBiasGrad() && (ty(getBiasGrad()).getRank() != 1 || ty(getBiasGrad()).getDimSize(0) != out))
    return emitOpError() << "bias gradient must be a vector of " << out << " elements";
  return success();
}

LogicalResult AttentionGradOp::verify() {
  int64_t h = getNumHeadsAttr().getInt(), kvh = getNumKvHeadsAttr().getInt(),
          hd = getHeadDimAttr().getInt();
  if (h <= 0 || kvh <= 0 || hd <= 0 || h % kvh)
    return emitOpError() << "needs positive heads divisible by kv_heads";
  if (ty(getQ()).getDimSize(2) != h * hd || ty(getK()).getDimSize(2) != kvh * hd)
    return emitOpError() << "q must have heads * head_dim and k, v kv_heads * head_dim features";
  return success();
}

LogicalResult GeluGradOp::verify() { return success(); }
LogicalResult SwiGLUGradOp::verify() { return success(); }

LogicalResult LMHeadGradOp::verify() {
  RankedTensorType w = ty(getWeight());
  if (w.getRank() != 2 || ty(getGrad()).getDimSize(2) != w.getDimSize(0) ||
      ty(getInput()).getDimSize(2) != w.getDimSize(1))
    return emitOpError() << "gradient [.., vocab], input [.., hidden] and weight "
                            "[vocab, hidden] disagree";
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  if (ty(getLabels()).getRank() != 2 || ty(getLogits()).getRank() != 3)
    return emitOpError() << "logits must be [batch, seq, vocab] and labels [batch, seq]";
  return verifyVocabSize(*this, getVocabAxisAttr(), getVocabSizeAttr());
}

LogicalResult CrossEntropyGradOp::verifySymbolUses(SymbolTableCollection &symbols) {
  SymbolRefAttr axis = getVocabAxisAttr();
  return axis ? verifyGridAxis(*this, axis, symbols) : success();
}

LogicalResult MoERouterGradOp::verify() {
  if (getGrad().getType() != getWeights().getType() ||
      ty(getIndices()).getShape() != ty(getWeights()).getShape() || ty(getWeights()).getRank() != 3)
    return emitOpError() << "weights, their gradient and the indices must share one "
                            "[batch, seq, top_k] shape";
  return success();
}

LogicalResult MoEDispatchGradOp::verify() {
  if (getType().getRank() != 3 || ty(getGrad()).getRank() != 3 ||
      getType().getDimSize(2) != ty(getGrad()).getDimSize(2))
    return emitOpError() << "result must be [batch, seq, " << ty(getGrad()).getDimSize(2)
                         << "], got " << getType();
  return success();
}

LogicalResult MoEExpertsGradOp::verify() {
  if (std::optional<Type> gemm = getGemm(); gemm && !isa<Float8E4M3FNType>(*gemm))
    return emitOpError() << "expert GEMMs take f8E4M3FN inputs (gradients E5M2), got " << *gemm;
  if (getWeights().size() != getWeightGrads().size())
    return emitOpError() << "needs one weight gradient per weight";
  for (auto [w, g] : llvm::zip(getWeights(), getWeightGrads()))
    if (failed(sameType(*this, "weight gradient", g, "weight", w)))
      return failure();
  return success();
}

LogicalResult MoECombineGradOp::verify() { return success(); }

LogicalResult GlobalNormOp::verify() {
  if (getGrads().empty())
    return emitOpError() << "needs at least one gradient";
  return success();
}

LogicalResult AdamWOp::verify() {
  auto finite = [](APFloat f) { return std::isfinite(f.convertToDouble()); };
  double lr = getLr().convertToDouble(), b1 = getBeta1().convertToDouble(),
         b2 = getBeta2().convertToDouble(), eps = getEps().convertToDouble(),
         wd = getWeightDecay().convertToDouble(), maxNorm = getMaxNorm().convertToDouble();
  if (!finite(getLr()) || !finite(getBeta1()) || !finite(getBeta2()) || !finite(getEps()) ||
      !finite(getWeightDecay()) || !finite(getMaxNorm()))
    return emitOpError() << "hyperparameters must be finite";
  if (lr <= 0)
    return emitOpError() << "lr must be positive, got " << lr;
  if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1)
    return emitOpError() << "betas must be in [0, 1), got (" << b1 << ", " << b2 << ")";
  if (eps <= 0)
    return emitOpError() << "eps must be positive, got " << eps;
  if (wd < 0 || maxNorm < 0)
    return emitOpError() << "weight_decay and max_norm must not be negative";
  // That the name is a parameter of the function is verified once per
  // function (LLMDialect::verifyOperationAttribute on llm.train_step), not
  // by a walk per update.
  return success();
}

//===----------------------------------------------------------------------===//
// Costs: the backward work, counted as this op's forward (it runs once).
//===----------------------------------------------------------------------===//

OpCost ConcatOp::getCost(const CostContext &c) {
  OpCost k;
  for (Value in : getInputs())
    k.fwdBytesRead += bytes(in, c);
  k.fwdBytesWritten = bytes(getResult(), c);
  return k;
}

OpCost EmbeddingGradOp::getCost(const CostContext &c) {
  OpCost k;
  k.fwdFlops = elems(getGrad(), c);
  k.fwdBytesRead = bytes(getGrad(), c) + bytes(getTokens(), c);
  k.fwdBytesWritten = bytes(getGrad(), c);
  return k;
}

OpCost PositionEmbeddingGradOp::getCost(const CostContext &c) {
  OpCost k;
  k.fwdFlops = elems(getGrad(), c);
  k.fwdBytesRead = bytes(getGrad(), c);
  k.fwdBytesWritten = bytes(getResult(), c);
  return k;
}

static OpCost elementwiseBackward(Value grad, ValueRange saved, ValueRange outs,
                                  double flopsPerElem, const CostContext &c) {
  OpCost k;
  k.fwdFlops = flopsPerElem * elems(grad, c);
  k.fwdBytesRead = bytes(grad, c);
  for (Value v : saved)
    k.fwdBytesRead += bytes(v, c);
  for (Value v : outs)
    k.fwdBytesWritten += bytes(v, c);
  return k;
}

OpCost LayerNormGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getGrad(), {getInput(), getWeight()}, getOperation()->getResults(), 14,
                             c);
}

OpCost RMSNormGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getGrad(), {getInput(), getWeight()}, getOperation()->getResults(), 10,
                             c);
}

OpCost LinearGradOp::getCost(const CostContext &c) {
  OpCost k;
  double t = double(c.tokens());
  double in = ty(getInput()).getDimSize(2), out = ty(getGrad()).getDimSize(2);
  k.fwdFlops = 4 * t * in * out + (getBias() ? t * out : 0);
  k.fwdBytesRead = 2 * bytes(getGrad(), c) + bytes(getInput(), c) + bytes(getWeight(), c);
  k.fwdBytesWritten = bytes(getInputGrad(), c) + bytes(getWeightGrad(), c);
  return k;
}

OpCost AttentionGradOp::getCost(const CostContext &c) {
  OpCost k;
  double seq = double(c.seqLen);
  double pairs = getCausal() ? seq * (seq + 1) / 2 : seq * seq;
  if (IntegerAttr w = getWindowAttr(); w && w.getInt() < seq && getCausal())
    pairs = double(w.getInt()) * (w.getInt() + 1) / 2 + (seq - w.getInt()) * w.getInt();
  k.fwdFlops = 8.0 * c.batch * getNumHeadsAttr().getInt() * getHeadDimAttr().getInt() * pairs;
  k.fwdBytesRead = bytes(getQ(), c) + bytes(getK(), c) + bytes(getV(), c) + 2 * bytes(getOut(), c);
  k.fwdBytesWritten = bytes(getQ(), c) + bytes(getK(), c) + bytes(getV(), c);
  return k;
}

OpCost GeluGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getGrad(), {getInput()}, getOperation()->getResults(), 16, c);
}

OpCost SwiGLUGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getGrad(), {getGate(), getUp()}, getOperation()->getResults(), 10, c);
}

OpCost LMHeadGradOp::getCost(const CostContext &c) {
  OpCost k;
  double t = double(c.tokens());
  auto w = ty(getWeight());
  k.fwdFlops = 4 * t * w.getDimSize(0) * w.getDimSize(1);
  k.fwdBytesRead = 2 * bytes(getGrad(), c) + bytes(getInput(), c) + bytes(getWeight(), c);
  k.fwdBytesWritten = bytes(getInputGrad(), c) + bytes(getWeightGrad(), c);
  return k;
}

OpCost CrossEntropyGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getLogits(), {getLabels()}, getOperation()->getResults(), 3, c);
}

OpCost MoERouterGradOp::getCost(const CostContext &c) {
  OpCost k;
  double t = double(c.tokens()), e = ty(getGate()).getDimSize(0), h = ty(getGate()).getDimSize(1);
  k.fwdFlops = 4 * t * h * e + 5 * t * e;
  k.fwdBytesRead = bytes(getGrad(), c) + bytes(getInput(), c) + bytes(getGate(), c);
  k.fwdBytesWritten = bytes(getInputGrad(), c) + bytes(getGateGrad(), c);
  return k;
}

OpCost MoEDispatchGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getGrad(), {getIndices()}, getOperation()->getResults(), 1, c);
}

OpCost MoEExpertsGradOp::getCost(const CostContext &c) {
  // Recomputes the expert GEMMs (gemms x 2 flops per row and weight element)
  // and runs their backward (twice that).
  OpCost k;
  auto x = ty(getInput());
  double rows = double(x.getDimSize(0)) * double(x.getDimSize(1)), w = 0;
  for (Value v : getWeights())
    w += double(ty(v).getNumElements()) / double(x.getDimSize(0));
  k.fwdFlops = 6 * rows * w;
  k.fwdBytesRead = 2 * bytes(getGrad(), c) + bytes(getInput(), c);
  for (Value v : getWeights())
    k.fwdBytesRead += bytes(v, c);
  for (Value v : getOperation()->getResults())
    k.fwdBytesWritten += bytes(v, c);
  return k;
}

OpCost MoECombineGradOp::getCost(const CostContext &c) {
  return elementwiseBackward(getGrad(), {getExpertOut(), getWeights(), getIndices()},
                             getOperation()->getResults(), 4, c);
}

OpCost GlobalNormOp::getCost(const CostContext &c) {
  OpCost k;
  for (Value g : getGrads()) {
    k.fwdFlops += 2 * elems(g, c);
    k.fwdBytesRead += bytes(g, c);
  }
  return k;
}

OpCost AdamWOp::getCost(const CostContext &c) {
  OpCost k;
  double n = elems(getGrad(), c);
  // Reads the gradient and the fp32 master weight and moments, writes them
  // and the 16-bit copy of the weight.
  k.fwdFlops = 14 * n;
  k.fwdBytesRead = bytes(getGrad(), c) + 12 * n;
  k.fwdBytesWritten = 12 * n + bytes(getGrad(), c);
  return k;
}

bool llmopt::llm::accumulatesWeightGradients(Operation *op, int64_t zeroStage) {
  if (zeroStage >= 2)
    return false;
  SmallVector<Value> grads;
  if (auto g = dyn_cast<LinearGradOp>(op)) {
    if (g.getGemm())
      return false; // fp8: the recipe's own path
    grads.push_back(g.getWeightGrad());
    if (g.getBiasGrad())
      grads.push_back(g.getBiasGrad());
  } else if (auto h = dyn_cast<LMHeadGradOp>(op)) {
    grads.push_back(h.getWeightGrad());
  } else if (auto e = dyn_cast<MoEExpertsGradOp>(op)) {
    llvm::append_range(grads, e.getWeightGrads());
  } else {
    return false;
  }
  for (Value v : grads) {
    if (v.use_empty()) // no update reads it: nothing to accumulate into
      return false;
    for (Operation *user : v.getUsers())
      if (!isa<AdamWOp, GlobalNormOp>(user))
        return false;
  }
  return true;
}
