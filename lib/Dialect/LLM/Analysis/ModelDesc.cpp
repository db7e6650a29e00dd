//===- ModelDesc.cpp - the planner's view of an llm module ----------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelDesc.h"
#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
enum class LinearRole { QKV, Out, Mlp };

/// What a linear of a layer is for: it feeds the attention's q, k or v
/// (through splits and the rotary embedding), it reads the attention's
/// output, or it belongs to the MLP.
LinearRole linearRole(LinearOp lin) {
  if (lin.getInput().getDefiningOp<AttentionOp>())
    return LinearRole::Out;
  SmallVector<Value> work{lin.getResult()};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<AttentionOp>(user))
        return LinearRole::QKV;
      if (isa<SplitOp, RotaryOp>(user))
        llvm::append_range(work, user->getResults());
    }
  }
  return LinearRole::Mlp;
}
} // namespace

FailureOr<cost::ModelDesc> llmopt::llm::extractModelDesc(func::FuncOp func) {
  CostContext ctx;
  ctx.seqLen = 1;
  FailureOr<ModelStats> stats = computeModelStats(func, ctx);
  if (failed(stats))
    return failure();

  cost::ModelDesc m;
  m.name = stats->name.empty() ? func.getSymName().str() : stats->name;
  m.tiedEmbeddings = stats->tiedEmbeddings;
  m.embeddingParams = double(stats->paramsEmbedding);
  m.headParams = double(stats->paramsLMHead);
  m.finalNormParams = double(stats->paramsOther);

  func.walk([&](Operation *op) {
    if (auto e = dyn_cast<EmbeddingOp>(op)) {
      auto t = cast<RankedTensorType>(e.getTable().getType());
      m.vocab = t.getDimSize(0);
      m.hidden = t.getDimSize(1);
    } else if (auto p = dyn_cast<PositionEmbeddingOp>(op)) {
      m.positions = cast<RankedTensorType>(p.getTable().getType()).getDimSize(0);
    } else if (auto r = dyn_cast<RotaryOp>(op)) {
      m.ropeTheta = r.getTheta().convertToDouble();
      if (r.getScalingAttr())
        m.ropeScaling = r.getRopeType().str();
      m.ropeFactor = r.getScalingNumber("factor", 0);
      m.ropeLowFreqFactor = r.getScalingNumber("low_freq_factor", 0);
      m.ropeHighFreqFactor = r.getScalingNumber("high_freq_factor", 0);
      m.ropeOriginalPositions = int64_t(r.getScalingNumber("original_max_position_embeddings", 0));
    } else if (auto h = dyn_cast<LMHeadOp>(op)) {
      auto t = cast<RankedTensorType>(h.getWeight().getType());
      m.vocab = t.getDimSize(0);
      m.hidden = t.getDimSize(1);
    }
  });
  if (m.vocab == 0)
    return func.emitError() << "the planner needs an llm.embedding or llm.lm_head to "
                               "know the vocabulary";

  for (LayerOp layer : func.getBody().front().getOps<LayerOp>()) {
    cost::LayerDesc l;
    l.hidden = cast<RankedTensorType>(layer.getInput().getType()).getDimSize(2);
    int attentions = 0, mlps = 0;
    WalkResult res = layer.getBody().walk([&](Operation *op) -> WalkResult {
      if (auto n = dyn_cast<RMSNormOp>(op)) {
        l.norm = "rms";
        l.normEps = n.getEps().convertToDouble();
      } else if (auto n = dyn_cast<LayerNormOp>(op)) {
        l.norm = "layer";
        l.normEps = n.getEps().convertToDouble();
      } else if (auto lin = dyn_cast<LinearOp>(op); lin && lin.getBias()) {
        switch (linearRole(lin)) {
        case LinearRole::QKV:
          l.qkvBias = true;
          break;
        case LinearRole::Out:
          l.outBias = true;
          break;
        case LinearRole::Mlp:
          l.mlpBias = true;
          break;
        }
      } else if (auto r = dyn_cast<MoERouterOp>(op)) {
        l.routerNormalize = r.getNormalize();
        if (FloatAttr aux = r.getAuxLossAttr())
          l.auxLoss = aux.getValueAsDouble();
      }
      if (auto a = dyn_cast<AttentionOp>(op)) {
        ++attentions;
        l.heads = a.getNumHeadsAttr().getInt();
        l.kvHeads = a.getNumKvHeadsAttr().getInt();
        l.headDim = a.getHeadDimAttr().getInt();
        l.causal = a.getCausal();
        if (IntegerAttr w = a.getWindowAttr())
          l.window = w.getInt();
      } else if (auto e = dyn_cast<MoEExpertsOp>(op)) {
        ++mlps;
        l.experts = e.getNumExperts();
        l.ffn = e.getFfnSize();
        l.gatedMlp = e.getActivation() == ExpertActivation::swiglu;
        l.activation = l.gatedMlp ? "swiglu" : "gelu";
        if (auto d = e.getInput().getDefiningOp<MoEDispatchOp>()) {
          l.topK = cast<RankedTensorType>(d.getIndices().getType()).getDimSize(2);
          l.capacityFactor = d.getCapacityFactor().convertToDouble();
        } else {
          return e.emitOpError() << "expert input must come from llm.moe_dispatch for "
                                    "the planner to know top_k";
        }
      } else if (auto s = dyn_cast<SwiGLUOp>(op)) {
        ++mlps;
        l.gatedMlp = true;
        l.activation = "swiglu";
        l.ffn = s.getType().getDimSize(2);
      } else if (auto g = dyn_cast<GeluOp>(op)) {
        ++mlps;
        l.activation = g.getApproximate() == GeluApprox::tanh ? "gelu_tanh" : "gelu";
        l.ffn = g.getType().getDimSize(2);
      } else if (auto p = dyn_cast<ParamOp>(op)) {
        (p.isExpertStack() ? l.expertParams : l.denseParams) += double(p.getNumElements());
      }
      return WalkResult::advance();
    });
    if (res.wasInterrupted())
      return failure();
    if (attentions != 1 || mlps != 1)
      return layer.emitOpError()
             << "the planner models a layer as one attention and one MLP (or MoE) "
                "block; this one has "
             << attentions << " attention and " << mlps << " MLP blocks";
    m.layers.push_back(l);
  }
  if (m.layers.empty())
    return func.emitError() << "the model has no llm.layer: nothing to parallelize";
  return m;
}
