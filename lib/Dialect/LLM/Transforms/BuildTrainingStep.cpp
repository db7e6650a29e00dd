//===- BuildTrainingStep.cpp - forward + backward + AdamW -----------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include <cmath>

#include <functional>

namespace llmopt::llm {
#define GEN_PASS_DEF_BUILDTRAININGSTEP
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

/// Replaces every llm.layer by its body, tagging the ops with the layer index.
void inlineLayers(func::FuncOp func) {
  SmallVector<LayerOp> layers(func.getBody().front().getOps<LayerOp>());
  for (LayerOp layer : layers) {
    OpBuilder b(layer);
    IRMapping map;
    Block &body = layer.getBody().front();
    map.map(body.getArgument(0), layer.getInput());
    auto index = b.getI64IntegerAttr(layer.getIndexAttr().getInt());
    for (Operation &op : body.without_terminator()) {
      Operation *clone = b.clone(op, map);
      clone->setAttr("llm.layer", index);
    }
    Value out = map.lookup(cast<YieldOp>(body.getTerminator()).getValue());
    layer.getResult().replaceAllUsesWith(out);
    layer.erase();
  }
}

struct BuildTrainingStepPass
    : public llmopt::llm::impl::BuildTrainingStepBase<BuildTrainingStepPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> found =
        entryFunction(module, LLMDialect::kForwardAttrName, "llm-build-training-step",
                      "import a model (llm-opt config.json) or mark the model function with it");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp forward = *found;
    if (findEntryFunction(module, LLMDialect::kTrainStepAttrName) ||
        module.lookupSymbol("train_step")) {
      module.emitError() << "llm-build-training-step: the module already has a training step";
      return signalPassFailure();
    }
    // (tokens, labels): what the runtime feeds each micro-batch.
    {
      FunctionType ft = forward.getFunctionType();
      auto isIds = [](Type t) {
        auto r = dyn_cast<RankedTensorType>(t);
        return r && r.getRank() == 2 && r.getElementType().isInteger(32);
      };
      if (ft.getNumInputs() != 2 || !isIds(ft.getInput(0)) || !isIds(ft.getInput(1))) {
        forward.emitError() << "llm-build-training-step: @forward must take (tokens, labels), "
                               "two tensor<?x?xi32> [batch, seq]; it takes "
                            << ft.getNumInputs() << " argument"
                            << (ft.getNumInputs() == 1 ? "" : "s");
        return signalPassFailure();
      }
    }
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    if (ret.getNumOperands() != 1 || !ret.getOperand(0).getDefiningOp<CrossEntropyOp>()) {
      forward.emitError() << "llm-build-training-step: @forward must return the loss of "
                             "one llm.cross_entropy";
      return signalPassFailure();
    }

    // @train_step starts as a copy of @forward with its layers inlined.
    OpBuilder mb(module.getContext());
    mb.setInsertionPointAfter(forward);
    auto step = cast<func::FuncOp>(mb.clone(*forward));
    step.setSymName("train_step");
    step->removeAttr(LLMDialect::kForwardAttrName);
    step->setAttr(LLMDialect::kTrainStepAttrName, mb.getUnitAttr());
    inlineLayers(step);
    Block &body = step.getBody().front();
    auto stepRet = cast<func::ReturnOp>(body.getTerminator());
    Value loss = stepRet.getOperand(0);

    // Reverse mode. Backward ops go before the return, in reverse order of
    // the forward ops they differentiate.
    OpBuilder b(stepRet);
    Location loc = step.getLoc();
    llvm::MapVector<Value, Value> grads;
    auto accumulate = [&](Value v, Value g) {
      if (!g)
        return;
      auto [it, inserted] = grads.insert({v, g});
      if (!inserted)
        it->second = AddOp::create(b, loc, g.getType(), it->second, g);
    };
    auto oneTy = RankedTensorType::get({}, b.getF32Type());
    auto seed = arith::ConstantOp::create(b, loc, oneTy,
                                          DenseElementsAttr::get(oneTy, b.getF32FloatAttr(1.0f)));
    // Dynamic loss scaling (fp16): the backward starts from the runtime's
    // loss scale; the conversion unscales and checks the gradients.
    bool fp16 = false;
    body.walk([&](ParamOp p) { fp16 |= p.getType().getElementType().isF16(); });
    if (lossScale != "none" && lossScale != "dynamic" && lossScale != "auto") {
      module.emitError() << "llm-build-training-step: loss-scale must be none, dynamic or auto, "
                            "got '"
                         << lossScale << "'";
      return signalPassFailure();
    }
    if (lossScale == "dynamic" || (lossScale == "auto" && fp16)) {
      seed->setAttr("llm.loss_scale_seed", b.getUnitAttr());
      module->setAttr("llm.loss_scale", LossScalingAttr::get(b.getContext(), LossScaling::dynamic));
    }
    accumulate(loss, seed);

    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      if (op.getBlock() == &body)
        forwardOps.push_back(&op);

    // MoE load-balancing loss: the routers' backward adds its gradient.
    if (moeAuxLoss < 0 || !std::isfinite(double(moeAuxLoss))) {
      module.emitError() << "llm-build-training-step: moe-aux-loss must be a finite "
                            "coefficient >= 0";
      return signalPassFailure();
    }
    if (moeAuxLoss > 0) {
      bool any = false;
      for (Operation *op : forwardOps)
        if (auto r = dyn_cast<MoERouterOp>(op)) {
          r.setAuxLossAttr(b.getF64FloatAttr(moeAuxLoss));
          any = true;
        }
      if (!any) {
        module.emitError() << "llm-build-training-step: moe-aux-loss is set but the model has "
                              "no MoE routers";
        return signalPassFailure();
      }
    }

    // Full activation recomputation (the plan's `recompute`, or this pass's
    // option): a layer's forward ops are cloned right before its backward,
    // which then reads the clones, so the originals' activations die at the
    // end of the forward pass and only layer inputs stay alive. Selective
    // recomputation is handled after the backward is built (below).
    std::string mode = recompute;
    if (mode.empty())
      if (auto plan = module->getAttrOfType<PlanAttr>("llm.plan")) {
        if (plan.getRecomputeLayers() > 0) {
          module.emitError() << "llm-build-training-step: the plan recomputes the first "
                             << plan.getRecomputeLayers()
                             << " layers of each chunk (partial recomputation), which the "
                                "lowering does not run; plan with fix=recompute_layers:0 or "
                                "stack=llm-run-cpu";
          return signalPassFailure();
        }
        mode = stringifyRecomputeLevel(plan.getRecompute()).str();
        if (mode == "per-stage" && plan.getStageRecompute() && !plan.getStageRecompute().empty())
          mode = cast<StringAttr>(plan.getStageRecompute()[0]).getValue().str();
      }
    if (mode.empty())
      mode = "none";
    if (mode != "none" && mode != "selective" && mode != "full") {
      module.emitError() << "llm-build-training-step: recompute must be none, selective or "
                            "full, got '"
                         << mode << "'";
      return signalPassFailure();
    }
    llvm::DenseMap<int64_t, SmallVector<Operation *>> layerOps;
    if (mode == "full")
      for (Operation *op : forwardOps)
        if (auto layer = op->getAttrOfType<IntegerAttr>("llm.layer"))
          if (!isa<ParamOp, arith::ConstantOp>(op))
            layerOps[layer.getInt()].push_back(op);
    llvm::DenseMap<Operation *, Operation *> recomputed;
    SmallVector<Operation *> clones;
    auto recomputeLayer = [&](int64_t layer) {
      IRMapping map;
      for (Operation *op : layerOps[layer]) {
        Operation *clone = b.clone(*op, map);
        clone->setAttr("llm.recompute", b.getUnitAttr());
        recomputed[op] = clone;
        clones.push_back(clone);
      }
      layerOps.erase(layer);
    };

    for (Operation *op : llvm::reverse(forwardOps)) {
      if (isa<ParamOp, arith::ConstantOp>(op))
        continue;
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        auto it = grads.find(r);
        resultGrads.push_back(it == grads.end() ? Value() : it->second);
        any |= bool(resultGrads.back());
      }
      if (!any)
        continue;
      if (auto layer = op->getAttrOfType<IntegerAttr>("llm.layer");
          layer && layerOps.count(layer.getInt()))
        recomputeLayer(layer.getInt());
      // The backward of a recomputed op reads the clone's operands and results.
      Operation *source = recomputed.lookup(op) ? recomputed.lookup(op) : op;
      auto diff = dyn_cast<GradientOpInterface>(source);
      if (!diff) {
        op->emitOpError() << "has no backward yet: llm-build-training-step cannot "
                             "differentiate it";
        return signalPassFailure();
      }
      SmallVector<Value> operandGrads;
      Operation *lastBefore = stepRet->getPrevNode();
      if (failed(diff.emitGradient(b, resultGrads, operandGrads)))
        return signalPassFailure();
      if (operandGrads.size() != op->getNumOperands()) {
        op->emitOpError() << "backward returned " << operandGrads.size() << " gradients for "
                          << op->getNumOperands() << " operands";
        return signalPassFailure();
      }
      for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
        accumulate(operand, g);
      // The ops just created (backward and accumulation) belong to the
      // forward op's layer.
      if (IntegerAttr layer = op->getAttrOfType<IntegerAttr>("llm.layer"))
        for (Operation *n = lastBefore->getNextNode(); n != stepRet.getOperation();
             n = n->getNextNode())
          n->setAttr("llm.layer", layer);
    }

    // Parameters: global norm, then AdamW, in declaration order.
    SmallVector<ParamOp> params;
    for (Operation *op : forwardOps)
      if (auto p = dyn_cast<ParamOp>(op))
        params.push_back(p);
    SmallVector<Value> paramGrads;
    for (ParamOp p : params) {
      auto it = grads.find(p.getResult());
      if (it == grads.end()) {
        p.emitOpError() << "parameter '" << p.getName()
                        << "' gets no gradient: it does not affect the loss";
        return signalPassFailure();
      }
      paramGrads.push_back(it->second);
    }
    Value norm = GlobalNormOp::create(b, loc, oneTy, paramGrads);
    for (auto [p, g] : llvm::zip(params, paramGrads))
      AdamWOp::create(b, loc, p.getNameAttr(), g, norm, b.getF64FloatAttr(lr),
                      b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2), b.getF64FloatAttr(eps),
                      b.getF64FloatAttr(weightDecay), b.getF64FloatAttr(maxGradNorm));

    // Values the backward makes again instead of keeping them from the
    // forward, cloned right before each backward use (their inputs too, when
    // they are themselves recomputable):
    //  - sequence parallelism (Korthikanti et al. 2022, 4.2.2): the gathered
    //    input of a column-parallel linear;
    //  - selective recomputation with fused attention (the planner's model,
    //    torchtitan's op-level policy): norm outputs, the MLP activation
    //    output, and the tp_copy of a norm output.
    Operation *lossDef = loss.getDefiningOp();
    bool selective = mode == "selective";
    std::function<bool(Operation *)> recomputable = [&](Operation *op) -> bool {
      if (!op || op->getBlock() != &body || !lossDef || !op->isBeforeInBlock(lossDef))
        return false;
      if (auto g = dyn_cast<SPGatherOp>(op))
        return !g.getReplicated();
      if (!selective)
        return false;
      if (isa<RMSNormOp, LayerNormOp, GeluOp, SwiGLUOp>(op))
        return op->hasAttr("llm.layer");
      if (auto c = dyn_cast<TPCopyOp>(op))
        return recomputable(c.getInput().getDefiningOp());
      return false;
    };
    std::function<Value(Value, Operation *)> remake = [&](Value v, Operation *before) -> Value {
      Operation *def = v.getDefiningOp();
      if (!recomputable(def))
        return v;
      OpBuilder ub(before);
      IRMapping map;
      for (Value operand : def->getOperands())
        map.map(operand, remake(operand, before));
      Operation *again = ub.clone(*def, map);
      again->setAttr("llm.recompute", ub.getUnitAttr());
      if (Attribute layer = before->getAttr("llm.layer"))
        again->setAttr("llm.layer", layer);
      return again->getResult(cast<OpResult>(v).getResultNumber());
    };
    if (lossDef) {
      SmallVector<Operation *> backward;
      for (Operation *op = lossDef->getNextNode(); op && op != stepRet.getOperation();
           op = op->getNextNode())
        backward.push_back(op);
      for (Operation *user : backward) {
        if (isa<GlobalNormOp, AdamWOp>(user) || user->hasAttr("llm.recompute"))
          continue;
        for (OpOperand &use : user->getOpOperands())
          if (recomputable(use.get().getDefiningOp()))
            use.set(remake(use.get(), user));
      }
    }

    // Clones whose results no backward op reads are dropped.
    for (Operation *clone : llvm::reverse(clones))
      if (clone->use_empty())
        clone->erase();

    func::ReturnOp::create(b, loc, ValueRange{loss, norm});
    stepRet.erase();
    step.setType(FunctionType::get(module.getContext(), step.getArgumentTypes(), {oneTy, oneTy}));
  }
};
} // namespace
