//===- LLMParallelOps.cpp - tensor-parallel ops: verifiers, costs, grads --===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace llmopt::llm;

static RankedTensorType ty(Value v) { return cast<RankedTensorType>(v.getType()); }

static LogicalResult verifyAxis(Operation *op, SymbolRefAttr axis) {
  if (axis.getNestedReferences().size() != 1)
    return op->emitOpError() << "names its axis as @grid::@axis, got " << axis;
  return success();
}

LogicalResult llmopt::llm::verifyGridAxis(Operation *op, SymbolRefAttr axis,
                                          SymbolTableCollection &symbols) {
  if (!symbols.lookupNearestSymbolFrom<GridAxisOp>(op, axis))
    return op->emitOpError() << "names axis " << axis
                             << ", which no llm.grid declares (the partition passes declare the "
                                "axes they split over)";
  return success();
}

FailureOr<SymbolRefAttr> llmopt::llm::gridAxis(ModuleOp module, StringRef name, int64_t size) {
  MLIRContext *ctx = module.getContext();
  constexpr llvm::StringLiteral kGrid = "mesh";
  Operation *existing = SymbolTable::lookupSymbolIn(module, kGrid);
  auto grid = dyn_cast_or_null<GridOp>(existing);
  if (existing && !grid)
    return module.emitError() << "the module has a symbol @" << kGrid
                              << " that is not its llm.grid; rename it";
  if (!grid) {
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    grid = GridOp::create(b, module.getLoc(), kGrid);
    grid.getBody().push_back(new Block());
  }
  auto axis = dyn_cast_or_null<GridAxisOp>(SymbolTable::lookupSymbolIn(grid, name));
  if (axis && axis.getSizeAttr().getInt() != size)
    return module.emitError() << "the mesh axis '" << name << "' has "
                              << axis.getSizeAttr().getInt() << " ranks, not " << size;
  if (!axis) {
    OpBuilder b = OpBuilder::atBlockEnd(&grid.getBody().front());
    GridAxisOp::create(b, module.getLoc(), name, size);
  }
  return SymbolRefAttr::get(ctx, kGrid, {FlatSymbolRefAttr::get(ctx, name)});
}

LogicalResult GridAxisOp::verify() {
  if (getSizeAttr().getInt() < 1)
    return emitOpError() << "has " << getSizeAttr().getInt() << " ranks; an axis has at least one";
  return success();
}

#define LLM_AXIS_USER(Op)                                                                          \
  LogicalResult Op::verifySymbolUses(SymbolTableCollection &symbols) {                             \
    return verifyGridAxis(*this, getAxisAttr(), symbols);                                          \
  }
LLM_AXIS_USER(TPCopyOp)
LLM_AXIS_USER(TPReduceOp)
LLM_AXIS_USER(AllReduceOp)
LLM_AXIS_USER(SPGatherOp)
LLM_AXIS_USER(SPScatterOp)
LLM_AXIS_USER(SPSplitOp)
LLM_AXIS_USER(TPSliceOp)
LLM_AXIS_USER(TPUnsliceOp)
LLM_AXIS_USER(EPDispatchOp)
LLM_AXIS_USER(EPCombineOp)
LLM_AXIS_USER(CPGatherOp)
LLM_AXIS_USER(CPScatterOp)
LLM_AXIS_USER(ZeroGatherOp)
#undef LLM_AXIS_USER

/// The axis marks of the partition passes on ops that are not parallel ops:
/// `llm.vocab_axis` (vocabulary-parallel embeddings) and `llm.cp_ring`
/// (ring attention) name an axis of the grid too.
static LogicalResult verifyAxisMarks(Operation *op, SymbolTableCollection &symbols) {
  for (StringRef mark : {"llm.vocab_axis", "llm.cp_ring"})
    if (auto axis = op->getAttrOfType<SymbolRefAttr>(mark))
      if (failed(verifyGridAxis(op, axis, symbols)))
        return failure();
  return success();
}
#define LLM_AXIS_MARKS(Op)                                                                         \
  LogicalResult Op::verifySymbolUses(SymbolTableCollection &symbols) {                             \
    return verifyAxisMarks(*this, symbols);                                                        \
  }
LLM_AXIS_MARKS(EmbeddingOp)
LLM_AXIS_MARKS(EmbeddingGradOp)
LLM_AXIS_MARKS(AttentionOp)
LLM_AXIS_MARKS(AttentionGradOp)
#undef LLM_AXIS_MARKS

/// A bias matches the last dimension and element type of `x`.
static LogicalResult verifyBias(Operation *op, Value x, Value bias) {
  RankedTensorType b = ty(bias), t = ty(x);
  if (b.getRank() != 1 || b.getDimSize(0) != t.getDimSize(t.getRank() - 1) ||
      b.getElementType() != t.getElementType())
    return op->emitOpError() << "bias " << b << " must be a vector of the last dimension of " << t;
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
  out.assign(
      {(Value)AllReduceOp::create(b, getLoc(), grads[0].getType(), grads[0], getAxisAttr())});
  return success();
}

LogicalResult TPReduceOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                       SmallVectorImpl<Value> &out) {
  out.assign({grads[0]});
  if (getBias())
    out.push_back(BiasGradOp::create(b, getLoc(), getBias().getType(), grads[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Sequence parallelism
//===----------------------------------------------------------------------===//

static int64_t encodedParts(Type t, StringRef key) {
  auto r = dyn_cast<RankedTensorType>(t);
  auto enc = r ? dyn_cast_or_null<DictionaryAttr>(r.getEncoding()) : DictionaryAttr();
  auto parts = enc ? dyn_cast_or_null<IntegerAttr>(enc.get(key)) : IntegerAttr();
  return parts ? parts.getInt() : 1;
}

static RankedTensorType withEncodedParts(Type t, StringRef key, int64_t parts) {
  auto r = cast<RankedTensorType>(t);
  MLIRContext *ctx = r.getContext();
  Attribute enc;
  if (parts > 1)
    enc = DictionaryAttr::get(ctx,
                              {NamedAttribute(StringAttr::get(ctx, key),
                                              IntegerAttr::get(IntegerType::get(ctx, 64), parts))});
  return RankedTensorType::get(r.getShape(), r.getElementType(), enc);
}

int64_t llmopt::llm::seqParts(Type t) { return encodedParts(t, "seq_parts"); }
RankedTensorType llmopt::llm::withSeqParts(Type t, int64_t parts) {
  return withEncodedParts(t, "seq_parts", parts);
}
int64_t llmopt::llm::cpParts(Type t) { return encodedParts(t, "cp_parts"); }
RankedTensorType llmopt::llm::withCpParts(Type t, int64_t parts) {
  return withEncodedParts(t, "cp_parts", parts);
}
int64_t llmopt::llm::expertParts(Type t) { return encodedParts(t, "ep_parts"); }
RankedTensorType llmopt::llm::withExpertParts(Type t, int64_t parts) {
  return withEncodedParts(t, "ep_parts", parts);
}

/// `chunk` is `whole` cut into parts along the sequence (same batch, hidden
/// and element type; static sequence sizes divide).
static LogicalResult verifyChunk(Operation *op, Value whole, Value chunk) {
  RankedTensorType w = ty(whole), c = ty(chunk);
  int64_t parts = seqParts(c);
  if (w.getRank() != 3 || c.getRank() != 3 || seqParts(w) != 1 || parts < 2 ||
      w.getElementType() != c.getElementType() || w.getDimSize(0) != c.getDimSize(0) ||
      w.getDimSize(2) != c.getDimSize(2))
    return op->emitOpError() << "expects a whole [b, s, h] tensor and its chunk [b, s/t, h] "
                                "with encoding {seq_parts = t}, got "
                             << w << " and " << c;
  if (!ShapedType::isDynamic(w.getDimSize(1)) &&
      (ShapedType::isDynamic(c.getDimSize(1)) || c.getDimSize(1) * parts != w.getDimSize(1)))
    return op->emitOpError() << "sequence " << w.getDimSize(1) << " is not " << parts
                             << " chunks of " << c.getDimSize(1);
  return success();
}

LogicalResult SPGatherOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyChunk(*this, getResult(), getInput());
}

LogicalResult SPScatterOp::verify() {
  if (failed(verifyAxis(*this, getAxis())) || failed(verifyChunk(*this, getInput(), getResult())))
    return failure();
  return getBias() ? verifyBias(*this, getInput(), getBias()) : success();
}

LogicalResult SPSplitOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyChunk(*this, getInput(), getResult());
}

OpCost SPGatherOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost SPScatterOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost SPSplitOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }

LogicalResult SPGatherOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                       SmallVectorImpl<Value> &out) {
  if (getReplicated())
    out.assign(
        {(Value)SPSplitOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr())});
  else
    out.assign({(Value)SPScatterOp::create(b, getLoc(), getInput().getType(), grads[0], Value(),
                                           getAxisAttr())});
  return success();
}

LogicalResult SPScatterOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  out.assign({(Value)SPGatherOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr(),
                                        /*replicated=*/nullptr)});
  if (getBias())
    out.push_back(BiasGradOp::create(b, getLoc(), getBias().getType(), grads[0]));
  return success();
}

LogicalResult SPSplitOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                      SmallVectorImpl<Value> &out) {
  out.assign({(Value)SPGatherOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr(),
                                        /*replicated=*/nullptr)});
  return success();
}

//===----------------------------------------------------------------------===//
// KV-head replication
//===----------------------------------------------------------------------===//

/// `part` is one of `parts` equal parts of `whole`'s last dimension.
static LogicalResult verifyPart(Operation *op, Value whole, Value part, int64_t parts) {
  RankedTensorType w = ty(whole), p = ty(part);
  if (parts < 1 || w.getRank() != p.getRank() || w.getElementType() != p.getElementType() ||
      w.getDimSize(w.getRank() - 1) != p.getDimSize(p.getRank() - 1) * parts)
    return op->emitOpError() << "expects " << w << " to be " << parts << " parts of " << p;
  return success();
}

LogicalResult TPSliceOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyPart(*this, getInput(), getResult(), getParts());
}

LogicalResult TPUnsliceOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyPart(*this, getResult(), getInput(), getParts());
}

OpCost TPSliceOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost TPUnsliceOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }

LogicalResult TPSliceOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                      SmallVectorImpl<Value> &out) {
  out.assign({(Value)TPUnsliceOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr(),
                                         getPartsAttr())});
  return success();
}

LogicalResult TPUnsliceOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  out.assign({(Value)TPSliceOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr(),
                                       getPartsAttr())});
  return success();
}

//===----------------------------------------------------------------------===//
// Expert parallelism
//===----------------------------------------------------------------------===//

/// `local` [E/t, t C, h] {ep_parts = t} is this rank's share of `rows` [E, C, h].
static LogicalResult verifyExpertShare(Operation *op, Value rows, Value local) {
  RankedTensorType w = ty(rows), l = ty(local);
  int64_t t = expertParts(l);
  if (w.getRank() != 3 || l.getRank() != 3 || expertParts(w) != 1 || t < 2 || w.isDynamicDim(0) ||
      l.isDynamicDim(0) || w.getDimSize(0) != l.getDimSize(0) * t ||
      w.getDimSize(2) != l.getDimSize(2) || w.getElementType() != l.getElementType())
    return op->emitOpError() << "expects expert rows [E, C, h] and this rank's share [E/t, t C, h] "
                                "with encoding {ep_parts = t}, got "
                             << w << " and " << l;
  if (!w.isDynamicDim(1) && (l.isDynamicDim(1) || l.getDimSize(1) != w.getDimSize(1) * t))
    return op->emitOpError() << "capacity " << l.getDimSize(1) << " is not " << t << " x "
                             << w.getDimSize(1);
  return success();
}

LogicalResult EPDispatchOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyExpertShare(*this, getInput(), getResult());
}

LogicalResult EPCombineOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyExpertShare(*this, getResult(), getInput());
}

OpCost EPDispatchOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost EPCombineOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }

LogicalResult EPDispatchOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                         SmallVectorImpl<Value> &out) {
  out.assign(
      {(Value)EPCombineOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr())});
  return success();
}

LogicalResult EPCombineOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  out.assign(
      {(Value)EPDispatchOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr())});
  return success();
}

//===----------------------------------------------------------------------===//
// Context parallelism
//===----------------------------------------------------------------------===//

/// `whole` [b, s, h] {cp_parts = t} is gathered from `local` [b, s/t, h].
static LogicalResult verifyCpWhole(Operation *op, Value local, Value whole) {
  RankedTensorType l = ty(local), w = ty(whole);
  int64_t t = cpParts(w);
  if (l.getRank() != 3 || w.getRank() != 3 || cpParts(l) != 1 || t < 2 ||
      l.getDimSize(0) != w.getDimSize(0) || l.getDimSize(2) != w.getDimSize(2) ||
      l.getElementType() != w.getElementType())
    return op->emitOpError() << "expects a local [b, s/t, h] tensor and the whole sequence "
                                "[b, s, h] with encoding {cp_parts = t}, got "
                             << l << " and " << w;
  if (!l.isDynamicDim(1) && (w.isDynamicDim(1) || w.getDimSize(1) != l.getDimSize(1) * t))
    return op->emitOpError() << "sequence " << w.getDimSize(1) << " is not " << t << " x "
                             << l.getDimSize(1);
  return success();
}

LogicalResult CPGatherOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyCpWhole(*this, getInput(), getResult());
}

LogicalResult CPScatterOp::verify() {
  if (failed(verifyAxis(*this, getAxis())))
    return failure();
  return verifyCpWhole(*this, getResult(), getInput());
}

OpCost CPGatherOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }
OpCost CPScatterOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }

LogicalResult CPGatherOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                       SmallVectorImpl<Value> &out) {
  out.assign(
      {(Value)CPScatterOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr())});
  return success();
}

LogicalResult CPScatterOp::emitGradient(OpBuilder &b, ArrayRef<Value> grads,
                                        SmallVectorImpl<Value> &out) {
  out.assign(
      {(Value)CPGatherOp::create(b, getLoc(), getInput().getType(), grads[0], getAxisAttr())});
  return success();
}

LogicalResult PPTransferOp::verify() {
  if (getFrom() == getTo())
    return emitOpError() << "sends stage " << getFrom() << " to itself";
  return success();
}

OpCost PPTransferOp::getCost(const CostContext &c) { return touches(getInput(), getResult(), c); }

LogicalResult ZeroGatherOp::verify() {
  if (!getParam().getDefiningOp<ParamOp>())
    return emitOpError() << "gathers an llm.param";
  return verifyAxis(*this, getAxis());
}

OpCost ZeroGatherOp::getCost(const CostContext &c) { return touches(getParam(), getResult(), c); }
