//===- staged_comm.cpp - collectives on device memory through the host ----===//

#include "llmopt-runtime/staged_comm.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace llmopt::runtime {

float *Staging::allocHost(size_t count) { return new (std::nothrow) float[count](); }

void Staging::freeHost(float *p, size_t) { delete[] p; }

HostBuffer::HostBuffer(Staging &s, size_t count) {
  if (count == 0)
    return;
  if ((p = s.allocHost(count))) {
    staging = &s;
    n = count;
  }
}

HostBuffer::~HostBuffer() {
  if (p)
    staging->freeHost(p, n);
}

bool HostStaging::toHost(float *host, const float *device, int64_t count, std::string &) {
  std::copy_n(device, count, host);
  return true;
}

bool HostStaging::toDevice(float *device, const float *host, int64_t count, std::string &) {
  std::copy_n(host, count, device);
  return true;
}

bool StagedCommunicator::hold(Copy &c, float *device, int64_t count, std::string &error) {
  c.data = HostBuffer(staging, size_t(count));
  c.device = device;
  if (count > 0 && !c.data.data())
    return (error = "out of host memory for " + std::to_string(count * 4) +
                    " bytes of a staged collective",
            false);
  return true;
}

bool StagedCommunicator::in(Copy &c, const float *device, int64_t count, std::string &error) {
  return hold(c, c.device, count, error) &&
         (count == 0 || staging.toHost(c.data.data(), device, count, error));
}

bool StagedCommunicator::out(Copy &c, std::string &error) {
  return !c.device || c.data.empty() ||
         staging.toDevice(c.device, c.data.data(), int64_t(c.data.size()), error);
}

int64_t StagedCommunicator::axisSize(const std::string &axis) const {
  int index = 0, n = 1;
  inner.axisPosition(axis, index, n);
  return n;
}

bool StagedCommunicator::finish(std::map<int, std::pair<Copy, Copy>> &started, int key,
                                std::string &error) {
  auto it = started.find(key);
  if (it == started.end())
    return true;
  bool ok = out(it->second.second, error);
  started.erase(it);
  return ok;
}

bool StagedCommunicator::allReduce(const std::string &axis, float *data, int64_t count,
                                   bool average, std::string &error) {
  Copy c{{}, data};
  return in(c, data, count, error) && inner.allReduce(axis, c.data.data(), count, average, error) &&
         out(c, error);
}

bool StagedCommunicator::allReduceMax(const std::string &axis, float *data, int64_t count,
                                      std::string &error) {
  Copy c{{}, data};
  return in(c, data, count, error) && inner.allReduceMax(axis, c.data.data(), count, error) &&
         out(c, error);
}

bool StagedCommunicator::startAllReduce(const std::string &axis, float *data, int64_t count,
                                        bool average, int bucket, std::string &error) {
  std::list<Copy> &held = buckets[bucket];
  Copy &c = held.emplace_back(Copy{{}, data});
  if (!in(c, data, count, error)) {
    // Not started: nothing of it is held.
    held.pop_back();
    if (held.empty())
      buckets.erase(bucket);
    return false;
  }
  return inner.startAllReduce(axis, c.data.data(), count, average, bucket, error);
}

bool StagedCommunicator::waitAllReduce(int bucket, std::string &error) {
  if (!inner.waitAllReduce(bucket, error))
    return false;
  auto it = buckets.find(bucket);
  if (it == buckets.end())
    return true;
  for (Copy &c : it->second)
    if (!out(c, error))
      return false;
  buckets.erase(it);
  return true;
}

bool StagedCommunicator::reduceScatter(const std::string &axis, float *data, int64_t count,
                                       bool average, std::string &error) {
  Copy c{{}, data};
  return in(c, data, count, error) &&
         inner.reduceScatter(axis, c.data.data(), count, average, error) && out(c, error);
}

bool StagedCommunicator::allGather(const std::string &axis, float *data, int64_t count,
                                   std::string &error) {
  Copy c{{}, data};
  return in(c, data, count, error) && inner.allGather(axis, c.data.data(), count, error) &&
         out(c, error);
}

bool StagedCommunicator::allGatherBlocks(const std::string &axis, const float *mine, float *all,
                                         int64_t count, std::string &error) {
  int64_t n = axisSize(axis);
  Copy m, a;
  return hold(a, all, count * n, error) && in(m, mine, count, error) &&
         inner.allGatherBlocks(axis, m.data.data(), a.data.data(), count, error) && out(a, error);
}

bool StagedCommunicator::startAllGatherBlocks(const std::string &axis, const float *mine,
                                              float *all, int64_t count, int event,
                                              std::string &error) {
  int64_t n = axisSize(axis);
  auto &[m, a] = gathers[event];
  if (!hold(a, all, count * n, error) || !in(m, mine, count, error)) {
    gathers.erase(event); // not started: nothing of it is held
    return false;
  }
  return inner.startAllGatherBlocks(axis, m.data.data(), a.data.data(), count, event, error);
}

bool StagedCommunicator::waitAllGather(int event, std::string &error) {
  return inner.waitAllGather(event, error) && finish(gathers, event, error);
}

bool StagedCommunicator::reduceScatterBlocks(const std::string &axis, const float *all, float *mine,
                                             int64_t count, std::string &error) {
  int64_t n = axisSize(axis);
  Copy a, m;
  return hold(m, mine, count, error) && in(a, all, count * n, error) &&
         inner.reduceScatterBlocks(axis, a.data.data(), m.data.data(), count, error) &&
         out(m, error);
}

bool StagedCommunicator::startReduceScatterBlocks(const std::string &axis, const float *all,
                                                  float *mine, int64_t count, int handle,
                                                  std::string &error) {
  int64_t n = axisSize(axis);
  auto &[a, m] = scatters[handle];
  if (!hold(m, mine, count, error) || !in(a, all, count * n, error)) {
    scatters.erase(handle); // not started: nothing of it is held
    return false;
  }
  return inner.startReduceScatterBlocks(axis, a.data.data(), m.data.data(), count, handle, error);
}

bool StagedCommunicator::waitReduceScatter(int handle, std::string &error) {
  return inner.waitReduceScatter(handle, error) && finish(scatters, handle, error);
}

bool StagedCommunicator::allToAllBlocks(const std::string &axis, const float *send, float *recv,
                                        int64_t count, std::string &error) {
  int64_t n = axisSize(axis);
  Copy s, r;
  return hold(r, recv, count * n, error) && in(s, send, count * n, error) &&
         inner.allToAllBlocks(axis, s.data.data(), r.data.data(), count, error) && out(r, error);
}

bool StagedCommunicator::send(int peer, int tag, const float *data, int64_t count,
                              std::string &error) {
  // The host communicator may return before the peer has received: the
  // copy stays until `flush`.
  Copy c;
  if (!in(c, data, count, error))
    return false;
  const HostBuffer &held = sends.emplace_back(std::move(c.data));
  return inner.send(peer, tag, held.data(), count, error);
}

bool StagedCommunicator::recv(int peer, int tag, float *data, int64_t count, std::string &error) {
  Copy c;
  return hold(c, data, count, error) && inner.recv(peer, tag, c.data.data(), count, error) &&
         out(c, error);
}

bool StagedCommunicator::flush(std::string &error) {
  if (!inner.flush(error))
    return false;
  sends.clear();
  return true;
}

size_t StagedCommunicator::inFlight() const {
  size_t n = sends.size() + gathers.size() + scatters.size();
  for (const auto &[bucket, copies] : buckets)
    n += copies.size();
  return n;
}

} // namespace llmopt::runtime
