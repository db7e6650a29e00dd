//===- comm.cpp - collectives between ranks -------------------------------===//

#include "llmopt-runtime/comm.h"

namespace llmopt::runtime {

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
