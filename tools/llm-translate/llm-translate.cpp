//===- llm-translate.cpp - models into llm IR, exec modules into plans ----===//
//
//   llm-translate --import-hf config.json -o model.mlir
//   llm-translate --exec-to-plan exec.mlir -o plan.json
//   llm-translate --exec-to-cuda exec.mlir -o kernels.cu
//
//===----------------------------------------------------------------------===//

#include "llmopt/Import/HFConfig.h"
#include "llmopt/Support/Crash.h"
#include "llmopt/Target/ExecToPlan.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  llmopt::installCrashGuard();
  llmopt::registerHFImportTranslation();
  llmopt::registerExecToPlanTranslation();
  return mlir::failed(mlir::mlirTranslateMain(argc, argv, "llm-opt model translation tool")) ? 1
                                                                                             : 0;
}
