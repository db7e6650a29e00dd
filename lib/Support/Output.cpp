//===- Output.cpp - reports on standard output ----------------------------===//

#include "llmopt/Support/Output.h"

#include <atomic>
#include <mutex>

static std::atomic<bool> wroteToStdout{false};
static std::mutex reportMutex;

/// Reports queued for standard output; a function-local static so that it
/// exists before any pass runs, whatever the static initialization order.
static std::string &reportBuffer() {
  static std::string buffer;
  return buffer;
}

void llmopt::writeReportToStdout(llvm::StringRef text) {
  std::lock_guard<std::mutex> lock(reportMutex);
  reportBuffer().append(text.begin(), text.end());
  wroteToStdout = true;
}

bool llmopt::reportWroteToStdout() { return wroteToStdout; }

std::string llmopt::takeBufferedReports() {
  std::lock_guard<std::mutex> lock(reportMutex);
  std::string out;
  out.swap(reportBuffer());
  return out;
}
