//===- llm-opt.cpp - the llm-opt driver -----------------------------------===//
//
// mlir-opt for llm IR, with two additions:
//  - a model can be given as a Hugging Face config.json wherever a .mlir file
//    is accepted (a .json name, or content starting with `{`, standard input
//    included): it is imported first, with --hf-dtype;
//  - when a report pass (--llm-stats) writes to standard output, the module is
//    not printed there as well (use -o FILE to keep it).
// Output is written only when everything succeeded: a failing run leaves no
// partial file (the module's, or a report a pass wrote before a later pass
// failed) and prints no report.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Import/HFConfig.h"
#include "llmopt/InitAllDialects.h"
#include "llmopt/InitAllPasses.h"
#include "llmopt/Support/Crash.h"
#include "llmopt/Support/IRDepth.h"
#include "llmopt/Support/Output.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

/// Imports a JSON model and returns its MLIR text, or null after printing the
/// error. The text carries the ops' locations (`file.json:1:1`), so later
/// diagnostics name the JSON file; the buffer gets another name so that no
/// diagnostic shows a line of generated MLIR as a line of the JSON file.
static std::unique_ptr<llvm::MemoryBuffer> importJSON(std::unique_ptr<llvm::MemoryBuffer> json,
                                                      DialectRegistry &registry) {
  MLIRContext ctx(registry);
  llvm::SourceMgr sourceMgr;
  std::string name = json->getBufferIdentifier().str();
  StringRef text = json->getBuffer();
  sourceMgr.AddNewSourceBuffer(std::move(json), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  OwningOpRef<ModuleOp> module =
      llmopt::importHFConfig(text, name, &ctx, llmopt::getHFImportOptionsFromCommandLine());
  if (!module)
    return nullptr;
  std::string ir;
  llvm::raw_string_ostream os(ir);
  module->print(os, OpPrintingFlags().enableDebugInfo());
  return llvm::MemoryBuffer::getMemBufferCopy(ir, "<" + name + "> (imported)");
}

/// Prints the reports that passes queued for standard output.
static LogicalResult flushReports() {
  std::string reports = llmopt::takeBufferedReports();
  if (reports.empty())
    return success();
  llvm::outs() << reports;
  llvm::outs().flush();
  if (llvm::outs().has_error()) {
    llvm::errs() << "llm-opt: cannot write the report to standard output\n";
    llvm::outs().clear_error();
    return failure();
  }
  return success();
}

int main(int argc, char **argv) {
  llmopt::installCrashGuard();
  llvm::InitLLVM y(argc, argv);
  // Again after InitLLVM's stack-trace printer, which cancels alarms when it
  // is done: whatever handler runs after it is bounded too.
  llmopt::installCrashGuard();
  llmopt::crashIfAskedForTest();
  DialectRegistry registry;
  llmopt::registerAllDialects(registry);
  llmopt::registerAllPasses();

  // Errors name the op and its location; dumping the whole module after each
  // one buries the message, so that is off unless asked for.
  std::vector<char *> args(argv, argv + argc);
  std::string quietDiag = "--mlir-print-op-on-diagnostic=false";
  bool userSet = llvm::any_of(
      args, [](const char *a) { return StringRef(a).contains("mlir-print-op-on-diagnostic"); });
  if (!userSet)
    args.insert(args.begin() + 1, quietDiag.data());
  int newArgc = static_cast<int>(args.size());

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      newArgc, args.data(), "llm-opt: plan and lower transformer training", registry);
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return asMainReturnCode(
        MlirOptMain(newArgc, args.data(), inputFilename, outputFilename, registry));

  // A FIFO would block until a writer comes, a device like /dev/zero never
  // ends: a named input must be a file (standard input is read as it is).
  if (inputFilename != "-") {
    llvm::sys::fs::file_status status;
    if (!llvm::sys::fs::status(inputFilename, status) && !llvm::sys::fs::is_regular_file(status)) {
      llvm::errs() << inputFilename
                   << ": error: not a regular file (a directory, FIFO or device): give a .mlir "
                      "or config.json file, or '-' to read standard input\n";
      return EXIT_FAILURE;
    }
  }
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input = openInputFile(inputFilename, &errorMessage);
  if (!input) {
    llvm::errs() << "llm-opt: " << errorMessage << "\n";
    return EXIT_FAILURE;
  }
  // A model config is recognized by its name or, on standard input or
  // under another name, by its content.
  if (llmopt::isHFConfigFile(inputFilename) || llmopt::looksLikeHFConfig(input->getBuffer())) {
    input = importJSON(std::move(input), registry);
    if (!input)
      return EXIT_FAILURE;
  } else if (std::string deep = llmopt::irDepthError(input->getBuffer()); !deep.empty()) {
    llvm::errs() << inputFilename << ": error: " << deep << "\n";
    return EXIT_FAILURE;
  }

  // Run into memory so that a failure writes nothing, and print the reports
  // last, so that a failure prints none. The files passes write (report=,
  // report-html=, export-file=) are held until the run has succeeded too.
  llmopt::holdFilesUntilCommit();
  std::string result;
  llvm::raw_string_ostream resultStream(result);
  if (failed(MlirOptMain(resultStream, std::move(input), registry, config))) {
    llmopt::discardStagedFiles();
    return EXIT_FAILURE;
  }

  if (outputFilename != "-" || !llmopt::reportWroteToStdout()) {
    std::unique_ptr<llvm::ToolOutputFile> output = openOutputFile(outputFilename, &errorMessage);
    if (!output) {
      llvm::errs() << "llm-opt: " << errorMessage << "\n";
      llmopt::discardStagedFiles();
      return EXIT_FAILURE;
    }
    output->os() << result;
    output->os().flush();
    if (output->os().has_error()) {
      llvm::errs() << "llm-opt: cannot write '" << outputFilename << "'\n";
      output->os().clear_error();
      llmopt::discardStagedFiles();
      return EXIT_FAILURE;
    }
    if (!llmopt::commitStagedFiles(errorMessage)) {
      llvm::errs() << "llm-opt: " << errorMessage << "\n";
      return EXIT_FAILURE;
    }
    output->keep();
  } else if (!llmopt::commitStagedFiles(errorMessage)) {
    llvm::errs() << "llm-opt: " << errorMessage << "\n";
    return EXIT_FAILURE;
  }
  return failed(flushReports()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
