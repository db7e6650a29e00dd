//===- LLMStats.cpp - --llm-stats -----------------------------------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Support/Output.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace llmopt::llm {
#define GEN_PASS_DEF_LLMSTATS
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
/// Longest sequence and largest micro-batch the pass accepts: far beyond any
/// training run, and small enough that tokens, bytes and FLOPs stay exact in
/// doubles.
constexpr int64_t kMaxSeqLen = int64_t(1) << 26;
constexpr int64_t kMaxMicroBatch = int64_t(1) << 20;

struct LLMStatsPass : public llmopt::llm::impl::LLMStatsBase<LLMStatsPass> {
  using Base::Base;

  /// The sequence length: the option when given, else the module's
  /// `llm.seq_len`. Emits an error and fails when neither is usable.
  FailureOr<int64_t> resolveSeqLen(ModuleOp module) {
    if (seqLen.hasValue()) {
      if (seqLen <= 0)
        return module.emitError() << "llm-stats: seq-len must be positive, got "
                                  << static_cast<int64_t>(seqLen);
      if (seqLen > kMaxSeqLen)
        return module.emitError() << "llm-stats: seq-len " << static_cast<int64_t>(seqLen)
                                  << " is above the limit of " << kMaxSeqLen
                                  << " (2^26) tokens; pass a training sequence length";
      return static_cast<int64_t>(seqLen);
    }
    Attribute attr = module->getAttr("llm.seq_len");
    if (!attr)
      return module.emitError() << "llm-stats: no sequence length: the module has no "
                                   "llm.seq_len; pass --llm-stats=\"seq-len=N\"";
    auto intAttr = dyn_cast<IntegerAttr>(attr);
    std::optional<int64_t> value;
    if (intAttr && intAttr.getType().isUnsignedInteger()) {
      if (intAttr.getValue().getActiveBits() < 64)
        value = static_cast<int64_t>(intAttr.getValue().getZExtValue());
    } else if (intAttr && intAttr.getValue().getSignificantBits() <= 64) {
      value = intAttr.getValue().getSExtValue();
    }
    if (!value || *value <= 0 || *value > kMaxSeqLen)
      return module.emitError() << "llm-stats: module attribute llm.seq_len is invalid: " << attr
                                << " is not a sequence length from 1 to " << kMaxSeqLen
                                << " (2^26); fix the attribute or pass --llm-stats=\"seq-len=N\"";
    return *value;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (format != "table" && format != "json") {
      module.emitError() << "llm-stats: unknown format '" << format
                         << "': use format=table or format=json";
      return signalPassFailure();
    }
    if (microBatch <= 0) {
      module.emitError() << "llm-stats: micro-batch must be positive, got "
                         << static_cast<int64_t>(microBatch);
      return signalPassFailure();
    }
    if (microBatch > kMaxMicroBatch) {
      module.emitError() << "llm-stats: micro-batch " << static_cast<int64_t>(microBatch)
                         << " is above the limit of " << kMaxMicroBatch << " (2^20) sequences";
      return signalPassFailure();
    }
    if (dtypeBytes != 0 && dtypeBytes != 1 && dtypeBytes != 2 && dtypeBytes != 4 &&
        dtypeBytes != 8) {
      module.emitError() << "llm-stats: dtype-bytes must be 1, 2, 4 or 8, or 0 "
                            "to take element types from the IR; got "
                         << static_cast<unsigned>(dtypeBytes);
      return signalPassFailure();
    }
    FailureOr<int64_t> seq = resolveSeqLen(module);
    if (failed(seq))
      return signalPassFailure();

    CostContext ctx;
    ctx.seqLen = *seq;
    ctx.batch = microBatch;
    ctx.dtypeBytes = dtypeBytes;
    ctx.fusedAttention = fusedAttention;
    FailureOr<func::FuncOp> func = findModelFunc(module);
    if (failed(func))
      return signalPassFailure();
    FailureOr<ModelStats> stats = computeModelStats(*func, ctx);
    if (failed(stats))
      return signalPassFailure();

    std::string text;
    llvm::raw_string_ostream os(text);
    if (format == "json")
      os << llvm::formatv("{0:2}", stats->toJSON()) << "\n";
    else
      stats->printTable(os);
    writeReportToStdout(text);
    markAllAnalysesPreserved();
  }
};
} // namespace
