//===- comm.h - collectives between ranks ---------------------------*- C++ -*-===//
//
// What an executor needs from the other ranks: an in-place all-reduce over a
// mesh axis. Implementations: one rank (nothing to do), ranks as threads of
// one process (tests), and, with the runtime issue, Gloo and MPI across
// processes and NCCL on GPUs.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_COMM_H
#define LLMOPT_RUNTIME_COMM_H

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llmopt::runtime {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sums (`average`: then divides by size) `count` floats in place across
  /// the ranks of `axis`. Returns false with `error` set on failure.
  virtual bool allReduce(const std::string &axis, float *data, int64_t count, bool average,
                         std::string &error) = 0;
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
