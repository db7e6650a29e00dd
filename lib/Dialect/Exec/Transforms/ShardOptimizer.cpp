//===- ShardOptimizer.cpp - exec-shard-optimizer (ZeRO) ------------------===//

#include "llmopt/Dialect/Exec/Transforms/Passes.h"

#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

namespace llmopt::exec {
#define GEN_PASS_DEF_EXECSHARDOPTIMIZER
#include "llmopt/Dialect/Exec/Transforms/Passes.h.inc"
} // namespace llmopt::exec

using namespace mlir;
using namespace llmopt;
using namespace llmopt::exec;

namespace {

/// The parameter a gradient accumulator `grad:<param>` belongs to, or "".
StringRef accumulatedParam(Attribute a) {
  auto buf = dyn_cast<BufAttr>(a);
  if (!buf || buf.getSpace() != BufferSpace::accum)
    return "";
  StringRef name = buf.getName().getValue();
  return name.consume_front("grad:") ? name : StringRef();
}

struct ShardOptimizerPass : public exec::impl::ExecShardOptimizerBase<ShardOptimizerPass> {
  int64_t zero = 0, dp = 1, ep = 1;
  llvm::StringSet<> experts;
  llvm::StringMap<RankedTensorType> paramTypes;

  bool isExpert(Attribute acc) const { return experts.contains(accumulatedParam(acc)); }
  StringRef axisOf(bool expert) const { return expert ? "edp" : "dp"; }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plans = llvm::to_vector(module.getOps<PlanOp>());
    if (plans.size() != 1) {
      module.emitError() << "exec-shard-optimizer: needs the module's exec.plan (its ZeRO stage "
                            "and mesh); run convert-llm-to-exec";
      return signalPassFailure();
    }
    PlanOp plan = plans.front();
    experts.clear();
    paramTypes.clear();
    zero = plan.getZero();
    if (zero == 0)
      return;
    dp = cast<IntegerAttr>(plan.getMesh().get("dp")).getInt();
    ep = cast<IntegerAttr>(plan.getMesh().get("ep")).getInt();
    for (ParamOp p : module.getOps<ParamOp>()) {
      paramTypes[p.getName()] = cast<RankedTensorType>(p.getType());
      if (DictionaryAttr shard = p.getShardAttr())
        if (auto axis = shard.getAs<StringAttr>("axis"); axis && axis.getValue() == "ep")
          experts.insert(p.getName());
    }
    for (ProgramOp program : module.getOps<ProgramOp>())
      if (failed(shard(program)))
        return signalPassFailure();
  }

  LogicalResult shard(ProgramOp program) {
    MLIRContext *ctx = program.getContext();
    Builder b(ctx);
    // An empty phase parses as a region without a block.
    for (Region *phase : {&program.getMicroBatch(), &program.getStep()})
      if (phase->empty())
        phase->push_back(new Block());
    Block &micro = program.getMicroBatch().front(), &step = program.getStep().front();
    auto reduceKind = [&](ReduceKind k) { return ReduceKindAttr::get(ctx, k); };
    // Buckets group the collectives of the sharded form: they come after.
    WalkResult bucketed = program.walk([&](Operation *op) {
      auto rs = dyn_cast<GradReduceScatterOp>(op);
      if (isa<BucketAllReduceOp, BucketWaitOp>(op) || (rs && rs.getBucketAttr())) {
        op->emitOpError() << "exec-shard-optimizer: the program has gradient buckets already; "
                             "shard first (exec-shard-optimizer, then exec-bucket-gradients)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (bucketed.wasInterrupted())
      return failure();

    // The updates, in order: their accumulators, dense or expert.
    SmallVector<KernelOp> updates;
    SmallVector<Attribute> denseGrads, expertGrads;
    for (KernelOp k : step.getOps<KernelOp>()) {
      if (k.getKernel() != "adamw")
        continue;
      if (k.getParams().contains("shard"))
        return k.emitOpError() << "exec-shard-optimizer: the program is sharded already";
      if (k.getIns().size() < 2 || !isa<StringAttr>(k.getParams().get("param")))
        return k.emitOpError() << "exec-shard-optimizer: an update reads its gradient "
                                  "accumulator and the norm and names its param";
      updates.push_back(k);
      Attribute acc = k.getIns()[0];
      (isExpert(acc) ? expertGrads : denseGrads).push_back(acc);
    }

    // ZeRO-2/3: each gradient accumulates as this rank's chunk, ceil(n / d)
    // elements, reduce-scattered from every micro-batch's gradient.
    DenseMap<Attribute, BufAttr> chunks;
    if (zero >= 2) {
      for (Attribute acc : llvm::concat<Attribute>(denseGrads, expertGrads)) {
        auto buf = cast<BufAttr>(acc);
        int64_t d = isExpert(acc) ? dp / ep : dp, n = buf.getNumElements();
        chunks[acc] = BufAttr::get(ctx, BufferSpace::accum, 0,
                                   b.getStringAttr(("grad_shard:" + accumulatedParam(acc)).str()),
                                   b.getDenseI64ArrayAttr({(n + d - 1) / d}), b.getF32Type());
      }
      for (KernelOp k : llvm::make_early_inc_range(micro.getOps<KernelOp>())) {
        if (k.getParams().get("accumulate"))
          for (Attribute out : k.getOuts())
            if (chunks.count(out))
              return k.emitOpError()
                     << "exec-shard-optimizer: under ZeRO-" << zero
                     << " each gradient is reduce-scattered as it is made, but this kernel adds "
                        "into "
                     << cast<BufAttr>(out).getName()
                     << " in place; lower with the plan's ZeRO "
                        "stage (llm-plan-memory, "
                        "convert-llm-to-exec)";
        if (k.getKernel() != "add" || k.getOuts().size() != 1 || k.getIns().size() != 2 ||
            k.getIns()[0] != k.getOuts()[0] || !chunks.count(k.getOuts()[0]))
          continue;
        OpBuilder ob(k);
        Attribute acc = k.getOuts()[0];
        GradReduceScatterOp::create(ob, k.getLoc(), b.getStringAttr(axisOf(isExpert(acc))),
                                    reduceKind(ReduceKind::avg), cast<BufAttr>(k.getIns()[1]),
                                    chunks.lookup(acc), IntegerAttr(), UnitAttr());
        k.erase();
      }
    }

    // The step: the loss alone is all-reduced over dp; ZeRO-1 reduce-scatters
    // the gradients there (ZeRO-2/3 did in the micro-batches).
    exec::AllReduceOp average, expertAverage;
    for (exec::AllReduceOp r : step.getOps<exec::AllReduceOp>()) {
      if (r.getReduce() != ReduceKind::avg || (r.getAxis() != "dp" && r.getAxis() != "edp"))
        continue;
      exec::AllReduceOp &slot = r.getAxis() == "dp" ? average : expertAverage;
      if (slot)
        return r.emitOpError() << "exec-shard-optimizer: a second " << r.getAxis()
                               << " average in the step; the unsharded step has one";
      slot = r;
    }
    if (!average)
      return program.emitOpError() << "exec-shard-optimizer: the step has no data-parallel "
                                      "average (exec.all_reduce \"dp\" avg) to shard";
    {
      OpBuilder ob(average);
      SmallVector<Attribute> rest;
      for (Attribute a : average.getBuffers())
        if (accumulatedParam(a).empty())
          rest.push_back(a);
      if (!rest.empty())
        exec::AllReduceOp::create(ob, average.getLoc(), average.getAxisAttr(),
                                  reduceKind(ReduceKind::avg), b.getArrayAttr(rest));
      if (zero < 2 && !denseGrads.empty())
        ReduceScatterOp::create(ob, average.getLoc(), b.getStringAttr("dp"),
                                reduceKind(ReduceKind::avg), b.getArrayAttr(denseGrads));
      if (zero < 2 && !expertGrads.empty())
        ReduceScatterOp::create(ob, average.getLoc(), b.getStringAttr("edp"),
                                reduceKind(ReduceKind::avg), b.getArrayAttr(expertGrads));
      average.erase();
      if (expertAverage)
        expertAverage.erase();
    }

    // Each rank unscales, squares and updates its chunks; the squares' sums
    // are all-reduced over the chunks' axis.
    auto withShard = [&](KernelOp k, StringRef axis) {
      NamedAttrList params(k.getParams());
      params.set("shard", b.getStringAttr(axis));
      k.setParamsAttr(params.getDictionary(ctx));
    };
    auto chunkAxis = [&](KernelOp k) {
      return axisOf(llvm::any_of(k.getIns(), [&](Attribute a) { return isExpert(a); }));
    };
    for (KernelOp k : llvm::make_early_inc_range(step.getOps<KernelOp>())) {
      StringRef kernel = k.getKernel();
      if (kernel == "loss_unscale") {
        withShard(k, chunkAxis(k));
      } else if (kernel == "sum_squares") {
        StringRef axis = chunkAxis(k);
        withShard(k, axis);
        OpBuilder ob(ctx);
        ob.setInsertionPointAfter(k);
        exec::AllReduceOp::create(ob, k.getLoc(), b.getStringAttr(axis),
                                  reduceKind(ReduceKind::sum), k.getOuts());
      } else if (kernel == "global_norm") {
        OpBuilder ob(k);
        StringAttr axis = b.getStringAttr(chunkAxis(k));
        KernelOp::create(ob, k.getLoc(), b.getStringAttr("sum_squares"), k.getIns(), k.getOuts(),
                         b.getDictionaryAttr({b.getNamedAttr("shard", axis)}));
        exec::AllReduceOp::create(ob, k.getLoc(), axis, reduceKind(ReduceKind::sum), k.getOuts());
        KernelOp::create(ob, k.getLoc(), b.getStringAttr("sqrt"), k.getOuts(), k.getOuts(),
                         b.getDictionaryAttr({}));
        k.erase();
      } else if (kernel == "adamw") {
        withShard(k, chunkAxis(k));
      }
    }

    // ZeRO-1/2: the updated chunks are gathered into whole parameters.
    if (zero < 3 && !updates.empty()) {
      SmallVector<Attribute> dense, expert;
      for (KernelOp k : updates) {
        auto name = k.getParams().getAs<StringAttr>("param");
        RankedTensorType t = name ? paramTypes.lookup(name.getValue()) : RankedTensorType();
        if (!t)
          return k.emitOpError() << "exec-shard-optimizer: updates a parameter no exec.param "
                                    "declares";
        (isExpert(k.getIns()[0]) ? expert : dense)
            .push_back(BufAttr::get(ctx, BufferSpace::state, 0, name,
                                    b.getDenseI64ArrayAttr(t.getShape()), t.getElementType()));
      }
      OpBuilder ob(ctx);
      ob.setInsertionPointAfter(updates.back());
      if (!dense.empty())
        AllGatherOp::create(ob, program.getLoc(), b.getStringAttr("dp"), b.getArrayAttr(dense));
      if (!expert.empty())
        AllGatherOp::create(ob, program.getLoc(), b.getStringAttr("edp"), b.getArrayAttr(expert));
    }

    // ZeRO-2/3: the chunk accumulators replace the whole ones everywhere.
    if (!chunks.empty()) {
      AttrTypeReplacer replacer;
      replacer.addReplacement([&](BufAttr buf) -> std::optional<Attribute> {
        if (auto it = chunks.find(buf); it != chunks.end())
          return it->second;
        return std::nullopt;
      });
      program.walk([&](Operation *op) {
        if (op != program.getOperation())
          replacer.replaceElementsIn(op, /*replaceAttrs=*/true, /*replaceLocs=*/false,
                                     /*replaceTypes=*/false);
      });
    }
    return success();
  }
};

} // namespace
