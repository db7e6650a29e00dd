//===- mpi_comm.cpp - collectives over MPI --------------------------------===//

#include "llmopt-runtime/mpi_comm.h"

#include <algorithm>
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
  bool allReduce(const std::string &, float *data, int64_t count, bool average,
                 std::string &error) override {
    // Chunks below 2^31 elements (MPI counts are int).
    for (int64_t at = 0; at < count;) {
      int n = int(std::min<int64_t>(count - at, int64_t(1) << 30));
      int rc = MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) {
        error = "MPI_Allreduce failed with code " + std::to_string(rc);
        return false;
      }
      at += n;
    }
    if (average)
      for (int64_t i = 0; i < count; ++i)
        data[i] /= float(size_);
    return true;
  }

  bool reduceScatter(const std::string &axis, float *data, int64_t count, bool average,
                     std::string &error) override {
    int64_t c = (count + size_ - 1) / size_;
    if (c * size_ > (int64_t(1) << 30))
      return Communicator::reduceScatter(axis, data, count, average, error);
    std::vector<float> padded(size_t(c * size_), 0.0f);
    std::vector<float> mine(size_t(c), 0.0f);
    std::copy(data, data + count, padded.begin());
    int rc = MPI_Reduce_scatter_block(padded.data(), mine.data(), int(c), MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      error = "MPI_Reduce_scatter_block failed with code " + std::to_string(rc);
      return false;
    }
    Chunk own = shardChunk(count, size_, rank_);
    for (int64_t i = 0; i < own.size(); ++i)
      data[own.begin + i] = average ? mine[size_t(i)] / float(size_) : mine[size_t(i)];
    return true;
  }

  bool allGather(const std::string &axis, float *data, int64_t count,
                 std::string &error) override {
    int64_t c = (count + size_ - 1) / size_;
    if (c * size_ > (int64_t(1) << 30))
      return Communicator::allGather(axis, data, count, error);
    std::vector<float> padded(size_t(c * size_), 0.0f);
    std::copy(data, data + count, padded.begin());
    int rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, padded.data(), int(c), MPI_FLOAT,
                           MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      error = "MPI_Allgather failed with code " + std::to_string(rc);
      return false;
    }
    std::copy(padded.begin(), padded.begin() + count, data);
    return true;
  }

private:
  int rank_ = 0, size_ = 1;
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
