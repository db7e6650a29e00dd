//===- PartitionTP.cpp - Megatron tensor parallelism -----------------------===//
//
// Column- and row-parallel linears, attention split by heads, the f / g
// conjugate operators as llm.tp_copy / llm.tp_reduce. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

namespace llmopt::llm {
#define GEN_PASS_DEF_PARTITIONTP
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

RankedTensorType withDim(Type t, int64_t dim, int64_t size) {
  auto r = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(r.getShape());
  shape[size_t(dim)] = size;
  return RankedTensorType::get(shape, r.getElementType());
}

/// Divides the last dimension of `v`'s type by `tp`.
void shrinkLast(Value v, int64_t tp) {
  auto t = cast<RankedTensorType>(v.getType());
  int64_t last = t.getRank() - 1;
  v.setType(withDim(t, last, t.getDimSize(last) / tp));
}

struct Partitioner {
  int64_t tp;
  SymbolRefAttr axis;
  bool sp = false;
  bool expertParallel = false;
  llvm::DenseMap<Value, Value> entered; // input -> its tp_copy / sp_gather

  /// Shards parameter `v` along `dim` into `tp` parts of each of `blocks`
  /// equal blocks. `pad` (one block: the vocabulary): a size tp does not
  /// divide is padded to the next multiple of tp first, the shard recording
  /// the real size as `whole` (the runtime initializes and checkpoints the
  /// unpadded tensor and keeps the padding rows at zero).
  LogicalResult shardParam(Operation *user, Value v, int64_t dim, int64_t blocks,
                           bool shared = false, bool pad = false) {
    auto p = v.getDefiningOp<ParamOp>();
    if (!p || (!shared && !v.hasOneUse()))
      return user->emitOpError() << "llm-partition-tp: expects an llm.param used only here";
    auto t = cast<RankedTensorType>(v.getType());
    int64_t size = t.getDimSize(dim), padded = size;
    if (pad && blocks == 1)
      padded = paddedVocab(size);
    if (padded % (blocks * tp) != 0)
      return p.emitOpError() << "llm-partition-tp: dimension " << dim << " of '" << p.getName()
                             << "' (" << size << ") does not split into " << blocks
                             << " block(s) of " << tp << " parts; choose a tp that divides it";
    Builder b(p.getContext());
    p->setAttr("llm.shard", ShardAttr::get(b.getContext(), axisName(axis), dim, blocks, tp,
                                           padded != size ? size : 0));
    v.setType(withDim(t, dim, padded / tp));
    return success();
  }
  /// The vocabulary's rows once padded to a multiple of tp (Megatron pads to
  /// a multiple of 128 x tp for its GEMMs' sake; the llm-run stacks pad only
  /// what splitting needs, which their cost model counts: vocab_padding 1).
  int64_t paddedVocab(int64_t vocab) const { return (vocab + tp - 1) / tp * tp; }

  LogicalResult column(LinearOp l) {
    int64_t blocks = 1;
    SplitOp split;
    if (l->hasOneUse())
      split = dyn_cast<SplitOp>(*l->getUsers().begin());
    if (split) {
      ArrayRef<int64_t> sizes = split.getSizes();
      if (!llvm::all_equal(sizes))
        return split.emitOpError() << "llm-partition-tp: only equal split sizes are partitioned";
      blocks = int64_t(sizes.size());
    }
    int64_t outDim = l.getTransposed() ? 1 : 0;
    if (failed(shardParam(l, l.getWeight(), outDim, blocks)) ||
        (l.getBias() && failed(shardParam(l, l.getBias(), 0, blocks))))
      return failure();
    shrinkLast(l.getResult(), tp);
    if (split) {
      SmallVector<int64_t> sizes;
      for (int64_t s : split.getSizes())
        sizes.push_back(s / tp);
      split.setSizes(sizes);
      for (Value r : split.getResults())
        shrinkLast(r, tp);
    }
    // The input enters the parallel region once, however many linears read it.
    Value x = l.getInput();
    Value &in = entered[x];
    if (!in) {
      OpBuilder b(l);
      if (sp)
        in = SPGatherOp::create(b, l.getLoc(), withSeqParts(x.getType(), 1), x, axis,
                                /*replicated=*/nullptr);
      else
        in = TPCopyOp::create(b, l.getLoc(), x.getType(), x, axis);
    }
    l.getInputMutable().assign(in);
    return success();
  }

  LogicalResult row(LinearOp l) {
    int64_t inDim = l.getTransposed() ? 0 : 1;
    if (failed(shardParam(l, l.getWeight(), inDim, 1)))
      return failure();
    OpBuilder b(l->getContext());
    b.setInsertionPointAfter(l);
    Value bias = l.getBias();
    if (bias)
      l.getBiasMutable().clear();
    Operation *reduce;
    if (sp) {
      reduce = SPScatterOp::create(b, l.getLoc(), withSeqParts(l.getType(), tp), l.getResult(),
                                   bias, axis);
      if (bias)
        bias.getDefiningOp()->setAttr("llm.sp_partial", b.getUnitAttr());
    } else {
      reduce = TPReduceOp::create(b, l.getLoc(), l.getType(), l.getResult(), bias, axis);
    }
    l.getResult().replaceAllUsesExcept(reduce->getResult(0), reduce);
    return success();
  }

  /// Expert tensor parallelism (Megatron's default for MoE under TP): every
  /// rank routes all tokens, and each expert's ffn dimension is split like a
  /// dense MLP's (gate / up by rows, down by columns), so the combine gives
  /// partial sums. The dispatch reads its input through tp_copy and the
  /// combine its routing weights through tp_copy (their gradients are partial
  /// sums over the ranks); the combine's output is reduced. With sequence
  /// parallelism the router and dispatch read the gathered sequence (the
  /// router's copy is replicated) and the output is reduce-scattered.
  LogicalResult experts(MoEExpertsOp e) {
    auto d = e.getInput().getDefiningOp<MoEDispatchOp>();
    MoECombineOp c;
    if (e->hasOneUse())
      c = dyn_cast<MoECombineOp>(*e->getUsers().begin());
    auto router = d ? d.getIndices().getDefiningOp<MoERouterOp>() : MoERouterOp();
    if (!d || !c || !router || c.getIndices() != d.getIndices() ||
        c.getWeights() != router.getWeights() || router.getInput() != d.getInput())
      return e.emitOpError() << "llm-partition-tp: expects router -> dispatch -> experts -> "
                                "combine on one input; cannot partition this MoE layer";
    int64_t last = int64_t(e.getWeights().size()) - 1;
    for (auto [i, w] : llvm::enumerate(e.getWeights()))
      if (failed(shardParam(e, w, int64_t(i) == last ? 2 : 1, 1)))
        return failure();
    Value x = d.getInput();
    OpBuilder b(router);
    if (sp) {
      Type full = withSeqParts(x.getType(), 1);
      router.getInputMutable().assign(
          SPGatherOp::create(b, router.getLoc(), full, x, axis, b.getUnitAttr()));
      d.getInputMutable().assign(SPGatherOp::create(b, d.getLoc(), full, x, axis, nullptr));
    } else {
      d.getInputMutable().assign(TPCopyOp::create(b, d.getLoc(), x.getType(), x, axis));
    }
    b.setInsertionPoint(c);
    Value w = c.getWeights();
    c.getWeightsMutable().assign(TPCopyOp::create(b, c.getLoc(), w.getType(), w, axis));
    b.setInsertionPointAfter(c);
    Operation *reduce =
        sp ? (Operation *)SPScatterOp::create(b, c.getLoc(), withSeqParts(c.getType(), tp),
                                              c.getResult(), nullptr, axis)
           : (Operation *)TPReduceOp::create(b, c.getLoc(), c.getType(), c.getResult(), nullptr,
                                             axis);
    c.getResult().replaceAllUsesExcept(reduce->getResult(0), reduce);
    return success();
  }

  /// The linear producing `v`, through rotary and split.
  LinearOp producer(Value v) {
    Operation *def = v.getDefiningOp();
    if (auto r = dyn_cast_or_null<RotaryOp>(def))
      return producer(cast<OpResult>(v).getResultNumber() == 0 ? r.getQ() : r.getK());
    if (auto s = dyn_cast_or_null<SplitOp>(def))
      return producer(s.getInput());
    return dyn_cast_or_null<LinearOp>(def);
  }

  LinearOp consumer(Value v) {
    if (!v.hasOneUse())
      return {};
    auto l = dyn_cast<LinearOp>(*v.getUsers().begin());
    return l && l.getInput() == v ? l : LinearOp();
  }

  LogicalResult layer(LayerOp layerOp) {
    Block &body = layerOp.getBody().front();
    llvm::SetVector<Operation *> columns, rows, replicated;
    SmallVector<Operation *> retype; // rotary, attention, activations
    auto need = [&](LinearOp l, Operation *at, StringRef what) -> LogicalResult {
      if (!l)
        return at->emitOpError() << "llm-partition-tp: the " << what
                                 << " is not an llm.linear; cannot partition this layer";
      return success();
    };
    // With expert parallelism the experts are split over ep instead (each
    // rank keeps its experts whole): MoE layers run on the tokens as they
    // are, replicated over tp, or under sequence parallelism on this rank's
    // chunk (MoE is token-wise).
    if (!expertParallel)
      for (MoEExpertsOp e : llvm::to_vector(body.getOps<MoEExpertsOp>()))
        if (failed(experts(e)))
          return failure();
    for (Operation &op : body) {
      if (auto a = dyn_cast<AttentionOp>(op)) {
        int64_t h = a.getNumHeads(), kv = a.getNumKvHeads();
        // Fewer KV heads than ranks: each rank computes every KV head and
        // keeps the one its query heads read.
        bool replicateKV = h % tp == 0 && kv % tp != 0 && tp % kv == 0;
        if (h % tp || (kv % tp && !replicateKV))
          return a.emitOpError() << "llm-partition-tp: " << h << " query heads and " << kv
                                 << " KV heads do not split over tp " << tp
                                 << "; choose a tp dividing the query heads and dividing or "
                                    "divided by the KV heads";
        for (Value v : {a.getQ(), a.getK(), a.getV()}) {
          LinearOp l = producer(v);
          if (failed(need(l, a, "projection before attention")))
            return failure();
          if (replicateKV && v != a.getQ()) {
            if (!l->hasOneUse() || !(l->getResult(0) == v || isa<RotaryOp>(*l->getUsers().begin())))
              return a.emitOpError() << "llm-partition-tp: KV heads to replicate must come "
                                        "straight from their own projection";
            replicated.insert(l);
            continue;
          }
          columns.insert(l);
        }
        LinearOp out = consumer(a.getResult());
        if (failed(need(out, a, "projection after attention")))
          return failure();
        rows.insert(out);
        retype.push_back(a);
        for (Value v : {a.getQ(), a.getK()})
          if (auto r = v.getDefiningOp<RotaryOp>())
            if (!llvm::is_contained(retype, r.getOperation()))
              retype.push_back(r);
      } else if (isa<GeluOp, SwiGLUOp>(op)) {
        for (Value in : op.getOperands()) {
          LinearOp l = producer(in);
          if (failed(need(l, &op, "linear before the activation")))
            return failure();
          columns.insert(l);
        }
        LinearOp out = consumer(op.getResult(0));
        if (failed(need(out, &op, "linear after the activation")))
          return failure();
        rows.insert(out);
        retype.push_back(&op);
      }
    }
    // Column linears in block order, so that a shared input's tp_copy comes
    // before all of its readers.
    SmallVector<Operation *> ordered(columns.begin(), columns.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    for (Operation *op : ordered)
      if (failed(column(cast<LinearOp>(op))))
        return failure();
    // Replicated KV projections: whole weights (their gradients are partial
    // sums over the ranks, like sequence-parallel norms': llm.sp_partial),
    // the shared input that entered the parallel region, and a slice of the
    // rank's KV head after them.
    for (Operation *op : replicated) {
      auto l = cast<LinearOp>(op);
      Value x = l.getInput();
      Value &in = entered[x];
      if (!in) {
        OpBuilder b(l);
        if (sp)
          in = SPGatherOp::create(b, l.getLoc(), withSeqParts(x.getType(), 1), x, axis, nullptr);
        else
          in = TPCopyOp::create(b, l.getLoc(), x.getType(), x, axis);
      }
      l.getInputMutable().assign(in);
      Builder b(l.getContext());
      for (Value w : {l.getWeight(), l.getBias()})
        if (w)
          if (Operation *p = w.getDefiningOp())
            p->setAttr("llm.sp_partial", b.getUnitAttr());
      int64_t kvHeads = 0;
      for (Operation *user : l->getUsers())
        if (auto r = dyn_cast<RotaryOp>(user))
          for (Operation *ru : r->getUsers())
            if (auto at = dyn_cast<AttentionOp>(ru))
              kvHeads = at.getNumKvHeads();
      for (Operation *user : l->getUsers())
        if (auto at = dyn_cast<AttentionOp>(user))
          kvHeads = at.getNumKvHeads();
      if (kvHeads <= 1)
        continue; // one KV head: every rank reads it whole
      OpBuilder ob(l->getContext());
      ob.setInsertionPointAfter(l);
      Value y = l.getResult();
      auto full = cast<RankedTensorType>(y.getType());
      SmallVector<int64_t> shape(full.getShape());
      shape.back() /= kvHeads;
      auto slice = TPSliceOp::create(
          ob, l.getLoc(), RankedTensorType::get(shape, full.getElementType(), full.getEncoding()),
          y, axis, ob.getI64IntegerAttr(kvHeads));
      y.replaceAllUsesExcept(slice, slice);
    }
    for (Operation *op : retype) {
      if (auto a = dyn_cast<AttentionOp>(op)) {
        Builder b(a.getContext());
        a.setNumHeadsAttr(b.getI64IntegerAttr(a.getNumHeads() / tp));
        a.setNumKvHeadsAttr(b.getI64IntegerAttr(std::max<int64_t>(1, a.getNumKvHeads() / tp)));
        shrinkLast(a.getResult(), tp);
      } else if (auto r = dyn_cast<RotaryOp>(op)) {
        r.getQOut().setType(r.getQ().getType());
        r.getKOut().setType(r.getK().getType());
      } else {
        shrinkLast(op->getResult(0), tp);
      }
    }
    for (Operation *op : rows)
      if (failed(row(cast<LinearOp>(op))))
        return failure();
    return success();
  }
};

/// Vocabulary parallelism (Megatron): the token embedding keeps V/tp rows,
/// each rank looks up the tokens in its rows (zeros elsewhere) and the
/// ranks' lookups are summed (llm.tp_reduce; under sequence parallelism a
/// reduce-scatter straight into the sequence chunks, unless learned
/// positions are added first). An LM head keeps V/tp rows too, each rank
/// computes its part of the logits and the cross-entropy's softmax spans the
/// ranks; a head tied to the embedding shares its part. A vocabulary tp does
/// not divide is padded to the next multiple of tp (as Megatron pads it):
/// the padding rows are never looked up, and the loss leaves their logits
/// out (`vocab_size`), so the model is the unpadded one.
LogicalResult vocabParallel(FunctionOpInterface forward, Partitioner &p) {
  Block &top = forward.getFunctionBody().front();
  auto parallelHead = [&](LMHeadOp head, int64_t vocab) -> LogicalResult {
    auto ce = head.getResult().hasOneUse()
                  ? dyn_cast<CrossEntropyOp>(*head.getResult().getUsers().begin())
                  : CrossEntropyOp();
    if (!ce)
      return failure();
    Value logits = head.getResult();
    auto t = cast<RankedTensorType>(logits.getType());
    logits.setType(withDim(t, t.getRank() - 1, p.paddedVocab(vocab) / p.tp));
    ce.setVocabAxisAttr(p.axis);
    if (p.paddedVocab(vocab) != vocab)
      ce.setVocabSizeAttr(OpBuilder(head).getI64IntegerAttr(vocab));
    if (!p.sp) {
      OpBuilder b(head);
      Value x = head.getInput();
      head->setOperand(0, TPCopyOp::create(b, head.getLoc(), x.getType(), x, p.axis));
    }
    return success();
  };
  for (EmbeddingOp e : llvm::to_vector(top.getOps<EmbeddingOp>())) {
    Value w = e.getTable();
    if (!w.getDefiningOp<ParamOp>())
      continue;
    int64_t vocab = cast<RankedTensorType>(w.getType()).getDimSize(0);
    SmallVector<LMHeadOp> tied;
    bool others = false;
    for (Operation *user : w.getUsers()) {
      if (auto h = dyn_cast<LMHeadOp>(user); h && h.getWeight() == w && h.getResult().hasOneUse() &&
                                             isa<CrossEntropyOp>(*h.getResult().getUsers().begin()))
        tied.push_back(h);
      else if (user != e)
        others = true;
    }
    if (others)
      continue;
    if (vocab % p.tp != 0)
      e.emitRemark() << "the vocabulary of " << vocab << " rows is padded to "
                     << p.paddedVocab(vocab) << " (a multiple of tp " << p.tp
                     << ") to split the embedding" << (tied.empty() ? "" : " and its tied head")
                     << "; the padding rows are never looked up and their logits are left "
                        "out of the loss";
    if (failed(p.shardParam(e, w, 0, 1, /*shared=*/true, /*pad=*/true)))
      return failure();
    e->setAttr("llm.vocab_axis", p.axis);
    OpBuilder b(e->getContext());
    b.setInsertionPointAfter(e);
    Value x = e.getResult();
    bool positions = x.hasOneUse() && isa<PositionEmbeddingOp>(*x.getUsers().begin());
    Operation *sum =
        p.sp && !positions
            ? (Operation *)SPScatterOp::create(b, e.getLoc(), withSeqParts(x.getType(), p.tp), x,
                                               nullptr, p.axis)
            : (Operation *)TPReduceOp::create(b, e.getLoc(), x.getType(), x, nullptr, p.axis);
    x.replaceAllUsesExcept(sum->getResult(0), sum);
    for (LMHeadOp h : tied)
      if (failed(parallelHead(h, vocab)))
        return failure();
  }
  for (LMHeadOp head : llvm::to_vector(top.getOps<LMHeadOp>())) {
    Value w = head.getWeight();
    if (!w.hasOneUse() || !w.getDefiningOp<ParamOp>())
      continue; // tied (handled with its embedding) or not a parameter
    if (!head.getResult().hasOneUse() || !isa<CrossEntropyOp>(*head.getResult().getUsers().begin()))
      continue;
    int64_t vocab = cast<RankedTensorType>(w.getType()).getDimSize(0);
    if (vocab % p.tp != 0)
      head.emitRemark() << "the vocabulary of " << vocab << " rows is padded to "
                        << p.paddedVocab(vocab) << " (a multiple of tp " << p.tp
                        << ") to split the LM head; the padding logits are left out of the loss";
    if (failed(p.shardParam(head, w, 0, 1, /*shared=*/false, /*pad=*/true)) ||
        failed(parallelHead(head, vocab)))
      return failure();
  }
  return success();
}

/// Sequence parallelism: the residual stream between the layers' parallel
/// regions is a chunk of the sequence. Enters before the first layer
/// (sp_split), propagates through norms and residual adds (whose parameters
/// then get partial gradients: `llm.sp_partial`), and leaves before the LM
/// head (sp_gather).
LogicalResult sequenceParallel(FunctionOpInterface forward, Partitioner &p) {
  Block &top = forward.getFunctionBody().front();
  SmallVector<LayerOp> layers(top.getOps<LayerOp>());
  if (layers.empty())
    return success();
  OpBuilder b(layers.front());
  Value x = layers.front().getInput();
  // A vocabulary-parallel embedding's reduce-scatter already made chunks.
  if (seqParts(x.getType()) == 1) {
    auto split =
        SPSplitOp::create(b, layers.front().getLoc(), withSeqParts(x.getType(), p.tp), x, p.axis);
    layers.front().getInputMutable().assign(split);
  }
  auto chunked = [](Value v) { return seqParts(v.getType()) > 1; };
  std::function<LogicalResult(Block &)> propagate = [&](Block &block) -> LogicalResult {
    for (Operation &op : block) {
      if (isa<SPSplitOp, SPGatherOp, SPScatterOp, ParamOp, YieldOp>(op))
        continue;
      bool any = llvm::any_of(op.getOperands(), chunked);
      if (auto layer = dyn_cast<LayerOp>(op)) {
        Block &body = layer.getBody().front();
        body.getArgument(0).setType(layer.getInput().getType());
        if (failed(propagate(body)))
          return failure();
        layer.getResult().setType(cast<YieldOp>(body.getTerminator()).getValue().getType());
        continue;
      }
      if (!any)
        continue;
      if (isa<LMHeadOp>(op)) {
        OpBuilder ob(&op);
        Value in = op.getOperand(0);
        // A vocabulary-parallel head is partitioned: its input gradient is a
        // partial sum (reduce-scatter); a replicated one is whole everywhere.
        bool parallelHead = cast<LMHeadOp>(op).getWeight().getDefiningOp() &&
                            cast<LMHeadOp>(op).getWeight().getDefiningOp()->hasAttr("llm.shard");
        op.setOperand(0, SPGatherOp::create(ob, op.getLoc(), withSeqParts(in.getType(), 1), in,
                                            p.axis, parallelHead ? UnitAttr() : ob.getUnitAttr()));
        continue;
      }
      // MoE layers left whole (expert parallelism) run on the chunk's tokens:
      // routing results are chunks, the dispatched rows are this rank's, and
      // every MoE weight's gradient is partial over the chunks.
      if (isa<MoERouterOp, MoEDispatchOp, MoECombineOp>(op)) {
        auto partial = [&](Value w) {
          if (auto param = w.getDefiningOp<ParamOp>())
            param->setAttr("llm.sp_partial", UnitAttr::get(op.getContext()));
        };
        if (auto r = dyn_cast<MoERouterOp>(op))
          partial(r.getGate());
        if (auto d = dyn_cast<MoEDispatchOp>(op)) {
          for (Operation *user : d->getUsers())
            if (auto e = dyn_cast<MoEExpertsOp>(user))
              llvm::for_each(e.getWeights(), partial);
          continue;
        }
        for (Value r : op.getResults())
          r.setType(withSeqParts(r.getType(), p.tp));
        continue;
      }
      if (!isa<RMSNormOp, LayerNormOp, AddOp>(op))
        return op.emitOpError() << "llm-partition-tp: sequence parallelism does not know how "
                                   "to run this op on a sequence chunk";
      for (Value operand : op.getOperands())
        if (auto param = operand.getDefiningOp<ParamOp>())
          param->setAttr("llm.sp_partial", UnitAttr::get(op.getContext()));
      for (Value r : op.getResults())
        r.setType(withSeqParts(r.getType(), p.tp));
    }
    return success();
  };
  return propagate(top);
}

struct PartitionTPPass : public llmopt::llm::impl::PartitionTPBase<PartitionTPPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t degree = tp;
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (degree == 0)
      degree = plan ? plan.getTp() : 1;
    if (degree <= 1)
      return;
    bool seqParallel = plan && plan.getSp() && plan.getSp().getValue();
    FunctionOpInterface forward = forwardToPartition(module, "llm-partition-tp");
    if (!forward)
      return signalPassFailure();
    Partitioner p;
    p.tp = degree;
    FailureOr<SymbolRefAttr> axis = gridAxis(module, "tp", degree);
    if (failed(axis))
      return signalPassFailure();
    p.axis = *axis;
    p.sp = seqParallel;
    p.expertParallel = plan && plan.getEp() > 1;
    for (LayerOp layer : llvm::to_vector(forward.getFunctionBody().front().getOps<LayerOp>()))
      if (failed(p.layer(layer)))
        return signalPassFailure();
    if (failed(vocabParallel(forward, p)))
      return signalPassFailure();
    // With sequence parallelism, the chunk types then flow from the split
    // before the first layer and from each sp_scatter.
    if (seqParallel && failed(sequenceParallel(forward, p)))
      return signalPassFailure();
  }
};
} // namespace
