//===- device_comm.cpp - communicators on GPU memory ----------------------===//
//
// Written without a GPU to run it on (compiled for every build with the CUDA
// toolkit). The host-staged path ran on an H200 on 2026-11-26 (the GPU kit's
// `comm` part, test/Runtime/cuda-comm.test); NCCL needs two GPUs
// (test/Runtime/cuda-nccl.test, the kit's `nccl` part) and has not run.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/device_comm.h"

#include <cuda_runtime.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#define LLMOPT_HAVE_NCCL_HEADER 1
#endif

#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <type_traits>

namespace llmopt::runtime {

namespace {

class CudaStaging final : public Staging {
public:
  explicit CudaStaging(cudaStream_t stream) : stream(stream) {}
  ~CudaStaging() override {
    // (Every host copy is given back before the staging goes: a staged
    // communicator never outlives its staging. One that was not is freed.)
    for (auto &[count, p] : pool)
      cudaFreeHost(p);
    for (float *p : pinned)
      cudaFreeHost(p);
  }
  // Page-locked host memory (the copies are DMA, with no bounce through
  // pageable memory), kept for reuse: a step asks for the same sizes again,
  // and pinning is slow. Ordinary memory where none can be pinned.
  // (Called from the staged communicator's thread only, as its copies are.)
  float *allocHost(size_t count) override {
    if (count == 0)
      return Staging::allocHost(count);
    float *p = nullptr;
    if (auto it = pool.find(count); it != pool.end()) {
      p = it->second;
      pool.erase(it);
    } else if (cudaMallocHost(reinterpret_cast<void **>(&p), count * sizeof(float)) !=
               cudaSuccess) {
      cudaGetLastError();
      return Staging::allocHost(count);
    }
    pinned.insert(p);
    std::memset(p, 0, count * sizeof(float));
    return p;
  }
  void freeHost(float *p, size_t count) override {
    if (!pinned.erase(p))
      return Staging::freeHost(p, count);
    try {
      pool.emplace(count, p);
    } catch (...) { // (no memory to keep it: give it back)
      cudaFreeHost(p);
    }
  }
  bool toHost(float *host, const float *device, int64_t count, std::string &error) override {
    return copy(host, device, count, cudaMemcpyDeviceToHost, error);
  }
  bool toDevice(float *device, const float *host, int64_t count, std::string &error) override {
    return copy(device, host, count, cudaMemcpyHostToDevice, error);
  }

private:
  cudaStream_t stream;
  /// Pinned buffers free for reuse (by size), and those handed out.
  std::multimap<size_t, float *> pool;
  std::set<float *> pinned;
  bool copy(float *to, const float *from, int64_t count, cudaMemcpyKind kind, std::string &error) {
    // In stream order, and complete on return: the host side is read or
    // reused right after.
    if (cudaMemcpyAsync(to, from, size_t(count) * 4, kind, stream) == cudaSuccess &&
        cudaStreamSynchronize(stream) == cudaSuccess)
      return true;
    error = std::string("staging a collective's buffer ") +
            (kind == cudaMemcpyDeviceToHost ? "to the host" : "to the GPU") + ": " +
            cudaGetErrorString(cudaGetLastError());
    return false;
  }
};

#ifdef LLMOPT_HAVE_NCCL_HEADER
/// NCCL, loaded when a plan has collectives (libnccl.so.2 from the loader's
/// path: CUDA's, or PyTorch's nvidia-nccl wheel).
struct NcclApi {
  void *lib = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId *) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  const char *(*errorString)(ncclResult_t) = nullptr;

  bool load(std::string &error) {
    if (lib)
      return true;
    if (!(lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL))) {
      error = std::string("cannot load NCCL (libnccl.so.2) for the plan's collectives: ") +
              dlerror() +
              "; put NCCL's lib directory on LD_LIBRARY_PATH, or run with --comm staged";
      return false;
    }
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    if (sym(getUniqueId, "ncclGetUniqueId") && sym(commInitRank, "ncclCommInitRank") &&
        sym(allReduce, "ncclAllReduce") && sym(allGather, "ncclAllGather") &&
        sym(reduceScatter, "ncclReduceScatter") && sym(send, "ncclSend") && sym(recv, "ncclRecv") &&
        sym(groupStart, "ncclGroupStart") && sym(groupEnd, "ncclGroupEnd") &&
        sym(commGetAsyncError, "ncclCommGetAsyncError") && sym(commAbort, "ncclCommAbort") &&
        sym(commDestroy, "ncclCommDestroy") && sym(errorString, "ncclGetErrorString"))
      return true;
    error = "libnccl.so.2 lacks a function llm-run calls (NCCL 2.10 or later is needed)";
    return false;
  }
  bool ok(ncclResult_t r, const char *what, std::string &error) const {
    if (r == ncclSuccess)
      return true;
    error = std::string(what) + ": " + errorString(r);
    return false;
  }
};

/// A started collective's kind and handle (its wait names them); handle -1:
/// a blocking collective, waited for at once.
enum class Kind { AllReduce, AllGather, ReduceScatter };
struct Later {
  Kind kind = Kind::AllReduce;
  int handle = -1;
};

// NCCL's kernels run on a stream of their own (`side`), in the order this
// rank issues them (every rank issues in the plan's order, so no two of a
// communicator's collectives can cross), each after the compute stream's
// work so far (an event). The compute stream waits for a collective where
// the plan does: at once for a blocking one, at its wait for a started one
// (gradient buckets, ZeRO's prefetched gathers and reduce-scatters), so
// those overlap the kernels in between.
class NcclCommunicator final : public DeviceCommunicator {
public:
  NcclCommunicator(Communicator &host, cudaStream_t stream)
      : DeviceCommunicator(host), stream(stream) {}
  ~NcclCommunicator() override {
    for (auto &[axis, c] : comms)
      if (c)
        (aborted ? nccl.commAbort : nccl.commDestroy)(c);
    for (auto &[key, e] : pending)
      cudaEventDestroy(e);
    for (cudaEvent_t e : spare)
      cudaEventDestroy(e);
    if (ready)
      cudaEventDestroy(ready);
    if (side)
      cudaStreamDestroy(side);
  }

  /// Sets up a communicator per axis. Every rank ends with the same
  /// answer: a rank where NCCL does not load, an id is not made or a
  /// communicator not formed still takes part in every exchange, and the
  /// ranks agree (agree()) before any of them uses NCCL.
  bool connect(const std::vector<std::string> &axes, std::string &error) {
    std::string why;
    bool loaded = nccl.load(why);
    // (Non-blocking: the legacy default stream, the compute stream without
    // CUDA graphs, does not wait for it, nor it for that stream. At the
    // highest priority: NCCL's kernels get multiprocessors while GEMMs fill
    // the GPU.)
    int leastPriority = 0, greatestPriority = 0;
    cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority);
    if (loaded && (cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, greatestPriority) !=
                       cudaSuccess ||
                   cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess)) {
      loaded = false;
      why = "cannot create the stream for NCCL's collectives: " +
            std::string(cudaGetErrorString(cudaGetLastError()));
    }
    if (!agree(loaded, error))
      return false;
    if (anyFailed) {
      error = loaded ? "NCCL (libnccl.so.2) does not load on every rank" : why;
      return false;
    }
    bool ok = true;
    // The axis's first rank makes the unique id; it reaches the others
    // through the host communicator (its bytes as floats, summed with zeros),
    // with a last float saying whether it could be made.
    for (const std::string &axis : axes) {
      int index = 0, n = 1;
      inner.axisPosition(axis, index, n);
      if (n <= 1 || comms.count(axis))
        continue;
      ncclUniqueId id{};
      bool made = index != 0 || nccl.ok(nccl.getUniqueId(&id), "ncclGetUniqueId", why);
      std::vector<float> bytes(sizeof(id.internal) + 1, 0.0f);
      for (size_t i = 0; i < sizeof(id.internal); ++i)
        bytes[i] = index == 0 ? float(static_cast<unsigned char>(id.internal[i])) : 0.0f;
      bytes.back() = made ? 0.0f : 1.0f;
      if (!inner.allReduce(axis, bytes.data(), int64_t(bytes.size()), /*average=*/false, error))
        return false;
      if (bytes.back() != 0.0f) {
        ok = false;
        continue;
      }
      for (size_t i = 0; i < sizeof(id.internal); ++i)
        id.internal[i] = char(static_cast<unsigned char>(bytes[i]));
      ncclComm_t c = nullptr;
      if (!nccl.ok(nccl.commInitRank(&c, n, id, index), "ncclCommInitRank", why)) {
        why += " (mesh axis '" + axis + "': two ranks on one GPU? run with --comm staged)";
        ok = false;
        continue;
      }
      comms[axis] = c;
    }
    if (!agree(ok, error))
      return false;
    if (anyFailed) {
      abortAll();
      error = "NCCL could not form the mesh's communicators on every rank" +
              (why.empty() ? std::string() : ": " + why);
      return false;
    }
    return true;
  }

  bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                 std::string &error) override {
    return reduce(axis, data, data, count, average ? ncclAvg : ncclSum, error);
  }
  bool allReduceMax(const std::string &axis, float *data, int64_t count,
                    std::string &error) override {
    return reduce(axis, data, data, count, ncclMax, error);
  }
  // Started collectives: the compute stream waits for them at their wait.
  bool startAllReduce(const std::string &axis, float *data, int64_t count, bool average, int bucket,
                      std::string &error) override {
    return reduce(axis, data, data, count, average ? ncclAvg : ncclSum, error,
                  Later{Kind::AllReduce, bucket});
  }
  bool waitAllReduce(int bucket, std::string &error) override {
    return waitFor({Kind::AllReduce, bucket}, error);
  }
  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    // The contract allows a superset: chunks of ceil(n / size) are not
    // NCCL's equal blocks.
    return allReduce(axis, data, count, average, error);
  }
  bool allGather(const std::string &axis, float *data, int64_t count, std::string &error) override {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    Chunk c = shardChunk(count, n, index);
    if (cudaMemsetAsync(data, 0, size_t(c.begin) * 4, stream) != cudaSuccess ||
        cudaMemsetAsync(data + c.end, 0, size_t(count - c.end) * 4, stream) != cudaSuccess)
      return (error = "all-gather: cannot clear the other ranks' chunks", false);
    return allReduce(axis, data, count, /*average=*/false, error);
  }
  bool allGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                       std::string &error) override {
    return gatherBlocks(axis, mine, all, count, error, {});
  }
  bool startAllGatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                            int event, std::string &error) override {
    return gatherBlocks(axis, mine, all, count, error, Later{Kind::AllGather, event});
  }
  bool waitAllGather(int event, std::string &error) override {
    return waitFor({Kind::AllGather, event}, error);
  }
  bool reduceScatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                           std::string &error) override {
    return scatterBlocks(axis, all, mine, count, error, {});
  }
  bool startReduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                int64_t count, int handle, std::string &error) override {
    return scatterBlocks(axis, all, mine, count, error, Later{Kind::ReduceScatter, handle});
  }
  bool waitReduceScatter(int handle, std::string &error) override {
    return waitFor({Kind::ReduceScatter, handle}, error);
  }
  bool allToAllBlocks(const std::string &axis, const float *send, float *recv, int64_t count,
                      std::string &error) override {
    return onAxis(axis, recv, send, count, error, [&](ncclComm_t c) {
      int index = 0, n = 1;
      axisPosition(axis, index, n);
      return onSide(error, {}, [&] {
        return grouped(error, [&] {
          bool ok = true;
          for (int r = 0; r < n && ok; ++r)
            ok = nccl.ok(
                     nccl.send(send + int64_t(r) * count, size_t(count), ncclFloat32, r, c, side),
                     "ncclSend", error) &&
                 nccl.ok(
                     nccl.recv(recv + int64_t(r) * count, size_t(count), ncclFloat32, r, c, side),
                     "ncclRecv", error);
          return ok;
        });
      });
    });
  }
  // Pipeline transfers over the "pp" communicator: world rank `peer` is
  // stage peer / (world / stages) there (pp is the mesh's outermost axis).
  // A send is held and issued in one NCCL group with this rank's next
  // receive (two stages that each send, then receive, would otherwise wait
  // on each other's stream), or before any other collective, or at flush.
  // What it sends is copied when it is held (in stream order): the kernels
  // queued before it is issued may reuse the buffer (the first stage's
  // next forward, a 16-bit buffer's wide copy).
  bool send(int peer, int tag, const float *data, int64_t count, std::string &error) override {
    ncclComm_t c = nullptr;
    int stage = 0;
    if (!pipelinePeer(peer, c, stage, error))
      return false;
    void *copy = nullptr;
    size_t bytes = size_t(std::max<int64_t>(count, 1)) * 4;
    if (cudaMallocAsync(&copy, bytes, stream) != cudaSuccess) {
      cudaGetLastError();
      return (error = "out of GPU memory for a held pipeline send", false);
    }
    cudaStream_t st = stream;
    std::shared_ptr<void> owner(copy, [st](void *q) { cudaFreeAsync(q, st); });
    if (cudaMemcpyAsync(copy, data, size_t(count) * 4, cudaMemcpyDeviceToDevice, stream) !=
        cudaSuccess)
      return (error = "cannot copy a pipeline send on the GPU", false);
    held.push_back({std::move(owner), count, stage, c});
    return true;
  }
  bool recv(int peer, int tag, float *data, int64_t count, std::string &error) override {
    ncclComm_t c = nullptr;
    int stage = 0;
    if (!pipelinePeer(peer, c, stage, error))
      return false;
    bool ok = onSide(error, {}, [&] {
      return grouped(error, [&] {
        return issueHeld(error) &&
               nccl.ok(nccl.recv(data, size_t(count), ncclFloat32, stage, c, side), "ncclRecv",
                       error);
      });
    });
    held.clear(); // freed on the compute stream, after it waited for the group
    return ok;
  }
  bool flush(std::string &error) override { return sendHeld(error); }
  // A ring's step on `axis`'s communicator: the send and the receive in one
  // group (every rank of the ring sends and receives at once: no rank waits
  // for a receive its neighbour posts later), complete in stream order.
  bool startShift(const std::string &axis, int shift, int, int, int, const float *send, float *recv,
                  int64_t count, std::string &error) override {
    ncclComm_t c = nullptr;
    if (!comm(axis, c, error))
      return false;
    if (!c)
      return copy(recv, send, count, error); // an axis of one rank
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    int to = ((index + shift) % n + n) % n, from = ((index - shift) % n + n) % n;
    return onSide(error, {}, [&] {
      return grouped(error, [&] {
        return nccl.ok(nccl.send(send, size_t(count), ncclFloat32, to, c, side), "ncclSend",
                       error) &&
               nccl.ok(nccl.recv(recv, size_t(count), ncclFloat32, from, c, side), "ncclRecv",
                       error);
      });
    });
  }
  bool finishShift(const std::string &, int, int, int, int, const float *, float *, int64_t,
                   std::string &) override {
    return true;
  }

  bool synchronize(std::string &error, bool all) override {
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      // The compute stream: it waits for every collective the plan has
      // waited for, so the host may read what it computed; the started ones
      // not waited for yet go on overlapping (a peer that never joins them
      // stops the compute stream at their wait, and the watchdog here),
      // unless `all` asks for them too (the end of a step).
      cudaError_t q = all && side ? cudaStreamQuery(side) : cudaSuccess;
      if (q == cudaSuccess)
        q = cudaStreamQuery(stream);
      if (q == cudaSuccess)
        return true;
      if (q != cudaErrorNotReady)
        return (error = std::string("CUDA error in the step: ") + cudaGetErrorString(q), false);
      for (auto &[axis, c] : comms) {
        ncclResult_t async = ncclSuccess;
        if (nccl.commGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
          abortAll();
          return (error = "NCCL on mesh axis '" + axis + "': " + nccl.errorString(async), false);
        }
      }
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (timeout() > 0 && waited > timeout()) {
        abortAll();
        error =
            watchdogError("the step's NCCL collectives on rank " + std::to_string(rank()), {}, {});
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

private:
  cudaStream_t stream;
  /// NCCL's stream, and the event that orders it after the compute stream.
  cudaStream_t side = nullptr;
  cudaEvent_t ready = nullptr;
  /// Started collectives the compute stream has not waited for yet, by
  /// kind and handle; spare events for the next ones.
  std::map<std::pair<Kind, int>, cudaEvent_t> pending;
  std::vector<cudaEvent_t> spare;
  NcclApi nccl;
  std::map<std::string, ncclComm_t> comms;
  bool aborted = false;
  /// Sends not issued yet (send()).
  struct HeldSend {
    std::shared_ptr<void> data; // its copy, freed on the stream
    int64_t count;
    int stage;
    ncclComm_t comm;
  };
  std::vector<HeldSend> held;
  /// Issues the held sends (inside the caller's NCCL group, which clears
  /// them once it has ended: only then are NCCL's kernels on the stream).
  bool issueHeld(std::string &error) {
    bool ok = true;
    for (const HeldSend &h : held)
      ok = ok && nccl.ok(nccl.send(static_cast<const float *>(h.data.get()), size_t(h.count),
                                   ncclFloat32, h.stage, h.comm, side),
                         "ncclSend", error);
    return ok;
  }
  /// Issues the held sends in a group of their own (before another
  /// collective, or at flush).
  bool sendHeld(std::string &error) {
    if (held.empty())
      return true;
    bool ok = onSide(error, {}, [&] { return grouped(error, [&] { return issueHeld(error); }); });
    held.clear();
    return ok;
  }
  /// `issue` (NCCL calls) inside one NCCL group; the group is closed even
  /// when a call fails.
  template <typename F> bool grouped(std::string &error, F &&issue) {
    if (!nccl.ok(nccl.groupStart(), "ncclGroupStart", error))
      return false;
    bool ok = issue();
    return nccl.ok(nccl.groupEnd(), "ncclGroupEnd", error) && ok;
  }

  /// Aborts every communicator at once (one with a collective in flight
  /// cannot be destroyed): the stuck kernels end, the stream frees up.
  void abortAll() {
    for (auto &[axis, c] : comms)
      if (c)
        nccl.commAbort(c);
    comms.clear();
    held.clear(); // (their communicators are gone)
    aborted = true;
  }
  /// Whether any rank failed (`anyFailed`), from this rank's `ok`: a flag
  /// summed over dp, cp, tp and pp in turn, whose product is the world.
  bool anyFailed = false;
  bool agree(bool ok, std::string &error) {
    float f = ok ? 0.0f : 1.0f;
    for (const char *axis : {"dp", "cp", "tp", "pp"}) {
      int index = 0, n = 1;
      inner.axisPosition(axis, index, n);
      if (n > 1 && !inner.allReduce(axis, &f, 1, /*average=*/false, error))
        return false;
    }
    anyFailed = f != 0.0f;
    return true;
  }
  /// The axis's communicator (null: an axis of one rank), after the held
  /// sends.
  bool comm(const std::string &axis, ncclComm_t &c, std::string &error) {
    return sendHeld(error) && lookup(axis, c, error);
  }
  bool lookup(const std::string &axis, ncclComm_t &c, std::string &error) {
    int index = 0, n = 1;
    axisPosition(axis, index, n);
    auto it = comms.find(axis);
    if (it != comms.end()) {
      c = it->second;
      return true;
    }
    if (n <= 1)
      return true;
    error = "no NCCL communicator for mesh axis '" + axis + "' (not set up at load)";
    return false;
  }
  /// `issue` (NCCL calls on `side`) after the compute stream's work so
  /// far; the compute stream then waits for it, at once or (`later` with a
  /// handle) at waitFor.
  template <typename F> bool onSide(std::string &error, Later later, F &&issue) {
    if (cudaEventRecord(ready, stream) != cudaSuccess ||
        cudaStreamWaitEvent(side, ready, 0) != cudaSuccess)
      return (error = "cannot order NCCL's stream after the kernels", false);
    // Whatever `issue` enqueued (all of it, or part of a group that failed)
    // is ordered before the compute stream's later work, and so before the
    // frees of its buffers there: at once where it failed.
    bool issued = issue();
    cudaEvent_t done = nullptr;
    if (!spare.empty()) {
      done = spare.back();
      spare.pop_back();
    } else if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess) {
      done = nullptr;
    }
    if (!done || cudaEventRecord(done, side) != cudaSuccess) {
      if (done)
        spare.push_back(done);
      // No event to wait on: the compute stream waits for all of NCCL's.
      cudaStreamSynchronize(side);
      if (issued)
        error = "cannot record a collective's end";
      return false;
    }
    if (later.handle < 0 || !issued) {
      spare.push_back(done);
      bool waited = cudaStreamWaitEvent(stream, done, 0) == cudaSuccess;
      if (issued && !waited)
        error = "cannot order the kernels after a collective";
      return issued && waited;
    }
    auto key = std::make_pair(later.kind, later.handle);
    if (auto it = pending.find(key); it != pending.end()) {
      // A handle started again before its wait (a gradient bucket's
      // members): `side` runs in issue order, so the newest end implies
      // the earlier ones; one wait covers them all.
      spare.push_back(it->second);
      it->second = done;
      return true;
    }
    pending[key] = done;
    return true;
  }
  /// The compute stream waits for a started collective (one never started,
  /// or over an axis of one rank, has nothing to wait for).
  bool waitFor(std::pair<Kind, int> key, std::string &error) {
    auto it = pending.find(key);
    if (it == pending.end())
      return true;
    bool ok = cudaStreamWaitEvent(stream, it->second, 0) == cudaSuccess;
    spare.push_back(it->second);
    pending.erase(it);
    return ok || (error = "cannot order the kernels after a collective", false);
  }
  bool reduce(const std::string &axis, const float *in, float *out, int64_t count, ncclRedOp_t op,
              std::string &error, Later later = {}) {
    ncclComm_t c = nullptr;
    if (!comm(axis, c, error))
      return false;
    return !c || onSide(error, later, [&] {
      return nccl.ok(nccl.allReduce(in, out, size_t(count), ncclFloat32, op, c, side),
                     "ncclAllReduce", error);
    });
  }
  bool gatherBlocks(const std::string &axis, const float *mine, float *all, int64_t count,
                    std::string &error, Later later) {
    return onAxis(axis, all, mine, count, error, [&](ncclComm_t c) {
      return onSide(error, later, [&] {
        return nccl.ok(nccl.allGather(mine, all, size_t(count), ncclFloat32, c, side),
                       "ncclAllGather", error);
      });
    });
  }
  bool scatterBlocks(const std::string &axis, const float *all, float *mine, int64_t count,
                     std::string &error, Later later) {
    return onAxis(axis, mine, all, count, error, [&](ncclComm_t c) {
      return onSide(error, later, [&] {
        return nccl.ok(nccl.reduceScatter(all, mine, size_t(count), ncclFloat32, ncclSum, c, side),
                       "ncclReduceScatter", error);
      });
    });
  }
  /// A block collective over `axis`: `run` on its communicator, or over an
  /// axis of one rank the copy of `from` to `to` it comes down to.
  template <typename Run>
  bool onAxis(const std::string &axis, float *to, const float *from, int64_t count,
              std::string &error, Run run) {
    ncclComm_t c = nullptr;
    if (!comm(axis, c, error))
      return false;
    return c ? run(c) : copy(to, from, count, error);
  }
  bool copy(float *to, const float *from, int64_t count, std::string &error) {
    if (to == from || cudaMemcpyAsync(to, from, size_t(count) * 4, cudaMemcpyDeviceToDevice,
                                      stream) == cudaSuccess)
      return true;
    return (error = "cannot copy a collective's buffer on the GPU", false);
  }
  bool pipelinePeer(int peer, ncclComm_t &c, int &stage, std::string &error) {
    int index = 0, stages = 1;
    axisPosition("pp", index, stages);
    if (!lookup("pp", c, error))
      return false;
    if (!c)
      return (error = "a pipeline transfer without pipeline stages", false);
    stage = peer / (size() / stages);
    return true;
  }
};
#endif

} // namespace

std::unique_ptr<Staging> makeCudaStaging(void *stream) {
  return std::make_unique<CudaStaging>(static_cast<cudaStream_t>(stream));
}

std::unique_ptr<DeviceCommunicator> makeNcclCommunicator(Communicator &host,
                                                         const std::vector<std::string> &axes,
                                                         void *stream, std::string &error) {
#ifdef LLMOPT_HAVE_NCCL_HEADER
  auto c = std::make_unique<NcclCommunicator>(host, static_cast<cudaStream_t>(stream));
  c->setTimeout(host.timeout());
  if (!c->connect(axes, error))
    return nullptr;
  return c;
#else
  error = "this llm-run was built without nccl.h: run the plan with --comm staged";
  return nullptr;
#endif
}

} // namespace llmopt::runtime
