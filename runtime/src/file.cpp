//===- file.cpp - reading input files that are files ----------------------===//

#include "llmopt-runtime/file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace llmopt::runtime {

namespace {
const char *kindOf(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a file";
}
} // namespace

int openRegularFile(const std::string &path, int64_t &size, std::string &error, bool *notRegular) {
  if (notRegular)
    *notRegular = false;
  // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a
  // writer; it changes nothing for a regular file's reads.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    error = std::string("cannot open it: ") + std::strerror(errno);
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = std::string("cannot read it: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    if (notRegular)
      *notRegular = true;
    error = std::string("is ") + kindOf(st.st_mode) + ", not a regular file";
    ::close(fd);
    return -1;
  }
  size = int64_t(st.st_size);
  return fd;
}

bool readAt(int fd, void *data, size_t size, int64_t offset) {
  char *p = static_cast<char *>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    size -= size_t(n);
    offset += n;
  }
  return true;
}

bool readRegularFile(const std::string &path, std::string &out, std::string &error,
                     bool *notRegular) {
  int64_t size = 0;
  int fd = openRegularFile(path, size, error, notRegular);
  if (fd < 0)
    return false;
  out.assign(size_t(size), '\0');
  bool ok = readAt(fd, out.data(), out.size(), 0);
  ::close(fd);
  if (!ok) {
    error = "cannot read it (it changed while being read?)";
    return false;
  }
  return true;
}

} // namespace llmopt::runtime
