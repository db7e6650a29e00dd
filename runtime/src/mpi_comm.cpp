//===- mpi_comm.cpp - collectives over MPI --------------------------------===//

#include "llmopt-runtime/mpi_comm.h"

#include <algorithm>
#include <list>
#include <map>
#include <cstdlib>
#include <vector>

#ifdef LLMOPT_HAVE_MPI
#include <mpi.h>
#endif

namespace llmopt::runtime {

#ifdef LLMOPT_HAVE_MPI
namespace {
class MPICommunicator final : public Communicator {
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
    int stage = rank_ / stageSize, dpIndex = (rank_ / (cp * tp)) % dp,
        cpIndex = (rank_ / tp) % cp, tpIndex = rank_ % tp;
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

  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average,
                      int bucket, std::string &error) override {
    MPI_Comm comm = commFor(axis);
    Started &st = buckets[bucket];
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
    if (MPI_Waitall(int(st.requests.size()), st.requests.data(), MPI_STATUSES_IGNORE) !=
        MPI_SUCCESS) {
      error = "MPI_Waitall on gradient bucket " + std::to_string(bucket) + " failed";
      return false;
    }
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
    int rc = MPI_Alltoall(send, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT,
                          commFor(axis));
    if (rc != MPI_SUCCESS) {
      error = "MPI_Alltoall failed with code " + std::to_string(rc);
      return false;
    }
    return true;
  }

  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override {
    // Non-blocking from a private copy: the caller may reuse its buffer at
    // once, and two stages sending to each other cannot deadlock.
    pending.push_back(Pending{std::vector<float>(data, data + count), {}});
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
      if (MPI_Waitall(int(p.requests.size()), p.requests.data(), MPI_STATUSES_IGNORE) !=
          MPI_SUCCESS) {
        error = "MPI_Waitall on pipeline sends failed";
        return false;
      }
    pending.clear();
    return true;
  }

  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override {
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      if (MPI_Recv(data + at, len, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS) {
        error = "MPI_Recv from rank " + std::to_string(peer) + " failed";
        return false;
      }
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
    int rc = MPI_Allgather(mine, int(count), MPI_FLOAT, all, int(count), MPI_FLOAT,
                           commFor(axis));
    if (rc != MPI_SUCCESS) {
      error = "MPI_Allgather failed with code " + std::to_string(rc);
      return false;
    }
    return true;
  }

  bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all,
                            int64_t count, int event, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::allGatherBlocks(axis, mine, all, count, error);
    MPI_Request r;
    int rc = MPI_Iallgather(mine, int(count), MPI_FLOAT, all, int(count), MPI_FLOAT,
                            commFor(axis), &r);
    return track(gathers, event, r, rc, "parameter gather", error);
  }

  bool waitAllGather(int event, std::string &error) override {
    return finish(gathers, event, "parameter gather", error);
  }

  bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                int64_t count, int handle, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::reduceScatterBlocks(axis, all, mine, count, error);
    MPI_Request r;
    int rc = MPI_Ireduce_scatter_block(all, mine, int(count), MPI_FLOAT, MPI_SUM, commFor(axis),
                                       &r);
    return track(scatters, handle, r, rc, "gradient reduce-scatter", error);
  }

  bool waitReduceScatter(int handle, std::string &error) override {
    return finish(scatters, handle, "gradient reduce-scatter", error);
  }

  /// A non-blocking collective `what` just started as `r` (MPI code `rc`),
  /// kept under `handle` until finish() waits for it.
  static bool track(std::map<int, MPI_Request> &pending, int handle, MPI_Request r, int rc,
                    const char *what, std::string &error) {
    if (rc != MPI_SUCCESS) {
      error = std::string("starting a ") + what + " failed with MPI code " + std::to_string(rc);
      return false;
    }
    if (!pending.emplace(handle, r).second) {
      error = std::string(what) + " " + std::to_string(handle) + " started twice";
      return false;
    }
    return true;
  }

  static bool finish(std::map<int, MPI_Request> &pending, int handle, const char *what,
                     std::string &error) {
    auto it = pending.find(handle);
    if (it == pending.end())
      return true; // ran at once
    if (MPI_Wait(&it->second, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      error = std::string("MPI_Wait on ") + what + " " + std::to_string(handle) + " failed";
      return false;
    }
    pending.erase(it);
    return true;
  }

  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                           int64_t count, std::string &error) override {
    if (count > (int64_t(1) << 30))
      return Communicator::reduceScatterBlocks(axis, all, mine, count, error);
    int rc = MPI_Reduce_scatter_block(all, mine, int(count), MPI_FLOAT, MPI_SUM, commFor(axis));
    if (rc != MPI_SUCCESS) {
      error = "MPI_Reduce_scatter_block failed with code " + std::to_string(rc);
      return false;
    }
    return true;
  }

  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int n = 1;
    MPI_Comm_size(comm, &n);
    // Chunks below 2^31 elements (MPI counts are int).
    for (int64_t at = 0; at < count;) {
      int len = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      int rc = MPI_Allreduce(MPI_IN_PLACE, data + at, len, MPI_FLOAT, MPI_SUM, comm);
      if (rc != MPI_SUCCESS) {
        error = "MPI_Allreduce failed with code " + std::to_string(rc);
        return false;
      }
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
    int rc = MPI_Allreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_MAX, commFor(axis));
    if (rc != MPI_SUCCESS) {
      error = "MPI_Allreduce (max) failed with code " + std::to_string(rc);
      return false;
    }
    return true;
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
    int rc = MPI_Reduce_scatter_block(padded.data(), mine.data(), int(c), MPI_FLOAT, MPI_SUM,
                                      comm);
    if (rc != MPI_SUCCESS) {
      error = "MPI_Reduce_scatter_block failed with code " + std::to_string(rc);
      return false;
    }
    Chunk own = shardChunk(count, size, rank);
    for (int64_t i = 0; i < own.size(); ++i)
      data[own.begin + i] = average ? mine[size_t(i)] / float(size) : mine[size_t(i)];
    return true;
  }

  bool allGather(const std::string &axis, float *data, int64_t count,
                 std::string &error) override {
    MPI_Comm comm = commFor(axis);
    int size = 1;
    MPI_Comm_size(comm, &size);
    int64_t c = (count + size - 1) / size;
    if (c * size > (int64_t(1) << 30))
      return Communicator::allGather(axis, data, count, error);
    std::vector<float> padded(size_t(c * size), 0.0f);
    std::copy(data, data + count, padded.begin());
    int rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, padded.data(), int(c), MPI_FLOAT,
                           comm);
    if (rc != MPI_SUCCESS) {
      error = "MPI_Allgather failed with code " + std::to_string(rc);
      return false;
    }
    std::copy(padded.begin(), padded.begin() + count, data);
    return true;
  }

private:
  struct Pending {
    std::vector<float> data;
    std::vector<MPI_Request> requests;
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
  };
  std::map<int, Started> buckets;
  std::map<int, MPI_Request> gathers; // prefetched parameter gathers
  std::map<int, MPI_Request> scatters; // gradient chunks in flight
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
