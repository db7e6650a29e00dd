//===- Optimizer.cpp - the step phase: reductions, norm, AdamW ----------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

/// AdamW's scalar parameters.
static SmallVector<NamedAttribute> adamwParams(AdamWOp a, Lowering &l) {
  return {l.b.getNamedAttr("param", a.getNameAttr()),
          l.f64("lr", a.getLr().convertToDouble()),
          l.f64("beta1", a.getBeta1().convertToDouble()),
          l.f64("beta2", a.getBeta2().convertToDouble()),
          l.f64("eps", a.getEps().convertToDouble()),
          l.f64("weight_decay", a.getWeightDecay().convertToDouble()),
          l.f64("max_norm", a.getMaxNorm().convertToDouble())};
}

void llmopt::lowering::lowerStepPhase(Lowering &l, Location loc, const StepPhase &s) {
  const ParamFacts &facts = s.params;
  SmallVector<Attribute> all(s.gradAccs);
  all.push_back(s.loss);
  // The accumulators hold sums over the micro-batches.
  if (s.micro > 1)
    for (Attribute acc : all)
      l.kernelOn(loc, "scale", {acc}, {acc}, {l.f64("factor", 1.0 / double(s.micro))});
  // Context parallelism: each rank's gradients and loss are of its chunks'
  // tokens (equal counts); their average is the sequence's.
  if (s.cp > 1)
    l.allReduceOn(loc, "cp", ReduceKind::avg, all);
  SmallVector<Attribute> tiedAccs;
  for (auto [update, acc] : llvm::zip(s.updates, s.gradAccs))
    if (AdamWOp a = update; facts.tied.contains(a.getName()))
      tiedAccs.push_back(acc);
  if (!tiedAccs.empty())
    l.allReduceOn(loc, "pp_tied", ReduceKind::sum, tiedAccs);
  // What the norm sums: squares of tp-sharded gradients over tp, replicated
  // ones once, experts' over ep; SP's partial gradients first summed over tp.
  SmallVector<Attribute> sharded, replicated, partial, experts, denseGrads;
  for (auto [update, acc] : llvm::zip(s.updates, s.gradAccs)) {
    AdamWOp a = update;
    if (facts.epSharded.contains(a.getName())) {
      experts.push_back(acc);
      // Under sequence parallelism each tp rank routed its own chunk.
      if (facts.spPartial.contains(a.getName()))
        partial.push_back(acc);
      continue;
    }
    denseGrads.push_back(acc);
    // A shared weight counts once in the norm: on the first stage.
    if (facts.tied.contains(a.getName()) && s.stage != 0)
      continue;
    (facts.tpSharded.contains(a.getName()) ? sharded : replicated).push_back(acc);
    if (facts.spPartial.contains(a.getName()))
      partial.push_back(acc);
  }
  if (!partial.empty())
    l.allReduceOn(loc, "tp", ReduceKind::sum, partial);
  if (s.dp > 1) {
    // Data parallelism averages the gradients and the loss. Expert gradients
    // already hold the ep ranks' tokens: they average over the
    // expert-data-parallel ranks and count each rank's share once (1 / ep),
    // which is the average over dp.
    SmallVector<Attribute> dense;
    for (Attribute acc : all)
      if (!llvm::is_contained(experts, acc))
        dense.push_back(acc);
    l.allReduceOn(loc, "dp", ReduceKind::avg, dense);
    if (!experts.empty()) {
      if (s.dp / s.ep > 1)
        l.allReduceOn(loc, "edp", ReduceKind::avg, experts);
      for (Attribute acc : experts)
        l.kernelOn(loc, "scale", {acc}, {acc}, {l.f64("factor", 1.0 / double(s.ep))});
    }
  }
  // Only the last stage computed the loss; the others add their zero.
  if (s.pp > 1)
    l.allReduceOn(loc, "pp", ReduceKind::sum, {s.loss});
  // Dynamic loss scaling: unscale the (reduced) gradients, note a non-finite
  // one anywhere, skip the update then (AdamW reads the flag) and let the
  // runtime move the scale.
  std::optional<BufAttr> found;
  if (s.lossScaling) {
    found = l.buffers.accumulator("scratch:found_inf", ArrayRef<int64_t>{});
    l.kernelOn(loc, "loss_unscale", denseGrads, {*found});
    if (!experts.empty()) {
      BufAttr more = l.buffers.accumulator("scratch:found_inf_experts", ArrayRef<int64_t>{});
      l.kernelOn(loc, "loss_unscale", experts, {more});
      l.kernelOn(loc, "add", {*found, more}, {*found});
    }
    for (auto [axis, size] :
         {std::pair<StringRef, int64_t>{"dp", s.dp}, {"tp", s.tp}, {"cp", s.cp}, {"pp", s.pp}})
      if (size > 1)
        l.allReduceOn(loc, axis, ReduceKind::sum, {*found});
  }
  // The gradient norm over the whole model.
  if (s.tp == 1 && s.pp == 1 && experts.empty()) {
    l.kernelOn(loc, "global_norm", s.gradAccs, {s.norm});
  } else {
    auto sumSquares = [&](ArrayRef<Attribute> grads, BufAttr into, bool overTp) {
      l.kernelOn(loc, "sum_squares", grads, {into});
      if (overTp)
        l.allReduceOn(loc, "tp", ReduceKind::sum, {into});
    };
    if (s.tp > 1) {
      BufAttr rest = l.buffers.accumulator("norm_sq_replicated", ArrayRef<int64_t>{});
      sumSquares(sharded, s.norm, /*overTp=*/true);
      sumSquares(replicated, rest, /*overTp=*/false);
      l.kernelOn(loc, "add", {s.norm, rest}, {s.norm});
    } else {
      sumSquares(replicated, s.norm, /*overTp=*/false); // tp 1: nothing is tp-sharded
    }
    if (!experts.empty()) {
      // Each ep rank squares its own experts.
      BufAttr mine = l.buffers.accumulator("scratch:norm_sq_experts", ArrayRef<int64_t>{});
      sumSquares(experts, mine, /*overTp=*/false);
      l.allReduceOn(loc, "ep", ReduceKind::sum, {mine});
      l.kernelOn(loc, "add", {s.norm, mine}, {s.norm});
    }
    // Every stage squares its own parameters' gradients.
    if (s.pp > 1)
      l.allReduceOn(loc, "pp", ReduceKind::sum, {s.norm});
    l.kernelOn(loc, "sqrt", {s.norm}, {s.norm});
  }
  for (auto [update, acc] : llvm::zip(s.updates, s.gradAccs)) {
    AdamWOp a = update;
    SmallVector<Attribute> ins = {acc, s.norm};
    if (found)
      ins.push_back(*found);
    l.kernelOn(loc, "adamw", ins, {}, adamwParams(a, l));
  }
  if (found)
    l.kernelOn(loc, "loss_scale_update", {*found}, {});
}
