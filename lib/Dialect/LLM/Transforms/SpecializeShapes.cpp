//===- SpecializeShapes.cpp - fix batch and sequence dimensions -----------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cmath>

namespace llmopt::llm {
#define GEN_PASS_DEF_SPECIALIZESHAPES
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
struct SpecializeShapesPass : public llmopt::llm::impl::SpecializeShapesBase<SpecializeShapesPass> {
  using Base::Base;

  /// Rows per expert of the MoE buffers [experts, capacity, hidden]; 0
  /// while the module has no dispatch.
  int64_t capacity = 0;
  /// Context-parallel degree (1: none).
  int64_t cp = 1;

  /// [?, ?, ...] -> [batch, seq, ...] and [experts, ?, hidden] -> [experts,
  /// capacity, hidden]; other dynamic dimensions are an error.
  FailureOr<Type> specialize(Type t, int64_t b, int64_t s, Location loc) {
    auto r = dyn_cast<RankedTensorType>(t);
    if (!r || r.hasStaticShape())
      return t;
    SmallVector<int64_t> shape(r.getShape());
    for (auto [i, d] : llvm::enumerate(shape)) {
      if (!ShapedType::isDynamic(d))
        continue;
      // Only [?, ?, ...] and [?, ...] are batch and sequence; [4, ?, 8] is an
      // MoE capacity.
      if (i == 1 && !ShapedType::isDynamic(r.getDimSize(0)) && capacity > 0) {
        // After expert parallelism's all-to-all: every rank's rows.
        d = capacity * expertParts(t);
        continue;
      }
      if (i > 1 || (i == 1 && !ShapedType::isDynamic(r.getDimSize(0)))) {
        emitError(loc) << "llm-specialize-shapes: dimension " << i << " of " << t
                       << " is dynamic and is not batch or sequence";
        return failure();
      }
      d = i == 0 ? b : s * (i == 1 ? cpParts(t) : 1);
      // A sequence chunk (sequence parallelism) holds 1/parts of it.
      if (i == 1) {
        int64_t parts = seqParts(t);
        if (s % parts != 0) {
          emitError(loc) << "llm-specialize-shapes: sequence length " << s
                         << " does not split into " << parts
                         << " chunks for sequence parallelism; choose a multiple of " << parts;
          return failure();
        }
        d = s * cpParts(t) / parts;
      }
    }
    return Type(RankedTensorType::get(shape, r.getElementType(), r.getEncoding()));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t b = batch, s = seq;
    if (b < 0 || s < 0) {
      module.emitError() << "llm-specialize-shapes: batch and seq must be positive (sequences "
                            "per rank and micro-batch, tokens per sequence), got batch="
                         << b << " seq=" << s;
      return signalPassFailure();
    }
    // The plan was made for a job: its micro-batch and sequence length win
    // over the model's default length, and may not be changed here (that
    // would train another global batch than the plan's).
    if (auto plan = module->getAttrOfType<PlanAttr>("llm.plan")) {
      if (b != 0 && b != plan.getMicroBatch()) {
        module.emitError()
            << "llm-specialize-shapes: batch=" << b << " differs from the plan's micro-batch of "
            << plan.getMicroBatch() << " (dp " << plan.getDp() << " x " << plan.getNumMicroBatches()
            << " micro-batches); leave batch= out, or plan again with fix=micro_batch:" << b;
        return signalPassFailure();
      }
      if (s != 0 && s != plan.getSeqLen()) {
        module.emitError() << "llm-specialize-shapes: seq=" << s
                           << " differs from the plan's sequence length of " << plan.getSeqLen()
                           << "; leave seq= out, or plan again with seq-len=" << s;
        return signalPassFailure();
      }
      if (b == 0)
        b = plan.getMicroBatch();
      if (s == 0)
        s = plan.getSeqLen();
    }
    if (auto seqAttr = module->getAttrOfType<IntegerAttr>("llm.seq_len"); seqAttr && s == 0)
      s = seqAttr.getInt();
    if (b <= 0 || s <= 0) {
      module.emitError() << "llm-specialize-shapes: no batch or sequence length: pass "
                            "batch=N seq=N, or plan the module first";
      return signalPassFailure();
    }
    // Shapes the plan and the runtime can hold: a rank's tokens fit in 32
    // bits of rows, and nothing overflows when multiplied by widths.
    if (b > (int64_t(1) << 24) || s > (int64_t(1) << 26) || b * s > (int64_t(1) << 31)) {
      module.emitError() << "llm-specialize-shapes: batch=" << b << " x seq=" << s
                         << " tokens per rank and micro-batch is more than a plan holds "
                            "(batch <= 2^24, seq <= 2^26, their product <= 2^31)";
      return signalPassFailure();
    }
    // Context parallelism (llm-partition-cp): each rank holds 2 of 2 cp
    // chunks of the sequence; gathered keys and values hold all of it.
    int64_t full = s;
    if (auto cpAttr = module->getAttrOfType<IntegerAttr>("llm.cp"); cpAttr && cpAttr.getInt() > 1) {
      cp = cpAttr.getInt();
      if (s % (2 * cp) != 0) {
        module.emitError() << "llm-specialize-shapes: sequence length " << s
                           << " does not split into 2 x cp = " << 2 * cp
                           << " chunks for context parallelism; choose a multiple of " << 2 * cp;
        return signalPassFailure();
      }
      s /= cp;
    }
    // Static MoE capacity: with a capacity factor c, ceil(c * tokens * top_k
    // / experts) rows (at most every token); dropless, every token (top-k
    // experts are distinct, so no expert takes a token twice).
    WalkResult caps = module.walk([&](MoEDispatchOp d) {
      auto idx = cast<RankedTensorType>(d.getIndices().getType());
      // A sequence-parallel chunk routes its own tokens only.
      int64_t experts = d.getType().getDimSize(0),
              tokens = b * s / seqParts(d.getInput().getType());
      double cf = d.getCapacityFactor().convertToDouble();
      int64_t c = tokens;
      if (cf > 0)
        c = std::min<int64_t>(
            tokens, int64_t(std::ceil(cf * double(tokens * idx.getDimSize(2)) / double(experts))));
      if (capacity > 0 && c != capacity) {
        d.emitOpError() << "llm-specialize-shapes: MoE layers with different capacities ("
                        << capacity << " and " << c
                        << " rows per expert) are not supported; use one capacity factor";
        return WalkResult::interrupt();
      }
      capacity = c;
      return WalkResult::advance();
    });
    if (caps.wasInterrupted())
      return signalPassFailure();
    for (auto func : module.getOps<func::FuncOp>()) {
      WalkResult res = func.walk([&](Block *block) -> WalkResult {
        for (BlockArgument arg : block->getArguments()) {
          FailureOr<Type> t = specialize(arg.getType(), b, s, func.getLoc());
          if (failed(t))
            return WalkResult::interrupt();
          arg.setType(*t);
        }
        for (Operation &op : *block)
          for (Value r : op.getResults()) {
            FailureOr<Type> t = specialize(r.getType(), b, s, op.getLoc());
            if (failed(t))
              return WalkResult::interrupt();
            r.setType(*t);
          }
        return WalkResult::advance();
      });
      if (res.wasInterrupted())
        return signalPassFailure();
      func.setType(FunctionType::get(func.getContext(), func.getBody().front().getArgumentTypes(),
                                     func.getBody().front().getTerminator()->getOperandTypes()));
    }
    module->setAttr("llm.micro_batch", IntegerAttr::get(IntegerType::get(&getContext(), 64), b));
    module->setAttr("llm.seq_len", IntegerAttr::get(IntegerType::get(&getContext(), 64), full));
  }
};
} // namespace
