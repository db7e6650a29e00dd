//===- Crash.h - a fatal signal ends the tool, promptly ----------*- C++ -*-===//
//
// The compiler tools print LLVM's stack dump on a fatal signal (a bug, or a
// stack overflow). That handler must not be able to hang: it runs without
// llvm-symbolizer (a child process started from a crashing one, which hung 5
// of 12 stack overflows when the input nesting was unlimited), and an alarm
// armed before anything else in the handler ends the process if the rest of
// it hangs. Call installCrashGuard() first thing in main, before InitLLVM,
// and again after it: LLVM's stack-trace printer cancels pending alarms when
// it finishes, so the second one bounds whatever runs after the printer.
// It also ignores SIGXFSZ: a file-size limit becomes a write error that the
// atomic writers report and clean up after.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_SUPPORT_CRASH_H
#define LLMOPT_SUPPORT_CRASH_H

namespace llmopt {

/// Seconds a fatal signal's handling may take before the process is ended.
inline constexpr unsigned kCrashHandlerSeconds = 10;

void installCrashGuard();

/// Test hook: with LLMOPT_TEST_CRASH=signal, =stack-overflow or
/// =handler-hangs (a signal handler that never returns) in the environment,
/// crashes the way it names (lit tests that the process still ends).
void crashIfAskedForTest();

} // namespace llmopt

#endif // LLMOPT_SUPPORT_CRASH_H
