//===- llm-run.cpp - train a plan ------------------------------------------===//
//
//   mpirun -np N llm-run PLAN_DIR --data SHARD[,SHARD...] --steps N
//          [--metrics FILE.jsonl] [--seed S] [--checkpoint-dir DIR]
//          [--checkpoint-every K] [--resume DIR] [--overwrite] [--peak-tflops T] [--quiet]
//
// Ranks come from the launcher: mpirun (OMPI_COMM_WORLD_*), srun
// (SLURM_PROCID / SLURM_NTASKS), PMI (PMI_RANK / PMI_SIZE), or
// RANK / WORLD_SIZE. Runs the CPU backend. Exits non-zero with a message on
// any error; with several ranks a failing rank aborts the job, so no rank is
// left waiting in a collective.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/checkpoint.h"
#ifdef LLMOPT_HAVE_CUDA
#include "llmopt-runtime/cuda_executor.h"
#include "llmopt-runtime/fused_library.h"
#endif
#include "llmopt-runtime/data.h"
#include "llmopt-runtime/executor.h"
#include "llmopt-runtime/mpi_comm.h"
#include "llmopt-runtime/staged_comm.h"
#include "llmopt-runtime/tcp_comm.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace llmopt::runtime;

namespace {

struct Options {
  std::string plan, metrics, checkpointDir, resume, profile, device = "cpu", compileFused;
  int checkCuda = 0; // --check-cuda SM: the compute capability (90 for sm_90)
  /// Start over in a checkpoint directory that already holds a run.
  bool overwrite = false;
  std::vector<std::string> data;
  int64_t steps = 0, checkpointEvery = 0, keepLast = 0;
  uint64_t seed = 42;
  double peakTflops = 0;
  /// The collective watchdog (seconds; 0: none); -1: LLMOPT_COLLECTIVE_TIMEOUT or
  /// the default.
  double collectiveTimeout = -1;
  /// How collectives reach the other ranks: "auto", "nccl" or "staged"
  /// (--comm, else LLMOPT_COMM, else auto).
  std::string comm;
  bool quiet = false;
};

/// A watchdog timeout in seconds from `text`: a number in [0, 1e6].
bool parseTimeout(const char *text, const char *what, double &out, std::string &error) {
  char *end = nullptr;
  double v = std::strtod(text, &end);
  if (!*text || *end || !(v >= 0) || v > 1e6) {
    error = std::string(what) + " must be a number of seconds in [0, 1e6] (0: no watchdog), got '" +
            text + "'";
    return false;
  }
  out = v;
  return true;
}

/// Bounds the launch's calls that block with no timeout of their own
/// (MPI_Init, splitting the world into the mesh's communicators,
/// MPI_Finalize): a rank still in one `seconds` after it came to it says so
/// and exits non-zero, and the launcher ends the job. Without it a rank
/// stopped before or inside MPI_Init holds every other rank in MPI_Init
/// forever: the collective watchdog starts only once the communicator
/// exists. Every rank that waits reports, so the rank that does not is the
/// one stopped: after its message a rank gives the others a few seconds to
/// report before it exits (its exit ends the job). Time the rank did not
/// run (stopped and continued) does not count.
class BlockingCallWatchdog {
public:
  BlockingCallWatchdog(int rank, int world, double seconds)
      : rank(rank), world(world), seconds(seconds) {}
  ~BlockingCallWatchdog() {
    {
      std::lock_guard<std::mutex> g(m);
      quit = true;
    }
    cv.notify_all();
    if (thread.joinable())
      thread.join();
  }
  /// Starts the deadline for the call `what`.
  void arm(const std::string &call) {
    if (seconds <= 0)
      return;
    {
      std::lock_guard<std::mutex> g(m);
      what = call;
      armed = true;
      ++generation;
    }
    cv.notify_all();
    if (!thread.joinable())
      thread = std::thread([this] { watch(); });
  }
  /// The call returned.
  void disarm() {
    {
      std::lock_guard<std::mutex> g(m);
      armed = false;
    }
    cv.notify_all();
  }

private:
  using Clock = std::chrono::steady_clock;
  void watch() {
    std::unique_lock<std::mutex> g(m);
    while (!quit) {
      if (!armed) {
        cv.wait(g, [&] { return quit || armed; });
        continue;
      }
      // Waits in steps, counting only the time this rank ran.
      const uint64_t mine = generation;
      Clock::duration ran{};
      Clock::time_point last = Clock::now();
      while (!quit && armed && generation == mine && ran < std::chrono::duration<double>(seconds)) {
        cv.wait_for(g, std::chrono::milliseconds(100));
        Clock::time_point now = Clock::now();
        if (now - last < std::chrono::milliseconds(500))
          ran += now - last;
        last = now;
      }
      if (quit || !armed || generation != mine)
        continue;
      std::fprintf(stderr,
                   "llm-run: rank %d: error: %s did not return within %g s (the collective "
                   "watchdog, --collective-timeout): rank %d of %d waits in it; a rank that does "
                   "not report this did not come to it (stopped, hung, dead or not started)\n",
                   rank, what.c_str(), seconds, rank, world);
      std::fflush(stderr);
      g.unlock();
      std::this_thread::sleep_for(
          std::chrono::milliseconds(int64_t(1000 * std::min(5.0, std::max(1.0, seconds)))));
      std::_Exit(1);
    }
  }

  const int rank, world;
  const double seconds;
  std::mutex m;
  std::condition_variable cv;
  std::thread thread;
  std::string what;
  bool armed = false, quit = false;
  uint64_t generation = 0;
};

int envInt(const char *a, const char *b, const char *c, const char *d, int dflt) {
  for (const char *name : {a, b, c, d})
    if (const char *v = std::getenv(name))
      return std::atoi(v);
  return dflt;
}

/// The first of the variables that is set, read strictly: an integer in
/// [lo, hi] and nothing else ("abc" used to read as 0). False with `error`
/// naming the variable otherwise.
bool envIntStrict(std::initializer_list<const char *> names, long long lo, long long hi,
                  long long dflt, long long &out, std::string &error) {
  for (const char *name : names)
    if (const char *v = std::getenv(name)) {
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(v, &end, 10);
      if (!*v || *end || errno == ERANGE || n < lo || n > hi) {
        error = std::string(name) + "='" + v + "' must be an integer from " + std::to_string(lo) +
                " to " + std::to_string(hi);
        return false;
      }
      out = n;
      return true;
    }
  out = dflt;
  return true;
}

/// `--profile`: rank 0's kernel times as JSON (docs/runtime.md), written to a
/// temporary name and renamed.
bool writeProfile(const std::string &path, const std::string &planDir, const CpuExecutor &exe,
                  const std::string &device, std::string &error) {
  std::string out = "{\"version\": 1, \"device\": \"" + device + "\", \"plan\": \"";
  for (char c : planDir)
    out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  out += "\", \"kernels\": [";
  bool first = true;
  for (const auto &[key, p] : exe.profile) {
    char buf[256];
    std::string dims;
    for (int64_t d : p.dims)
      dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    std::snprintf(buf, sizeof(buf),
                  "\"calls\": %lld, \"seconds\": %.9g, \"host_seconds\": %.9g, \"flops\": %.9g, "
                  "\"bytes\": %.9g}",
                  static_cast<long long>(p.calls), p.seconds, p.hostSeconds, p.flops, p.bytes);
    out += std::string(first ? "\n  " : ",\n  ") + "{\"kernel\": \"" + p.kernel +
           "\", \"dims\": [" + dims + "], " + buf;
    first = false;
  }
  out += "\n]}\n";
  std::string tmp = path + ".tmp";
  std::FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0 ||
      std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": cannot write the profile";
    return false;
  }
  return true;
}

int usage(const char *msg) {
  std::fprintf(stderr,
               "llm-run: %s\nusage: llm-run PLAN_DIR --data SHARD[,SHARD] --steps N "
               "[--metrics FILE.jsonl] [--seed S] [--checkpoint-dir DIR] "
               "[--checkpoint-every K] [--keep-last N] [--resume DIR] [--overwrite] [--peak-tflops "
               "T] [--profile FILE.json] "
               "[--device cpu|cuda] [--comm auto|nccl|staged] [--collective-timeout SECONDS] "
               "[--quiet]\n"
               "       llm-run PLAN_DIR --compile-fused SM   (build the plan's fused kernels "
               "for sm_SM ahead of a job)\n"
               "       llm-run PLAN_DIR --check-cuda SM      (whether the CUDA backend runs "
               "every rank's program on an sm_SM GPU; no GPU needed)\n",
               msg);
  return 2;
}

/// Whether checkpoint directory `dir` holds (LATEST) a run other than the
/// one `resume` holds: `why` says which and what to do. A `resume` that
/// cannot be read is left to the resume to report.
bool holdsAnotherRun(const std::string &resume, const std::string &dir, std::string &why) {
  if (!std::ifstream(dir + "/LATEST").good())
    return false;
  ResumedCheckpoint from, there;
  std::string error;
  if (!inspectCheckpoint(resume, from, error))
    return false;
  if (!inspectCheckpoint(dir, there, error)) {
    why = dir + " holds a checkpoint that cannot be read (" + error +
          "): replace it with --overwrite, or give another --checkpoint-dir";
    return true;
  }
  if (there.runId == from.runId)
    return false;
  auto named = [](const std::string &id) {
    return id.empty() ? std::string("of no run_id, version 1") : "of run " + id;
  };
  why = dir + " holds another run (" + there.stepDir + " is " + named(there.runId) +
        ", the resumed " + from.stepDir + " " + named(from.runId) +
        "): continue there with --resume " + dir + ", or replace it with --overwrite";
  return true;
}

bool parse(int argc, char **argv, Options &o, std::string &error) {
  // The test suite's second-seed run (ctest lit-runtime-seed7) moves the
  // default; an explicit --seed wins.
  if (const char *s = std::getenv("LLMOPT_TEST_SEED")) {
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (!*s || *end || errno == ERANGE) {
      error = std::string("LLMOPT_TEST_SEED='") + s + "' must be a non-negative integer";
      return false;
    }
    o.seed = uint64_t(v);
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char *flag) -> const char * {
      if (i + 1 >= argc) {
        error = std::string(flag) + " needs a value";
        return nullptr;
      }
      return argv[++i];
    };
    auto number = [&](const char *flag, int64_t &out) {
      const char *v = value(flag);
      if (!v)
        return false;
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(v, &end, 10);
      if (!*v || *end || n < 0 || errno == ERANGE) {
        error = std::string(flag) + " must be a non-negative integer below 2^63, got '" + v + "'";
        return false;
      }
      out = n;
      return true;
    };
    if (a == "--data") {
      const char *v = value("--data");
      if (!v)
        return false;
      std::stringstream ss(v);
      std::string part;
      while (std::getline(ss, part, ','))
        if (!part.empty())
          o.data.push_back(part);
    } else if (a == "--steps") {
      if (!number("--steps", o.steps))
        return false;
    } else if (a == "--metrics") {
      const char *v = value("--metrics");
      if (!v)
        return false;
      o.metrics = v;
    } else if (a == "--compile-fused") {
      const char *v = value("--compile-fused");
      if (!v)
        return false;
      o.compileFused = v;
    } else if (a == "--check-cuda") {
      const char *v = value("--check-cuda");
      if (!v)
        return false;
      char *end = nullptr;
      long sm = std::strtol(v, &end, 10);
      if (end == v || *end || sm < 10 || sm > 1000) {
        error = "--check-cuda takes a compute capability such as 80 or 90, got '" + std::string(v) +
                "'";
        return false;
      }
      o.checkCuda = int(sm);
    } else if (a == "--device") {
      const char *v = value("--device");
      if (!v)
        return false;
      o.device = v;
      if (o.device != "cpu" && o.device != "cuda") {
        error = "--device must be cpu or cuda, got '" + o.device + "'";
        return false;
      }
    } else if (a == "--profile") {
      const char *v = value("--profile");
      if (!v)
        return false;
      o.profile = v;
    } else if (a == "--seed") {
      int64_t s;
      if (!number("--seed", s))
        return false;
      o.seed = uint64_t(s);
    } else if (a == "--checkpoint-dir") {
      const char *v = value("--checkpoint-dir");
      if (!v)
        return false;
      o.checkpointDir = v;
    } else if (a == "--checkpoint-every") {
      if (!number("--checkpoint-every", o.checkpointEvery))
        return false;
    } else if (a == "--keep-last") {
      if (!number("--keep-last", o.keepLast))
        return false;
    } else if (a == "--resume") {
      const char *v = value("--resume");
      if (!v)
        return false;
      o.resume = v;
    } else if (a == "--peak-tflops") {
      const char *v = value("--peak-tflops");
      if (!v)
        return false;
      char *end = nullptr;
      o.peakTflops = std::strtod(v, &end);
      if (!*v || *end || !(o.peakTflops > 0) || o.peakTflops > 1e6) {
        error = std::string("--peak-tflops must be a positive number of TFLOP/s per device "
                            "(e.g. 989 for an H100 SXM in bf16), got '") +
                v + "'";
        return false;
      }
    } else if (a == "--collective-timeout") {
      const char *v = value("--collective-timeout");
      if (!v || !parseTimeout(v, "--collective-timeout", o.collectiveTimeout, error))
        return false;
    } else if (a == "--comm") {
      const char *v = value("--comm");
      if (!v)
        return false;
      o.comm = v;
      if (o.comm != "auto" && o.comm != "nccl" && o.comm != "staged") {
        error = "--comm must be auto, nccl or staged, got '" + o.comm + "'";
        return false;
      }
    } else if (a == "--quiet") {
      o.quiet = true;
    } else if (a == "--overwrite") {
      o.overwrite = true;
    } else if (!a.empty() && a[0] == '-') {
      error = "unknown option '" + a + "'";
      return false;
    } else if (o.plan.empty()) {
      o.plan = a;
    } else {
      error = "unexpected argument '" + a + "'";
      return false;
    }
  }
  if (o.plan.empty())
    error = "no plan directory";
  else if (!o.compileFused.empty() || o.checkCuda)
    return true;
  else if (o.steps < 0 || (o.steps == 0 && o.checkpointDir.empty()))
    error = "--steps N is required (--steps 0 with --checkpoint-dir writes the initial "
            "weights as a step-0 checkpoint)";
  // A checkpoint directory holding a run is continued or replaced on
  // purpose: starting over there without a word would move LATEST back.
  else if (!o.checkpointDir.empty() && o.resume.empty() && !o.overwrite &&
           std::ifstream(o.checkpointDir + "/LATEST").good())
    error = o.checkpointDir + " already holds a run (LATEST): continue it with --resume " +
            o.checkpointDir + ", or start over with --overwrite";
  // Nor does a resumed run continue in a directory holding another run: the
  // two runs' step directories would sit side by side.
  else if (std::string why; !o.checkpointDir.empty() && !o.resume.empty() && !o.overwrite &&
                            holdsAnotherRun(o.resume, o.checkpointDir, why))
    error = why;
  return error.empty();
}

/// A communicator that counts the time spent in it.
class Timed final : public LayeredCommunicator {
public:
  explicit Timed(Communicator &inner) : LayeredCommunicator(inner) {}
  /// Runs `call` (a collective of `inner`), adding its wall time to `seconds`.
  template <typename F> bool timed(F &&call) {
    auto t0 = std::chrono::steady_clock::now();
    bool ok = call();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ok;
  }
  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    return timed([&] { return inner.allReduce(axis, data, count, average, error); });
  }
  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    return timed([&] { return inner.reduceScatter(axis, data, count, average, error); });
  }
  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override {
    return timed([&] { return inner.allGather(axis, data, count, error); });
  }
  bool allReduceMax(const std::string &axis, float *data, int64_t count,
                    std::string &error) override {
    return timed([&] { return inner.allReduceMax(axis, data, count, error); });
  }
  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average, int bucket,
                      std::string &error) override {
    return timed([&] { return inner.startAllReduce(axis, data, count, average, bucket, error); });
  }
  bool waitAllReduce(int bucket, std::string &error) override {
    // Only the wait is exposed communication; the reduction overlapped.
    return timed([&] { return inner.waitAllReduce(bucket, error); });
  }
  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    return timed([&] { return inner.allToAllBlocks(axis, send, recv, count, error); });
  }
  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override {
    return timed([&] { return inner.send(peer, tag, data, count, error); });
  }
  bool flush(std::string &error) override { return inner.flush(error); }
  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override {
    return timed([&] { return inner.recv(peer, tag, data, count, error); });
  }
  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    return timed([&] { return inner.allGatherBlocks(axis, mine, all, count, error); });
  }
  bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                            int event, std::string &error) override {
    return timed([&] { return inner.startAllGatherBlocks(axis, mine, all, count, event, error); });
  }
  bool waitAllGather(int event, std::string &error) override {
    // Only the wait is exposed communication; the gather overlapped.
    return timed([&] { return inner.waitAllGather(event, error); });
  }
  bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                int64_t count, int handle, std::string &error) override {
    return timed(
        [&] { return inner.startReduceScatterBlocks(axis, all, mine, count, handle, error); });
  }
  bool waitReduceScatter(int handle, std::string &error) override {
    return timed([&] { return inner.waitReduceScatter(handle, error); });
  }
  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    return timed([&] { return inner.reduceScatterBlocks(axis, all, mine, count, error); });
  }
  double seconds = 0;
};

} // namespace

static int run(int argc, char **argv) {
  Options o;
  std::string error;
  if (!parse(argc, argv, o, error))
    return usage(error.c_str());
  if (o.comm.empty()) {
    // The environment's choice (the test suite's second run stages every
    // collective through the host: ctest lit-runtime-seed7).
    const char *e = std::getenv("LLMOPT_COMM");
    o.comm = e ? e : "auto";
    if (o.comm != "auto" && o.comm != "nccl" && o.comm != "staged")
      return usage(("LLMOPT_COMM='" + o.comm + "' must be auto, nccl or staged").c_str());
  }
  if (o.comm == "nccl" && o.device != "cuda")
    return usage("--comm nccl needs --device cuda (NCCL runs on GPU memory)");

  if (o.checkCuda) {
    // What the CUDA backend would refuse when it loads each rank's program,
    // found without a GPU (a job's plan checked before it is queued).
    Plan plan;
    if (!loadPlan(o.plan, plan, error)) {
      std::fprintf(stderr, "llm-run: error: %s\n", error.c_str());
      return 1;
    }
#ifdef LLMOPT_HAVE_CUDA
    for (int r = 0; r < int(plan.worldSize); ++r) {
      std::set<std::string> axes;
      bool bf16 = false;
      if (!CudaExecutor::supports(plan, r, o.checkCuda, axes, bf16, error)) {
        std::fprintf(stderr, "llm-run: error: rank %d: %s\n", r, error.c_str());
        return 1;
      }
      std::string over;
      for (const std::string &a : axes)
        over += (over.empty() ? "" : ", ") + a;
      std::printf("rank %d: runs on sm_%d (%s%s%s)\n", r, o.checkCuda, bf16 ? "bf16" : "fp32",
                  over.empty() ? "" : "; collectives over ", over.c_str());
    }
    return 0;
#else
    std::fprintf(stderr, "llm-run: error: this llm-run was built without CUDA\n");
    return 1;
#endif
  }

  if (!o.compileFused.empty()) {
    // The plan's fused kernels, generated from plan.json (the directory's
    // kernels.cu is not read), compiled into the kernel cache (every fused
    // kernel of every program must resolve), so that a job's ranks find it.
    Plan plan;
    if (!loadPlan(o.plan, plan, error)) {
      std::fprintf(stderr, "llm-run: error: %s\n", error.c_str());
      return 1;
    }
#ifdef LLMOPT_HAVE_CUDA
    std::string source;
    std::set<std::string> names;
    if (!fusedKernelsSource(plan, source, names, error)) {
      std::fprintf(stderr, "llm-run: error: %s\n", error.c_str());
      return 1;
    }
    if (names.empty()) {
      std::printf("0 fused kernels for sm_%s: nothing to compile\n", o.compileFused.c_str());
      return 0;
    }
    FusedLibrary lib;
    if (!lib.load(plan, o.compileFused, error)) {
      std::fprintf(stderr, "llm-run: error: %s\n", error.c_str());
      return 1;
    }
    for (const std::string &n : names)
      if (!lib.find(n)) {
        std::fprintf(stderr, "llm-run: error: %s has no launcher '%s'\n", lib.path().c_str(),
                     n.c_str());
        return 1;
      }
    std::printf("%zu fused kernels for sm_%s: %s\n", names.size(), o.compileFused.c_str(),
                lib.path().c_str());
    return 0;
#else
    std::fprintf(stderr, "llm-run: error: this llm-run was built without CUDA\n");
    return 1;
#endif
  }

  long long worldValue = 1, rankValue = 0;
  if (!envIntStrict({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"}, 1, 1 << 24,
                    1, worldValue, error) ||
      !envIntStrict({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}, 0, worldValue - 1,
                    0, rankValue, error)) {
    std::fprintf(stderr, "llm-run: error: %s\n", error.c_str());
    return 1;
  }
  int world = int(worldValue), rank = int(rankValue);
  auto fail = [&](const std::string &msg) {
    std::fprintf(stderr, "llm-run: rank %d: error: %s\n", rank, msg.c_str());
    std::fflush(stderr);
    if (world > 1)
      abortAll(1);
    return 1;
  };

  // The collective watchdog: a stuck collective or transfer ends the job
  // with the ranks that did not arrive named; the launch's blocking calls
  // (MPI_Init first) are bounded by the same timeout.
  double watchdog = Communicator::kDefaultTimeout;
  if (o.collectiveTimeout >= 0)
    watchdog = o.collectiveTimeout;
  else if (const char *t = std::getenv("LLMOPT_COLLECTIVE_TIMEOUT");
           t && !parseTimeout(t, "LLMOPT_COLLECTIVE_TIMEOUT", watchdog, error))
    return fail(error);
  BlockingCallWatchdog blocking(rank, world, world > 1 ? watchdog : 0);

  std::unique_ptr<Communicator> mpi;
  SingleRank single;
  Communicator *comm = &single;
  // torchrun-style launches (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
  // no MPI or Slurm process manager) meet over TCP.
  bool byEnv = !std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE") &&
               !std::getenv("SLURM_NTASKS") && std::getenv("WORLD_SIZE");
  if (world > 1 && byEnv) {
    const char *addr = std::getenv("MASTER_ADDR");
    const char *port = std::getenv("MASTER_PORT");
    const char *timeout = std::getenv("LLMOPT_RENDEZVOUS_TIMEOUT");
    long long portValue = 29500;
    if (!envIntStrict({"MASTER_PORT"}, 1, 65535, 29500, portValue, error))
      return fail(error);
    double seconds = 120.0;
    if (timeout) {
      char *end = nullptr;
      seconds = std::strtod(timeout, &end);
      if (!*timeout || *end || !(seconds > 0) || seconds > 1e6)
        return fail(std::string("LLMOPT_RENDEZVOUS_TIMEOUT='") + timeout +
                    "' must be a positive number of seconds (at most 1e6)");
    }
    (void)port;
    mpi =
        makeTcpCommunicator(rank, world, addr ? addr : "127.0.0.1", int(portValue), seconds, error);
    if (!mpi)
      return fail(error);
    comm = mpi.get();
  } else if (world > 1) {
    blocking.arm("MPI_Init");
    mpi = makeMPICommunicator(&argc, &argv, error);
    blocking.disarm();
    if (!mpi)
      return fail(error);
    comm = mpi.get();
    rank = comm->rank();
    world = comm->size();
  }

  comm->setTimeout(watchdog);

  Plan plan;
  if (!loadPlan(o.plan, plan, error))
    return fail(error);
  if (plan.worldSize != world)
    return fail("the plan is for " + std::to_string(plan.worldSize) +
                " ranks; launch it with mpirun -np " + std::to_string(plan.worldSize));
  int dp = plan.axisSize("dp"), tp = plan.axisSize("tp"), pp = plan.axisSize("pp");
  int cp = plan.axisSize("cp");
  blocking.arm("splitting the ranks into the mesh's axes (MPI_Comm_split)");
  bool meshed =
      comm->useMesh(pp, dp, cp, tp, error) && comm->useExpertAxes(plan.axisSize("ep"), error);
  blocking.disarm();
  if (!meshed)
    return fail(error);

  // --comm staged on the CPU backend: every collective through host copies,
  // as the CUDA backend's host-staged communicator moves GPU buffers (the
  // CPU test of that path).
  HostStaging hostStaging;
  std::unique_ptr<StagedCommunicator> staged;
  if (o.comm == "staged" && o.device == "cpu") {
    staged = std::make_unique<StagedCommunicator>(*comm, hostStaging);
    comm = staged.get();
  }

  TokenData data;
  if (!data.open(o.data, error))
    return fail(error);
  int64_t vocab = 0;
  for (const ParamSpec &p : plan.params)
    if (p.name.find("embed") != std::string::npos || p.name.find("wte") != std::string::npos)
      vocab = p.shardDim == 0 ? p.wholeDim() : p.shape[0]; // a vocabulary-parallel part
  if (vocab && data.maxToken() >= vocab)
    return fail("the data holds token " + std::to_string(data.maxToken()) +
                ", outside the model's vocabulary of " + std::to_string(vocab));

  // Every rank launched alike, before the backend starts (NCCL's setup is
  // collective): a rank with another seed (its replicas' initial weights),
  // step count, data or checkpoint interval would train apart or wait in a
  // collective the others never reach.
  // The ranks that found the difference send what the others still wait
  // for before they stop (they are all alive: each is here).
  auto unalike = [&](const std::string &why) {
    std::string ignored;
    comm->flush(ignored);
    return fail(why);
  };
  // A SHA-256's (or a run id's) first 64 bits (hex digests of 64 digits,
  // run ids of 32).
  auto digest = [](const std::string &hex) {
    return int64_t(std::stoull(hex.substr(0, 16), nullptr, 16));
  };
  if (!agreeOnLaunch(*comm,
                     {{"plan", digest(plan.sha256), true},
                      {"--seed", int64_t(o.seed)},
                      {"--steps", o.steps},
                      {"--data", digest(data.fingerprint()), true},
                      {"--checkpoint-every", o.checkpointEvery},
                      {"--resume (1: given)", o.resume.empty() ? 0 : 1},
                      {"--device (1: cuda)", o.device == "cuda" ? 1 : 0},
                      {"--comm (0: auto, 1: staged, 2: nccl)", o.comm == "staged" ? 1
                                                               : o.comm == "nccl" ? 2
                                                                                  : 0}},
                     error))
    return unalike(error);

    // The backend's parameter store: the CPU executor's host memory, or the
    // GPU's (checkpoints read and write it one tensor at a time). `exe` is
    // the CPU executor: the one that runs the plan, or the one that
    // initializes the CUDA backend's parameters and collects its profile.
#ifdef LLMOPT_HAVE_CUDA
  std::unique_ptr<CudaExecutor> gpu;
  if (o.device == "cuda") {
    gpu = std::make_unique<CudaExecutor>();
    gpu->compileFused = true;
    gpu->comm = comm;
    gpu->commMode = o.comm;
    gpu->stepsWanted = o.steps > 0;
  }
  CpuExecutor cpuExe;
  CpuExecutor &exe = gpu ? gpu->host : cpuExe;
  ParamStore &store = gpu ? static_cast<ParamStore &>(*gpu) : cpuExe;
  // --steps 0 writes the initial weights only: no activations are needed.
  cpuExe.arenasWanted = o.steps > 0;
  if (gpu ? !gpu->init(plan, rank, o.seed, error) : !exe.init(plan, rank, o.seed, error))
    return fail(error);
#else
  if (o.device == "cuda")
    return fail("this llm-run was built without CUDA (no nvcc at build time)");
  CpuExecutor exe;
  ParamStore &store = exe;
  exe.arenasWanted = o.steps > 0; // --steps 0: the initial weights only
  if (!exe.init(plan, rank, o.seed, error))
    return fail(error);
#endif
  ResumedCheckpoint resumed;
  if (!o.resume.empty() &&
      !loadCheckpoint(o.resume, store, plan, rank, world, error, nullptr, &resumed))
    return fail(error);
  // ... and resumed the same checkpoint: the same step of the same run, the
  // same manifest (which holds every rank file's SHA-256, each rank's file
  // checked against it and naming its rank). Ranks resumed from two runs'
  // checkpoints of one step, or from two copies that differ, would train
  // replicas apart.
  if (!o.resume.empty() &&
      !agreeOnLaunch(
          *comm,
          {{"resumed step (--resume)", store.steps},
           {"resumed run (its run_id)", resumed.runId.empty() ? 0 : digest(resumed.runId), true},
           {"resumed checkpoint (its manifest's SHA-256)", digest(resumed.manifestSha256), true}},
          error))
    return unalike(error);

  // --overwrite: the run this one replaces goes once this run's first
  // checkpoint is in place (never before: a failed start leaves it whole).
  SaveOptions saveOptions;
  saveOptions.keepLast = o.keepLast;
  saveOptions.replaceOtherRuns = o.overwrite;

  std::FILE *metrics = nullptr;
  if (rank == 0 && !o.metrics.empty()) {
    metrics = std::fopen(o.metrics.c_str(), o.resume.empty() ? "w" : "a");
    if (!metrics)
      return fail(o.metrics + ": cannot write the metrics file");
  }
  const Buffer &tokensIn = plan.inputs[0];
  // Under context parallelism a rank's input holds its 2 of 2 cp chunks of
  // each sequence.
  int64_t perRank = tokensIn.shape[0], seq = tokensIn.shape[1] * cp;
  int dpIndex = 0, cpIndex = 0, axisSize = 1;
  if (!plan.place("dp", rank, dpIndex, axisSize) || !plan.place("cp", rank, cpIndex, axisSize))
    return fail("the plan's mesh does not place rank " + std::to_string(rank));
  std::vector<int32_t> wholeX, wholeY;
  int64_t stateBytes = 0;
  // fp32 value, gradient accumulator (a chunk under ZeRO-2/3) and AdamW
  // moments (a chunk under ZeRO).
  for (const ParamSpec &p : plan.params)
    if (store.holds(p.name)) {
      Chunk shard;
      bool chunked = false;
      store.layout(p.name, shard, chunked);
      stateBytes +=
          exe.gradientBytes(p.name) + (chunked ? shard.size() : p.elements) * 4 + shard.size() * 8;
    }
  int64_t memory = exe.activationBytes() + stateBytes;
  bool tty = isatty(2) && !o.quiet;
  const char *failRank = std::getenv("LLMOPT_TEST_FAIL_RANK");
  const char *failStep = std::getenv("LLMOPT_TEST_FAIL_STEP");

  const int64_t startStep = store.steps;
  Timed timed(*comm);
  int64_t micro = plan.programFor(rank)->numMicroBatches;
  std::vector<std::vector<int32_t>> x(static_cast<size_t>(micro)), y(static_cast<size_t>(micro));
  while (store.steps < o.steps) {
    int64_t step = store.steps;
    if (failRank && failStep && std::atoi(failRank) == rank && std::atoll(failStep) == step + 1) {
      // A rank that dies without a word (LLMOPT_TEST_FAIL_MODE=kill): the
      // launcher must end the others.
      // A rank that hangs (LLMOPT_TEST_FAIL_MODE=hang, stopped as by SIGSTOP):
      // the others' collective watchdog must end the job.
      const char *mode = std::getenv("LLMOPT_TEST_FAIL_MODE");
      if (mode && std::string(mode) == "kill")
        std::raise(SIGKILL);
      if (mode && std::string(mode) == "hang")
        std::raise(SIGSTOP); // continued: goes on as if it had been slow
      else
        return fail("injected failure at step " + std::to_string(step + 1) +
                    " (LLMOPT_TEST_FAIL_RANK)");
    }
    // Micro-batch i of data-parallel index r (the tp and cp ranks of a
    // group share their batch): sequences [(i * dp + r) * b, + b) of the
    // step's global batch of b * dp * micro sequences.
    for (int64_t i = 0; i < micro; ++i) {
      if (cp == 1) {
        data.batch(step, perRank * dp * micro, (i * dp + dpIndex) * perRank, perRank, seq,
                   x[size_t(i)], y[size_t(i)]);
        continue;
      }
      data.batch(step, perRank * dp * micro, (i * dp + dpIndex) * perRank, perRank, seq, wholeX,
                 wholeY);
      // Chunks cpIndex and 2 cp - 1 - cpIndex of each sequence.
      int64_t half = seq / (2 * cp);
      x[size_t(i)].clear();
      y[size_t(i)].clear();
      for (int64_t b = 0; b < perRank; ++b)
        for (int64_t chunk : {int64_t(cpIndex), int64_t(2 * cp - 1 - cpIndex)}) {
          int64_t at = b * seq + chunk * half;
          x[size_t(i)].insert(x[size_t(i)].end(), wholeX.begin() + at, wholeX.begin() + at + half);
          y[size_t(i)].insert(y[size_t(i)].end(), wholeY.begin() + at, wholeY.begin() + at + half);
        }
    }
    // Per-kernel times from the second step on (the first warms up).
    exe.profiling = !o.profile.empty() && (store.steps > startStep || o.steps - startStep == 1);
    timed.seconds = 0;
    auto t0 = std::chrono::steady_clock::now();
    StepResult r;
#ifdef LLMOPT_HAVE_CUDA
    bool stepped = gpu ? gpu->step(x, y, r, error) : exe.step(x, y, timed, r, error);
#else
    bool stepped = exe.step(x, y, timed, r, error);
#endif
    if (!stepped)
      return fail("step " + std::to_string(step + 1) + ": " + error);
    // Every staged collective completed within its step.
    if (staged && staged->inFlight() != 0)
      return fail("step " + std::to_string(step + 1) + ": the staged communicator still holds " +
                  std::to_string(staged->inFlight()) + " host copies after the step");
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double tokensPerS = double(perRank * dp * micro * seq) / dt;
    if (metrics) {
      // JSON has no NaN or infinity: a non-finite value is null.
      auto num = [](double v) {
        char buf[32];
        if (!std::isfinite(v))
          return std::string("null");
        std::snprintf(buf, sizeof buf, "%.9g", v);
        return std::string(buf);
      };
      std::fprintf(metrics,
                   "{\"step\": %lld, \"loss\": %s, \"grad_norm\": %s, \"tokens_per_s\": %.6g, "
                   "\"step_time_s\": %.6g, \"peak_memory_bytes\": %lld, "
                   "\"exposed_comm_share\": %.6g",
                   static_cast<long long>(store.steps), num(r.loss).c_str(),
                   num(r.gradNorm).c_str(), tokensPerS, dt, static_cast<long long>(memory),
                   dt > 0 ? timed.seconds / dt : 0.0);
      if (r.lossScaling)
        std::fprintf(metrics, ", \"loss_scale\": %.9g, \"skipped\": %s", r.lossScale,
                     r.skipped ? "true" : "false");
      if (r.deviceBytes > 0)
        std::fprintf(metrics, ", \"device_memory_bytes\": %lld",
                     static_cast<long long>(r.deviceBytes));
      // MFU against the per-GPU peak the user names (none on the CPU).
      if (o.peakTflops > 0 && plan.trainFlopsPerToken > 0)
        std::fprintf(metrics, ", \"mfu\": %.6g}\n",
                     plan.trainFlopsPerToken * tokensPerS / (o.peakTflops * 1e12 * world));
      else
        std::fprintf(metrics, "}\n");
      std::fflush(metrics);
    }
    if (rank == 0 && !o.quiet)
      std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  grad norm %.3f  %.0f tok/s%s",
                   tty ? "\r" : "", static_cast<long long>(store.steps),
                   static_cast<long long>(o.steps), r.loss, r.gradNorm, tokensPerS,
                   tty ? "" : "\n");
    // A non-finite loss or gradient norm is a run gone wrong, not a step
    // to train on (dynamic loss scaling skips such steps itself): stop
    // before anything is saved from it.
    if ((!std::isfinite(r.loss) || !std::isfinite(r.gradNorm)) && !(r.lossScaling && r.skipped))
      return fail("step " + std::to_string(store.steps) + ": the loss is " +
                  std::to_string(r.loss) + " and the gradient norm " + std::to_string(r.gradNorm) +
                  "; training stopped, nothing saved from this step (check the data, the "
                  "initialization and the learning rate, or train with loss scaling)");
    if (!o.checkpointDir.empty() && o.checkpointEvery > 0 && store.steps % o.checkpointEvery == 0 &&
        !saveCheckpoint(o.checkpointDir, store, plan, *comm, error, saveOptions))
      return fail("checkpoint: " + error);
  }
  if (tty && rank == 0)
    std::fprintf(stderr, "\n");
  // The last step is always saved (unless the periodic save just did), so a
  // finished run can be extended later. --steps 0 saves the initial (or
  // resumed) weights: to start another framework from, or resharded to this
  // run's plan.
  bool ran = store.steps > startStep;
  bool savedLast = ran && o.checkpointEvery > 0 && store.steps % o.checkpointEvery == 0;
  if (!o.checkpointDir.empty() && ((ran && !savedLast) || o.steps == 0) &&
      !saveCheckpoint(o.checkpointDir, store, plan, *comm, error, saveOptions))
    return fail("checkpoint: " + error);
  if (metrics)
    std::fclose(metrics);
  if (!o.profile.empty() && rank == 0 && !writeProfile(o.profile, o.plan, exe, o.device, error))
    return fail(error);
  blocking.arm("MPI_Finalize");
  finalizeMPI();
  blocking.disarm();
  return 0;
}

int main(int argc, char **argv) {
  // A file-size limit (ulimit -f) is a write error that the checkpoint,
  // metrics and profile writers report, not a silent kill by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  // An allocation that fails anywhere else (parameters, moments, data) ends
  // the job with a message, not an uncaught std::bad_alloc. (Checkpoints are
  // written to a temporary and renamed: none is left half written.)
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc &) {
    int world = envInt("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE", 1);
    int rank = envInt("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK", 0);
    std::fprintf(stderr,
                 "llm-run: rank %d: error: out of host memory (a plan too large for this "
                 "machine's RAM: lower it with fewer tokens per micro-batch or more ranks)\n",
                 rank);
    std::fflush(stderr);
    if (world > 1)
      abortAll(1);
    return 1;
  }
}
