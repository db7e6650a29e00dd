//===- LLMDialect.cpp - llm dialect ---------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

using namespace mlir;
using namespace llmopt::llm;

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "llmopt/Dialect/LLM/IR/LLMOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMAttrs.cpp.inc"

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t dp,
                               int64_t tp, int64_t pp, int64_t vpp, int64_t cp, int64_t ep,
                               BoolAttr sp, int64_t zero, BoolAttr offload,
                               StringAttr recompute, ArrayAttr stageRecompute,
                               int64_t microBatch,
                               int64_t numMicroBatches, int64_t seqLen, StringAttr schedule,
                               StringAttr placement, DenseI64ArrayAttr stageLayers,
                               FloatAttr stepTime, int64_t peakMemoryBytes, int64_t shard,
                               int64_t recomputeLayers) {
  if (shard < 0 || (shard > 0 && (zero == 0 || shard >= dp * cp || (dp * cp) % shard)))
    return emitError() << "plan: shard must be 0, or a divisor of dp x cp = " << dp * cp
                       << " smaller than it with zero >= 1, got shard " << shard
                       << " with zero " << zero;
  for (auto [name, v] : {std::pair<const char *, int64_t>{"dp", dp},
                         {"tp", tp},
                         {"pp", pp},
                         {"vpp", vpp},
                         {"cp", cp},
                         {"ep", ep},
                         {"micro_batch", microBatch},
                         {"num_micro_batches", numMicroBatches},
                         {"seq_len", seqLen}})
    if (v < 1)
      return emitError() << "plan: " << name << " must be positive, got " << v;
  if (zero < 0 || zero > 3)
    return emitError() << "plan: zero must be 0, 1, 2 or 3, got " << zero;
  if (!sp || !offload || !recompute || !stageRecompute || !schedule || !placement ||
      !stageLayers || !stepTime)
    return emitError() << "plan: every field needs a value";
  StringRef rc = recompute.getValue(), sched = schedule.getValue();
  if (recomputeLayers < 0 || (recomputeLayers > 0 && rc != "full"))
    return emitError() << "plan: recompute_layers must be 0, or positive with recompute = "
                          "\"full\", got "
                       << recomputeLayers << " with \"" << rc << "\"";
  auto isLevel = [](StringRef r) {
    return r == "none" || r == "selective" || r == "full";
  };
  if (!isLevel(rc) && rc != "per-stage")
    return emitError() << "plan: recompute must be none, selective, full or per-stage, "
                          "got '"
                       << rc << "'";
  if (rc == "per-stage") {
    if (int64_t(stageRecompute.size()) != pp)
      return emitError() << "plan: per-stage recompute needs one level per stage, got "
                         << stageRecompute.size() << " for pp " << pp;
    for (Attribute a : stageRecompute) {
      auto level = dyn_cast<StringAttr>(a);
      if (!level || !isLevel(level.getValue()))
        return emitError() << "plan: stage_recompute entries must be \"none\", "
                              "\"selective\" or \"full\"";
    }
  } else if (!stageRecompute.empty()) {
    return emitError() << "plan: stage_recompute is only for recompute = \"per-stage\"";
  }
  if (sched != "none" && sched != "gpipe" && sched != "1f1b" &&
      sched != "interleaved-1f1b")
    return emitError() << "plan: schedule must be none, gpipe, 1f1b or "
                          "interleaved-1f1b, got '"
                       << sched << "'";
  if ((pp == 1) != (sched == "none"))
    return emitError() << "plan: schedule '" << sched << "' does not match pp " << pp;
  if (vpp > 1 && sched != "interleaved-1f1b")
    return emitError() << "plan: vpp " << vpp << " needs the interleaved-1f1b schedule";
  if (int64_t(stageLayers.size()) != pp)
    return emitError() << "plan: stage_layers has " << stageLayers.size()
                       << " entries for pp " << pp;
  for (int64_t n : stageLayers.asArrayRef())
    if (n < 1)
      return emitError() << "plan: every stage needs at least one layer";
  if (placement.getValue() != "tp-cp-dp-pp" && placement.getValue() != "tp-cp-pp-dp")
    return emitError() << "plan: placement must be tp-cp-dp-pp or tp-cp-pp-dp";
  if (peakMemoryBytes < 0 || stepTime.getValueAsDouble() < 0)
    return emitError() << "plan: predictions must not be negative";
  return success();
}

LogicalResult LLMDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() != kTrainStepAttrName)
    return success();
  if (!isa<UnitAttr>(attr.getValue()))
    return op->emitOpError() << "'" << kTrainStepAttrName << "' must be a unit attribute";
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (!func)
    return op->emitOpError() << "'" << kTrainStepAttrName << "' marks a function";
  // Every update names a parameter of the function with its gradient's type:
  // one walk for the parameters, one for the updates.
  llvm::StringMap<Type> params;
  func->walk([&](ParamOp p) { params.try_emplace(p.getName(), p.getType()); });
  WalkResult r = func->walk([&](AdamWOp u) {
    auto it = params.find(u.getName());
    if (it != params.end() && it->second == u.getGrad().getType())
      return WalkResult::advance();
    u.emitOpError() << "updates '" << u.getName()
                    << "', which is no llm.param of that type in this function";
    return WalkResult::interrupt();
  });
  return failure(r.wasInterrupted());
}

void LLMDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "llmopt/Dialect/LLM/IR/LLMAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "llmopt/Dialect/LLM/IR/LLMOps.cpp.inc"
      >();
}
