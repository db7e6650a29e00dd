//===- Collectives.cpp - the partition passes' exchanges ----------------===//
//
// Tensor parallelism (copies, slices, reductions), sequence and context
// parallelism's sequence exchanges, expert all-to-alls and ZeRO-3 gathers.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

/// A reduction of partial outputs over `axis`, then the bias added once.
static LogicalResult reduceThenBias(Lowering &l, Location loc, StringRef axis, Value in, Value out,
                                    Value bias) {
  if (failed(l.kernel(loc, "copy", in, out)) || failed(l.allReduce(loc, axis, out)))
    return failure();
  if (!bias)
    return success();
  return l.kernel(loc, "bias_add", {out, bias}, out);
}

static LogicalResult allToAll(Lowering &l, Location loc, ExpertExchange kind, StringAttr axis,
                              Value in, Value out) {
  FailureOr<ArrayAttr> i = l.buffers.lookup(ValueRange(in)), o = l.buffers.lookup(ValueRange(out));
  if (failed(i) || failed(o))
    return failure();
  AllToAllOp::create(l.ob, loc, ExpertExchangeAttr::get(l.b.getContext(), kind), axis, *i, *o);
  return success();
}

/// ZeRO-3: the whole parameter gathered from its chunks; with `llm.prefetch`
/// started ahead as an event the first reader waits for.
static LogicalResult lowerZeroGather(ZeroGatherOp g, Lowering &l) {
  FailureOr<BufAttr> out = l.buffers.lookup(g.getResult());
  if (failed(out))
    return failure();
  IntegerAttr event;
  if (g->hasAttr("llm.prefetch")) {
    event = l.b.getI64IntegerAttr(l.gatherEvents++);
    l.pendingGathers[g.getResult()] = event.getInt();
  }
  ParamGatherOp::create(l.ob, g.getLoc(), l.b.getStringAttr(axisName(g.getAxis())),
                        g.getParam().getDefiningOp<llm::ParamOp>().getNameAttr(), *out, event);
  return success();
}

void llmopt::lowering::populateCollectiveLowerings(LoweringPatternSet &set) {
  set.add<TPCopyOp>([](TPCopyOp c, Lowering &l) {
    return l.kernel(c.getLoc(), "copy", c.getInput(), c.getResult());
  });
  set.add<TPSliceOp>([](TPSliceOp t, Lowering &l) {
    return l.kernel(t.getLoc(), "tp_slice", t.getInput(), t.getResult(),
                    {l.text("shard", axisName(t.getAxis())), l.i64("parts", t.getParts())});
  });
  set.add<TPUnsliceOp>([](TPUnsliceOp t, Lowering &l) {
    return l.kernel(t.getLoc(), "tp_unslice", t.getInput(), t.getResult(),
                    {l.text("shard", axisName(t.getAxis())), l.i64("parts", t.getParts())});
  });
  set.add<llm::AllReduceOp>([](llm::AllReduceOp a, Lowering &l) {
    return reduceThenBias(l, a.getLoc(), axisName(a.getAxis()), a.getInput(), a.getResult(),
                          Value());
  });
  set.add<TPReduceOp>([](TPReduceOp r, Lowering &l) {
    return reduceThenBias(l, r.getLoc(), axisName(r.getAxis()), r.getInput(), r.getResult(),
                          r.getBias());
  });
  set.add<ZeroGatherOp>(lowerZeroGather);
  set.add<EPDispatchOp>([](EPDispatchOp e, Lowering &l) {
    return allToAll(l, e.getLoc(), ExpertExchange::dispatch,
                    l.b.getStringAttr(axisName(e.getAxis())), e.getInput(), e.getResult());
  });
  set.add<EPCombineOp>([](EPCombineOp e, Lowering &l) {
    return allToAll(l, e.getLoc(), ExpertExchange::combine,
                    l.b.getStringAttr(axisName(e.getAxis())), e.getInput(), e.getResult());
  });
  set.add<CPGatherOp>([](CPGatherOp g, Lowering &l) {
    return l.seq(g.getLoc(), SeqKind::cp_all_gather, axisName(g.getAxis()), g.getInput(),
                 g.getResult());
  });
  set.add<CPScatterOp>([](CPScatterOp g, Lowering &l) {
    return l.seq(g.getLoc(), SeqKind::cp_reduce_scatter, axisName(g.getAxis()), g.getInput(),
                 g.getResult());
  });
  set.add<SPGatherOp>([](SPGatherOp g, Lowering &l) {
    return l.seq(g.getLoc(), SeqKind::all_gather, axisName(g.getAxis()), g.getInput(),
                 g.getResult());
  });
  set.add<SPSplitOp>([](SPSplitOp g, Lowering &l) {
    return l.seq(g.getLoc(), SeqKind::split, axisName(g.getAxis()), g.getInput(), g.getResult());
  });
  set.add<SPScatterOp>([](SPScatterOp r, Lowering &l) -> LogicalResult {
    // The reduce-scatter of partial outputs, then the bias once.
    if (failed(l.seq(r.getLoc(), SeqKind::reduce_scatter, axisName(r.getAxis()), r.getInput(),
                     r.getResult())))
      return failure();
    if (!r.getBias())
      return success();
    return l.kernel(r.getLoc(), "bias_add", {r.getResult(), r.getBias()}, r.getResult());
  });
}
