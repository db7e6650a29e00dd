//===- Loss.cpp - cross-entropy, whole or vocabulary-parallel -----------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

namespace {
/// The vocabulary-parallel cross-entropy's scratch: per-row local
/// log-sum-exp [1, rows, 1], every rank's [1, parts * rows, 1], and the
/// target logit [rows]; and its parameters: the axis, the ignored label and,
/// for a padded vocabulary, its real size (`classes`: the padding's logits
/// are left out).
struct VocabParallel {
  BufAttr lse, all, target;
  DictionaryAttr params;

  VocabParallel(Lowering &l, BufAttr logits, StringRef axis, int64_t ignore,
                IntegerAttr vocabSize) {
    int64_t rows = 1;
    for (int64_t d : logits.getShape().asArrayRef().drop_back())
      rows *= d;
    lse = l.buffers.accumulator("scratch:vp_lse", {1, rows, 1});
    all = l.buffers.accumulator("scratch:vp_lse_all", {1, rows * l.tp, 1});
    target = l.buffers.accumulator("scratch:vp_target", {rows});
    SmallVector<NamedAttribute> ps = {l.text("shard", axis), l.i64("ignore_index", ignore)};
    if (vocabSize)
      ps.push_back(l.i64("classes", vocabSize.getInt()));
    params = l.b.getDictionaryAttr(ps);
  }

  /// Each rank's log-sum-exp and target logit per row, the log-sum-exps
  /// gathered over the axis.
  void stats(Lowering &l, Location loc, BufAttr logits, BufAttr labels, StringAttr axis) {
    KernelOp::create(l.ob, loc, l.b.getStringAttr("vp_ce_stats"),
                     l.b.getArrayAttr({logits, labels}), l.b.getArrayAttr({lse, target}), params);
    SeqOp::create(l.ob, loc, SeqKindAttr::get(l.b.getContext(), SeqKind::all_gather), axis,
                  l.b.getArrayAttr({lse}), l.b.getArrayAttr({all}));
  }
};
} // namespace

void llmopt::lowering::populateLossLowerings(LoweringPatternSet &set) {
  set.add<CrossEntropyOp>([](CrossEntropyOp c, Lowering &l) -> LogicalResult {
    int64_t ignore = c.getIgnoreIndexAttr().getInt();
    SymbolRefAttr vocabAxis = c.getVocabAxisAttr();
    if (!vocabAxis)
      return l.kernel(c.getLoc(), "cross_entropy_fwd", {c.getLogits(), c.getLabels()}, c.getLoss(),
                      {l.i64("ignore_index", ignore)});
    // Vocabulary-parallel: local statistics, the target logits summed over
    // the axis, combined into the mean loss.
    FailureOr<BufAttr> logits = l.buffers.lookup(c.getLogits()),
                       labels = l.buffers.lookup(c.getLabels()),
                       loss = l.buffers.lookup(c.getLoss());
    if (failed(logits) || failed(labels) || failed(loss))
      return failure();
    StringAttr axis = l.b.getStringAttr(axisName(vocabAxis));
    VocabParallel vp(l, *logits, axis.getValue(), ignore, c.getVocabSizeAttr());
    vp.stats(l, c.getLoc(), *logits, *labels, axis);
    l.allReduceOn(c.getLoc(), axis.getValue(), ReduceKind::sum, {vp.target});
    l.kernelOn(c.getLoc(), "vp_ce_loss", {vp.all, vp.target, *labels}, {*loss},
               {l.i64("ignore_index", ignore)});
    return success();
  });
  set.add<CrossEntropyGradOp>([](CrossEntropyGradOp g, Lowering &l) -> LogicalResult {
    int64_t ignore = g.getIgnoreIndexAttr().getInt();
    SymbolRefAttr vocabAxis = g.getVocabAxisAttr();
    if (!vocabAxis)
      return l.kernel(g.getLoc(), "cross_entropy_bwd",
                      {g.getLogits(), g.getLabels(), g.getLossGrad()}, g.getResult(),
                      {l.i64("ignore_index", ignore)});
    FailureOr<BufAttr> logits = l.buffers.lookup(g.getLogits()),
                       labels = l.buffers.lookup(g.getLabels()),
                       dloss = l.buffers.lookup(g.getLossGrad()),
                       out = l.buffers.lookup(g.getResult());
    if (failed(logits) || failed(labels) || failed(dloss) || failed(out))
      return failure();
    StringAttr axis = l.b.getStringAttr(axisName(vocabAxis));
    VocabParallel vp(l, *logits, axis.getValue(), ignore, g.getVocabSizeAttr());
    vp.stats(l, g.getLoc(), *logits, *labels, axis);
    KernelOp::create(l.ob, g.getLoc(), l.b.getStringAttr("vp_ce_bwd"),
                     l.b.getArrayAttr({*logits, *labels, vp.all, *dloss}), l.b.getArrayAttr({*out}),
                     vp.params);
    return success();
  });
}
