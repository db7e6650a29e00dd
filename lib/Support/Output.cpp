//===- Output.cpp - reports on standard output ----------------------------===//

#include "llmopt/Support/Output.h"

#include "llvm/Support/raw_ostream.h"
#include <atomic>
#include <mutex>

static std::atomic<bool> wroteToStdout{false};
static std::mutex stdoutMutex;

void llmopt::writeReportToStdout(llvm::StringRef text) {
  std::lock_guard<std::mutex> lock(stdoutMutex);
  llvm::outs() << text;
  llvm::outs().flush();
  wroteToStdout = true;
}

bool llmopt::reportWroteToStdout() { return wroteToStdout; }
