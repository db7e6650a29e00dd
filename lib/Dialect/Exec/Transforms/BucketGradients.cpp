//===- BucketGradients.cpp - exec-bucket-gradients -----------------------===//

#include "llmopt/Dialect/Exec/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"

namespace llmopt::exec {
#define GEN_PASS_DEF_EXECBUCKETGRADIENTS
#include "llmopt/Dialect/Exec/Transforms/Passes.h.inc"
} // namespace llmopt::exec

using namespace mlir;
using namespace llmopt;
using namespace llmopt::exec;

namespace {

bool isGradAccumulator(Attribute a) {
  auto buf = dyn_cast<BufAttr>(a);
  return buf && buf.getSpace() == BufferSpace::accum &&
         buf.getName().getValue().starts_with("grad:");
}

/// fp32 bytes of a buffer's elements (the reductions run in fp32).
int64_t fp32Bytes(BufAttr buf) { return 4 * buf.getNumElements(); }

struct BucketGradientsPass : public exec::impl::ExecBucketGradientsBase<BucketGradientsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (bucketBytes < 0) {
      module.emitError() << "exec-bucket-gradients: bucket-bytes must be 0 (no buckets) or "
                            "positive, got "
                         << int64_t(bucketBytes);
      return signalPassFailure();
    }
    if (bucketBytes == 0)
      return;
    for (ProgramOp program : module.getOps<ProgramOp>()) {
      if (program.getMicroBatch().empty())
        continue;
      if (!program.getStep().empty() && failed(bucketAllReduces(program)))
        return signalPassFailure();
      bucketReduceScatters(program);
    }
  }

  /// Data-parallel all-reduce buckets (no ZeRO).
  LogicalResult bucketAllReduces(ProgramOp program) {
    MLIRContext *ctx = program.getContext();
    Builder b(ctx);
    Block &micro = program.getMicroBatch().front(), &step = program.getStep().front();
    // What the step averages over dp (edp for experts), less the shared
    // pipeline weights summed over pp_tied first.
    exec::AllReduceOp dense, experts;
    DenseSet<Attribute> tied;
    for (exec::AllReduceOp r : step.getOps<exec::AllReduceOp>()) {
      if (r.getAxis() == "pp_tied") {
        tied.insert(r.getBuffers().begin(), r.getBuffers().end());
        continue;
      }
      if (r.getReduce() != ReduceKind::avg || (r.getAxis() != "dp" && r.getAxis() != "edp"))
        continue;
      exec::AllReduceOp &slot = r.getAxis() == "dp" ? dense : experts;
      if (slot) {
        r.emitOpError() << "exec-bucket-gradients: a second " << r.getAxis()
                        << " average in the step; the unbucketed step has one";
        return failure();
      }
      slot = r;
    }
    DenseMap<Attribute, bool> bucketable; // accumulator -> expert
    for (auto [reduce, expert] : {std::pair{dense, false}, {experts, true}})
      if (reduce)
        for (Attribute a : reduce.getBuffers())
          if (isGradAccumulator(a) && !tied.contains(a))
            bucketable[a] = expert;
    if (bucketable.empty())
      return success();

    struct OpenBucket {
      SmallVector<Attribute> members;
      int64_t bytes = 0;
    } open[2]; // dense (dp), experts (edp)
    DenseSet<Attribute> bucketed;
    int64_t buckets = 0;
    OpBuilder ob(ctx);
    auto start = [&](bool expert) {
      OpenBucket &o = open[expert ? 1 : 0];
      if (o.members.empty())
        return;
      BucketAllReduceOp::create(ob, program.getLoc(), b.getStringAttr(expert ? "edp" : "dp"),
                                ReduceKindAttr::get(ctx, ReduceKind::avg),
                                b.getI64IntegerAttr(buckets++), b.getArrayAttr(o.members));
      bucketed.insert(o.members.begin(), o.members.end());
      o.members.clear();
      o.bytes = 0;
    };
    // An accumulator joins its bucket after the micro-batch's write to it:
    // its add, or the GEMM adding into it in place.
    Operation *lossAdd = nullptr;
    for (KernelOp k : llvm::make_early_inc_range(micro.getOps<KernelOp>())) {
      SmallVector<Attribute> completed;
      bool inPlace = k.getParams().get("accumulate") != nullptr;
      if (k.getKernel() == "add" && k.getOuts().size() == 1 && k.getIns().size() == 2 &&
          k.getIns()[0] == k.getOuts()[0]) {
        auto out = cast<BufAttr>(k.getOuts()[0]);
        if (out.getSpace() == BufferSpace::accum && out.getName().getValue() == "loss")
          lossAdd = k;
        else if (bucketable.count(out))
          completed.push_back(out);
      } else if (inPlace) {
        for (Attribute out : k.getOuts())
          if (bucketable.count(out))
            completed.push_back(out);
      }
      ob.setInsertionPointAfter(k);
      for (Attribute acc : completed) {
        bool expert = bucketable.lookup(acc);
        OpenBucket &o = open[expert ? 1 : 0];
        o.members.push_back(acc);
        o.bytes += fp32Bytes(cast<BufAttr>(acc));
        if (o.bytes >= bucketBytes)
          start(expert);
      }
    }
    // The rest start when the backward ends, before the loss is added.
    if (lossAdd)
      ob.setInsertionPoint(lossAdd);
    else
      ob.setInsertionPointToEnd(&micro);
    start(false);
    start(true);

    // The step waits for the buckets and no longer all-reduces their members.
    ob.setInsertionPointToStart(&step);
    for (int64_t k = 0; k < buckets; ++k)
      BucketWaitOp::create(ob, program.getLoc(), b.getI64IntegerAttr(k));
    for (exec::AllReduceOp reduce : {dense, experts}) {
      if (!reduce)
        continue;
      SmallVector<Attribute> rest;
      for (Attribute a : reduce.getBuffers())
        if (!bucketed.contains(a))
          rest.push_back(a);
      if (rest.empty())
        reduce.erase();
      else
        reduce.setBuffersAttr(b.getArrayAttr(rest));
    }
    return success();
  }

  /// ZeRO-2/3 reduce-scatter buckets, per axis, within one part of the
  /// schedule.
  void bucketReduceScatters(ProgramOp program) {
    Builder b(program.getContext());
    struct ScatterBucket {
      int64_t id = -1, bytes = 0;
      GradReduceScatterOp last;
    };
    llvm::StringMap<ScatterBucket> open;
    int64_t buckets = 0;
    auto close = [](ScatterBucket &sb) {
      if (sb.last)
        sb.last.setFlush(true);
      sb = ScatterBucket();
    };
    auto closeAll = [&] {
      for (auto &entry : open)
        close(entry.second);
    };
    for (Operation &op : program.getMicroBatch().front()) {
      if (isa<BackwardOp, ChunkOp>(op)) {
        closeAll();
        continue;
      }
      auto rs = dyn_cast<GradReduceScatterOp>(op);
      if (!rs || rs.getBucketAttr())
        continue;
      ScatterBucket &sb = open[rs.getAxis()];
      if (sb.id < 0)
        sb.id = buckets++;
      rs.setBucketAttr(b.getI64IntegerAttr(sb.id));
      sb.last = rs;
      sb.bytes += fp32Bytes(rs.getInput());
      if (sb.bytes >= bucketBytes)
        close(sb);
    }
    closeAll();
  }
};

} // namespace
