//===- ShardParams.cpp - ZeRO-3 parameter gathering ------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <limits>
#include <map>
#include <tuple>

namespace llmopt::llm {
#define GEN_PASS_DEF_SHARDPARAMS
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
struct ShardParamsPass : public llmopt::llm::impl::ShardParamsBase<ShardParamsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (plan && plan.getShard() > 0) {
      module.emitError() << "llm-shard-params: the plan shards ZeRO over groups of "
                         << plan.getShard()
                         << " ranks (hybrid sharding), which the lowering does not run; "
                            "plan with fix=shard:0 or stack=llm-run-cpu";
      return signalPassFailure();
    }
    if (!plan || plan.getZero() != 3 || plan.getDp() <= 1)
      return;
    FailureOr<func::FuncOp> found =
        entryFunction(module, LLMDialect::kTrainStepAttrName, "llm-shard-params",
                      "run llm-build-training-step first");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp func = *found;
    OpBuilder b(module.getContext());
    // Expert weights (expert parallelism) are chunked over the ranks holding
    // the same experts (edp, dp / ep of them), the rest over dp.
    FailureOr<SymbolRefAttr> dp = gridAxis(module, "dp", plan.getDp()), edp = dp;
    if (plan.getEp() > 1)
      edp = gridAxis(module, "edp", plan.getDp() / plan.getEp());
    if (failed(dp) || failed(edp))
      return signalPassFailure();
    for (ParamOp p : llvm::to_vector(func.getBody().front().getOps<ParamOp>())) {
      auto shard = p->getAttrOfType<ShardAttr>("llm.shard");
      SymbolRefAttr axis = shard && shard.getAxis() == "ep" ? *edp : *dp;
      p->setAttr("llm.zero3", b.getUnitAttr());
      for (OpOperand &use : llvm::make_early_inc_range(p.getResult().getUses())) {
        Operation *user = use.getOwner();
        if (isa<AdamWOp>(user))
          continue;
        b.setInsertionPoint(user);
        auto g = ZeroGatherOp::create(b, user->getLoc(), p.getType(), p.getResult(), axis);
        // The gather runs where its user runs (layer, pipeline stage).
        for (StringRef attr : {"llm.layer", "llm.stage", "llm.chunk"})
          if (Attribute a = user->getAttr(attr))
            g->setAttr(attr, a);
        use.set(g.getResult());
      }
    }
    if (prefetch)
      prefetchGathers(func);
  }

  /// Moves each layer's gathers to where the previous layer (in the same
  /// segment) starts computing; see the pass description.
  static void prefetchGathers(func::FuncOp func) {
    Block &body = func.getBody().front();
    Operation *lossOp = body.getTerminator()->getNumOperands()
                            ? body.getTerminator()->getOperand(0).getDefiningOp()
                            : nullptr;
    auto intAttr = [](Operation *op, StringRef name, int64_t absent) {
      auto a = op->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : absent;
    };
    struct Group {
      int64_t layer;
      SmallVector<ZeroGatherOp> gathers;
    };
    // Segment (stage, chunk, backward) -> its gather groups in program order.
    std::map<std::tuple<int64_t, int64_t, bool>, SmallVector<Group>> segments;
    for (Operation &op : body) {
      auto g = dyn_cast<ZeroGatherOp>(op);
      if (!g)
        continue;
      bool backward = lossOp && lossOp->isBeforeInBlock(g);
      auto key = std::make_tuple(intAttr(g, "llm.stage", -1), intAttr(g, "llm.chunk", 0), backward);
      int64_t layer = intAttr(g, "llm.layer", -1);
      SmallVector<Group> &groups = segments[key];
      if (groups.empty() || groups.back().layer != layer)
        groups.push_back({layer, {}});
      groups.back().gathers.push_back(g);
    }
    // Moving an op invalidates the block's order, after which isBeforeInBlock
    // renumbers the whole block: once per move, quadratic in depth. The
    // positions are kept here instead. Ops only ever move right before an
    // anchor (gathers) or right before a gather just moved (its parameter),
    // and anchors never move: an op that has not moved is at (its index,
    // max), one moved before anchor a at (a's index, the order it arrived),
    // which is after the ops that were before a and before a itself.
    using Position = std::pair<int64_t, int64_t>;
    constexpr int64_t unmoved = std::numeric_limits<int64_t>::max();
    DenseMap<Operation *, Position> position;
    int64_t index = 0;
    for (Operation &op : body)
      position[&op] = {index++, unmoved};
    int64_t arrival = 0;
    UnitAttr unit = UnitAttr::get(func.getContext());
    for (auto &[key, groups] : segments) {
      // The anchors are readers, which do not move.
      SmallVector<Operation *> anchors;
      for (Group &group : groups) {
        Operation *first = nullptr;
        for (Operation *user : group.gathers.front()->getUsers())
          if (!first || position.at(user) < position.at(first))
            first = user;
        anchors.push_back(first);
      }
      for (size_t k = 1; k < groups.size(); ++k) {
        if (!anchors[k - 1])
          continue;
        Operation *anchor = anchors[k - 1];
        for (ZeroGatherOp g : groups[k].gathers)
          if (position.at(anchor) < position.at(g)) {
            g->moveBefore(anchor);
            g->setAttr("llm.prefetch", unit);
            // Odd arrivals for gathers, so that a parameter moved right
            // before one (the even number below it) lands after the ops
            // that arrived before it.
            arrival += 2;
            position[g] = {position.at(anchor).first, arrival + 1};
            // A parameter has no operands: declaring it earlier is safe.
            Operation *param = g.getParam().getDefiningOp();
            if (param && position.at(g) < position.at(param)) {
              param->moveBefore(g);
              position[param] = {position.at(anchor).first, arrival};
            }
          }
      }
    }
  }
};
} // namespace
