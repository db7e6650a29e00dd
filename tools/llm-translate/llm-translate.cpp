//===- llm-translate.cpp - import models into llm IR ----------------------===//
//
//   llm-translate --import-hf config.json -o model.mlir
//
//===----------------------------------------------------------------------===//

#include "llmopt/Import/HFConfig.h"
#include "llmopt/Support/Crash.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  llmopt::installCrashGuard();
  llmopt::registerHFImportTranslation();
  return mlir::failed(mlir::mlirTranslateMain(argc, argv, "llm-opt model translation tool")) ? 1
                                                                                             : 0;
}
