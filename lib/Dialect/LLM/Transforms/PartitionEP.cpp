//===- PartitionEP.cpp - expert parallelism --------------------------------===//
//
// Each rank of an `ep` group keeps E/ep experts; dispatched rows travel to
// their experts' ranks and back by all-to-all. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace llmopt::llm {
#define GEN_PASS_DEF_PARTITIONEP
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
struct PartitionEPPass : public llmopt::llm::impl::PartitionEPBase<PartitionEPPass> {
  using Base::Base;

  LogicalResult partition(MoEExpertsOp e, int64_t degree, SymbolRefAttr axis) {
    auto in = cast<RankedTensorType>(e.getInput().getType());
    int64_t experts = in.getDimSize(0);
    if (experts % degree != 0)
      return e.emitOpError() << "llm-partition-ep: " << experts << " experts do not split over ep "
                             << degree << "; choose an ep dividing the expert count";
    Builder b(e.getContext());
    for (Value w : e.getWeights()) {
      auto p = w.getDefiningOp<ParamOp>();
      if (!p || !w.hasOneUse())
        return e.emitOpError() << "llm-partition-ep: expects expert weights that are llm.param "
                                  "used only here";
      if (p->hasAttr("llm.shard"))
        return e.emitOpError() << "llm-partition-ep: expert weights already split by tensor "
                                  "parallelism; with expert parallelism they stay whole: give "
                                  "llm-partition-tp a plan with ep > 1 (llm-auto-parallel)";
      auto t = cast<RankedTensorType>(w.getType());
      SmallVector<int64_t> shape(t.getShape());
      shape[0] /= degree;
      p->setAttr("llm.shard", ShardAttr::get(b.getContext(), axisName(axis), /*dim=*/0,
                                             /*blocks=*/1, /*parts=*/degree, /*whole=*/0));
      w.setType(RankedTensorType::get(shape, t.getElementType()));
    }
    SmallVector<int64_t> local(in.getShape());
    local[0] /= degree;
    Type share = withExpertParts(RankedTensorType::get(local, in.getElementType()), degree);
    OpBuilder ob(e);
    Value x = e.getInput();
    e.getInputMutable().assign(EPDispatchOp::create(ob, e.getLoc(), share, x, axis));
    Value y = e.getResult();
    y.setType(share);
    ob.setInsertionPointAfter(e);
    auto back = EPCombineOp::create(ob, e.getLoc(), in, y, axis);
    y.replaceAllUsesExcept(back, back);
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t degree = ep;
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (degree == 0)
      degree = plan ? plan.getEp() : 1;
    if (degree <= 1)
      return;
    if (plan && plan.getDp() % degree != 0) {
      module.emitError() << "llm-partition-ep: ep " << degree << " does not divide dp "
                         << plan.getDp() << " (expert-parallel ranks are data-parallel ranks)";
      return signalPassFailure();
    }
    FunctionOpInterface forward = forwardToPartition(module, "llm-partition-ep");
    if (!forward)
      return signalPassFailure();
    SmallVector<MoEExpertsOp> all;
    forward.walk([&](MoEExpertsOp e) { all.push_back(e); });
    if (all.empty()) {
      module.emitError() << "llm-partition-ep: the plan has ep " << degree
                         << " but the model has no MoE layers";
      return signalPassFailure();
    }
    FailureOr<SymbolRefAttr> axis = gridAxis(module, "ep", degree);
    if (failed(axis))
      return signalPassFailure();
    for (MoEExpertsOp e : all)
      if (failed(partition(e, degree, *axis)))
        return signalPassFailure();
  }
};
} // namespace
