//===- LoweringBench.cpp - compile time against model depth ---------------===//
//
// `--llm-lower-to-plan` (training step, shapes, memory plan, exec, the plan
// directory) of a small Llama (hidden 32) with 250, 500, 1000 and 2000
// layers, in one process as llm-opt runs it (IR verified after every pass),
// without a plan (zero3=0) and with a ZeRO-3 one (zero3=1: dp 2, the
// search's pick for deep models, which adds a gather before every use of a
// parameter). The time should grow linearly with the depth (issue 20: 1000
// layers under 10 s, 2000 under 20 s on a 2-core CI machine; issue 31: 2000
// layers under 30 s with ZeRO-3).
//
//===----------------------------------------------------------------------===//

#include "llmopt/Import/HFConfig.h"
#include "llmopt/InitAllDialects.h"
#include "llmopt/InitAllPasses.h"
#include "llmopt/Support/Output.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <benchmark/benchmark.h>

#include <string>

static void lowerLayers(benchmark::State &state) {
  static const bool registered = [] {
    llmopt::registerAllPasses();
    return true;
  }();
  (void)registered;
  const int64_t layers = state.range(0);
  const bool zero3 = state.range(1) != 0;
  std::string config = llvm::formatv(
      R"({{"model_type": "llama", "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": {0}, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "vocab_size": 256})",
      layers);
  llvm::SmallString<128> dir;
  llvm::sys::fs::createUniqueDirectory("llm-opt-bench-lowering", dir);
  mlir::DialectRegistry registry;
  llmopt::registerAllDialects(registry);
  llmopt::HFImportOptions options;
  options.dtype = "f32";
  for (auto _ : state) {
    mlir::MLIRContext context(registry);
    context.disableMultithreading();
    mlir::OwningOpRef<mlir::ModuleOp> module =
        llmopt::importHFConfig(config, "deep.json", &context, options);
    if (module && zero3) {
      // The plan search is not the lowering: left out of the time.
      state.PauseTiming();
      mlir::PassManager plan(&context);
      bool planned =
          mlir::succeeded(mlir::parsePassPipeline(
              "llm-auto-parallel{stack=llm-run-cpu cluster=dgx-h100 gpus=2 global-batch=4 "
              "seq-len=32 fix=dp:2,zero:3,micro_batch:1 compare=false top-k=1}",
              plan)) &&
          mlir::succeeded(plan.run(*module));
      (void)llmopt::takeBufferedReports(); // the table it prints
      state.ResumeTiming();
      if (!planned) {
        state.SkipWithError("the ZeRO-3 plan failed");
        break;
      }
    }
    mlir::PassManager pm(&context);
    if (!module ||
        mlir::failed(mlir::parsePassPipeline(
            ("llm-lower-to-plan{dir=" + dir + "/plan batch=1 seq=32}").str(), pm)) ||
        mlir::failed(pm.run(*module))) {
      state.SkipWithError("the lowering failed");
      break;
    }
  }
  llvm::sys::fs::remove_directories(dir);
  state.counters["layers"] = double(layers);
}
BENCHMARK(lowerLayers)
    ->ArgNames({"layers", "zero3"})
    ->ArgsProduct({{250, 500, 1000, 2000}, {0, 1}})
    ->Unit(benchmark::kSecond);

BENCHMARK_MAIN();
