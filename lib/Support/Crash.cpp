//===- Crash.cpp - a fatal signal ends the tool, promptly -----------------===//

#include "llmopt/Support/Crash.h"

#include "llvm/Support/Signals.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

void llmopt::installCrashGuard() {
  // Read when the stack dump is printed; a user's own setting wins.
  ::setenv("LLVM_DISABLE_SYMBOLIZATION", "1", /*overwrite=*/0);
  // Registered before InitLLVM's stack-trace printer, so it runs first.
  llvm::sys::AddSignalHandler([](void *) { ::alarm(kCrashHandlerSeconds); }, nullptr);
  // A file-size limit (ulimit -f) is a write error the writers report (and
  // clean up after), not a crash: LLVM treats SIGXFSZ as fatal.
  std::signal(SIGXFSZ, SIG_IGN);
}

namespace {
// Recursion the compiler cannot turn into a loop, bounded only by the stack
// (the test hook overflows it on purpose).
[[gnu::noinline]] int overflow(volatile int depth, int limit) {
  volatile char frame[4096];
  frame[0] = char(depth);
  if (depth == limit)
    return frame[0];
  return overflow(depth + 1, limit) + frame[0];
}
} // namespace

void llmopt::crashIfAskedForTest() {
  const char *how = std::getenv("LLMOPT_TEST_CRASH");
  if (!how)
    return;
  if (std::strcmp(how, "signal") == 0)
    std::raise(SIGSEGV);
  if (std::strcmp(how, "stack-overflow") == 0)
    (void)overflow(0, -1);
  if (std::strcmp(how, "handler-hangs") == 0) {
    // A handler that never returns (as a deadlocked symbolizer would): the
    // alarm armed before it must end the process.
    llvm::sys::AddSignalHandler(
        [](void *) {
          for (;;)
            ::pause();
        },
        nullptr);
    std::raise(SIGSEGV);
  }
}
