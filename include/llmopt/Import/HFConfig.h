//===- HFConfig.h - Hugging Face config.json importer -----------*- C++ -*-===//
//
// Builds an llm module from a Hugging Face style `config.json` (GPT-2,
// Llama 2/3/3.1, Mistral, Mixtral, Qwen2). Parameters get the names the
// architecture's checkpoints use.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_IMPORT_HFCONFIG_H
#define LLMOPT_IMPORT_HFCONFIG_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include <string>

namespace llmopt {

struct HFImportOptions {
  /// Element type of weights and activations: bf16, f16 or f32.
  std::string dtype = "bf16";
  /// Model name recorded as `llm.name`; defaults to the file's stem
  /// ("stdin" for standard input).
  std::string name;
};

/// Imports `json`, the contents of `filename`. On bad input, emits one error
/// located at the offending field of `filename` and returns null.
mlir::OwningOpRef<mlir::ModuleOp> importHFConfig(llvm::StringRef json, llvm::StringRef filename,
                                                 mlir::MLIRContext *context,
                                                 const HFImportOptions &options = {});

/// True when `filename` names a JSON model (".json").
bool isHFConfigFile(llvm::StringRef filename);

/// True when `contents` looks like a JSON object rather than MLIR: its first
/// character other than white space is `{` (and not the `{-#` of an MLIR
/// resource section).
bool looksLikeHFConfig(llvm::StringRef contents);

/// The options given on the command line (`--hf-dtype`).
HFImportOptions getHFImportOptionsFromCommandLine();

/// Registers `--import-hf` with mlir-translate style tools.
void registerHFImportTranslation();

} // namespace llmopt

#endif // LLMOPT_IMPORT_HFCONFIG_H
