//===- staged_comm.h - collectives on device memory through the host -*- C++ -*-===//
//
// A communicator for buffers a host communicator cannot touch (GPU memory):
// each collective copies its inputs to host memory, runs there on the host
// communicator (MPI or TCP), and copies its outputs back. It is how a plan of
// N ranks runs as N processes sharing one GPU, where NCCL refuses two ranks
// on one device, and the fallback wherever NCCL is missing.
//
// The non-blocking collectives keep their host copies until they are waited
// on: the device buffer is read when the collective starts and written when
// it completes, never in between, as the Communicator contract says. Sends
// keep theirs until `flush`.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_STAGED_COMM_H
#define LLMOPT_RUNTIME_STAGED_COMM_H

#include "llmopt-runtime/comm.h"

#include <list>
#include <map>
#include <memory>
#include <utility>

namespace llmopt::runtime {

/// Moves floats between the memory a backend computes in and the host.
class Staging {
public:
  virtual ~Staging() = default;
  /// Host memory for `count` floats that the copies below move to and from
  /// (zeroed; null when there is none): page-locked where they move GPU
  /// memory, so that a copy is one DMA with no bounce through pageable
  /// memory. The default is ordinary memory.
  virtual float *allocHost(size_t count);
  /// Gives back what allocHost returned (`count` as asked).
  virtual void freeHost(float *p, size_t count);
  /// `count` floats from `device` into `host`, complete when it returns
  /// (after the work the backend queued before it).
  virtual bool toHost(float *host, const float *device, int64_t count, std::string &error) = 0;
  /// `count` floats from `host` into `device`, complete (or ordered before
  /// the backend's next work) when it returns; `host` may be reused at once.
  virtual bool toDevice(float *device, const float *host, int64_t count, std::string &error) = 0;
};

/// Staging between two host buffers (memcpy): the CPU backend's way to run
/// the staged path (`llm-run --comm staged`), which tests it on every
/// machine.
class HostStaging final : public Staging {
public:
  bool toHost(float *host, const float *device, int64_t count, std::string &error) override;
  bool toDevice(float *device, const float *host, int64_t count, std::string &error) override;
};

/// A staged copy's host memory, from a Staging (move-only).
class HostBuffer {
public:
  HostBuffer() = default;
  /// `count` zeroed floats from `staging` (data() null when it has none).
  HostBuffer(Staging &staging, size_t count);
  HostBuffer(HostBuffer &&other) noexcept { swap(other); }
  HostBuffer &operator=(HostBuffer &&other) noexcept {
    HostBuffer moved(std::move(other));
    swap(moved);
    return *this;
  }
  HostBuffer(const HostBuffer &) = delete;
  HostBuffer &operator=(const HostBuffer &) = delete;
  ~HostBuffer();
  float *data() const { return p; }
  size_t size() const { return n; }
  bool empty() const { return n == 0; }

private:
  Staging *staging = nullptr;
  float *p = nullptr;
  size_t n = 0;
  void swap(HostBuffer &other) noexcept {
    std::swap(staging, other.staging);
    std::swap(p, other.p);
    std::swap(n, other.n);
  }
};

class StagedCommunicator final : public LayeredCommunicator {
public:
  /// Collectives of `host` on buffers moved by `staging`; both outlive this.
  StagedCommunicator(Communicator &host, Staging &staging)
      : LayeredCommunicator(host), staging(staging) {}

  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override;
  bool allReduceMax(const std::string &axis, float *data, int64_t count,
                    std::string &error) override;
  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average, int bucket,
                      std::string &error) override;
  bool waitAllReduce(int bucket, std::string &error) override;
  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override;
  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override;
  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override;
  bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                            int event, std::string &error) override;
  bool waitAllGather(int event, std::string &error) override;
  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override;
  bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                int64_t count, int handle, std::string &error) override;
  bool waitReduceScatter(int handle, std::string &error) override;
  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override;
  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override;
  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override;
  bool flush(std::string &error) override;

  /// Host copies held now (of collectives and sends in flight): 0 between
  /// steps, which the tests check.
  size_t inFlight() const;

private:
  Staging &staging;
  /// A device buffer's host copy, to be written back to `device` (null:
  /// nothing to write back) when its collective completes.
  struct Copy {
    HostBuffer data;
    float *device = nullptr;
  };
  /// `count` floats of host memory for `c` (writing back to `device`),
  /// false with `error` set when there is none.
  bool hold(Copy &c, float *device, int64_t count, std::string &error);
  bool in(Copy &c, const float *device, int64_t count, std::string &error);
  bool out(Copy &c, std::string &error);
  int64_t axisSize(const std::string &axis) const;
  /// Started collectives' copies, by bucket / event / handle, in start
  /// order; the node-based containers keep each copy where the host
  /// communicator was told it is.
  std::map<int, std::list<Copy>> buckets;
  std::map<int, std::pair<Copy, Copy>> gathers, scatters;
  /// The started collective `key` of `started` (its input, its output),
  /// after the host communicator completed it: the output written back.
  bool finish(std::map<int, std::pair<Copy, Copy>> &started, int key, std::string &error);
  std::list<HostBuffer> sends;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_STAGED_COMM_H
