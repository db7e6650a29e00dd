//===- InitAllPasses.h - passes llm-opt knows -------------------*- C++ -*-===//

#ifndef LLMOPT_INITALLPASSES_H
#define LLMOPT_INITALLPASSES_H

#include "llmopt/Conversion/Passes.h"
#include "llmopt/Dialect/Exec/Transforms/Passes.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Pipelines/Pipelines.h"
#include "llmopt/Target/Passes.h"
#include "mlir/Transforms/Passes.h"

namespace llmopt {

/// Our passes and the upstream ones our pipelines use.
inline void registerAllPasses() {
  llm::registerLLMPasses();
  exec::registerExecPasses();
  registerLLMOptTargetPasses();
  registerLLMOptConversionPasses();
  registerPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
}

} // namespace llmopt

#endif // LLMOPT_INITALLPASSES_H
