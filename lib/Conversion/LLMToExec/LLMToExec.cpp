//===- LLMToExec.cpp - convert-llm-to-exec --------------------------------===//
//
// The pass: one exec.program per pipeline stage (or one without a pipeline),
// its micro-batch phase lowered op by op through the op-family patterns
// (Lowering.h) with each gradient added to its fp32 accumulator, its step
// phase from lowerStepPhase, and exec.plan / exec.param describing the rest
// of the plan. Gradient buckets and ZeRO sharding are later exec passes
// (exec-shard-optimizer, exec-bucket-gradients).
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "llmopt-runtime/schedule.h"
#include "llmopt/Conversion/Passes.h"
#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"

#include "llvm/ADT/StringSet.h"

namespace llmopt {
#define GEN_PASS_DEF_CONVERTLLMTOEXEC
#include "llmopt/Conversion/Passes.h.inc"
} // namespace llmopt

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;
using namespace llmopt::lowering;

namespace {

/// A pipeline stage's schedule and the (micro-batch, chunk, backward) order
/// of its parts: interleaved stages hold several model chunks each and need
/// whole groups of pp micro-batches (Narayanan et al. 2021), else they run
/// one micro-batch after another.
LogicalResult stageSchedule(ModuleOp module, int64_t stage, int64_t pp, int64_t micro,
                            StringAttr &scheduleName, DenseI64ArrayAttr &order) {
  Builder b(module.getContext());
  auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
  int64_t vpp = plan && plan.getVpp() > 1 ? plan.getVpp() : 1;
  schedule::Kind kind =
      vpp > 1 ? (micro % pp == 0 ? schedule::Kind::Interleaved : schedule::Kind::Sequential)
      : plan && plan.getSchedule() == PipelineSchedule::gpipe ? schedule::Kind::GPipe
                                                              : schedule::Kind::OneFOneB;
  std::vector<schedule::Pass> passes = schedule::stageOrder(kind, micro, pp, stage, vpp);
  if (passes.empty())
    return module.emitError() << "convert-llm-to-exec: stage " << stage << " of " << pp
                              << " cannot lay out " << micro << " micro-batches in the "
                              << schedule::name(kind) << " schedule";
  SmallVector<int64_t> triples;
  for (const schedule::Pass &p : passes)
    triples.append({p.microBatch, p.chunk, int64_t(p.backward)});
  scheduleName = b.getStringAttr(schedule::name(kind));
  order = b.getDenseI64ArrayAttr(triples);
  return success();
}

struct ConvertLLMToExecPass : public llmopt::impl::ConvertLLMToExecBase<ConvertLLMToExecPass> {
  using Base::Base;

  /// The mesh and the ZeRO stage of the plan (after its checks).
  int64_t dp = 1, tp = 1, pp = 1, ep = 1, cp = 1, micro = 1, zero = 0;

  LogicalResult readPlan(ModuleOp module, func::FuncOp func) {
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    if (!plan)
      return success();
    if (plan.getShard() > 0)
      return module.emitError() << "convert-llm-to-exec: the plan shards ZeRO over groups of "
                                << plan.getShard()
                                << " ranks (hybrid sharding), which the lowering does not run; "
                                   "plan with fix=shard:0 or stack=llm-run-cpu";
    cp = plan.getCp();
    if (cp > 1 && !module->hasAttr("llm.cp"))
      return module.emitError() << "convert-llm-to-exec: the plan has cp " << cp
                                << "; run llm-partition-cp first";
    ep = plan.getEp();
    if (plan.getPp() > 1 && !module->hasAttr("llm.pp"))
      return module.emitError() << "convert-llm-to-exec: the plan has pp " << plan.getPp()
                                << "; run llm-partition-pp first";
    tp = plan.getTp();
    dp = plan.getDp();
    micro = plan.getNumMicroBatches();
    zero = plan.getZero();
    if (zero == 3 && dp > 1 && func.getBody().front().getOps<ZeroGatherOp>().empty())
      return module.emitError() << "convert-llm-to-exec: the plan has ZeRO-3; run "
                                   "llm-shard-params first";
    // Sharding over one rank is no sharding.
    if (dp == 1)
      zero = 0;
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    dp = tp = pp = ep = cp = micro = 1;
    zero = 0;
    auto func = dyn_cast_or_null<func::FuncOp>(
        findEntryFunction(module, LLMDialect::kTrainStepAttrName).getOperation());
    if (!func || !func->hasAttr("llm.arena_bytes")) {
      module.emitError() << "convert-llm-to-exec: needs a memory-planned @train_step "
                            "(llm-build-training-step, llm-specialize-shapes, llm-plan-memory)";
      return signalPassFailure();
    }
    if (failed(readPlan(module, func)))
      return signalPassFailure();
    if (auto a = module->getAttrOfType<IntegerAttr>("llm.pp"))
      pp = a.getInt();

    LoweringPatternSet patterns;
    populateLLMToExecLowerings(patterns);
    BufferAssignment buffers(func);
    Lowering cv(func, patterns, buffers, tp, cp);
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<AdamWOp> allUpdates(body.getOps<AdamWOp>());
    SmallVector<GlobalNormOp> norms(body.getOps<GlobalNormOp>());
    if (ret.getNumOperands() != 2 || norms.size() != 1 || allUpdates.empty()) {
      func.emitError() << "convert-llm-to-exec: @train_step must end in one llm.global_norm "
                          "and llm.adamw updates, and return (loss, grad_norm)";
      return signalPassFailure();
    }
    FailureOr<BufAttr> loss = buffers.lookup(ret.getOperand(0)),
                       norm = buffers.lookup(ret.getOperand(1));
    if (failed(loss) || failed(norm))
      return signalPassFailure();
    BufAttr lossAcc = buffers.accumulator("loss", ret.getOperand(0));
    SmallVector<Attribute> allGradAccs;
    for (AdamWOp a : allUpdates)
      allGradAccs.push_back(buffers.accumulator(("grad:" + a.getName()).str(), a.getGrad()));
    ParamFacts facts(func);
    for (int64_t stage = pp > 1 ? 0 : -2; stage < (pp > 1 ? pp : -1); ++stage)
      if (failed(buildProgram(module, func, cv, facts, stage, allUpdates, allGradAccs, lossAcc,
                              *loss, *norm)))
        return signalPassFailure();
    describePlan(module, func);
  }

  /// One program: stage `stage`'s (-2: the whole step without a pipeline).
  LogicalResult buildProgram(ModuleOp module, func::FuncOp func, Lowering &cv,
                             const ParamFacts &facts, int64_t stage, ArrayRef<AdamWOp> allUpdates,
                             ArrayRef<Attribute> allGradAccs, BufAttr lossAcc, BufAttr loss,
                             BufAttr norm) {
    MLIRContext *ctx = module.getContext();
    Builder b(ctx);
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<AdamWOp> updates;
    SmallVector<Attribute> gradAccs;
    for (auto [update, acc] : llvm::zip(allUpdates, allGradAccs))
      if (AdamWOp a = update;
          stage < 0 || facts.stage.lookup(a.getName()) == stage ||
          (facts.tied.contains(a.getName()) && (stage == 0 || stage == pp - 1))) {
        updates.push_back(a);
        gradAccs.push_back(acc);
      }
    OpBuilder mb(ctx);
    mb.setInsertionPointToEnd(module.getBody());
    SmallVector<int64_t> ranks;
    int64_t group = dp * cp * tp, firstRank = stage >= 0 ? stage * group : 0;
    for (int64_t r = firstRank; r < firstRank + group; ++r)
      ranks.push_back(r);
    auto outputs = mb.getDictionaryAttr(
        {mb.getNamedAttr("loss", lossAcc), mb.getNamedAttr("grad_norm", norm)});
    int64_t arena = func->getAttrOfType<IntegerAttr>("llm.arena_bytes").getInt();
    if (auto perStage = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_arena_bytes");
        perStage && stage >= 0)
      arena = perStage[stage];
    std::string name = stage >= 0 ? "stage_" + std::to_string(stage) : "train_step";
    IntegerAttr stash;
    if (auto perStage = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_stash_bytes");
        perStage && stage >= 0 && perStage[stage] > 0)
      stash = mb.getI64IntegerAttr(perStage[stage]);
    StringAttr scheduleName;
    DenseI64ArrayAttr order;
    if (stage >= 0 && failed(stageSchedule(module, stage, pp, micro, scheduleName, order)))
      return failure();
    auto program =
        ProgramOp::create(mb, func.getLoc(), mb.getStringAttr(name), mb.getDenseI64ArrayAttr(ranks),
                          mb.getI64IntegerAttr(arena), mb.getI64IntegerAttr(micro), outputs, stash,
                          scheduleName, order);
    Block *microBlock = new Block(), *stepBlock = new Block();
    program.getMicroBatch().push_back(microBlock);
    program.getStep().push_back(stepBlock);
    Location loc = func.getLoc();

    // Micro-batch phase: forward and backward, then the gradients and the
    // loss added to their accumulators.
    cv.ob.setInsertionPointToEnd(microBlock);
    // Each parameter's gradient is added to its accumulator as soon as it is
    // made, so that its buffer is free for the rest of the backward (the
    // memory plan counts it live only until then).
    llvm::DenseMap<Value, BufAttr> accumulateAt;
    for (auto [a, acc] : llvm::zip(updates, gradAccs)) {
      // A shared weight's gradient: this stage's part (summed in the step).
      Value grad = a.getGrad();
      if (auto sum = grad.getDefiningOp<AddOp>(); sum && sum->hasAttr("llm.pp_tied_sum"))
        grad = stageOf(sum.getLhs().getDefiningOp()) == stage ? sum.getLhs() : sum.getRhs();
      accumulateAt[grad] = cast<BufAttr>(acc);
    }

    // Pipeline stages mark where each micro-batch's backward begins: at the
    // first of the stage's ops after the loss.
    Operation *lossOp = ret.getOperand(0).getDefiningOp();
    bool marked = stage < 0;
    // Interleaved stages: which model chunk the next instructions belong to
    // (llm.chunk from llm-partition-pp); a marker where it changes.
    int64_t chunk = 0, transfers = 0;
    auto enterChunk = [&](Operation *op, StringRef key, Location at) {
      auto c = op->getAttrOfType<IntegerAttr>(key);
      if (!c || c.getInt() == chunk)
        return;
      chunk = c.getInt();
      ChunkOp::create(cv.ob, at, b.getI64IntegerAttr(chunk));
    };
    for (Operation &op : body.without_terminator()) {
      if (isa<AdamWOp, GlobalNormOp>(op))
        continue;
      bool mine = stageOf(&op) == stage;
      if (auto t = dyn_cast<PPTransferOp>(op))
        mine = int64_t(t.getFrom()) == stage || int64_t(t.getTo()) == stage;
      if (!marked && mine && lossOp && lossOp->isBeforeInBlock(&op)) {
        BackwardOp::create(cv.ob, op.getLoc());
        marked = true;
      }
      if (auto t = dyn_cast<PPTransferOp>(op); t && stage >= 0) {
        // One side sends what the other receives; the tag (the transfer's
        // number in the step) pairs them whatever order a schedule runs.
        int64_t from = t.getFrom(), to = t.getTo(), tag = transfers++;
        if (from != stage && to != stage)
          continue;
        FailureOr<BufAttr> x = cv.buffers.lookup(from == stage ? t.getInput() : t.getResult());
        if (failed(x))
          return failure();
        enterChunk(&op, from == stage ? "llm.from_chunk" : "llm.to_chunk", op.getLoc());
        P2POp::create(
            cv.ob, op.getLoc(),
            TransferKindAttr::get(ctx, from == stage ? TransferKind::send : TransferKind::recv),
            b.getI64IntegerAttr(from == stage ? to : from), b.getI64IntegerAttr(tag), *x);
        continue;
      }
      if (mine)
        enterChunk(&op, "llm.chunk", op.getLoc());
      if (stage >= 0 && stageOf(&op) != stage)
        continue;
      // A linear's weight and bias gradients read only by the step are added
      // by the linear_bwd itself into their fp32 accumulators (`accumulate`;
      // llm-plan-memory gave them no buffer): no gradient buffers of their
      // own and no adds' passes over them (Megatron's fp32 main-gradient
      // accumulation: no 16-bit rounding of the weight gradients).
      llvm::SmallDenseSet<Value> accumulated;
      if (accumulatesWeightGradients(&op, zero)) {
        for (Value r : op.getResults().drop_front()) {
          auto it = accumulateAt.find(r);
          if (it == accumulateAt.end())
            return op.emitOpError() << "convert-llm-to-exec: a weight gradient added in place "
                                       "has no accumulator on this stage";
          cv.buffers.redirect(r, it->second);
          accumulated.insert(r);
        }
      }
      if (failed(cv.lower(&op)))
        return failure();
      if (!accumulated.empty()) {
        auto made = cast<KernelOp>(cv.ob.getInsertionBlock()->back());
        NamedAttrList params(made.getParams());
        params.set("accumulate", b.getBoolAttr(true));
        made.setParamsAttr(params.getDictionary(ctx));
      }
      for (Value r : op.getResults())
        if (auto it = accumulateAt.find(r); it != accumulateAt.end()) {
          FailureOr<BufAttr> g = cv.buffers.lookup(r);
          if (failed(g))
            return failure();
          // The accumulator holds the gradient already where it was added in
          // place.
          if (!accumulated.contains(r))
            cv.kernelOn(op.getLoc(), "add", {it->second, *g}, {it->second});
          accumulateAt.erase(it);
        }
    }
    if (!cv.pendingGathers.empty())
      return func.emitError() << "convert-llm-to-exec: a prefetched parameter gather has no "
                                 "reader on its stage";
    if (!accumulateAt.empty())
      return func.emitError() << "convert-llm-to-exec: a parameter gradient is not computed on "
                                 "the stage that updates it";
    if (stage < 0 || stage == pp - 1)
      cv.kernelOn(loc, "add", {lossAcc, loss}, {lossAcc});

    // Step phase: average over micro-batches and ranks, norm, update.
    cv.ob.setInsertionPointToEnd(stepBlock);
    StepPhase step{updates, gradAccs, lossAcc, norm, facts};
    step.stage = stage;
    step.dp = dp;
    step.tp = tp;
    step.pp = pp;
    step.cp = cp;
    step.ep = ep;
    step.micro = micro;
    auto scaling = module->getAttrOfType<LossScalingAttr>("llm.loss_scale");
    step.lossScaling = scaling && scaling.getValue() == LossScaling::dynamic;
    lowerStepPhase(cv, loc, step);
    return success();
  }

  /// exec.plan and exec.param: what the plan file says besides the
  /// programs, so that it is a translation of the exec ops alone.
  void describePlan(ModuleOp module, func::FuncOp step) {
    MLIRContext *ctx = module.getContext();
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    Location loc = module.getLoc();
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    // Ranks: pp x dp x cp x tp; ep subdivides dp.
    int64_t pp = plan ? plan.getPp() : 1;
    auto mesh = b.getDictionaryAttr({b.getNamedAttr("cp", i64(cp)), b.getNamedAttr("dp", i64(dp)),
                                     b.getNamedAttr("ep", i64(ep)), b.getNamedAttr("pp", i64(pp)),
                                     b.getNamedAttr("tp", i64(tp))});
    // The optimizer sharding the plan runs (none over one rank), which
    // exec-shard-optimizer applies to the programs.
    SmallVector<Type> inputs(step.getArgumentTypes());
    auto header = exec::PlanOp::create(b, loc, mesh, i64(dp * tp * pp * cp), i64(zero),
                                       b.getTypeArrayAttr(inputs), StringAttr(), IntegerAttr(),
                                       IntegerAttr(), DictionaryAttr(), FloatAttr());
    if (auto name = module->getAttrOfType<StringAttr>("llm.name"))
      header.setModelAttr(name);
    if (auto a = module->getAttrOfType<IntegerAttr>("llm.micro_batch"))
      header.setMicroBatchAttr(i64(a.getInt()));
    if (auto a = module->getAttrOfType<IntegerAttr>("llm.seq_len"))
      header.setSeqLenAttr(i64(a.getInt()));
    if (plan)
      header.setPredictionAttr(b.getDictionaryAttr(
          {b.getNamedAttr("num_micro_batches", i64(plan.getNumMicroBatches())),
           b.getNamedAttr("peak_memory_bytes", i64(plan.getPeakMemoryBytes())),
           b.getNamedAttr("step_time_s", b.getF64FloatAttr(plan.getStepTimeS().getValueAsDouble())),
           b.getNamedAttr("zero", i64(plan.getZero()))}));
    // Model FLOPs per token (6N + attention), for the runtime's MFU.
    if (auto forward = dyn_cast_or_null<func::FuncOp>(
            findEntryFunction(module, LLMDialect::kForwardAttrName).getOperation())) {
      CostContext cc;
      auto seq = module->getAttrOfType<IntegerAttr>("llm.seq_len");
      cc.seqLen = seq ? seq.getInt() : 1;
      ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
      if (FailureOr<ModelStats> st = computeModelStats(forward, cc); succeeded(st))
        header.setTrainFlopsPerTokenAttr(b.getF64FloatAttr(st->trainFlopsPerToken));
    }
    llvm::StringSet<> seen;
    step.walk([&](llm::ParamOp p) {
      if (!seen.insert(p.getName()).second)
        return;
      auto param = exec::ParamOp::create(
          b, loc, p.getNameAttr(), TypeAttr::get(p.getType()),
          ParamInitAttr::get(ctx, *symbolizeParamInit(stringifyInitKind(p.getInit()))), FloatAttr(),
          DictionaryAttr());
      if (p.getStd())
        param.setStdAttr(b.getF64FloatAttr(p.getStd()->convertToDouble()));
      if (auto shard = p->getAttrOfType<ShardAttr>("llm.shard")) {
        SmallVector<NamedAttribute> fields = {
            b.getNamedAttr("axis", b.getStringAttr(shard.getAxis())),
            b.getNamedAttr("dim", i64(shard.getDim())),
            b.getNamedAttr("blocks", i64(shard.getBlocks())),
            b.getNamedAttr("parts", i64(shard.getParts()))};
        if (shard.getWhole() > 0)
          fields.push_back(b.getNamedAttr("whole", i64(shard.getWhole())));
        param.setShardAttr(b.getDictionaryAttr(fields));
      }
    });
  }
};
} // namespace
