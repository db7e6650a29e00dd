//===- comm.cpp - collectives between ranks -------------------------------===//

#include "llmopt-runtime/comm.h"

#include <cstdio>

namespace llmopt::runtime {

std::string
Communicator::watchdogError(const std::string &what, const std::vector<int> &silent,
                            const std::vector<std::pair<int, std::string>> &elsewhere) const {
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g s", timeoutS);
  std::string out = what + " did not complete within " + limit +
                    " (the collective watchdog, --collective-timeout): ";
  if (silent.empty() && elsewhere.empty())
    return out + "every rank of the group is in it (a rank is slow or the network stalls)";
  if (!silent.empty()) {
    out += "rank(s) ";
    for (size_t i = 0; i < silent.size(); ++i)
      out += (i ? ", " : "") + std::to_string(silent[i]);
    out += " did not arrive (stopped, hung or dead)";
  }
  for (size_t i = 0; i < elsewhere.size(); ++i)
    out += std::string(i || !silent.empty() ? "; " : "") + "rank " +
           std::to_string(elsewhere[i].first) + " waits in " + elsewhere[i].second;
  return out;
}

class ThreadRank final : public Communicator {
public:
  ThreadRank(ThreadGroup &g, int rank) : g(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g.size_; }

  bool allReduce(const std::string &, float *data, int64_t count, bool average,
                 std::string &error) override {
    std::unique_lock<std::mutex> lock(g.mu);
    // Wait until the previous reduction's results have been read.
    g.cv.wait(lock, [&] { return g.readers == 0; });
    if (g.arrived == 0)
      g.sum.assign(count, 0.0);
    if (int64_t(g.sum.size()) != count) {
      error = "ranks all-reduce buffers of different sizes";
      return false;
    }
    // Reduce in rank order for determinism: accumulate per rank slot.
    for (int64_t i = 0; i < count; ++i)
      g.sum[i] += data[i];
    int64_t gen = g.generation;
    if (++g.arrived == g.size_) {
      g.result.resize(count);
      for (int64_t i = 0; i < count; ++i)
        g.result[i] = float(average ? g.sum[i] / g.size_ : g.sum[i]);
      g.arrived = 0;
      g.readers = g.size_;
      ++g.generation;
      g.cv.notify_all();
    } else {
      g.cv.wait(lock, [&] { return g.generation != gen; });
    }
    for (int64_t i = 0; i < count; ++i)
      data[i] = g.result[i];
    if (--g.readers == 0)
      g.cv.notify_all();
    return true;
  }

private:
  ThreadGroup &g;
  int rank_;
};

std::unique_ptr<Communicator> ThreadGroup::member(int rank) {
  return std::make_unique<ThreadRank>(*this, rank);
}

} // namespace llmopt::runtime
