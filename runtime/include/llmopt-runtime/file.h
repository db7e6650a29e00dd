//===- file.h - reading input files that are files ---------------*- C++ -*-===//
//
// The runtime's inputs (plan.json, its checksums, token shards) must be
// regular files: opening a FIFO waits for a writer that may never come, and a
// device such as /dev/zero never ends. They are opened without blocking and
// refused by fstat before a byte is read, so that a wrong path is an error at
// once rather than a hang.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_FILE_H
#define LLMOPT_RUNTIME_FILE_H

#include <cstdint>
#include <string>

namespace llmopt::runtime {

/// Opens `path` for reading when it is a regular file and returns its
/// descriptor and size; -1 otherwise, with `error` saying why ("cannot
/// open it: ...", or "is a FIFO, not a regular file") and `notRegular`, if
/// given, set when the path exists but is not a regular file.
int openRegularFile(const std::string &path, int64_t &size, std::string &error,
                    bool *notRegular = nullptr);

/// Reads all of the regular file at `path`; false with `error` (and
/// `notRegular`) as openRegularFile's, or a read error.
bool readRegularFile(const std::string &path, std::string &out, std::string &error,
                     bool *notRegular = nullptr);

/// Reads exactly `size` bytes at `offset` of `fd` (retrying short reads);
/// false on an error or the end of the file.
bool readAt(int fd, void *data, size_t size, int64_t offset);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_FILE_H
