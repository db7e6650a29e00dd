//===- device_comm.h - communicators on GPU memory ------------------*- C++ -*-===//
//
// The CUDA backend's two communicators, both behind the Communicator
// interface and both on device pointers, in the order of one CUDA stream:
//  - NCCL: a communicator per mesh axis (and one over the pipeline axis for
//    the stages' transfers), each from a unique id that the axis's first
//    rank makes and the launcher's host communicator (MPI or TCP) carries to
//    the others; NCCL itself is loaded at run time (libnccl.so.2), so that
//    llm-run starts where it is not installed.
//  - host-staged: the launcher's host communicator through pinned copies
//    (staged_comm.h with CudaStaging), for ranks that share a GPU (NCCL
//    refuses two ranks on one device) or machines without NCCL.
// Built only with the CUDA toolkit (LLMOPT_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_DEVICE_COMM_H
#define LLMOPT_RUNTIME_DEVICE_COMM_H

#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/staged_comm.h"

#include <memory>
#include <string>
#include <vector>

namespace llmopt::runtime {

/// Moves floats between this GPU and the host on `stream` (a cudaStream_t),
/// synchronizing it: a staged collective sees everything queued before it.
std::unique_ptr<Staging> makeCudaStaging(void *stream);

/// A device communicator whose work is queued on `stream` (a cudaStream_t).
/// (The host-staged one is a StagedCommunicator over makeCudaStaging: each
/// of its collectives is complete when it returns.)
class DeviceCommunicator : public LayeredCommunicator {
public:
  /// Bootstrapped through `host` (its ranks and mesh).
  explicit DeviceCommunicator(Communicator &host) : LayeredCommunicator(host) {}
  /// Waits for the compute stream (and with `all` for every collective,
  /// also those started and not waited for), at most the watchdog's
  /// timeout: a collective a rank never joins fails with the watchdog's
  /// error (and NCCL's communicators aborted) instead of hanging the step.
  virtual bool synchronize(std::string &error, bool all) = 0;
};

/// NCCL communicators for the mesh axes `axes` (every rank names the same
/// ones in the same order; those of one rank are skipped; "pp" carries the
/// pipeline transfers), set up through `host` (which outlives the result;
/// its mesh already set). Null with `error` set where NCCL cannot be loaded
/// or a communicator not made.
std::unique_ptr<DeviceCommunicator> makeNcclCommunicator(Communicator &host,
                                                         const std::vector<std::string> &axes,
                                                         void *stream, std::string &error);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_DEVICE_COMM_H
