//===- LLMOps.cpp - llm dialect operations and verifiers ------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/Support/MathExtras.h"
#include <cmath>

using namespace mlir;
using namespace llmopt::llm;

#include "llmopt/Dialect/LLM/IR/LLMEnums.cpp.inc"
#include "llmopt/Dialect/LLM/IR/LLMInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers.
//===----------------------------------------------------------------------===//

static RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Prints a dimension, `?` when dynamic.
static std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

/// True if two dimensions can be equal (one of them dynamic, or both the same).
static bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// Checks that `t` is [batch, seq, features] with a static feature size.
static LogicalResult verifyActivation(Operation *op, StringRef what, RankedTensorType t) {
  if (t.getRank() != 3)
    return op->emitOpError() << what << " must be rank 3 [batch, seq, features], got rank "
                             << t.getRank();
  if (t.isDynamicDim(2))
    return op->emitOpError() << what << " must have a static feature dimension";
  if (t.getDimSize(2) <= 0)
    return op->emitOpError() << what << " must have a positive feature dimension, got "
                             << t.getDimSize(2);
  return success();
}

/// Checks that the leading [batch, seq] dims of `a` and `b` agree.
static LogicalResult verifyLeadingDims(Operation *op, StringRef aName, RankedTensorType a,
                                       StringRef bName, RankedTensorType b) {
  for (int i = 0; i < 2; ++i)
    if (!dimsCompatible(a.getDimSize(i), b.getDimSize(i)))
      return op->emitOpError() << (i == 0 ? "batch" : "sequence") << " dimension of " << aName
                               << " (" << dimStr(a.getDimSize(i)) << ") does not match that of "
                               << bName << " (" << dimStr(b.getDimSize(i)) << ")";
  return success();
}

static LogicalResult verifySameElementType(Operation *op, StringRef aName, Type a, StringRef bName,
                                           Type b) {
  Type ea = getElementTypeOrSelf(a), eb = getElementTypeOrSelf(b);
  if (ea != eb)
    return op->emitOpError() << "element type of " << aName << " (" << ea
                             << ") does not match that of " << bName << " (" << eb << ")";
  return success();
}

/// Checks that `vec` is a vector of `size` elements.
static LogicalResult verifyVector(Operation *op, StringRef what, Value vec, int64_t size) {
  RankedTensorType t = tensorType(vec);
  if (t.getRank() != 1 || t.getDimSize(0) != size)
    return op->emitOpError() << what << " must be a vector of " << size << " elements, got " << t;
  return success();
}

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

int64_t ParamOp::getNumElements() { return getType().getNumElements(); }

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError() << "parameter name must not be empty";
  RankedTensorType t = getType();
  int64_t numel = 1;
  for (int64_t d : t.getShape()) {
    if (d <= 0)
      return emitOpError() << "parameter '" << getName() << "' must have positive dimensions, got "
                           << t;
    if (llvm::MulOverflow<int64_t>(numel, d, numel))
      return emitOpError() << "parameter '" << getName() << "' of type " << t
                           << " has more than 2^63 elements";
  }
  if (getInit() == InitKind::normal) {
    if (!getStd())
      return emitOpError() << "normal initialization of '" << getName()
                           << "' needs a standard deviation: normal(0.02)";
    double std = getStd()->convertToDouble();
    if (!(std > 0.0))
      return emitOpError() << "standard deviation of '" << getName() << "' must be positive, got "
                           << std;
    // An infinite one would reach plan.json as `inf`, which is not JSON.
    if (!std::isfinite(std))
      return emitOpError() << "standard deviation of '" << getName() << "' must be finite, got "
                           << std;
  } else if (getStd()) {
    return emitOpError() << "only normal initialization takes a standard deviation";
  }
  if (isExpertStack() && t.getRank() < 2)
    return emitOpError() << "per-expert parameter '" << getName()
                         << "' must have rank >= 2 with experts in dimension 0";
  return success();
}

//===----------------------------------------------------------------------===//
// LayerOp / YieldOp
//===----------------------------------------------------------------------===//

LogicalResult LayerOp::verify() {
  // I64Attr getters return the value unsigned; read it signed.
  int64_t index = getIndexAttr().getInt();
  if (index < 0)
    return emitOpError() << "layer index must be non-negative, got " << index;
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 || body.getArgument(0).getType() != getInput().getType())
    return emitOpError() << "body must take one argument of the input type "
                         << getInput().getType();
  if (!body.mightHaveTerminator() || !isa<YieldOp>(body.getTerminator()))
    return emitOpError() << "body must end with llm.yield";
  return success();
}

LogicalResult YieldOp::verify() {
  auto layer = cast<LayerOp>((*this)->getParentOp());
  if (getValue().getType() != layer.getType())
    return emitOpError() << "yields " << getValue().getType() << " but the layer's type is "
                         << layer.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  RankedTensorType tokens = tensorType(getTokens());
  RankedTensorType table = tensorType(getTable());
  RankedTensorType result = getType();
  if (tokens.getRank() != 2)
    return emitOpError() << "tokens must be rank 2 [batch, seq], got " << tokens;
  if (table.getRank() != 2)
    return emitOpError() << "table must be rank 2 [vocab, hidden], got " << table;
  if (failed(verifyActivation(*this, "result", result)))
    return failure();
  if (result.getDimSize(2) != table.getDimSize(1))
    return emitOpError() << "result hidden size (" << result.getDimSize(2)
                         << ") does not match the table's (" << table.getDimSize(1) << ")";
  for (int i = 0; i < 2; ++i)
    if (!dimsCompatible(result.getDimSize(i), tokens.getDimSize(i)))
      return emitOpError() << "result dimension " << i << " (" << dimStr(result.getDimSize(i))
                           << ") does not match the tokens' (" << dimStr(tokens.getDimSize(i))
                           << ")";
  return verifySameElementType(*this, "result", result, "table", table);
}

LogicalResult PositionEmbeddingOp::verify() {
  RankedTensorType x = tensorType(getInput());
  RankedTensorType table = tensorType(getTable());
  if (failed(verifyActivation(*this, "input", x)))
    return failure();
  if (table.getRank() != 2 || table.getDimSize(1) != x.getDimSize(2))
    return emitOpError() << "table must be [positions, " << x.getDimSize(2) << "], got " << table;
  if (!x.isDynamicDim(1) && x.getDimSize(1) > table.getDimSize(0))
    return emitOpError() << "sequence length " << x.getDimSize(1) << " exceeds the table's "
                         << table.getDimSize(0) << " positions";
  return verifySameElementType(*this, "input", x, "table", table);
}

StringRef RotaryOp::getRopeType() {
  if (DictionaryAttr d = getScalingAttr()) {
    if (auto t = d.getAs<StringAttr>("rope_type"))
      return t.getValue();
    if (auto t = d.getAs<StringAttr>("type"))
      return t.getValue();
  }
  return "default";
}

double RotaryOp::getScalingNumber(StringRef key, double dflt) {
  if (DictionaryAttr d = getScalingAttr()) {
    if (auto f = d.getAs<FloatAttr>(key))
      return f.getValueAsDouble();
    if (auto i = d.getAs<IntegerAttr>(key))
      return double(i.getInt());
  }
  return dflt;
}

LogicalResult RotaryOp::verify() {
  RankedTensorType q = tensorType(getQ()), k = tensorType(getK());
  if (failed(verifyActivation(*this, "q", q)) || failed(verifyActivation(*this, "k", k)) ||
      failed(verifyLeadingDims(*this, "q", q, "k", k)))
    return failure();
  int64_t hd = getHeadDimAttr().getInt();
  if (hd <= 0 || hd % 2 != 0)
    return emitOpError() << "head_dim must be positive and even, got " << hd;
  if (q.getDimSize(2) % hd != 0)
    return emitOpError() << "head_dim (" << hd << ") does not divide q's " << q.getDimSize(2)
                         << " features";
  if (k.getDimSize(2) % hd != 0)
    return emitOpError() << "head_dim (" << hd << ") does not divide k's " << k.getDimSize(2)
                         << " features";
  double theta = getTheta().convertToDouble();
  if (!(theta > 0.0) || !std::isfinite(theta))
    return emitOpError() << "theta must be positive and finite, got " << theta;
  return success();
}

//===----------------------------------------------------------------------===//
// Norms, linear, activations
//===----------------------------------------------------------------------===//

static LogicalResult verifyEps(Operation *op, APFloat eps) {
  double e = eps.convertToDouble();
  if (!(e > 0.0) || !std::isfinite(e))
    return op->emitOpError() << "eps must be positive and finite, got " << e;
  return success();
}

LogicalResult LayerNormOp::verify() {
  RankedTensorType x = tensorType(getInput());
  if (failed(verifyActivation(*this, "input", x)) ||
      failed(verifyVector(*this, "weight", getWeight(), x.getDimSize(2))) ||
      failed(verifySameElementType(*this, "input", x, "weight", getWeight().getType())))
    return failure();
  if (getBias() && (failed(verifyVector(*this, "bias", getBias(), x.getDimSize(2))) ||
                    failed(verifySameElementType(*this, "input", x, "bias", getBias().getType()))))
    return failure();
  return verifyEps(*this, getEps());
}

LogicalResult RMSNormOp::verify() {
  RankedTensorType x = tensorType(getInput());
  if (failed(verifyActivation(*this, "input", x)) ||
      failed(verifyVector(*this, "weight", getWeight(), x.getDimSize(2))) ||
      failed(verifySameElementType(*this, "input", x, "weight", getWeight().getType())))
    return failure();
  return verifyEps(*this, getEps());
}

int64_t LinearOp::getInFeatures() {
  ArrayRef<int64_t> w = tensorType(getWeight()).getShape();
  return getTransposed() ? w[0] : w[1];
}

int64_t LinearOp::getOutFeatures() {
  ArrayRef<int64_t> w = tensorType(getWeight()).getShape();
  return getTransposed() ? w[1] : w[0];
}

LogicalResult LinearOp::verify() {
  RankedTensorType x = tensorType(getInput());
  RankedTensorType w = tensorType(getWeight());
  RankedTensorType y = getType();
  if (failed(verifyActivation(*this, "input", x)) || failed(verifyActivation(*this, "result", y)) ||
      failed(verifyLeadingDims(*this, "input", x, "result", y)))
    return failure();
  if (w.getRank() != 2)
    return emitOpError() << "weight must be rank 2, got " << w;
  if (getInFeatures() != x.getDimSize(2))
    return emitOpError() << "weight " << w << (getTransposed() ? " [in, out]" : " [out, in]")
                         << " expects " << getInFeatures() << " input features, but the input has "
                         << x.getDimSize(2);
  if (getOutFeatures() != y.getDimSize(2))
    return emitOpError() << "result has " << y.getDimSize(2) << " features, but the weight gives "
                         << getOutFeatures();
  if (getBias() && failed(verifyVector(*this, "bias", getBias(), getOutFeatures())))
    return failure();
  if (failed(verifySameElementType(*this, "input", x, "weight", w)) ||
      failed(verifySameElementType(*this, "input", x, "result", y)))
    return failure();
  if (std::optional<Type> g = getGemm()) {
    if (!isa<Float8E4M3FNType, Float8E5M2Type, BFloat16Type, Float16Type>(*g))
      return emitOpError() << "gemm input type must be f8E4M3FN, f8E5M2, bf16 or f16, got " << *g;
  }
  return success();
}

LogicalResult SplitOp::verify() {
  RankedTensorType x = tensorType(getInput());
  if (failed(verifyActivation(*this, "input", x)))
    return failure();
  ArrayRef<int64_t> sizes = getSizes();
  if (sizes.empty())
    return emitOpError() << "needs at least one size";
  if (sizes.size() != getNumResults())
    return emitOpError() << "has " << sizes.size() << " sizes but " << getNumResults()
                         << " results";
  int64_t total = 0;
  for (auto [i, size] : llvm::enumerate(sizes)) {
    if (size <= 0)
      return emitOpError() << "size " << i << " must be positive, got " << size;
    if (llvm::AddOverflow(total, size, total))
      return emitOpError() << "sizes overflow 64 bits";
    RankedTensorType r = tensorType(getResult(i));
    if (failed(verifyActivation(*this, "result", r)) ||
        failed(verifyLeadingDims(*this, "input", x, "result", r)))
      return failure();
    if (r.getDimSize(2) != size)
      return emitOpError() << "result " << i << " has " << r.getDimSize(2) << " features, expected "
                           << size;
    if (failed(verifySameElementType(*this, "input", x, "result", r)))
      return failure();
  }
  if (total != x.getDimSize(2))
    return emitOpError() << "sizes add up to " << total << " but the input has " << x.getDimSize(2)
                         << " features";
  return success();
}

LogicalResult AttentionOp::verify() {
  RankedTensorType q = tensorType(getQ()), k = tensorType(getK());
  // Under context parallelism the queries are this rank's chunks and the
  // keys the whole sequence ({cp_parts = t}).
  int64_t cp = cpParts(k);
  if (cp > 1 &&
      (!dimsCompatible(q.getDimSize(0), k.getDimSize(0)) ||
       (!q.isDynamicDim(1) && !k.isDynamicDim(1) && k.getDimSize(1) != q.getDimSize(1) * cp)))
    return emitOpError() << "context-parallel keys " << k << " must be the whole sequence of " << cp
                         << " ranks' queries " << q;
  if (failed(verifyActivation(*this, "q", q)) || failed(verifyActivation(*this, "k", k)) ||
      (cp == 1 && failed(verifyLeadingDims(*this, "q", q, "k", k))) ||
      failed(verifySameElementType(*this, "q", q, "k and v", k)))
    return failure();
  int64_t h = getNumHeadsAttr().getInt(), kvh = getNumKvHeadsAttr().getInt(),
          hd = getHeadDimAttr().getInt();
  if (h <= 0 || kvh <= 0 || hd <= 0)
    return emitOpError() << "heads (" << h << "), kv_heads (" << kvh << ") and head_dim (" << hd
                         << ") must be positive";
  if (h % kvh != 0)
    return emitOpError() << "num_kv_heads (" << kvh << ") does not divide num_heads (" << h << ")";
  int64_t qDim = 0, kDim = 0;
  if (llvm::MulOverflow(h, hd, qDim) || llvm::MulOverflow(kvh, hd, kDim))
    return emitOpError() << "heads * head_dim overflows 64 bits";
  if (q.getDimSize(2) != qDim)
    return emitOpError() << "q has " << q.getDimSize(2)
                         << " features, expected heads * head_dim = " << h << " * " << hd << " = "
                         << h * hd;
  if (k.getDimSize(2) != kDim)
    return emitOpError() << "k and v have " << k.getDimSize(2)
                         << " features, expected kv_heads * head_dim = " << kvh << " * " << hd
                         << " = " << kvh * hd;
  double scale = getScale().convertToDouble();
  if (!(scale > 0.0) || !std::isfinite(scale))
    return emitOpError() << "scale must be positive and finite, got " << scale;
  if (IntegerAttr w = getWindowAttr(); w && w.getInt() <= 0)
    return emitOpError() << "window must be positive, got " << w.getInt();
  return success();
}

LogicalResult GeluOp::verify() { return verifyActivation(*this, "input", tensorType(getInput())); }

LogicalResult SwiGLUOp::verify() { return verifyActivation(*this, "gate", tensorType(getGate())); }

LogicalResult AddOp::verify() {
  // Residual adds are activations; gradient accumulation also adds weights.
  if (tensorType(getLhs()).getRank() != 3 && tensorType(getLhs()).hasStaticShape())
    return success();
  return verifyActivation(*this, "lhs", tensorType(getLhs()));
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

int64_t MoERouterOp::getNumExperts() { return tensorType(getGate()).getDimSize(0); }

LogicalResult MoERouterOp::verify() {
  RankedTensorType x = tensorType(getInput());
  RankedTensorType gate = tensorType(getGate());
  if (failed(verifyActivation(*this, "input", x)))
    return failure();
  if (gate.getRank() != 2 || gate.getDimSize(1) != x.getDimSize(2))
    return emitOpError() << "gate must be [experts, " << x.getDimSize(2) << "], got " << gate;
  int64_t k = getTopKAttr().getInt(), e = getNumExperts();
  if (k < 1)
    return emitOpError() << "top_k must be at least 1, got " << k;
  if (k > e)
    return emitOpError() << "top_k (" << k << ") exceeds the number of experts (" << e << ")";
  if (std::optional<APFloat> aux = getAuxLoss(); aux && (aux->isNegative() || !aux->isFinite()))
    return emitOpError() << "aux_loss must be a finite coefficient >= 0";
  for (Value r : {getWeights(), getIndices()}) {
    RankedTensorType t = tensorType(r);
    if (t.getRank() != 3 || t.getDimSize(2) != k)
      return emitOpError() << "routing results must be [batch, seq, top_k = " << k << "], got "
                           << t;
    if (failed(verifyLeadingDims(*this, "input", x, "routing result", t)))
      return failure();
  }
  return success();
}

LogicalResult MoEDispatchOp::verify() {
  RankedTensorType x = tensorType(getInput());
  RankedTensorType idx = tensorType(getIndices());
  RankedTensorType y = getType();
  if (failed(verifyActivation(*this, "input", x)))
    return failure();
  if (idx.getRank() != 3)
    return emitOpError() << "indices must be [batch, seq, top_k], got " << idx;
  if (failed(verifyLeadingDims(*this, "input", x, "indices", idx)))
    return failure();
  double cf = getCapacityFactor().convertToDouble();
  if (!(cf == 0.0 || cf >= 1.0) || !std::isfinite(cf))
    return emitOpError() << "capacity factor must be 0 (dropless) or a finite "
                            "value of at least 1, got "
                         << cf;
  if (y.getRank() != 3 || y.isDynamicDim(0) || y.getDimSize(2) != x.getDimSize(2))
    return emitOpError() << "result must be [experts, capacity, " << x.getDimSize(2)
                         << "] with a static expert count, got " << y;
  if (y.getDimSize(0) < 1)
    return emitOpError() << "result must have at least one expert, got " << y;
  return verifySameElementType(*this, "input", x, "result", y);
}

int64_t MoEExpertsOp::getNumExperts() { return getType().getDimSize(0); }

int64_t MoEExpertsOp::getFfnSize() { return tensorType(getWeights().front()).getDimSize(1); }

/// The experts' GEMM input type: fp8 E4M3 only.
static LogicalResult verifyExpertGemm(Operation *op, std::optional<Type> gemm) {
  if (gemm && !isa<Float8E4M3FNType>(*gemm))
    return op->emitOpError() << "expert GEMMs take f8E4M3FN inputs (gradients E5M2), got " << *gemm;
  return success();
}

LogicalResult MoEExpertsOp::verify() {
  if (failed(verifyExpertGemm(*this, getGemm())))
    return failure();
  RankedTensorType x = tensorType(getInput());
  if (x.getRank() != 3 || x.isDynamicDim(0) || x.isDynamicDim(2))
    return emitOpError() << "input must be [experts, capacity, hidden] with static "
                            "experts and hidden, got "
                         << x;
  size_t expected = getActivation() == ExpertActivation::swiglu ? 3 : 2;
  if (getWeights().size() != expected)
    return emitOpError() << stringifyExpertActivation(getActivation()) << " experts take "
                         << expected << " weights, got " << getWeights().size();
  int64_t e = x.getDimSize(0), hidden = x.getDimSize(2);
  if (e < 1 || hidden < 1)
    return emitOpError() << "input must have at least one expert and a positive "
                            "hidden size, got "
                         << x;
  RankedTensorType first = tensorType(getWeights().front());
  if (first.getRank() != 3)
    return emitOpError() << "weight 0 must be rank 3 [experts, ffn, hidden], got " << first;
  int64_t ffn = first.getDimSize(1);
  if (ffn < 1)
    return emitOpError() << "expert ffn size must be positive, got " << ffn << " in weight 0 "
                         << first;
  for (auto [i, w] : llvm::enumerate(getWeights())) {
    RankedTensorType t = tensorType(w);
    bool isDown = i + 1 == expected;
    SmallVector<int64_t> want =
        isDown ? SmallVector<int64_t>{e, hidden, ffn} : SmallVector<int64_t>{e, ffn, hidden};
    if (t.getRank() != 3 || t.getShape() != ArrayRef<int64_t>(want))
      return emitOpError() << "weight " << i << " must be [" << want[0] << ", " << want[1] << ", "
                           << want[2] << "] (experts, " << (isDown ? "hidden, ffn" : "ffn, hidden")
                           << "), got " << t;
    if (failed(verifySameElementType(*this, "input", x, "weight", t)))
      return failure();
  }
  return success();
}

LogicalResult MoECombineOp::verify() {
  RankedTensorType x = tensorType(getInput());
  RankedTensorType w = tensorType(getWeights()), idx = tensorType(getIndices());
  RankedTensorType y = getType();
  if (x.getRank() != 3 || x.isDynamicDim(2))
    return emitOpError() << "input must be [experts, capacity, hidden], got " << x;
  if (!x.isDynamicDim(0) && x.getDimSize(0) < 1)
    return emitOpError() << "input must have at least one expert, got " << x;
  if (w.getShape() != idx.getShape() || w.getRank() != 3)
    return emitOpError() << "weights " << w << " and indices " << idx
                         << " must both be [batch, seq, top_k]";
  if (failed(verifyActivation(*this, "result", y)) ||
      failed(verifyLeadingDims(*this, "result", y, "weights", w)))
    return failure();
  if (y.getDimSize(2) != x.getDimSize(2))
    return emitOpError() << "result hidden size (" << y.getDimSize(2)
                         << ") does not match the experts' (" << x.getDimSize(2) << ")";
  return verifySameElementType(*this, "input", x, "result", y);
}

//===----------------------------------------------------------------------===//
// Head and loss
//===----------------------------------------------------------------------===//

LogicalResult LMHeadOp::verify() {
  RankedTensorType x = tensorType(getInput());
  RankedTensorType w = tensorType(getWeight());
  RankedTensorType y = getType();
  if (failed(verifyActivation(*this, "input", x)) || failed(verifyActivation(*this, "result", y)) ||
      failed(verifyLeadingDims(*this, "input", x, "result", y)))
    return failure();
  if (w.getRank() != 2 || w.getDimSize(1) != x.getDimSize(2))
    return emitOpError() << "weight must be [vocab, " << x.getDimSize(2) << "], got " << w;
  if (y.getDimSize(2) != w.getDimSize(0))
    return emitOpError() << "result has " << y.getDimSize(2) << " logits, but the vocabulary has "
                         << w.getDimSize(0);
  return verifySameElementType(*this, "input", x, "weight", w);
}

LogicalResult llmopt::llm::verifyVocabSize(Operation *op, SymbolRefAttr axis,
                                           IntegerAttr vocabSize) {
  if (!vocabSize)
    return success();
  int64_t v = vocabSize.getInt();
  if (!axis)
    return op->emitOpError() << "vocab_size " << v
                             << " needs vocab_axis (it marks a padded vocabulary-parallel loss)";
  if (v < 1)
    return op->emitOpError() << "vocab_size must be positive, got " << v;
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  RankedTensorType logits = tensorType(getLogits());
  RankedTensorType labels = tensorType(getLabels());
  if (failed(verifyActivation(*this, "logits", logits)))
    return failure();
  if (labels.getRank() != 2)
    return emitOpError() << "labels must be rank 2 [batch, seq], got " << labels;
  for (int i = 0; i < 2; ++i)
    if (!dimsCompatible(labels.getDimSize(i), logits.getDimSize(i)))
      return emitOpError() << "labels " << labels << " do not match the logits' leading dimensions "
                           << logits;
  return verifyVocabSize(*this, getVocabAxisAttr(), getVocabSizeAttr());
}

LogicalResult CrossEntropyOp::verifySymbolUses(SymbolTableCollection &symbols) {
  SymbolRefAttr axis = getVocabAxisAttr();
  return axis ? verifyGridAxis(*this, axis, symbols) : success();
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

LogicalResult FusedOp::verify() {
  Block &block = getBody().front();
  if (block.getArgumentTypes() != getInputs().getTypes())
    return emitOpError() << "block arguments must have the inputs' types";
  auto yield = dyn_cast<FusedYieldOp>(block.getTerminator());
  if (!yield || yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "must yield values of the results' types";
  return success();
}
