//===- PartitionPP.cpp - pipeline stages of the training step --------------===//
//
// See Passes.td. Stage -1 marks the per-step tail (global norm, AdamW),
// which every stage runs for its own parameters.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace llmopt::llm {
#define GEN_PASS_DEF_PARTITIONPP
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

struct PartitionPPPass : public llmopt::llm::impl::PartitionPPBase<PartitionPPPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (!plan || plan.getPp() <= 1)
      return;
    int64_t pp = plan.getPp();
    int64_t vpp = plan.getVpp();
    FailureOr<func::FuncOp> found =
        entryFunction(module, LLMDialect::kTrainStepAttrName, "llm-partition-pp",
                      "run llm-build-training-step first");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp func = *found;
    ArrayRef<int64_t> counts = plan.getStageLayers().asArrayRef();
    if (int64_t(counts.size()) != pp) {
      module.emitError() << "llm-partition-pp: the plan has " << counts.size()
                         << " stage layer counts for pp " << pp;
      return signalPassFailure();
    }
    SmallVector<int64_t> stageOfLayer, chunkOfLayer;
    if (vpp > 1) {
      // Interleaved stages (Narayanan et al. 2021): the layers form pp x vpp
      // equal chunks; chunk v runs on stage v mod pp.
      int64_t layers = 0;
      for (int64_t n : counts)
        layers += n;
      if (layers % (pp * vpp) != 0 || !llvm::all_equal(counts)) {
        module.emitError() << "llm-partition-pp: interleaved stages need the " << layers
                           << " layers to split evenly into pp x vpp = " << pp * vpp
                           << " chunks; plan with fix=vpp:1 or a divisor";
        return signalPassFailure();
      }
      int64_t chunk = layers / (pp * vpp);
      for (int64_t l = 0; l < layers; ++l) {
        stageOfLayer.push_back((l / chunk) % pp);
        chunkOfLayer.push_back((l / chunk) / pp);
      }
    } else {
      for (auto [s, n] : llvm::enumerate(counts))
        for (int64_t i = 0; i < n; ++i)
          stageOfLayer.push_back(int64_t(s));
    }

    Block &body = func.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    // Positions of the first and last op that belongs to a layer.
    int64_t first = -1, last = -1;
    for (auto [i, op] : llvm::enumerate(ops))
      if (op->hasAttr("llm.layer")) {
        if (first < 0)
          first = int64_t(i);
        last = int64_t(i);
      }
    if (first < 0) {
      func.emitError() << "llm-partition-pp: no layers to split into stages";
      return signalPassFailure();
    }
    Builder b(module.getContext());
    auto setStage = [&](Operation *op, int64_t s) {
      op->setAttr("llm.stage", b.getI64IntegerAttr(s));
    };
    auto stageOf = [&](Operation *op) -> int64_t {
      auto a = op->getAttrOfType<IntegerAttr>("llm.stage");
      return a ? a.getInt() : -2;
    };
    // Interleaved stages: the model chunk (0 .. vpp-1) of the stage an op
    // belongs to, so that the schedule can run one chunk at a time.
    auto setChunk = [&](Operation *op, int64_t c) {
      op->setAttr("llm.chunk", b.getI64IntegerAttr(c));
    };
    auto chunkOf = [&](Operation *op) -> int64_t {
      auto a = op->getAttrOfType<IntegerAttr>("llm.chunk");
      return a ? a.getInt() : 0;
    };
    for (auto [i, op] : llvm::enumerate(ops)) {
      if (isa<ParamOp, arith::ConstantOp>(op))
        continue;
      if (isa<GlobalNormOp, AdamWOp>(op)) {
        setStage(op, -1);
        continue;
      }
      if (auto layer = op->getAttrOfType<IntegerAttr>("llm.layer")) {
        int64_t l = layer.getInt();
        if (l < 0 || l >= int64_t(stageOfLayer.size())) {
          op->emitOpError() << "llm-partition-pp: layer " << l
                            << " is outside the plan's stage_layers";
          return signalPassFailure();
        }
        setStage(op, stageOfLayer[size_t(l)]);
        if (vpp > 1)
          setChunk(op, chunkOfLayer[size_t(l)]);
        continue;
      }
      // Before the layers: embeddings; between the last forward and the first
      // backward layer op: the head and its backward; after: embedding
      // backward.
      int64_t idx = int64_t(i);
      bool head = idx > first && idx < last;
      setStage(op, head ? pp - 1 : 0);
      if (vpp > 1)
        setChunk(op, head ? vpp - 1 : 0);
    }
    // Parameters and constants live where they are used.
    for (Operation *op : ops) {
      if (!isa<ParamOp, arith::ConstantOp>(op))
        continue;
      llvm::SmallSetVector<int64_t, 2> stages;
      for (Operation *user : op->getUsers())
        if (stageOf(user) >= 0)
          stages.insert(stageOf(user));
      if (stages.empty()) {
        setStage(op, 0);
        continue;
      }
      if (auto param = dyn_cast<ParamOp>(op); param && stages.size() > 1) {
        // A weight shared by the first and the last stage (an LM head tied
        // to the token embedding, as Megatron's embedding group): each stage
        // keeps a copy, computes its part of the gradient, and the step sums
        // the parts over the two stages (axis "pp_tied") before both apply
        // the same update.
        llvm::SmallSetVector<int64_t, 2> ends;
        ends.insert(0);
        ends.insert(pp - 1);
        if (stages.size() != 2 ||
            !llvm::all_of(stages, [&](int64_t s) { return ends.contains(s); })) {
          op->emitOpError() << "llm-partition-pp: parameter '" << param.getName()
                            << "' is used by stages " << stages[0] << " and " << stages[1]
                            << "; only the first and last stage may share a weight";
          return signalPassFailure();
        }
        // AdamW names its parameter (it does not use the param's value).
        AdamWOp update;
        for (AdamWOp a : body.getOps<AdamWOp>())
          if (a.getName() == param.getName())
            update = a;
        auto sum = update ? update.getGrad().getDefiningOp<AddOp>() : AddOp();
        if (!sum ||
            stageOf(sum.getLhs().getDefiningOp()) == stageOf(sum.getRhs().getDefiningOp())) {
          op->emitOpError() << "llm-partition-pp: the gradient of shared parameter '"
                            << param.getName() << "' is not a sum of the two stages' parts";
          return signalPassFailure();
        }
        // The sum happens in the step (over "pp_tied"), not per micro-batch.
        setStage(sum, -1);
        sum->setAttr("llm.pp_tied_sum", b.getUnitAttr());
        OpBuilder ob(op);
        ob.setInsertionPointAfter(op);
        Operation *copy = ob.clone(*op);
        setStage(op, 0);
        setStage(copy, pp - 1);
        op->setAttr("llm.pp_tied", b.getUnitAttr());
        copy->setAttr("llm.pp_tied", b.getUnitAttr());
        op->getResult(0).replaceUsesWithIf(
            copy->getResult(0), [&](OpOperand &use) { return stageOf(use.getOwner()) == pp - 1; });
        continue;
      }
      setStage(op, stages[0]);
      if (vpp > 1)
        for (Operation *user : op->getUsers())
          if (stageOf(user) == stages[0]) {
            setChunk(op, chunkOf(user));
            break;
          }
      // A constant used on several stages gets a copy on each.
      for (int64_t s : llvm::drop_begin(stages)) {
        OpBuilder ob(op);
        Operation *copy = ob.clone(*op);
        setStage(copy, s);
        op->getResult(0).replaceUsesWithIf(
            copy->getResult(0), [&](OpOperand &use) { return stageOf(use.getOwner()) == s; });
        if (vpp > 1)
          for (Operation *user : copy->getUsers()) {
            setChunk(copy, chunkOf(user));
            break;
          }
      }
    }
    // Values used on another stage travel there right after they are made.
    for (Operation *op : ops) {
      int64_t from = stageOf(op);
      if (from < 0 || isa<ParamOp>(op))
        continue;
      for (Value r : op->getResults()) {
        llvm::SmallSetVector<int64_t, 2> targets;
        for (Operation *user : r.getUsers()) {
          int64_t to = stageOf(user);
          if (to >= 0 && to != from)
            targets.insert(to);
        }
        OpBuilder ob(op->getContext());
        ob.setInsertionPointAfter(op);
        for (int64_t to : targets) {
          auto t = PPTransferOp::create(ob, op->getLoc(), r.getType(), r,
                                        ob.getI64IntegerAttr(from), ob.getI64IntegerAttr(to));
          setStage(t, to);
          if (vpp > 1) {
            t->setAttr("llm.from_chunk", b.getI64IntegerAttr(chunkOf(op)));
            for (Operation *user : r.getUsers())
              if (user != t && stageOf(user) == to) {
                t->setAttr("llm.to_chunk", b.getI64IntegerAttr(chunkOf(user)));
                break;
              }
          }
          r.replaceUsesWithIf(t.getResult(), [&](OpOperand &use) {
            return use.getOwner() != t && stageOf(use.getOwner()) == to;
          });
          ob.setInsertionPointAfter(t);
        }
      }
    }
    module->setAttr("llm.pp", b.getI64IntegerAttr(pp));
  }
};
} // namespace
