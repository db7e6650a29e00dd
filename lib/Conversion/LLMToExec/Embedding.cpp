//===- Embedding.cpp - token and position embeddings, rotary ------------===//

#include "Lowering.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::lowering;

/// Hugging Face's rope types: "linear" divides every frequency by the factor,
/// "llama3" scales by wavelength, "dynamic" (NTK) changes nothing up to the
/// model's length; the others are refused rather than trained with other
/// positions than the model's.
static LogicalResult lowerRotary(RotaryOp r, Lowering &l) {
  SmallVector<NamedAttribute> p = {l.i64("head_dim", r.getHeadDimAttr().getInt()),
                                   l.f64("theta", r.getTheta().convertToDouble()),
                                   l.flag("inverse", r.getInverse())};
  auto num = [&](StringRef key, double dflt) { return r.getScalingNumber(key, dflt); };
  StringRef type = r.getRopeType();
  if (type == "linear") {
    p.push_back(l.f64("linear_factor", num("factor", 1)));
  } else if (type == "llama3") {
    p.push_back(l.f64("factor", num("factor", 0)));
    p.push_back(l.f64("low_freq_factor", num("low_freq_factor", 1)));
    p.push_back(l.f64("high_freq_factor", num("high_freq_factor", 4)));
    p.push_back(l.f64("original_max_positions", num("original_max_position_embeddings", 8192)));
  } else if (type == "dynamic") {
    int64_t cp = 1;
    if (auto plan = r->getParentOfType<ModuleOp>()->getAttrOfType<PlanAttr>("llm.plan"))
      cp = plan.getCp();
    int64_t seq = cast<ShapedType>(r.getQ().getType()).getDimSize(1) * cp;
    double limit = num("max_position_embeddings", 0);
    if (limit <= 0 || double(seq) > limit)
      return r.emitOpError() << "rope_scaling type \"dynamic\" (NTK) changes the frequencies "
                                "beyond the model's "
                             << int64_t(limit) << " positions, which the lowering does not do: "
                             << "train at a sequence of at most " << int64_t(limit) << " (got "
                             << seq << ")";
  } else if (type != "default") {
    return r.emitOpError() << "rope_scaling type \"" << type
                           << "\" is not lowered (linear, dynamic up to the model's "
                              "length and llama3 are): the model would train with other "
                              "positions than it was trained with";
  }
  return l.kernel(r.getLoc(), "rotary", {r.getQ(), r.getK()}, {r.getQOut(), r.getKOut()}, p);
}

/// A vocabulary-parallel embedding learns its rows' range from the axis.
static SmallVector<NamedAttribute> vocabShard(Operation *op, Lowering &l) {
  SmallVector<NamedAttribute> ps;
  if (auto axis = op->getAttrOfType<SymbolRefAttr>("llm.vocab_axis"))
    ps.push_back(l.text("shard", axisName(axis)));
  return ps;
}

void llmopt::lowering::populateEmbeddingLowerings(LoweringPatternSet &set) {
  set.add<EmbeddingOp>([](EmbeddingOp e, Lowering &l) {
    return l.kernel(e.getLoc(), "embedding_fwd", {e.getTokens(), e.getTable()}, e.getResult(),
                    vocabShard(e, l));
  });
  set.add<EmbeddingGradOp>([](EmbeddingGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "embedding_bwd", {g.getTokens(), g.getGrad()}, g.getResult(),
                    vocabShard(g, l));
  });
  set.add<PositionEmbeddingOp>([](PositionEmbeddingOp e, Lowering &l) {
    return l.kernel(e.getLoc(), "position_embedding_fwd", {e.getInput(), e.getTable()},
                    e.getResult());
  });
  set.add<PositionEmbeddingGradOp>([](PositionEmbeddingGradOp g, Lowering &l) {
    return l.kernel(g.getLoc(), "position_embedding_bwd", g.getGrad(), g.getResult());
  });
  set.add<RotaryOp>(lowerRotary);
}
