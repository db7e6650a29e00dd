//===- mpi_comm.cpp - collectives over MPI --------------------------------===//

#include "llmopt-runtime/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <vector>

#ifdef LLMOPT_HAVE_MPI
#include <mpi.h>
#endif

namespace llmopt::runtime {

#ifdef LLMOPT_HAVE_MPI
namespace {
class MPICommunicator final : public Communicator {
  /// A non-blocking collective started and not yet waited for.
  struct InFlight {
    MPI_Request request;
    MPI_Comm comm;
    std::string what;
  };

public:
  MPICommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool useMesh(int pp, int dp, int cp, int tp, std::string &error) override {
    if (pp * dp * cp * tp != size_) {
      error = "a " + std::to_string(pp) + " x " + std::to_string(dp) + " x " + std::to_string(cp) +
              " x " + std::to_string(tp) + " mesh needs " + std::to_string(pp * dp * cp * tp) +
              " ranks, not " + std::to_string(size_);
      return false;
    }
    dp_ = dp, cp_ = cp, tp_ = tp;
    int stageSize = dp * cp * tp;
    int stage = rank_ / stageSize, dpIndex = (rank_ / (cp * tp)) % dp, cpIndex = (rank_ / tp) % cp,
        tpIndex = rank_ % tp;
    // Colors: the coordinates on every other axis.
    if (MPI_Comm_split(MPI_COMM_WORLD, rank_ / tp, tpIndex, &tpComm) != MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, (stage * dp + dpIndex) * tp + tpIndex, cpIndex, &cpComm) !=
            MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, (stage * cp + cpIndex) * tp + tpIndex, dpIndex, &dpComm) !=
            MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, rank_ % stageSize, stage, &ppComm) != MPI_SUCCESS ||
        // The first and last stage, for weights they share.
        MPI_Comm_split(MPI_COMM_WORLD,
                       pp > 1 && (stage == 0 || stage == pp - 1) ? rank_ % stageSize
                                                                 : MPI_UNDEFINED,
                       stage, &tiedComm) != MPI_SUCCESS) {
      error = "MPI_Comm_split failed";
      return false;
    }
    return true;
  }

  bool useExpertAxes(int ep, std::string &error) override {
    if (ep == 1)
      return true;
    if (dp_ % ep != 0) {
      error = "ep " + std::to_string(ep) + " does not divide dp " + std::to_string(dp_);
      return false;
    }
    // Within a dp group (same stage and tp index): consecutive dp ranks form
    // an ep group; ranks with the same ep index form an edp group.
    int stageSize = dp_ * cp_ * tp_;
    int group = ((rank_ / stageSize) * cp_ + (rank_ / tp_) % cp_) * tp_ + rank_ % tp_,
        dpIndex = (rank_ / (cp_ * tp_)) % dp_;
    if (MPI_Comm_split(MPI_COMM_WORLD, group * dp_ + dpIndex / ep, dpIndex % ep, &epComm) !=
            MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, group * dp_ + dpIndex % ep, dpIndex / ep, &edpComm) !=
            MPI_SUCCESS) {
      error = "MPI_Comm_split failed";
      return false;
    }
    return true;
  }

  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average, int bucket,
                      std::string &error) override {
    MPI_Comm comm = commFor(axis);
    Started &st = buckets[bucket];
    st.comm = comm;
    st.what = label("all-reduce", axis) + " (gradient bucket " + std::to_string(bucket) + ")";
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, data + at, len, MPI_FLOAT, MPI_SUM, comm, &r);
      if (rc != MPI_SUCCESS) {
        error = "MPI_Iallreduce failed with code " + std::to_string(rc);
        return false;
      }
      st.requests.push_back(r);
      at += len;
    }
    if (average) {
      int n = 1;
      MPI_Comm_size(comm, &n);
      st.scale.push_back({data, count, n});
    }
    return true;
  }

  bool waitAllReduce(int bucket, std::string &error) override {
    auto it = buckets.find(bucket);
    if (it == buckets.end())
      return true;
    Started &st = it->second;
    if (!wait(st.requests, st.what, st.comm, error))
      return false;
    for (const Scale &s : st.scale)
      for (int64_t i = 0; i < s.count; ++i)
        s.data[i] /= float(s.ranks);
    buckets.erase(it);
    return true;
  }

  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allToAllBlocks(axis, send, recv, count, error);
    MPI_Request r;
    int rc =
        MPI_Ialltoall(send, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT, commFor(axis), &r);
    return started(rc, "MPI_Ialltoall", error) &&
           wait(r, label("all-to-all", axis), commFor(axis), error);
  }

  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override {
    // Non-blocking from a private copy: the caller may reuse its buffer at
    // once, and two stages sending to each other cannot deadlock.
    pending.push_back(
        Pending{std::vector<float>(data, data + count),
                {},
                "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")"});
    Pending &p = pending.back();
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      if (MPI_Isend(p.data.data() + at, len, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &r) !=
          MPI_SUCCESS) {
        error = "MPI_Isend to rank " + std::to_string(peer) + " failed";
        return false;
      }
      p.requests.push_back(r);
      at += len;
    }
    return true;
  }

  bool flush(std::string &error) override {
    for (Pending &p : pending)
      if (!wait(p.requests, p.what, MPI_COMM_WORLD, error))
        return false;
    pending.clear();
    return true;
  }

  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override {
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      if (!started(MPI_Irecv(data + at, len, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &r), "MPI_Irecv",
                   error) ||
          !wait(r,
                "receive from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
                MPI_COMM_WORLD, error))
        return false;
      at += len;
    }
    return true;
  }

  void axisPosition(const std::string &axis, int &index, int &size) const override {
    MPI_Comm comm = commFor(axis);
    MPI_Comm_rank(comm, &index);
    MPI_Comm_size(comm, &size);
  }

  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allGatherBlocks(axis, mine, all, count, error);
    MPI_Request r;
    int rc =
        MPI_Iallgather(mine, int(count), MPI_FLOAT, all, int(count), MPI_FLOAT, commFor(axis), &r);
    return started(rc, "MPI_Iallgather", error) &&
           wait(r, label("all-gather", axis), commFor(axis), error);
  }

  bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                            int event, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allGatherBlocks(axis, mine, all, count, error);
    MPI_Request r;
    int rc =
        MPI_Iallgather(mine, int(count), MPI_FLOAT, all, int(count), MPI_FLOAT, commFor(axis), &r);
    return track(gathers, event, r, rc, commFor(axis),
                 label("all-gather", axis) + " (parameters, event " + std::to_string(event) + ")",
                 error);
  }

  bool waitAllGather(int event, std::string &error) override {
    return finish(gathers, event, error);
  }

  bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                int64_t count, int handle, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::reduceScatterBlocks(axis, all, mine, count, error);
    MPI_Request r;
    int rc =
        MPI_Ireduce_scatter_block(all, mine, int(count), MPI_FLOAT, MPI_SUM, commFor(axis), &r);
    return track(scatters, handle, r, rc, commFor(axis),
                 label("reduce-scatter", axis) + " (gradients, handle " + std::to_string(handle) +
                     ")",
                 error);
  }

  bool waitReduceScatter(int handle, std::string &error) override {
    return finish(scatters, handle, error);
  }

  /// A non-blocking collective `what` over `comm` just started as `r` (MPI
  /// code `rc`), kept under `handle` until finish() waits for it.
  static bool track(std::map<int, InFlight> &pending, int handle, MPI_Request r, int rc,
                    MPI_Comm comm, const std::string &what, std::string &error) {
    if (rc != MPI_SUCCESS) {
      error = "starting the " + what + " failed with MPI code " + std::to_string(rc);
      return false;
    }
    if (!pending.emplace(handle, InFlight{r, comm, what}).second) {
      error = what + " started twice";
      return false;
    }
    return true;
  }

  bool finish(std::map<int, InFlight> &pending, int handle, std::string &error) {
    auto it = pending.find(handle);
    if (it == pending.end())
      return true; // ran at once
    if (!wait(it->second.request, it->second.what, it->second.comm, error))
      return false;
    pending.erase(it);
    return true;
  }

  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::reduceScatterBlocks(axis, all, mine, count, error);
    MPI_Request r;
    int rc =
        MPI_Ireduce_scatter_block(all, mine, int(count), MPI_FLOAT, MPI_SUM, commFor(axis), &r);
    return started(rc, "MPI_Ireduce_scatter_block", error) &&
           wait(r, label("reduce-scatter", axis), commFor(axis), error);
  }

  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int n = 1;
    MPI_Comm_size(comm, &n);
    // Chunks below 2^31 elements (MPI counts are int).
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      MPI_Request r;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, data + at, len, MPI_FLOAT, MPI_SUM, comm, &r);
      if (!started(rc, "MPI_Iallreduce", error) || !wait(r, label("all-reduce", axis), comm, error))
        return false;
      at += len;
    }
    if (average)
      for (int64_t i = 0; i < count; ++i)
        data[i] /= float(n);
    return true;
  }

  bool allReduceMax(const std::string &axis, float *data, int64_t count,
                    std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allReduceMax(axis, data, count, error);
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_MAX, commFor(axis), &r);
    return started(rc, "MPI_Iallreduce", error) &&
           wait(r, label("all-reduce (max)", axis), commFor(axis), error);
  }

  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    int64_t c = (count + size - 1) / size;
    if (c * size > (int64_t(1) << 30))
      return Communicator::reduceScatter(axis, data, count, average, error);
    std::vector<float> padded(size_t(c * size), 0.0f);
    std::vector<float> mine(size_t(c), 0.0f);
    std::copy(data, data + count, padded.begin());
    MPI_Request r;
    int rc =
        MPI_Ireduce_scatter_block(padded.data(), mine.data(), int(c), MPI_FLOAT, MPI_SUM, comm, &r);
    if (!started(rc, "MPI_Ireduce_scatter_block", error) ||
        !wait(r, label("reduce-scatter", axis), comm, error))
      return false;
    Chunk own = shardChunk(count, size, rank);
    for (int64_t i = 0; i < own.size(); ++i)
      data[own.begin + i] = average ? mine[size_t(i)] / float(size) : mine[size_t(i)];
    return true;
  }

  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int size = 1;
    MPI_Comm_size(comm, &size);
    int64_t c = (count + size - 1) / size;
    if (c * size > (int64_t(1) << 30))
      return Communicator::allGather(axis, data, count, error);
    std::vector<float> padded(size_t(c * size), 0.0f);
    std::copy(data, data + count, padded.begin());
    MPI_Request r;
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, padded.data(), int(c), MPI_FLOAT,
                            comm, &r);
    if (!started(rc, "MPI_Iallgather", error) || !wait(r, label("all-gather", axis), comm, error))
      return false;
    std::copy(padded.begin(), padded.begin() + count, data);
    return true;
  }

private:
  using Clock = std::chrono::steady_clock;
  /// Tag of the watchdog's messages on MPI_COMM_WORLD (plan transfers stay
  /// below 32000, ring attention uses 32000).
  static constexpr int kWatchdogTag = 32001;
  static constexpr int kWhereBytes = 160;

  /// The collective `what` over `axis`, numbered per axis: members of a
  /// group count their collectives alike, so equal labels mean the same one.
  std::string label(const std::string &what, const std::string &axis) {
    std::string a = axis.empty() ? "world" : axis;
    return what + " #" + std::to_string(++counts[a]) + " over " + a;
  }
  std::map<std::string, int64_t> counts;

  static bool started(int rc, const char *call, std::string &error) {
    if (rc == MPI_SUCCESS)
      return true;
    error = std::string(call) + " failed with MPI code " + std::to_string(rc);
    return false;
  }

  bool wait(MPI_Request &r, const std::string &what, MPI_Comm comm, std::string &error) {
    std::vector<MPI_Request> one{r};
    bool ok = wait(one, what, comm, error);
    r = one[0];
    return ok;
  }

  /// Completes `requests` (the operation `what` among the ranks of `comm`)
  /// under the watchdog: polled (a sleeping wait after the first
  /// millisecond, not a core spinning), and failed after timeout() seconds
  /// naming the ranks of `comm` that did not arrive.
  bool wait(std::vector<MPI_Request> &requests, const std::string &what, MPI_Comm comm,
            std::string &error) {
    Clock::time_point start = Clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      if (MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE) !=
          MPI_SUCCESS) {
        error = what + " failed";
        return false;
      }
      if (done)
        return true;
      Clock::duration waited = Clock::now() - start;
      if (timeoutS > 0 && waited > std::chrono::duration<double>(timeoutS)) {
        error = timedOut(what, comm);
        return false;
      }
      if (waited > std::chrono::milliseconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 200));
    }
  }

  /// The watchdog's error for `what` (Communicator::watchdogError): which
  /// ranks of `comm` did not arrive at it: every rank that times
  /// out tells every rank where it waits and listens to the members of
  /// `comm` for a few seconds; a rank that says nothing is stopped, hung or dead, a rank
  /// that waits elsewhere is named with where.
  std::string timedOut(const std::string &what, MPI_Comm comm) {
    int n = 1, me = 0;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    std::vector<int> local(static_cast<size_t>(n)), world(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      local[size_t(i)] = i;
    MPI_Group g, wg;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, n, local.data(), wg, world.data());
    char where[kWhereBytes] = {};
    std::strncpy(where, what.c_str(), kWhereBytes - 1);
    std::vector<std::vector<char>> heard(static_cast<size_t>(n), std::vector<char>(kWhereBytes));
    std::vector<MPI_Request> recvs(static_cast<size_t>(n), MPI_REQUEST_NULL);
    // Every rank hears it: one waiting on this rank elsewhere learns where.
    for (int r = 0; r < size_; ++r) {
      MPI_Request s;
      if (r != rank_ && MPI_Isend(where, kWhereBytes, MPI_CHAR, r, kWatchdogTag, MPI_COMM_WORLD,
                                  &s) == MPI_SUCCESS)
        MPI_Request_free(&s);
    }
    for (int i = 0; i < n; ++i) {
      if (i == me)
        continue;
      MPI_Irecv(heard[size_t(i)].data(), kWhereBytes, MPI_CHAR, world[size_t(i)], kWatchdogTag,
                MPI_COMM_WORLD, &recvs[size_t(i)]);
    }
    std::vector<bool> answered(static_cast<size_t>(n), false);
    answered[size_t(me)] = true;
    Clock::time_point until =
        Clock::now() + std::chrono::milliseconds(int64_t(1000 * watchdogListenSeconds()));
    while (Clock::now() < until) {
      bool all = true;
      for (int i = 0; i < n; ++i) {
        if (answered[size_t(i)])
          continue;
        int done = 0;
        MPI_Test(&recvs[size_t(i)], &done, MPI_STATUS_IGNORE);
        answered[size_t(i)] = done != 0;
        all &= answered[size_t(i)];
      }
      if (all)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::vector<int> silent;
    std::vector<std::pair<int, std::string>> elsewhere;
    for (int i = 0; i < n; ++i) {
      if (i == me)
        continue;
      if (!answered[size_t(i)]) {
        silent.push_back(world[size_t(i)]);
        continue;
      }
      std::string theirs(heard[size_t(i)].data(), strnlen(heard[size_t(i)].data(), kWhereBytes));
      if (theirs != what)
        elsewhere.push_back({world[size_t(i)], theirs});
    }
    // Requests to silent ranks stay posted: the job ends now.
    return watchdogError(what, silent, elsewhere);
  }

  struct Pending {
    std::vector<float> data;
    std::vector<MPI_Request> requests;
    std::string what;
  };

  std::list<Pending> pending;
  struct Scale {
    float *data;
    int64_t count;
    int ranks;
  };
  struct Started {
    std::vector<MPI_Request> requests;
    std::vector<Scale> scale;
    MPI_Comm comm = MPI_COMM_WORLD;
    std::string what;
  };
  std::map<int, Started> buckets;
  std::map<int, InFlight> gathers;  // prefetched parameter gathers
  std::map<int, InFlight> scatters; // gradient chunks in flight
  int rank_ = 0, size_ = 1, dp_ = 1, cp_ = 1, tp_ = 1;
  MPI_Comm dpComm = MPI_COMM_WORLD, tpComm = MPI_COMM_WORLD, ppComm = MPI_COMM_WORLD,
           tiedComm = MPI_COMM_NULL, epComm = MPI_COMM_WORLD, edpComm = MPI_COMM_WORLD,
           cpComm = MPI_COMM_WORLD;
  MPI_Comm commFor(const std::string &axis) const {
    return axis == "tp"        ? tpComm
           : axis == "dp"      ? dpComm
           : axis == "pp"      ? ppComm
           : axis == "pp_tied" ? tiedComm
           : axis == "cp"      ? cpComm
           : axis == "ep"      ? epComm
           : axis == "edp"     ? edpComm
                               : MPI_COMM_WORLD;
  }
};
} // namespace

bool haveMPI() { return true; }

std::unique_ptr<Communicator> makeMPICommunicator(int *argc, char ***argv, std::string &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && MPI_Init(argc, argv) != MPI_SUCCESS) {
    error = "MPI_Init failed";
    return nullptr;
  }
  return std::make_unique<MPICommunicator>();
}

void abortAll(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void finalizeMPI() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Finalize();
}
#else
bool haveMPI() { return false; }
std::unique_ptr<Communicator> makeMPICommunicator(int *, char ***, std::string &error) {
  error = "this llm-run was built without MPI (install libopenmpi-dev and rebuild)";
  return nullptr;
}
void abortAll(int code) { std::exit(code); }
void finalizeMPI() {}
#endif

} // namespace llmopt::runtime
