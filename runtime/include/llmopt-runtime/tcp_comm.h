//===- tcp_comm.h - collectives over TCP, launched like torchrun ----*- C++ -*-===//
//
// For launchers that set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// (torchrun, Kubernetes job controllers) instead of starting an MPI job: rank
// 0 listens on MASTER_ADDR:MASTER_PORT, every rank reports the port it
// listens on, and the ranks connect into a full mesh of TCP links. Each link
// has a writer and a reader thread, so sends never block and every byte that
// arrives is taken off the socket at once (no two ranks can deadlock on full
// socket buffers); receivers pick their messages by channel and tag.
//
// All-reduce: every rank sends its buffer to the group and sums the group's
// buffers in rank order, so all ranks get bit-identical results (O(n^2)
// traffic: meant for CPU runs and tests, not for speed). A rank whose link
// closes (it died) makes every wait on it fail with a message naming it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_TCP_COMM_H
#define LLMOPT_RUNTIME_TCP_COMM_H

#include "llmopt-runtime/comm.h"

#include <memory>
#include <string>

namespace llmopt::runtime {

/// Joins the job as `rank` of `world`: rendezvous at `masterAddr`:`port`
/// within `timeoutS` seconds, then the full mesh. Null with `error` set on
/// failure.
std::unique_ptr<Communicator> makeTcpCommunicator(int rank, int world,
                                                  const std::string &masterAddr, int port,
                                                  double timeoutS, std::string &error);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_TCP_COMM_H
