//===- ShardParams.cpp - ZeRO-3 parameter gathering ------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace llmopt {
#define GEN_PASS_DEF_SHARDPARAMS
#include "llmopt/Transforms/Passes.h.inc"
} // namespace llmopt

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
struct ShardParamsPass : public llmopt::impl::ShardParamsBase<ShardParamsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (!plan || plan.getZero() != 3 || plan.getDp() <= 1)
      return;
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func) {
      module.emitError() << "llm-shard-params: no @train_step; run llm-build-training-step first";
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    StringAttr dp = b.getStringAttr("dp"), edp = b.getStringAttr("edp");
    for (ParamOp p : llvm::to_vector(func.getBody().front().getOps<ParamOp>())) {
      // Expert weights (expert parallelism) are chunked over the ranks that
      // hold the same experts.
      auto shard = p->getAttrOfType<DictionaryAttr>("llm.shard");
      auto shardAxis = shard ? shard.getAs<StringAttr>("axis") : StringAttr();
      StringAttr axis = shardAxis && shardAxis.getValue() == "ep" ? edp : dp;
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
  }
};
} // namespace
