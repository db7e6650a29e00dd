//===- fused_library.cpp - the plan's generated fused kernels -------------===//

#include "llmopt-runtime/fused_library.h"
#include "llmopt-runtime/plan.h"
#include "llmopt-runtime/sha256.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace llmopt::runtime {
namespace {

/// A shell word: single-quoted, quotes escaped.
std::string quote(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool executable(const std::string &p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

/// `/bin/sh -c cmd`'s exit status (-1 when it cannot start), through
/// posix_spawn rather than std::system's fork(): the CUDA runtime and MPI
/// (with its registered memory) are initialized by the time kernels are
/// compiled.
int runShell(const std::string &cmd) {
  pid_t pid = 0;
  const char *argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char *const *>(argv), environ) != 0)
    return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string findNvcc() {
  if (const char *e = std::getenv("LLMOPT_NVCC"); e && executable(e))
    return e;
  if (const char *home = std::getenv("CUDA_HOME"))
    if (std::string p = std::string(home) + "/bin/nvcc"; executable(p))
      return p;
  if (executable("/usr/local/cuda/bin/nvcc"))
    return "/usr/local/cuda/bin/nvcc";
  if (const char *path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string d;
    while (std::getline(dirs, d, ':'))
      if (std::string p = d + "/nvcc"; executable(p))
        return p;
  }
  return "";
}

bool makeDirs(const std::string &dir) {
  std::string at;
  std::stringstream parts(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/')
    at = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty())
      continue;
    at += part + "/";
    if (mkdir(at.c_str(), 0755) != 0 && errno != EEXIST)
      return false;
  }
  return true;
}

std::string cacheDir() {
  if (const char *e = std::getenv("LLMOPT_CACHE_DIR"); e && *e)
    return e;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/llm-opt";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/llm-opt";
  return "/tmp/llm-opt-cache";
}

} // namespace

std::string kernelCacheDirectory() {
  // Loaded code comes from here: the directory must be this user's and
  // writable by no one else.
  std::string dir = cacheDir();
  struct stat st {};
  if (!makeDirs(dir) || stat(dir.c_str(), &st) != 0 || st.st_uid != getuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)))
    return std::string();
  return dir;
}

FusedLibrary::~FusedLibrary() {
  if (handle)
    dlclose(handle);
}

bool FusedLibrary::load(const Plan &plan, const std::string &sm, std::string &error) {
  if (sm.empty() || sm.size() > 4 || sm.find_first_not_of("0123456789") != std::string::npos) {
    error = "the GPU architecture must be digits (80, 90), got '" + sm + "'";
    return false;
  }
  // What is compiled is generated from plan.json, never read from the plan
  // directory: its kernels.cu could hold any code (host code included).
  std::string source;
  std::set<std::string> names;
  if (!fusedKernelsSource(plan, source, names, error))
    return false;
  if (names.empty()) {
    error = "the plan has no fused kernels";
    return false;
  }
  std::string src = "the plan's fused kernels";
  std::string digest = sha256Hex(source);
  std::string dir = kernelCacheDirectory();
  if (dir.empty()) {
    error = cacheDir() + ": cannot create the kernel cache, or it is not this user's alone "
                         "(set LLMOPT_CACHE_DIR)";
    return false;
  }
  // Named by what the library depends on: the source, nvcc's flags and the
  // CUDA runtime this llm-run was built with (the library links it shared;
  // a cache kept across a CUDA upgrade must not serve the old build).
  std::string flags = " -O3 -std=c++17 -shared -Xcompiler -fPIC -cudart shared";
  std::string key = sha256Hex(digest + flags + " cudart " + std::to_string(CUDART_VERSION));
  file = dir + "/fused-" + key.substr(0, 16) + "-sm" + sm + ".so";
  if (access(file.c_str(), R_OK) != 0) {
    std::string nvcc = findNvcc();
    if (nvcc.empty()) {
      error = "no nvcc to compile " + src + " (set LLMOPT_NVCC or CUDA_HOME)";
      return false;
    }
    // A directory of this build's own (ranks on other nodes may build the
    // same file at once): the checked source, the library and nvcc's log.
    std::string work = dir + "/build-XXXXXX";
    if (!mkdtemp(work.data())) {
      error = dir + ": cannot create a build directory";
      return false;
    }
    std::string cu = work + "/kernels.cu", lib = work + "/kernels.so", log = work + "/nvcc.log";
    auto cleanup = [&] {
      for (const std::string &f : {cu, lib, log})
        std::remove(f.c_str());
      rmdir(work.c_str());
    };
    {
      std::ofstream out(cu, std::ios::binary);
      out << source;
      if (!out.flush()) {
        cleanup();
        error = cu + ": cannot write";
        return false;
      }
    }
    std::string cmd = quote(nvcc) + flags + " -gencode arch=compute_" + sm + ",code=sm_" + sm +
                      " -o " + quote(lib) + " " + quote(cu) + " > " + quote(log) + " 2>&1";
    int rc = runShell(cmd);
    if (rc != 0) {
      std::ifstream l(log);
      std::string first;
      std::getline(l, first);
      error = "nvcc could not compile " + src + " for sm_" + sm + ": " +
              (first.empty() ? "exit status " + std::to_string(rc) : first);
      cleanup();
      return false;
    }
    if (std::rename(lib.c_str(), file.c_str()) != 0) {
      error = file + ": cannot write the compiled kernels";
      cleanup();
      return false;
    }
    cleanup();
  }
  handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *e = dlerror();
    error = file + ": cannot load the compiled kernels: " + (e ? e : "dlopen failed");
    return false;
  }
  return true;
}

FusedLibrary::Launcher FusedLibrary::find(const std::string &name) const {
  if (!handle || name.rfind("fused_", 0) != 0 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
    return nullptr;
  return reinterpret_cast<Launcher>(dlsym(handle, name.c_str()));
}

} // namespace llmopt::runtime
