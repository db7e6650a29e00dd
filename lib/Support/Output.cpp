//===- Output.cpp - reports on standard output ----------------------------===//

#include "llmopt/Support/Output.h"

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

bool llmopt::writeFilesAtomically(llvm::ArrayRef<std::pair<std::string, std::string>> files,
                                  std::string &error) {
  std::vector<std::string> temps;
  auto cleanup = [&] {
    for (const std::string &t : temps)
      llvm::sys::fs::remove(t);
  };
  // Stage every file completely first.
  for (const auto &[path, text] : files) {
    std::string temp = path + ".tmp-" + std::to_string(llvm::sys::Process::getProcessId());
    std::error_code ec;
    {
      llvm::raw_fd_ostream os(temp, ec, llvm::sys::fs::OF_None);
      if (!ec) {
        temps.push_back(temp);
        os << text;
        os.close();
        ec = os.error();
        os.clear_error();
      }
    }
    if (ec) {
      error = "cannot write '" + path + "': " + ec.message();
      cleanup();
      return false;
    }
  }
  // Then move them into place.
  for (size_t i = 0; i < files.size(); ++i)
    if (std::error_code ec = llvm::sys::fs::rename(temps[i], files[i].first)) {
      error = "cannot write '" + files[i].first + "': " + ec.message();
      for (size_t j = i; j < temps.size(); ++j)
        llvm::sys::fs::remove(temps[j]);
      return false;
    }
  return true;
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
    if (!writeFilesAtomically(paths, error))
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
