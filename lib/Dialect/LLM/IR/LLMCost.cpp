//===- LLMCost.cpp - CostOpInterface implementations ----------------------===//
//
// FLOP and byte formulas of every llm op; conventions in LLMInterfaces.h.
// GEMM FLOPs are exact (2 per multiply-add). Elementwise FLOP counts are
// nominal per-element operation counts; they never dominate a step and are
// there so that memory-bound ops are not free.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "llvm/ADT/DenseMap.h"
#include <cmath>

using namespace mlir;
using namespace llmopt::llm;

double llmopt::llm::elementBytes(Type type, const CostContext &ctx) {
  Type elt = getElementTypeOrSelf(type);
  if (ctx.dtypeBytes && isa<FloatType>(elt))
    return ctx.dtypeBytes;
  return std::max<unsigned>(1, elt.getIntOrFloatBitWidth() / 8);
}

double llmopt::llm::tensorElements(Type type, const CostContext &ctx) {
  auto shaped = cast<ShapedType>(type);
  double n = 1;
  for (auto [i, d] : llvm::enumerate(shaped.getShape())) {
    if (!ShapedType::isDynamic(d))
      n *= static_cast<double>(d);
    else
      n *= static_cast<double>(i == 0 ? ctx.batch : ctx.seqLen);
  }
  return n;
}

double llmopt::llm::tensorBytes(Type type, const CostContext &ctx) {
  return tensorElements(type, ctx) * elementBytes(type, ctx);
}

namespace {
/// Shorthands over one op's operands.
struct Sizes {
  const CostContext &ctx;
  double bytes(Value v) const { return tensorBytes(v.getType(), ctx); }
  double elems(Value v) const { return tensorElements(v.getType(), ctx); }
  double eb(Value v) const { return elementBytes(v.getType(), ctx); }
  SavedTensor save(Value v) const { return {v, bytes(v)}; }
};

/// Cost of a pure elementwise op: `flopsPerElem` forward and `bwdPerElem`
/// backward per output element, reading `inputs` and writing the result.
OpCost elementwise(Sizes s, ValueRange inputs, Value result, double flopsPerElem,
                   double bwdPerElem) {
  OpCost c;
  double e = s.elems(result);
  c.fwdFlops = flopsPerElem * e;
  c.bwdFlops = bwdPerElem * e;
  for (Value in : inputs)
    c.fwdBytesRead += s.bytes(in);
  c.fwdBytesWritten = s.bytes(result);
  // Backward reads the output gradient and the saved inputs, writes one
  // gradient per input.
  c.bwdBytesRead = s.bytes(result) + c.fwdBytesRead;
  c.bwdBytesWritten = c.fwdBytesRead;
  return c;
}

/// Rows routed to experts in total: capacity-padded when a capacity factor is
/// set, the balanced expected load otherwise.
double routedRows(double tokens, double topK, double experts, double capacityFactor) {
  if (capacityFactor > 0)
    return experts * std::ceil(capacityFactor * tokens * topK / experts);
  return tokens * topK;
}

/// The dispatch op feeding `v`, through experts ops, if any.
MoEDispatchOp findDispatch(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto d = dyn_cast<MoEDispatchOp>(def))
      return d;
    if (auto e = dyn_cast<MoEExpertsOp>(def)) {
      v = e.getInput();
      continue;
    }
    break;
  }
  return {};
}

/// Total routed rows of the expert tensor `v` ([experts, ?, hidden]).
double expertRows(Value v, const CostContext &ctx) {
  auto t = cast<RankedTensorType>(v.getType());
  if (!t.isDynamicDim(1))
    return static_cast<double>(t.getDimSize(0)) * static_cast<double>(t.getDimSize(1));
  if (MoEDispatchOp d = findDispatch(v)) {
    auto idx = cast<RankedTensorType>(d.getIndices().getType());
    return routedRows(ctx.tokens(), idx.getDimSize(2), t.getDimSize(0),
                      d.getCapacityFactor().convertToDouble());
  }
  return ctx.tokens();
}
} // namespace

//===----------------------------------------------------------------------===//
// Structure and parameters.
//===----------------------------------------------------------------------===//

OpCost ParamOp::getCost(const CostContext &) {
  OpCost c;
  c.params = getNumElements();
  return c;
}

OpCost LayerOp::getCost(const CostContext &ctx) {
  OpCost total;
  llvm::DenseMap<Value, double> saved;
  getBody().walk([&](CostOpInterface op) {
    OpCost c = op.getCost(ctx);
    total.fwdFlops += c.fwdFlops;
    total.bwdFlops += c.bwdFlops;
    total.fwdBytesRead += c.fwdBytesRead;
    total.fwdBytesWritten += c.fwdBytesWritten;
    total.bwdBytesRead += c.bwdBytesRead;
    total.bwdBytesWritten += c.bwdBytesWritten;
    total.params += c.params;
    total.savedExtraBytes += c.savedExtraBytes;
    total.selectiveDropBytes += c.selectiveDropBytes;
    for (const SavedTensor &t : c.saved) {
      double &b = saved[t.value];
      b = std::max(b, t.bytes);
    }
  });
  // Deterministic order: block arguments first, then by defining op order.
  getBody().walk([&](Operation *op) {
    for (Value r : op->getResults())
      if (auto it = saved.find(r); it != saved.end())
        total.saved.push_back({r, it->second});
  });
  if (auto it = saved.find(getBody().getArgument(0)); it != saved.end())
    total.saved.insert(total.saved.begin(), {it->first, it->second});
  return total;
}

//===----------------------------------------------------------------------===//
// Embeddings.
//===----------------------------------------------------------------------===//

OpCost EmbeddingOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double out = s.bytes(getResult());
  c.fwdBytesRead = s.bytes(getTokens()) + out; // gathered rows
  c.fwdBytesWritten = out;
  // Backward scatter-adds the output gradient into the table gradient.
  c.bwdFlops = s.elems(getResult());
  c.bwdBytesRead = out + s.bytes(getTokens());
  c.bwdBytesWritten = out;
  c.saved.push_back(s.save(getTokens()));
  return c;
}

OpCost PositionEmbeddingOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double e = s.elems(getResult()), b = s.bytes(getResult());
  double rows = static_cast<double>(ctx.seqLen) *
                cast<RankedTensorType>(getTable().getType()).getDimSize(1) * s.eb(getTable());
  c.fwdFlops = e;
  c.fwdBytesRead = b + rows;
  c.fwdBytesWritten = b;
  // The input gradient is the output gradient; the table gradient sums over
  // the batch.
  c.bwdFlops = e;
  c.bwdBytesRead = b;
  c.bwdBytesWritten = rows;
  return c;
}

OpCost RotaryOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double e = s.elems(getQ()) + s.elems(getK());
  double b = s.bytes(getQ()) + s.bytes(getK());
  // x * cos + rotate_half(x) * sin: two multiplies and an add per element.
  c.fwdFlops = 3 * e;
  c.bwdFlops = 3 * e;
  c.fwdBytesRead = c.fwdBytesWritten = b;
  c.bwdBytesRead = c.bwdBytesWritten = b;
  return c;
}

//===----------------------------------------------------------------------===//
// Norms, linear, activations.
//===----------------------------------------------------------------------===//

static OpCost normCost(Sizes s, Value input, Value result, double paramBytes, double fwdPerElem,
                       double bwdPerElem, int statsPerRow) {
  OpCost c = elementwise(s, ValueRange{input}, result, fwdPerElem, bwdPerElem);
  c.fwdBytesRead += paramBytes;
  c.bwdBytesRead += paramBytes;
  c.bwdBytesWritten += paramBytes;
  c.saved.push_back(s.save(input));
  // fp32 per-row statistics (mean and/or reciprocal std).
  c.savedExtraBytes = 4.0 * statsPerRow * s.ctx.tokens();
  return c;
}

OpCost LayerNormOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  double p = s.bytes(getWeight()) + (getBias() ? s.bytes(getBias()) : 0);
  return normCost(s, getInput(), getResult(), p, 7, 14, 2);
}

OpCost RMSNormOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  return normCost(s, getInput(), getResult(), s.bytes(getWeight()), 5, 10, 1);
}

OpCost LinearOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double t = ctx.tokens();
  double in = getInFeatures(), out = getOutFeatures();
  double wBytes =
      in * out *
      (getGemm() ? std::max(1u, getGemm()->getIntOrFloatBitWidth() / 8) : s.eb(getWeight()));
  double xb = s.bytes(getInput()), yb = s.bytes(getResult());
  c.fwdFlops = 2 * t * in * out + (getBias() ? t * out : 0);
  c.bwdFlops = 4 * t * in * out + (getBias() ? t * out : 0);
  c.fwdBytesRead = xb + wBytes + (getBias() ? s.bytes(getBias()) : 0);
  c.fwdBytesWritten = yb;
  // dX = dY W reads dY and W; dW = dY^T X reads dY and X.
  c.bwdBytesRead = 2 * yb + wBytes + xb;
  c.bwdBytesWritten = xb + wBytes + (getBias() ? s.bytes(getBias()) : 0);
  c.saved.push_back(s.save(getInput()));
  return c;
}

OpCost SplitOp::getCost(const CostContext &) {
  // A view: the pieces alias the input and their gradients are slices of one
  // buffer.
  return OpCost();
}

/// Number of (query, key) pairs attended to in one sequence.
static double attendedPairs(double seq, bool causal, std::optional<int64_t> window) {
  if (!causal)
    return window ? seq * std::min<double>(seq, *window) : seq * seq;
  if (!window || *window >= seq)
    return seq * (seq + 1) / 2;
  double w = *window;
  return w * (w + 1) / 2 + (seq - w) * w;
}

OpCost AttentionOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double b = ctx.batch, seq = ctx.seqLen, h = getNumHeads(), hd = getHeadDim();
  double pairs = attendedPairs(seq, getCausal(), getWindow());
  // QK^T and PV over the attended pairs.
  c.fwdFlops = 4 * b * h * hd * pairs;
  c.bwdFlops = 2 * c.fwdFlops;
  double qb = s.bytes(getQ()), kb = s.bytes(getK()), vb = s.bytes(getV());
  double ob = s.bytes(getResult());
  double lse = 4.0 * b * h * seq;
  c.fwdBytesRead = qb + kb + vb;
  c.fwdBytesWritten = ob + lse;
  c.bwdBytesRead = qb + kb + vb + 2 * ob + lse;
  c.bwdBytesWritten = qb + kb + vb;
  c.saved = {s.save(getQ()), s.save(getK()), s.save(getV()), s.save(getResult())};
  if (ctx.fusedAttention) {
    c.savedExtraBytes = lse;
  } else {
    // A non-fused kernel materializes and keeps the softmax probabilities.
    double probs = b * h * seq * seq * s.eb(getQ());
    c.fwdBytesWritten += probs;
    c.fwdBytesRead += probs;
    c.bwdBytesRead += probs;
    c.bwdBytesWritten += probs;
    c.savedExtraBytes = probs;
    c.selectiveDropBytes = probs;
  }
  return c;
}

OpCost GeluOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  bool tanh = getApproximate() == GeluApprox::tanh;
  OpCost c = elementwise(s, ValueRange{getInput()}, getResult(), tanh ? 8 : 10, tanh ? 16 : 20);
  c.saved.push_back(s.save(getInput()));
  return c;
}

OpCost SwiGLUOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c = elementwise(s, ValueRange{getGate(), getUp()}, getResult(), 5, 10);
  c.saved = {s.save(getGate()), s.save(getUp())};
  return c;
}

OpCost AddOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c = elementwise(s, ValueRange{getLhs(), getRhs()}, getResult(), 1, 0);
  // The output gradient flows to both inputs unchanged.
  c.bwdBytesRead = c.bwdBytesWritten = 0;
  return c;
}

//===----------------------------------------------------------------------===//
// Mixture of experts.
//===----------------------------------------------------------------------===//

OpCost MoERouterOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double t = ctx.tokens(), hidden = cast<RankedTensorType>(getInput().getType()).getDimSize(2);
  double e = getNumExperts();
  c.fwdFlops = 2 * t * hidden * e + 5 * t * e;
  c.bwdFlops = 4 * t * hidden * e + 5 * t * e;
  c.fwdBytesRead = s.bytes(getInput()) + s.bytes(getGate());
  c.fwdBytesWritten = s.bytes(getWeights()) + s.bytes(getIndices());
  c.bwdBytesRead = s.bytes(getWeights()) + s.bytes(getInput()) + s.bytes(getGate());
  c.bwdBytesWritten = s.bytes(getInput()) + s.bytes(getGate());
  c.saved.push_back(s.save(getInput()));
  c.savedExtraBytes = 4.0 * t * e; // fp32 softmax over the experts
  return c;
}

OpCost MoEDispatchOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double hidden = cast<RankedTensorType>(getInput().getType()).getDimSize(2);
  double rows = expertRows(getResult(), ctx);
  double rowBytes = rows * hidden * s.eb(getInput());
  c.fwdBytesRead = s.bytes(getIndices()) + rowBytes;
  c.fwdBytesWritten = rowBytes;
  // Backward gathers each token's copies back and sums them.
  c.bwdFlops = rows * hidden;
  c.bwdBytesRead = rowBytes + s.bytes(getIndices());
  c.bwdBytesWritten = s.bytes(getInput());
  c.saved.push_back(s.save(getIndices()));
  return c;
}

OpCost MoEExpertsOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  auto x = cast<RankedTensorType>(getInput().getType());
  double rows = expertRows(getInput(), ctx);
  double hidden = x.getDimSize(2), ffn = getFfnSize();
  double eb = s.eb(getInput());
  bool swiglu = getActivation() == ExpertActivation::swiglu;
  double gemms = swiglu ? 3 : 2;
  double wBytes = 0;
  for (Value w : getWeights())
    wBytes += s.bytes(w);
  c.fwdFlops = gemms * 2 * rows * hidden * ffn + (swiglu ? 5 : 8) * rows * ffn;
  c.bwdFlops = gemms * 4 * rows * hidden * ffn + (swiglu ? 10 : 16) * rows * ffn;
  double io = rows * hidden * eb;
  double inter = rows * ffn * eb * (swiglu ? 3 : 2);
  c.fwdBytesRead = io + wBytes + inter;
  c.fwdBytesWritten = io + inter;
  c.bwdBytesRead = 2 * io + wBytes + 2 * inter;
  c.bwdBytesWritten = io + wBytes + inter;
  c.saved.push_back({getInput(), io});
  // Expert intermediates: gate and up projections and the activation output
  // (swiglu), or the fc1 output and the activation output (gelu).
  c.savedExtraBytes = inter;
  return c;
}

OpCost MoECombineOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  auto x = cast<RankedTensorType>(getInput().getType());
  double rows = expertRows(getInput(), ctx);
  double io = rows * x.getDimSize(2) * s.eb(getInput());
  c.fwdFlops = 2 * rows * x.getDimSize(2);
  c.bwdFlops = 3 * rows * x.getDimSize(2);
  c.fwdBytesRead = io + s.bytes(getWeights()) + s.bytes(getIndices());
  c.fwdBytesWritten = s.bytes(getResult());
  c.bwdBytesRead = s.bytes(getResult()) + io + s.bytes(getWeights());
  c.bwdBytesWritten = io + s.bytes(getWeights());
  c.saved = {{getInput(), io}, s.save(getWeights())};
  return c;
}

//===----------------------------------------------------------------------===//
// Head and loss.
//===----------------------------------------------------------------------===//

OpCost LMHeadOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  auto w = cast<RankedTensorType>(getWeight().getType());
  double t = ctx.tokens(), vocab = w.getDimSize(0), hidden = w.getDimSize(1);
  double xb = s.bytes(getInput()), yb = s.bytes(getResult()), wb = s.bytes(getWeight());
  c.fwdFlops = 2 * t * hidden * vocab;
  c.bwdFlops = 4 * t * hidden * vocab;
  c.fwdBytesRead = xb + wb;
  c.fwdBytesWritten = yb;
  c.bwdBytesRead = 2 * yb + wb + xb;
  c.bwdBytesWritten = xb + wb;
  c.saved.push_back(s.save(getInput()));
  return c;
}

OpCost CrossEntropyOp::getCost(const CostContext &ctx) {
  Sizes s{ctx};
  OpCost c;
  double e = s.elems(getLogits()), lb = s.bytes(getLogits());
  double t = ctx.tokens();
  // max, subtract, exp, sum per logit; softmax minus one-hot backward.
  c.fwdFlops = 4 * e;
  c.bwdFlops = 3 * e;
  c.fwdBytesRead = lb + s.bytes(getLabels());
  c.fwdBytesWritten = 4 * t;
  c.bwdBytesRead = lb + s.bytes(getLabels());
  c.bwdBytesWritten = lb;
  c.saved = {s.save(getLogits()), s.save(getLabels())};
  return c;
}
