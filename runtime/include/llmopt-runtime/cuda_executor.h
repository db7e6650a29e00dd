//===- cuda_executor.h - running a plan on one GPU -------------------*- C++ -*-===//
//
// The CUDA backend: one rank's program on one GPU with the kernels of
// kernels/cuda, cuBLASLt and cuDNN. It takes fp32 and bf16 plans of dense
// models (embeddings, norms, linears, attention, GeLU / SwiGLU, rotary,
// cross-entropy, the generated fused kernels, AdamW with global-norm
// clipping), data-parallel ones through all-reduces on device memory (NCCL,
// or host-staged where ranks share a GPU: device_comm.h; written without a
// GPU to run them), and refuses
// the rest by name (ZeRO, tensor / pipeline / expert parallelism, fp8 and
// fp16 plans) so that a run never silently differs from the CPU backend.
//
// Parameters are initialized exactly as the CPU backend does (it creates
// them) and kept on the device as fp32 masters, AdamW moments and, for bf16
// plans, a bf16 working copy; `syncToHost` / `syncToDevice` move them for
// checkpoints. Built only where the CUDA toolkit is (LLMOPT_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_CUDA_EXECUTOR_H
#define LLMOPT_RUNTIME_CUDA_EXECUTOR_H

#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/executor.h"

#include <memory>
#include <string>
#include <vector>

namespace llmopt::runtime {

class CudaExecutor {
public:
  CudaExecutor();
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor &) = delete;
  CudaExecutor &operator=(const CudaExecutor &) = delete;

  /// Whether a CUDA device is present.
  static bool available();

  /// Checks that the plan is one this backend runs, initializes the
  /// parameters (through `host`, the CPU backend, so both start from the
  /// same values) and uploads them.
  bool init(const Plan &plan, int rank, uint64_t seed, std::string &error);
  bool step(const std::vector<std::vector<int32_t>> &tokens,
            const std::vector<std::vector<int32_t>> &labels, StepResult &result,
            std::string &error);
  /// Parameters and moments to `host.params` (before a checkpoint) and back
  /// (after a resume loaded them there).
  bool syncToHost(std::string &error);
  bool syncToDevice(std::string &error);

  /// The CPU executor that initialized the parameters and holds their host
  /// copy (and step count) for checkpoints.
  CpuExecutor host;
  /// The plan's directory (set before init): its kernels.cu is compiled
  /// for this GPU and its fused kernels launched (fused_library.h).
  std::string planDir;
  /// The launcher's communicator (set before init for plans of more than
  /// one rank): the mesh axes' ranks and the exchange of NCCL's unique ids.
  Communicator *comm = nullptr;
  /// How collectives reach the other ranks (set before init): "auto" (NCCL
  /// where each rank of the node has a GPU of its own and NCCL loads, else
  /// the launcher's communicator staged through host memory), "nccl" or
  /// "staged" (device_comm.h).
  std::string commMode = "auto";
  /// Set before init: false where no step will run (`--steps 0`: the
  /// initial weights only), so that no activation arena is allocated.
  bool stepsWanted = true;

private:
  /// One instruction; under `host.profiling` between two CUDA events.
  bool runTimed(const Instruction &ins, std::string &error);
  struct State;
  std::unique_ptr<State> s;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_CUDA_EXECUTOR_H
