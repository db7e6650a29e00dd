//===- Lowering.cpp - buffers, the exec builder, the pattern table ------===//

#include "Lowering.h"

#include "llvm/Support/ErrorHandling.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::exec;
using namespace llmopt::lowering;

//===----------------------------------------------------------------------===//
// BufferAssignment
//===----------------------------------------------------------------------===//

BufferAssignment::BufferAssignment(func::FuncOp step) : ctx(step.getContext()) {
  for (Operation &op : step.getBody().front()) {
    if (auto offs = op.getAttrOfType<DenseI64ArrayAttr>("llm.offsets"))
      for (auto [r, off] : llvm::zip(op.getResults(), offs.asArrayRef()))
        offsets[r] = off;
    if (auto st = op.getAttrOfType<DenseBoolArrayAttr>("llm.stashed"))
      for (auto [r, s] : llvm::zip(op.getResults(), st.asArrayRef()))
        if (s)
          stashed.insert(r);
  }
}

FailureOr<BufAttr> BufferAssignment::lookup(Value v) const {
  if (auto it = redirected.find(v); it != redirected.end())
    return it->second;
  Builder b(ctx);
  auto t = cast<RankedTensorType>(v.getType());
  auto shape = b.getDenseI64ArrayAttr(t.getShape());
  Type elt = t.getElementType();
  if (auto arg = dyn_cast<BlockArgument>(v))
    return BufAttr::get(ctx, BufferSpace::input, arg.getArgNumber(), b.getStringAttr(""), shape,
                        elt);
  if (auto p = v.getDefiningOp<llm::ParamOp>())
    return BufAttr::get(ctx, BufferSpace::state, 0, p.getNameAttr(), shape, elt);
  auto it = offsets.find(v);
  if (it == offsets.end() || it->second < 0) {
    emitError(v.getLoc()) << "convert-llm-to-exec: a value has no arena offset; run "
                             "llm-plan-memory first";
    return failure();
  }
  return BufAttr::get(ctx, stashed.contains(v) ? BufferSpace::stash : BufferSpace::arena,
                      it->second, b.getStringAttr(""), shape, elt);
}

FailureOr<ArrayAttr> BufferAssignment::lookup(ValueRange values) const {
  SmallVector<Attribute> out;
  for (Value v : values) {
    FailureOr<BufAttr> a = lookup(v);
    if (failed(a))
      return failure();
    out.push_back(*a);
  }
  return ArrayAttr::get(ctx, out);
}

BufAttr BufferAssignment::accumulator(StringRef name, ArrayRef<int64_t> shape) const {
  Builder b(ctx);
  return BufAttr::get(ctx, BufferSpace::accum, 0, b.getStringAttr(name),
                      b.getDenseI64ArrayAttr(shape), b.getF32Type());
}

BufAttr BufferAssignment::accumulator(StringRef name, Value like) const {
  return accumulator(name, cast<RankedTensorType>(like.getType()).getShape());
}

//===----------------------------------------------------------------------===//
// LoweringPatternSet
//===----------------------------------------------------------------------===//

LoweringPatternSet &LoweringPatternSet::add(StringRef opName, LowerFn fn) {
  bool inserted = table.try_emplace(opName, std::move(fn)).second;
  if (!inserted)
    llvm::report_fatal_error(llvm::Twine("two lowerings of ") + opName);
  return *this;
}

const LowerFn *LoweringPatternSet::lookup(Operation *op) const {
  auto it = table.find(op->getName().getStringRef());
  return it == table.end() ? nullptr : &it->second;
}

void llmopt::lowering::populateLLMToExecLowerings(LoweringPatternSet &set) {
  populateElementwiseLowerings(set);
  populateEmbeddingLowerings(set);
  populateNormLowerings(set);
  populateLinearLowerings(set);
  populateAttentionLowerings(set);
  populateMoELowerings(set);
  populateLossLowerings(set);
  populateCollectiveLowerings(set);
  populateFusedLowerings(set);
}

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

Lowering::Lowering(func::FuncOp step, const LoweringPatternSet &patterns, BufferAssignment &buffers,
                   int64_t tp, int64_t cp)
    : b(step.getContext()), ob(step.getContext()), buffers(buffers), tp(tp), cp(cp),
      patterns(patterns) {}

LogicalResult Lowering::lower(Operation *op) {
  Location loc = op->getLoc();
  // The compute stream waits for a prefetched gather right before its first
  // reader.
  if (!pendingGathers.empty())
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (auto it = pendingGathers.find(v); it != pendingGathers.end()) {
          ParamWaitOp::create(ob, loc, b.getI64IntegerAttr(it->second));
          pendingGathers.erase(it);
        }
    });
  const LowerFn *fn = patterns.lookup(op);
  if (!fn)
    return op->emitOpError() << "convert-llm-to-exec: no kernel for this op yet";
  return (*fn)(op, *this);
}

LogicalResult Lowering::kernel(Location loc, StringRef name, ValueRange ins, ValueRange outs,
                               ArrayRef<NamedAttribute> params) {
  if (captured) {
    auto numbers = [&](ValueRange vs) {
      SmallVector<int64_t> out;
      for (Value v : vs)
        out.push_back(refs.lookup(v));
      return b.getDenseI64ArrayAttr(out);
    };
    captured->push_back(b.getDictionaryAttr(
        {b.getNamedAttr("kernel", b.getStringAttr(name)), b.getNamedAttr("ins", numbers(ins)),
         b.getNamedAttr("outs", numbers(outs)),
         b.getNamedAttr("params", b.getDictionaryAttr(params))}));
    return success();
  }
  FailureOr<ArrayAttr> i = buffers.lookup(ins), o = buffers.lookup(outs);
  if (failed(i) || failed(o))
    return failure();
  SmallVector<NamedAttribute> ps(params);
  // Under context parallelism the kernels that depend on positions learn
  // which chunks this rank holds from the cp axis.
  if (cp > 1 && llvm::is_contained({StringRef("rotary"), StringRef("attention_fwd"),
                                    StringRef("attention_bwd"), StringRef("position_embedding_fwd"),
                                    StringRef("position_embedding_bwd")},
                                   name))
    ps.push_back(text("cp", "cp"));
  KernelOp::create(ob, loc, b.getStringAttr(name), *i, *o, b.getDictionaryAttr(ps));
  return success();
}

KernelOp Lowering::kernelOn(Location loc, StringRef name, ArrayRef<Attribute> ins,
                            ArrayRef<Attribute> outs, ArrayRef<NamedAttribute> params) {
  return KernelOp::create(ob, loc, b.getStringAttr(name), b.getArrayAttr(ins), b.getArrayAttr(outs),
                          b.getDictionaryAttr(params));
}

LogicalResult Lowering::allReduce(Location loc, StringRef axis, Value v) {
  FailureOr<BufAttr> a = buffers.lookup(v);
  if (failed(a))
    return failure();
  allReduceOn(loc, axis, ReduceKind::sum, {*a});
  return success();
}

void Lowering::allReduceOn(Location loc, StringRef axis, ReduceKind kind,
                           ArrayRef<Attribute> bufs) {
  exec::AllReduceOp::create(ob, loc, b.getStringAttr(axis),
                            ReduceKindAttr::get(b.getContext(), kind), b.getArrayAttr(bufs));
}

LogicalResult Lowering::seq(Location loc, SeqKind kind, StringRef axis, Value in, Value out) {
  FailureOr<ArrayAttr> i = buffers.lookup(ValueRange(in)), o = buffers.lookup(ValueRange(out));
  if (failed(i) || failed(o))
    return failure();
  SeqOp::create(ob, loc, SeqKindAttr::get(b.getContext(), kind), b.getStringAttr(axis), *i, *o);
  return success();
}

//===----------------------------------------------------------------------===//
// ParamFacts
//===----------------------------------------------------------------------===//

int64_t llmopt::lowering::stageOf(Operation *op) {
  auto a = op->getAttrOfType<IntegerAttr>("llm.stage");
  return a ? a.getInt() : -2;
}

ParamFacts::ParamFacts(func::FuncOp step) {
  for (llm::ParamOp p : step.getBody().front().getOps<llm::ParamOp>()) {
    stage[p.getName()] = stageOf(p);
    if (p->hasAttr("llm.pp_tied"))
      tied.insert(p.getName());
    if (auto shard = p->getAttrOfType<llm::ShardAttr>("llm.shard"))
      (shard.getAxis() == "ep" ? epSharded : tpSharded).insert(p.getName());
    if (p->hasAttr("llm.sp_partial"))
      spPartial.insert(p.getName());
  }
}
