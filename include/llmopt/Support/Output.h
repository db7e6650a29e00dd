//===- Output.h - reports on standard output --------------------*- C++ -*-===//
//
// Passes that report to a person (`--llm-stats`, the planner's table) write
// to standard output. When one has, `llm-opt` does not print the module there
// as well, so `llm-opt m.json --llm-stats="format=json" | jq` works; `-o FILE`
// still writes the module.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_SUPPORT_OUTPUT_H
#define LLMOPT_SUPPORT_OUTPUT_H

#include "llvm/ADT/StringRef.h"

namespace llmopt {

/// Writes `text` to standard output now and records that a report used it.
void writeReportToStdout(llvm::StringRef text);

/// True once a report has been written to standard output.
bool reportWroteToStdout();

} // namespace llmopt

#endif // LLMOPT_SUPPORT_OUTPUT_H
