//===- PartitionCP.cpp - context parallelism -------------------------------===//
//
// Each rank of a `cp` group holds two of the sequence's 2 cp chunks;
// attention reads the whole keys and values through llm.cp_gather. See
// Passes.td.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace llmopt::llm {
#define GEN_PASS_DEF_PARTITIONCP
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
struct PartitionCPPass : public llmopt::llm::impl::PartitionCPBase<PartitionCPPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // A misspelt option is refused whatever the degree.
    if (comm != "ring" && comm != "all-gather") {
      module.emitError() << "llm-partition-cp: comm must be ring or all-gather, got '" << comm
                         << "'";
      return signalPassFailure();
    }
    int64_t degree = cp;
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (degree == 0)
      degree = plan ? plan.getCp() : 1;
    if (degree <= 1)
      return;
    FunctionOpInterface forward = forwardToPartition(module, "llm-partition-cp");
    if (!forward)
      return signalPassFailure();
    FailureOr<SymbolRefAttr> grid = gridAxis(module, "cp", degree);
    if (failed(grid))
      return signalPassFailure();
    SymbolRefAttr axis = *grid;
    SmallVector<AttentionOp> all;
    forward.walk([&](AttentionOp a) { all.push_back(a); });
    for (AttentionOp a : all) {
      if (seqParts(a.getQ().getType()) > 1) {
        a.emitOpError() << "llm-partition-cp: attention on sequence-parallel chunks; run "
                           "llm-partition-cp on whole-sequence attention";
        return signalPassFailure();
      }
      if (comm == "ring") {
        a->setAttr("llm.cp_ring", axis);
        continue;
      }
      OpBuilder b(a);
      for (OpOperand *kv : {&a.getKMutable(), &a.getVMutable()}) {
        Value x = kv->get();
        kv->assign(CPGatherOp::create(b, a.getLoc(), withCpParts(x.getType(), degree), x, axis));
      }
    }
    module->setAttr("llm.cp", IntegerAttr::get(IntegerType::get(&getContext(), 64), degree));
  }
};
} // namespace
