//===- Output.cpp - reports on standard output ----------------------------===//

#include "llmopt/Support/Output.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <mutex>
#include <vector>

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

/// Files staged while held (temporary, target), in the order written.
static std::vector<std::pair<std::string, std::string>> &stagedFiles() {
  static std::vector<std::pair<std::string, std::string>> staged;
  return staged;
}
static bool holdingFiles = false;

void llmopt::holdFilesUntilCommit() {
  std::lock_guard<std::mutex> lock(reportMutex);
  holdingFiles = true;
}

/// Moves `staged` (temporary, target) into place in order; on a failure
/// removes the temporaries not yet moved.
static bool renameInto(llvm::ArrayRef<std::pair<std::string, std::string>> staged,
                       std::string &error) {
  for (size_t i = 0; i < staged.size(); ++i)
    if (std::error_code ec = llvm::sys::fs::rename(staged[i].first, staged[i].second)) {
      error = "cannot write '" + staged[i].second + "': " + ec.message();
      for (size_t j = i; j < staged.size(); ++j)
        llvm::sys::fs::remove(staged[j].first);
      return false;
    }
  return true;
}

bool llmopt::commitStagedFiles(std::string &error) {
  std::lock_guard<std::mutex> lock(reportMutex);
  std::vector<std::pair<std::string, std::string>> staged;
  staged.swap(stagedFiles());
  return renameInto(staged, error);
}

void llmopt::discardStagedFiles() {
  std::lock_guard<std::mutex> lock(reportMutex);
  for (const auto &[temp, target] : stagedFiles())
    llvm::sys::fs::remove(temp);
  stagedFiles().clear();
}

/// Writes each of `files` whole to a temporary of its own beside its target
/// (its own, should two passes write one path) and lists it in `staged`; on a
/// failure removes them all.
static bool stageFiles(llvm::ArrayRef<std::pair<std::string, std::string>> files,
                       std::vector<std::pair<std::string, std::string>> &staged,
                       std::string &error) {
  static std::atomic<unsigned> counter{0};
  for (const auto &[path, text] : files) {
    std::string temp = path + ".tmp-" + std::to_string(llvm::sys::Process::getProcessId()) + "-" +
                       std::to_string(counter++);
    std::error_code ec;
    {
      llvm::raw_fd_ostream os(temp, ec, llvm::sys::fs::OF_None);
      if (!ec) {
        staged.push_back({temp, path});
        os << text;
        os.close();
        ec = os.error();
        os.clear_error();
      }
    }
    if (ec) {
      error = "cannot write '" + path + "': " + ec.message();
      for (const auto &[t, target] : staged)
        llvm::sys::fs::remove(t);
      staged.clear();
      return false;
    }
  }
  return true;
}

bool llmopt::writeFilesAtomically(llvm::ArrayRef<std::pair<std::string, std::string>> files,
                                  std::string &error) {
  std::vector<std::pair<std::string, std::string>> staged;
  if (!stageFiles(files, staged, error))
    return false;
  {
    std::lock_guard<std::mutex> lock(reportMutex);
    if (holdingFiles) {
      llvm::append_range(stagedFiles(), staged);
      return true;
    }
  }
  return renameInto(staged, error);
}

bool llmopt::writeFileAtomically(llvm::StringRef path, llvm::StringRef text, std::string &error) {
  std::pair<std::string, std::string> one{path.str(), text.str()};
  return writeFilesAtomically(one, error);
}

bool llmopt::writeDirectoryAtomically(llvm::StringRef dir,
                                      llvm::ArrayRef<std::pair<std::string, std::string>> files,
                                      llvm::ArrayRef<std::string> stale, std::string &error) {
  auto inside = [](llvm::StringRef d, llvm::StringRef name) {
    llvm::SmallString<256> p(d);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };
  if (llvm::sys::fs::is_directory(dir)) {
    std::vector<std::pair<std::string, std::string>> paths;
    for (const auto &[name, text] : files)
      paths.push_back({inside(dir, name), text});
    // At once even when files are held: the stale files go now, and the
    // directory must not be left half old, half new.
    std::vector<std::pair<std::string, std::string>> staged;
    if (!stageFiles(paths, staged, error) || !renameInto(staged, error))
      return false;
    for (const std::string &name : stale)
      llvm::sys::fs::remove(inside(dir, name));
    return true;
  }
  llvm::StringRef parent = llvm::sys::path::parent_path(dir);
  if (!parent.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(parent)) {
      error = "cannot create '" + parent.str() + "': " + ec.message();
      return false;
    }
  std::string temp = dir.str() + ".tmp-" + std::to_string(llvm::sys::Process::getProcessId());
  llvm::sys::fs::remove_directories(temp);
  if (std::error_code ec = llvm::sys::fs::create_directory(temp)) {
    error = "cannot create '" + dir.str() + "': " + ec.message();
    return false;
  }
  for (const auto &[name, text] : files) {
    std::error_code ec;
    {
      llvm::raw_fd_ostream os(inside(temp, name), ec, llvm::sys::fs::OF_None);
      if (!ec) {
        os << text;
        os.close();
        ec = os.error();
        os.clear_error();
      }
    }
    if (ec) {
      error = "cannot write '" + inside(dir, name) + "': " + ec.message();
      llvm::sys::fs::remove_directories(temp);
      return false;
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, dir)) {
    error = "cannot create '" + dir.str() + "': " + ec.message();
    llvm::sys::fs::remove_directories(temp);
    return false;
  }
  return true;
}
