//===- comm.h - collectives between ranks ---------------------------*- C++ -*-===//
//
// What an executor needs from the other ranks: in-place all-reduce,
// reduce-scatter and all-gather over a mesh axis, point-to-point transfers
// and all-to-alls. Implementations: one rank (nothing to do), ranks as
// threads of one process (tests), MPI and TCP across processes on host
// memory (mpi_comm.h, tcp_comm.h), NCCL on GPU memory (the CUDA backend), and
// the host-staged communicator that runs a host one on device memory
// (staged_comm.h). The pointers a communicator takes are in the memory it
// works on: the defaults below touch them on the host, so a communicator on
// device memory overrides every one of them.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_COMM_H
#define LLMOPT_RUNTIME_COMM_H

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace llmopt::runtime {

/// Rank `rank`'s ZeRO chunk of `n` elements split over `size` ranks:
/// [rank * c, min(n, (rank + 1) * c)) with c = ceil(n / size), clamped to n.
struct Chunk {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
inline Chunk shardChunk(int64_t n, int size, int rank) {
  int64_t c = (n + size - 1) / size;
  int64_t b = std::min(n, c * rank);
  return {b, std::min(n, b + c)};
}

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The collective watchdog: a collective or transfer not complete after
  /// `seconds` fails, its error naming the operation and the ranks that did
  /// not arrive (where the communicator can tell); 0 waits forever. The
  /// process communicators (MPI, TCP) apply it; threads of one process and a
  /// single rank cannot hang on each other.
  virtual void setTimeout(double seconds) { timeoutS = seconds; }
  double timeout() const { return timeoutS; }
  /// The default: 10 minutes, as PyTorch's NCCL watchdog.
  static constexpr double kDefaultTimeout = 600;
  /// Sums (`average`: then divides by size) `count` floats in place across
  /// the ranks of `axis`. Returns false with `error` set on failure.
  virtual bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                         std::string &error) = 0;
  /// Element-wise maximum of `count` floats over the ranks of `axis` (fp8
  /// amax). By default through allGatherBlocks.
  virtual bool allReduceMax(const std::string &axis, float *data, int64_t count,
                            std::string &error) {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    std::vector<float> all(size_t(count * n));
    if (!allGatherBlocks(axis, data, all.data(), count, error))
      return false;
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < count; ++i)
        data[i] = std::max(data[i], all[size_t(r * count + i)]);
    return true;
  }
  /// Starts an all-reduce that `waitBuckets` completes (gradient buckets,
  /// whose reduction overlaps the rest of the backward). By default it runs
  /// at once.
  virtual bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average,
                              int bucket, std::string &error) {
    return allReduce(axis, data, count, average, error);
  }
  /// Completes the all-reduces started for `bucket`.
  virtual bool waitAllReduce(int bucket, std::string &error) { return true; }
  /// Lays the ranks out as a pp x dp x cp x tp mesh
  /// (rank = ((pp index * dp + dp index) * cp + cp index) * tp + tp index)
  /// so that collectives over "dp", "cp", "tp" and "pp" reach the ranks of
  /// that axis. By default only meshes with one non-trivial axis (which is
  /// the world).
  virtual bool useMesh(int pp, int dp, int cp, int tp, std::string &error) {
    int nontrivial = (pp > 1) + (dp > 1) + (cp > 1) + (tp > 1);
    if (nontrivial <= 1)
      return true;
    error = "this communicator cannot split the ranks into a " + std::to_string(pp) + " x " +
            std::to_string(dp) + " x " + std::to_string(cp) + " x " + std::to_string(tp) +
            " mesh (use MPI)";
    return false;
  }
  /// Point-to-point (pipeline stages): send to / blocking receive from world
  /// rank `peer`; transfers with one `tag` arrive in order.
  virtual bool send(int peer, int tag, const float *data, int64_t count, std::string &error) {
    error = "this communicator has no point-to-point transfers (use MPI)";
    return false;
  }
  virtual bool recv(int peer, int tag, float *data, int64_t count, std::string &error) {
    error = "this communicator has no point-to-point transfers (use MPI)";
    return false;
  }
  /// A ring's step on `axis` (context parallelism's ring attention): sends
  /// `count` floats to world rank `to`, the rank `shift` places ahead on the
  /// axis, and receives as many from world rank `from`, as far behind, in
  /// two halves so that the transfer overlaps a computation: after
  /// startShift `send` may be reused; after finishShift (called in the
  /// order of the starts) `recv` holds the data. By default the send, then
  /// at finish the receive, with `tag`; NCCL exchanges both in one group at
  /// the start (no ring deadlocks) and finishes in stream order.
  virtual bool startShift(const std::string &axis, int shift, int to, int from, int tag,
                          const float *send, float *recv, int64_t count, std::string &error) {
    return this->send(to, tag, send, count, error);
  }
  virtual bool finishShift(const std::string &axis, int shift, int to, int from, int tag,
                           const float *send, float *recv, int64_t count, std::string &error) {
    return this->recv(from, tag, recv, count, error);
  }
  /// Completes every send still in flight (sends may return before the peer
  /// has received: pipeline schedules need that to avoid deadlock).
  virtual bool flush(std::string &error) { return true; }
  /// Index of this rank on `axis` and the axis size. By default the world
  /// (meshes with one non-trivial axis).
  virtual void axisPosition(const std::string &axis, int &index, int &size) const {
    index = rank();
    size = this->size();
  }
  /// `count` floats from every rank of `axis`, in axis order, into `all`.
  virtual bool allGatherBlocks(const std::string &axis, const float *mine, float *all,
                               int64_t count, std::string &error) {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    std::fill(all, all + count * n, 0.0f);
    std::copy(mine, mine + count, all + count * index);
    return allReduce(axis, all, count * n, /*average=*/false, error);
  }
  /// Starts `allGatherBlocks` (a ZeRO-3 prefetch); `waitAllGather` with the
  /// same `event` completes it, and only then may `mine` and `all` be
  /// touched. By default it runs at once.
  virtual bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all,
                                    int64_t count, int event, std::string &error) {
    return allGatherBlocks(axis, mine, all, count, error);
  }
  virtual bool waitAllGather(int event, std::string &error) { return true; }
  /// Starts `reduceScatterBlocks` (ZeRO-2/3 gradient chunks, overlapping
  /// the rest of the backward); `waitReduceScatter` with the same `handle`
  /// completes it, and only then may `all` and `mine` be touched. By default
  /// it runs at once.
  virtual bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                        int64_t count, int handle, std::string &error) {
    return reduceScatterBlocks(axis, all, mine, count, error);
  }
  virtual bool waitReduceScatter(int handle, std::string &error) { return true; }
  /// Sums `all` (count floats per rank of `axis`) over the axis and keeps
  /// this rank's block in `mine`.
  virtual bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                   int64_t count, std::string &error) {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    std::vector<float> sum(all, all + count * n);
    if (!allReduce(axis, sum.data(), count * n, /*average=*/false, error))
      return false;
    std::copy(sum.begin() + count * index, sum.begin() + count * (index + 1), mine);
    return true;
  }
  /// All-to-all over `axis`: block j of `send` (count floats each) goes to
  /// the axis's rank j; block i of `recv` comes from its rank i. By default a
  /// sum in which each rank fills only its own row of a [from][to] matrix.
  virtual bool allToAllBlocks(const std::string &axis, const float *send, float *recv,
                              int64_t count, std::string &error) {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    std::vector<float> all(size_t(count * n * n), 0.0f);
    std::copy(send, send + count * n, all.begin() + count * n * index);
    if (!allReduce(axis, all.data(), count * n * n, /*average=*/false, error))
      return false;
    for (int i = 0; i < n; ++i)
      std::copy_n(all.begin() + (int64_t(i) * n + index) * count, count, recv + i * count);
    return true;
  }
  /// Expert parallelism: `ep` splits each dp group into expert-parallel
  /// groups of consecutive dp ranks (`ep`) and expert-data-parallel groups
  /// (`edp`). By default only when the ep group is the whole world.
  virtual bool useExpertAxes(int ep, std::string &error) {
    if (ep == 1 || ep == size())
      return true;
    error = "this communicator cannot form expert-parallel groups of " + std::to_string(ep) +
            " ranks (use MPI)";
    return false;
  }
  /// Leaves the reduction in this rank's chunk (shardChunk) of `data`; the
  /// rest is unspecified. By default an all-reduce, which is a superset.
  virtual bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                             std::string &error) {
    return allReduce(axis, data, count, average, error);
  }
  /// Every rank's chunk of `data` gathered into all of `data` on every rank.
  /// By default a sum in which each rank contributes zeros outside its chunk
  /// (exact: x + 0 = x).
  virtual bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    Chunk c = shardChunk(count, n, index);
    std::fill(data, data + c.begin, 0.0f);
    std::fill(data + c.end, data + count, 0.0f);
    return allReduce(axis, data, count, /*average=*/false, error);
  }

protected:
  double timeoutS = kDefaultTimeout;

  /// How long a timed-out rank listens for the others' whereabouts: a few
  /// seconds, within [1, 5], no more than the timeout itself.
  double watchdogListenSeconds() const { return std::min(5.0, std::max(1.0, timeoutS)); }
  /// What a rank whose watchdog fired learned from the others (world ranks).
  struct WatchdogFindings {
    /// Members of the operation that said nothing.
    std::vector<int> silent;
    /// Members waiting in another operation: rank, where.
    std::vector<std::pair<int, std::string>> elsewhere;
    /// A rank that came to an operation at least half the timeout after
    /// another rank of it (stopped, hung or slow before it).
    struct Late {
      int rank;
      /// The operation; empty: the one that timed out.
      std::string what;
      double seconds;
      /// The rank it came after; -1: this rank.
      int after;
    };
    /// Members, and ranks in the operations members wait in elsewhere, that
    /// came late.
    std::vector<Late> late;
    /// Members that were in the operation this many seconds before this
    /// rank came to it (at least half the timeout): this rank was late.
    std::vector<std::pair<int, double>> before;
    /// Members that did not run for this many seconds of their wait in it
    /// (stopped, as by SIGSTOP, or not scheduled) and said so.
    std::vector<std::pair<int, double>> stopped;
    /// Members whose watchdog had fired (in the operation named) before
    /// this rank came to this one: this rank was late.
    std::vector<std::pair<int, std::string>> gaveUp;
    /// Ranks this rank waits for, directly or through others, that said
    /// where they wait only this many seconds after the watchdog's first
    /// message reached this rank (stopped or busy until then).
    std::vector<std::pair<int, double>> slow;
    /// Ranks outside the operation that said nothing while members waiting
    /// elsewhere wait for them (directly or through other ranks).
    std::vector<int> behind;
  };
  /// The watchdog's error for `what`: the timeout, then what `found` says,
  /// or that every rank of the group is in it where it says nothing.
  std::string watchdogError(const std::string &what, const WatchdogFindings &found) const;
  /// The same with only the members that said nothing (`silent`) and those
  /// that wait in another operation (`elsewhere`: world rank, where).
  std::string watchdogError(const std::string &what, const std::vector<int> &silent,
                            const std::vector<std::pair<int, std::string>> &elsewhere) const {
    WatchdogFindings found;
    found.silent = silent;
    found.elsewhere = elsewhere;
    return watchdogError(what, found);
  }
};

/// A world of one.
class SingleRank final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool allReduce(const std::string &, float *, int64_t, bool, std::string &) override {
    return true;
  }
};

/// A communicator layered over another (host staging, timing, a device
/// library bootstrapped through it): the ranks, the mesh and the watchdog's
/// timeout are the inner communicator's; the collectives are the layer's.
class LayeredCommunicator : public Communicator {
public:
  explicit LayeredCommunicator(Communicator &inner) : inner(inner) {}
  int rank() const override { return inner.rank(); }
  int size() const override { return inner.size(); }
  void setTimeout(double seconds) override {
    Communicator::setTimeout(seconds);
    inner.setTimeout(seconds);
  }
  bool useMesh(int pp, int dp, int cp, int tp, std::string &error) override {
    return inner.useMesh(pp, dp, cp, tp, error);
  }
  bool useExpertAxes(int ep, std::string &error) override { return inner.useExpertAxes(ep, error); }
  void axisPosition(const std::string &axis, int &index, int &size) const override {
    inner.axisPosition(axis, index, size);
  }

protected:
  Communicator &inner;
};

/// One setting every rank of a job must be launched with alike (the plan,
/// the seed, the steps, the data): its name as the user gives it, and its
/// value, or a hash's first 64 bits (`hash`: shown in hex).
struct LaunchSetting {
  std::string name;
  int64_t value = 0;
  bool hash = false;
};

/// Compares this rank's `mine` with every rank's (one all-gather over the
/// world, under the watchdog): false where a setting differs, with `error`
/// the same on every rank, naming the first setting that differs, the ranks
/// whose value is not rank 0's and their values. Every rank passes the same
/// settings in the same order.
bool agreeOnLaunch(Communicator &comm, const std::vector<LaunchSetting> &mine, std::string &error);

/// Ranks as threads of one process sharing a reduction buffer; each
/// all-reduce is a barrier. Data-parallel only (one axis spanning all ranks).
class ThreadGroup {
public:
  explicit ThreadGroup(int size) : size_(size) {}
  std::unique_ptr<Communicator> member(int rank);

private:
  friend class ThreadRank;
  std::mutex mu;
  std::condition_variable cv;
  int size_;
  int arrived = 0;
  int64_t generation = 0;
  std::vector<double> sum;
  std::vector<float> result;
  int readers = 0;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_COMM_H
