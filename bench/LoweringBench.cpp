//===- LoweringBench.cpp - compile time against model depth ---------------===//
//
// `--llm-lower-to-plan` (training step, shapes, memory plan, exec, the plan
// directory) of a small Llama (hidden 32) with 250, 500, 1000 and 2000
// layers, in one process as llm-opt runs it (IR verified after every pass).
// The time should grow linearly with the depth (issue 20: 1000 layers under
// 10 s, 2000 under 20 s on a 2-core CI machine).
//
//===----------------------------------------------------------------------===//

#include "llmopt/Import/HFConfig.h"
#include "llmopt/InitAllDialects.h"
#include "llmopt/InitAllPasses.h"

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
BENCHMARK(lowerLayers)->Arg(250)->Arg(500)->Arg(1000)->Arg(2000)->Unit(benchmark::kSecond);

BENCHMARK_MAIN();
