//===- Output.h - reports on standard output --------------------*- C++ -*-===//
//
// Passes that report to a person (`--llm-stats`, the planner's table) write
// to standard output. Reports are buffered, not printed: the driver prints
// them with takeBufferedReports() once the whole run has succeeded and its
// output file is written, so a failing run prints no half of a report. When a
// report is bound for standard output, `llm-opt` does not print the module
// there as well, so `llm-opt m.json --llm-stats="format=json" | jq` works;
// `-o FILE` still writes the module.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_SUPPORT_OUTPUT_H
#define LLMOPT_SUPPORT_OUTPUT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <utility>

namespace llmopt {

/// Queues `text` for standard output and records that a report uses it.
/// Thread-safe; reports keep the order in which they were written.
void writeReportToStdout(llvm::StringRef text);

/// True once a report has been queued for standard output.
bool reportWroteToStdout();

/// Returns the queued reports and empties the queue. The driver calls it
/// after a successful run and prints the result on standard output.
std::string takeBufferedReports();

/// Writes `files` (path, content) all or nothing: each is first written to a
/// temporary beside it, flushed and closed with every write error checked,
/// and only when all of them are complete are they renamed into place. A
/// failure while writing (a full disk, a missing directory) changes no
/// target and leaves no temporary; `error` names the file and the cause.
/// (A rename that fails after others succeeded, e.g. onto a directory,
/// leaves the earlier ones renamed.)
bool writeFilesAtomically(llvm::ArrayRef<std::pair<std::string, std::string>> files,
                          std::string &error);

/// Makes writeFilesAtomically hold back its renames for the rest of the run:
/// each file is still written whole beside its target when a pass writes it
/// (write errors still fail that pass), but it is moved into place only by
/// commitStagedFiles, once the whole run has succeeded, and removed by
/// discardStagedFiles when it failed. A report written by one pass is then
/// not left behind by a run that a later pass failed. llm-opt holds; other
/// callers write at once.
void holdFilesUntilCommit();

/// Moves the held files into place, in the order they were written; false
/// with `error` naming the file that could not be (the rest are removed).
bool commitStagedFiles(std::string &error);

/// Removes the held files' temporaries: none of them reaches its target.
void discardStagedFiles();

/// One file, as writeFilesAtomically.
bool writeFileAtomically(llvm::StringRef path, llvm::StringRef text, std::string &error);

/// Writes `files` (names inside `dir`, contents) as the directory `dir`. A new
/// directory is written whole under a temporary name beside it and renamed
/// into place, so a failure leaves nothing (not even an empty `dir`); an
/// existing one gets its files as writeFilesAtomically writes them, and
/// loses the names in `stale` (files of a previous version it no longer
/// has).
bool writeDirectoryAtomically(llvm::StringRef dir,
                              llvm::ArrayRef<std::pair<std::string, std::string>> files,
                              llvm::ArrayRef<std::string> stale, std::string &error);

} // namespace llmopt

#endif // LLMOPT_SUPPORT_OUTPUT_H
