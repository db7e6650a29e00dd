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
struct LLMStatsPass
    : public llmopt::llm::impl::LLMStatsBase<LLMStatsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (format != "table" && format != "json") {
      module.emitError() << "llm-stats: unknown format '" << format
                         << "': use format=table or format=json";
      return signalPassFailure();
    }
    CostContext ctx;
    ctx.seqLen = seqLen > 0 ? seqLen : getDefaultSeqLen(module);
    if (ctx.seqLen <= 0) {
      module.emitError() << "llm-stats: no sequence length: the module has no "
                            "llm.seq_len; pass --llm-stats=\"seq-len=N\"";
      return signalPassFailure();
    }
    if (microBatch <= 0) {
      module.emitError() << "llm-stats: micro-batch must be positive, got "
                         << static_cast<int64_t>(microBatch);
      return signalPassFailure();
    }
    ctx.batch = microBatch;
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
