//===- LLMDialect.cpp - llm dialect ---------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

using namespace mlir;
using namespace llmopt::llm;

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

#include "llmopt/Dialect/LLM/IR/LLMOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "llmopt/Dialect/LLM/IR/LLMAttrs.cpp.inc"

LogicalResult ShardAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef axis,
                                int64_t dim, int64_t blocks, int64_t parts, int64_t whole) {
  if (axis != "tp" && axis != "ep")
    return emitError() << "#llm.shard: parameters split over tp or ep, not '" << axis << "'";
  if (dim < 0 || blocks < 1 || parts < 1 || whole < 0)
    return emitError() << "#llm.shard: dim must be non-negative, blocks and parts positive, "
                          "whole 0 or positive";
  return success();
}

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t dp, int64_t tp,
                               int64_t pp, int64_t vpp, int64_t cp, int64_t ep, BoolAttr sp,
                               int64_t zero, BoolAttr offload, RecomputeLevel recompute,
                               ArrayAttr stageRecompute, int64_t microBatch,
                               int64_t numMicroBatches, int64_t seqLen, PipelineSchedule schedule,
                               Placement placement, DenseI64ArrayAttr stageLayers,
                               FloatAttr stepTime, int64_t peakMemoryBytes, int64_t shard,
                               int64_t recomputeLayers) {
  if (shard < 0 || (shard > 0 && (zero == 0 || shard >= dp * cp || (dp * cp) % shard)))
    return emitError() << "plan: shard must be 0, or a divisor of dp x cp = " << dp * cp
                       << " smaller than it with zero >= 1, got shard " << shard << " with zero "
                       << zero;
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
  if (!sp || !offload || !stageRecompute || !stageLayers || !stepTime)
    return emitError() << "plan: every field needs a value";
  StringRef rc = stringifyRecomputeLevel(recompute), sched = stringifyPipelineSchedule(schedule);
  if (recomputeLayers < 0 || (recomputeLayers > 0 && recompute != RecomputeLevel::full))
    return emitError() << "plan: recompute_layers must be 0, or positive with recompute = "
                          "\"full\", got "
                       << recomputeLayers << " with \"" << rc << "\"";
  if (recompute == RecomputeLevel::per_stage) {
    if (int64_t(stageRecompute.size()) != pp)
      return emitError() << "plan: per-stage recompute needs one level per stage, got "
                         << stageRecompute.size() << " for pp " << pp;
    for (Attribute a : stageRecompute) {
      auto level = dyn_cast<StringAttr>(a);
      std::optional<RecomputeLevel> l =
          level ? symbolizeRecomputeLevel(level.getValue()) : std::nullopt;
      if (!l || *l == RecomputeLevel::per_stage)
        return emitError() << "plan: stage_recompute entries must be \"none\", "
                              "\"selective\" or \"full\"";
    }
  } else if (!stageRecompute.empty()) {
    return emitError() << "plan: stage_recompute is only for recompute = \"per-stage\"";
  }
  if ((pp == 1) != (schedule == PipelineSchedule::none))
    return emitError() << "plan: schedule '" << sched << "' does not match pp " << pp;
  if (vpp > 1 && schedule != PipelineSchedule::interleaved_1f1b)
    return emitError() << "plan: vpp " << vpp << " needs the interleaved-1f1b schedule";
  if (int64_t(stageLayers.size()) != pp)
    return emitError() << "plan: stage_layers has " << stageLayers.size() << " entries for pp "
                       << pp;
  for (int64_t n : stageLayers.asArrayRef())
    if (n < 1)
      return emitError() << "plan: every stage needs at least one layer";
  if (peakMemoryBytes < 0 || stepTime.getValueAsDouble() < 0)
    return emitError() << "plan: predictions must not be negative";
  return success();
}

namespace {
/// What a discardable `llm.*` attribute holds.
enum class AttrKind {
  Unit,
  Count,
  Index,
  Stage,
  Text,
  Counts,
  Offsets,
  Flags,
  Shard,
  Plan,
  LossScaling,
  Axis
};
/// Where it may sit.
enum class AttrPlace { Module, Function, Param, Op };

struct DeclaredAttr {
  llvm::StringLiteral name;
  AttrKind kind;
  AttrPlace place;
};

/// Every discardable attribute of the llm dialect: who sets it in
/// docs/lowering.md's pass table; anything else named `llm.*` is refused.
constexpr DeclaredAttr kDeclaredAttrs[] = {
    // The module: the importers' model facts and the planner's decisions.
    {"llm.name", AttrKind::Text, AttrPlace::Module},
    {"llm.architecture", AttrKind::Text, AttrPlace::Module},
    {"llm.seq_len", AttrKind::Count, AttrPlace::Module},
    {"llm.plan", AttrKind::Plan, AttrPlace::Module},
    {"llm.plan_activation_bytes", AttrKind::Counts, AttrPlace::Module},
    {"llm.plan_in_flight", AttrKind::Counts, AttrPlace::Module},
    {"llm.micro_batch", AttrKind::Count, AttrPlace::Module},
    {"llm.pp", AttrKind::Count, AttrPlace::Module},
    {"llm.cp", AttrKind::Count, AttrPlace::Module},
    {"llm.loss_scale", AttrKind::LossScaling, AttrPlace::Module},
    // Functions: the entry points and llm-plan-memory's sizes.
    {"llm.forward", AttrKind::Unit, AttrPlace::Function},
    {"llm.train_step", AttrKind::Unit, AttrPlace::Function},
    {"llm.arena_bytes", AttrKind::Index, AttrPlace::Function},
    {"llm.state_bytes", AttrKind::Index, AttrPlace::Function},
    {"llm.stage_arena_bytes", AttrKind::Counts, AttrPlace::Function},
    {"llm.stage_stash_bytes", AttrKind::Counts, AttrPlace::Function},
    // Parameters: their partitioning.
    {"llm.shard", AttrKind::Shard, AttrPlace::Param},
    {"llm.sp_partial", AttrKind::Unit, AttrPlace::Param},
    {"llm.zero3", AttrKind::Unit, AttrPlace::Param},
    // Ops: placement, recomputation, axes and memory.
    {"llm.layer", AttrKind::Index, AttrPlace::Op},
    {"llm.stage", AttrKind::Stage, AttrPlace::Op},
    {"llm.chunk", AttrKind::Index, AttrPlace::Op},
    {"llm.from_chunk", AttrKind::Index, AttrPlace::Op},
    {"llm.to_chunk", AttrKind::Index, AttrPlace::Op},
    {"llm.recompute", AttrKind::Unit, AttrPlace::Op},
    {"llm.pp_tied", AttrKind::Unit, AttrPlace::Op},
    {"llm.pp_tied_sum", AttrKind::Unit, AttrPlace::Op},
    {"llm.loss_scale_seed", AttrKind::Unit, AttrPlace::Op},
    {"llm.prefetch", AttrKind::Unit, AttrPlace::Op},
    {"llm.vocab_axis", AttrKind::Axis, AttrPlace::Op},
    {"llm.cp_ring", AttrKind::Axis, AttrPlace::Op},
    {"llm.offsets", AttrKind::Offsets, AttrPlace::Op},
    {"llm.stashed", AttrKind::Flags, AttrPlace::Op},
};

const char *describe(AttrKind k) {
  switch (k) {
  case AttrKind::Unit:
    return "a unit attribute";
  case AttrKind::Count:
    return "a positive i64";
  case AttrKind::Index:
    return "a non-negative i64";
  case AttrKind::Stage:
    return "a pipeline stage (an i64 >= 0, or -1: every stage)";
  case AttrKind::Text:
    return "a string";
  case AttrKind::Counts:
    return "an array<i64> of non-negative values";
  case AttrKind::Offsets:
    return "an array<i64> of offsets (-1: no buffer)";
  case AttrKind::Flags:
    return "an array<i1>";
  case AttrKind::Shard:
    return "an #llm.shard";
  case AttrKind::Plan:
    return "an #llm.plan";
  case AttrKind::LossScaling:
    return "an #llm.loss_scaling (none or dynamic)";
  case AttrKind::Axis:
    return "a mesh axis @grid::@axis";
  }
  return "";
}

/// Whether `a` holds what `kind` says.
bool holds(AttrKind kind, Attribute a) {
  auto i64 = [](Attribute x, int64_t lo) {
    auto i = dyn_cast_or_null<IntegerAttr>(x);
    return i && i.getType().isInteger(64) && i.getInt() >= lo;
  };
  switch (kind) {
  case AttrKind::Unit:
    return isa<UnitAttr>(a);
  case AttrKind::Count:
    return i64(a, 1);
  case AttrKind::Index:
    return i64(a, 0);
  case AttrKind::Stage:
    return i64(a, -1);
  case AttrKind::Text:
    return isa<StringAttr>(a);
  case AttrKind::Counts: {
    auto arr = dyn_cast<DenseI64ArrayAttr>(a);
    return arr && llvm::all_of(arr.asArrayRef(), [](int64_t v) { return v >= 0; });
  }
  case AttrKind::Offsets: {
    auto arr = dyn_cast<DenseI64ArrayAttr>(a);
    return arr && llvm::all_of(arr.asArrayRef(), [](int64_t v) { return v >= -1; });
  }
  case AttrKind::Flags:
    return isa<DenseBoolArrayAttr>(a);
  case AttrKind::Shard:
    return isa<ShardAttr>(a);
  case AttrKind::Plan:
    return isa<PlanAttr>(a);
  case AttrKind::LossScaling:
    return isa<LossScalingAttr>(a);
  case AttrKind::Axis: {
    auto ref = dyn_cast<SymbolRefAttr>(a);
    return ref && ref.getNestedReferences().size() == 1;
  }
  }
  return false;
}
} // namespace

LogicalResult LLMDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  const DeclaredAttr *decl =
      llvm::find_if(kDeclaredAttrs, [&](const DeclaredAttr &d) { return d.name == name; });
  if (decl == std::end(kDeclaredAttrs))
    return op->emitOpError() << "carries '" << name
                             << "', which the llm dialect does not declare (a misspelling? "
                                "LLMDialect.cpp lists its discardable attributes)";
  bool placed = true;
  switch (decl->place) {
  case AttrPlace::Module:
    placed = isa<ModuleOp>(op);
    break;
  case AttrPlace::Function:
    placed = isa<FunctionOpInterface>(op);
    break;
  case AttrPlace::Param:
    placed = isa<ParamOp>(op);
    break;
  case AttrPlace::Op:
    placed = !isa<ModuleOp>(op);
    break;
  }
  if (!placed) {
    static const char *where[] = {"a module", "a function", "an llm.param", "an op"};
    return op->emitOpError() << "'" << name << "' belongs on " << where[int(decl->place)];
  }
  if (!holds(decl->kind, attr.getValue()))
    return op->emitOpError() << "'" << name << "' must be " << describe(decl->kind) << ", got "
                             << attr.getValue();
  if (name == "llm.loss_scale_seed") {
    auto module = op->getParentOfType<ModuleOp>();
    auto scaling = module ? module->getAttrOfType<LossScalingAttr>("llm.loss_scale") : nullptr;
    if (!scaling || scaling.getValue() != LossScaling::dynamic)
      return op->emitOpError() << "seeds the backward with the loss scale, but the module's "
                                  "llm.loss_scale is not #llm.loss_scaling<dynamic>: the "
                                  "gradients would stay scaled";
  }
  if (auto shard = dyn_cast<ShardAttr>(attr.getValue())) {
    auto t = cast<RankedTensorType>(cast<ParamOp>(op).getType());
    if (shard.getDim() >= t.getRank())
      return op->emitOpError() << "'llm.shard' splits dimension " << shard.getDim() << " of a rank-"
                               << t.getRank() << " tensor";
    if (t.getDimSize(shard.getDim()) % shard.getBlocks() != 0)
      return op->emitOpError() << "'llm.shard' cuts dimension " << shard.getDim() << " ("
                               << t.getDimSize(shard.getDim()) << ") into " << shard.getBlocks()
                               << " blocks, which do not divide it";
    if (shard.getWhole() > 0 && shard.getBlocks() != 1)
      return op->emitOpError() << "'llm.shard' pads (whole) a dimension of " << shard.getBlocks()
                               << " blocks; only one block is padded";
    if (shard.getWhole() > shard.getParts() * t.getDimSize(shard.getDim()))
      return op->emitOpError() << "'llm.shard' has a whole of " << shard.getWhole()
                               << " rows, more than its " << shard.getParts() << " parts of "
                               << t.getDimSize(shard.getDim()) << " hold";
  }
  if (name == kForwardAttrName || name == kTrainStepAttrName)
    if (Operation *parent = op->getParentOp())
      for (Region &r : parent->getRegions())
        for (Block &block : r)
          for (Operation &other : block)
            if (&other != op && other.hasAttr(name) && other.getBlock() == op->getBlock() &&
                other.isBeforeInBlock(op))
              return op->emitOpError()
                     << "is a second function marked '" << name << "'; a module has one";
  if (name != kTrainStepAttrName)
    return success();
  // Every update names a parameter of the function with its gradient's type:
  // one walk for the parameters, one for the updates.
  llvm::StringMap<Type> params;
  op->walk([&](ParamOp p) { params.try_emplace(p.getName(), p.getType()); });
  WalkResult r = op->walk([&](AdamWOp u) {
    auto it = params.find(u.getName());
    if (it != params.end() && it->second == u.getGrad().getType())
      return WalkResult::advance();
    u.emitOpError() << "updates '" << u.getName()
                    << "', which is no llm.param of that type in this function";
    return WalkResult::interrupt();
  });
  return failure(r.wasInterrupted());
}

FunctionOpInterface llmopt::llm::findEntryFunction(ModuleOp module, StringRef marker) {
  for (Operation &op : module.getBody()->getOperations())
    if (auto f = dyn_cast<FunctionOpInterface>(op); f && f->hasAttr(marker) && !f.isExternal())
      return f;
  return {};
}

FunctionOpInterface llmopt::llm::forwardToPartition(ModuleOp module, StringRef pass) {
  FunctionOpInterface forward = findEntryFunction(module, LLMDialect::kForwardAttrName);
  if (!forward)
    module.emitError() << pass << ": no function marked 'llm.forward' to partition; "
                       << "import a model (llm-opt config.json) or mark the model function with it";
  return forward;
}

FailureOr<func::FuncOp> llmopt::llm::entryFunction(ModuleOp module, StringRef marker,
                                                   StringRef pass, StringRef hint) {
  FunctionOpInterface f = findEntryFunction(module, marker);
  if (!f)
    return module.emitError() << pass << ": no function marked '" << marker << "'; " << hint;
  auto func = dyn_cast<func::FuncOp>(f.getOperation());
  if (!func)
    return f.emitOpError() << pass << ": the function marked '" << marker
                           << "' must be a func.func";
  return func;
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
