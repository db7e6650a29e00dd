//===- cuda_executor.h - running a plan on one GPU -------------------*- C++ -*-===//
//
// The CUDA backend: one rank's program on one GPU with the kernels of
// kernels/cuda, cuBLASLt and cuDNN, under the step driver every backend
// shares (step_driver.h: the micro-batch loop and the data-moving
// instructions, collectives inside computations included). It takes fp32
// and bf16 plans of dense and MoE models (embeddings, norms, linears,
// attention, GeLU / SwiGLU, rotary, cross-entropy, the router and experts,
// the generated fused kernels, AdamW with global-norm clipping), fp8
// linears (an amax over tensor-parallel ranks too), data parallelism,
// ZeRO-1/2/3, pipeline stages, tensor (with sequence), expert and context
// parallelism through collectives on device memory (NCCL, or host-staged
// where ranks share a GPU: device_comm.h), and refuses the rest by name
// (fp8 experts, fp16 and loss scaling) so that a run never silently differs
// from the CPU backend. Everything but the one-GPU dense path was written
// without a GPU to run it.
//
// Parameters are initialized exactly as the CPU backend does (it creates
// them) and then live on the device only, as fp32 masters, AdamW moments
// and, for bf16 plans, a bf16 working copy: the executor is the rank's
// parameter store (param_store.h), so checkpoints read and write them one
// tensor at a time through host memory and no host copy of the training
// state is kept. Built only where the CUDA toolkit is (LLMOPT_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_CUDA_EXECUTOR_H
#define LLMOPT_RUNTIME_CUDA_EXECUTOR_H

#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/executor.h"
#include "llmopt-runtime/param_store.h"
#include "llmopt-runtime/step_driver.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace llmopt::runtime {

class CudaExecutor : public ParamStore, private StepBackend {
public:
  CudaExecutor();
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor &) = delete;
  CudaExecutor &operator=(const CudaExecutor &) = delete;

  /// Whether a CUDA device is present.
  static bool available();

  /// Whether this backend runs rank `rank`'s program of `plan` on a GPU of
  /// compute capability `capability` (80 for sm_80): the instructions,
  /// dtypes and shapes init checks, without a GPU (init also refuses, with
  /// the parameters laid out, a kernel that reads a ZeRO-3 chunk instead of
  /// its gathered copy, and a communicator that cannot form). Fills
  /// `axes` with the mesh axes its collectives use and `bf16` with whether
  /// it computes in bf16; else false with `error` naming what it refuses.
  static bool supports(const Plan &plan, int rank, int capability, std::set<std::string> &axes,
                       bool &bf16, std::string &error);

  /// Checks that the plan is one this backend runs, initializes the
  /// parameters (through `host`, the CPU backend, so both start from the
  /// same values), uploads them and frees the host copy.
  bool init(const Plan &plan, int rank, uint64_t seed, std::string &error);
  bool step(const std::vector<std::vector<int32_t>> &tokens,
            const std::vector<std::vector<int32_t>> &labels, StepResult &result,
            std::string &error);

  // The parameter store (param_store.h) on the device: each read or write
  // waits for the GPU's work and copies one tensor's value and moments
  // (writes also refresh a bf16 plan's working copy).
  bool holds(const std::string &name) const override;
  void layout(const std::string &name, Chunk &shard, bool &valueChunked) const override;
  bool read(const std::string &name, ParamState &out, std::string &error) const override;
  bool write(const std::string &name, ParamState &&in, std::string &error) override;

  /// The CPU executor that initializes the parameters (its copy of them is
  /// freed once they are on the device) and collects `--profile`'s kernel
  /// times (`profiling`, `record`).
  CpuExecutor host;
  /// Set before init: compile the plan's fused kernels for this GPU (their
  /// source generated from plan.json, fused_library.h) and launch them;
  /// otherwise their bodies run kernel by kernel.
  bool compileFused = false;
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
  /// Waits for the device's work (before the state is read or written).
  bool idle(std::string &error) const;
  /// One instruction; under `host.profiling` between two CUDA events.
  bool runTimed(const Instruction &ins, std::string &error);

  // The step driver's backend (StepBackend): device memory, the kernels,
  // and runs of kernels as captured CUDA graphs (LLMOPT_CUDA_GRAPHS=1).
  float *data(const Buffer &b) override;
  bool store(const Buffer &b, const float *values, std::string &error) override;
  bool paramValue(const std::string &name, const float *&value, int64_t &count,
                  std::string &error) override;
  bool allocate(int64_t n, BackendFloats &out, std::string &error) override;
  bool copy(float *dst, const float *src, int64_t n, std::string &error) override;
  bool addScaled(float *dst, const float *src, float scale, int64_t n, std::string &error) override;
  bool fill(float *dst, float value, int64_t n, std::string &error) override;
  bool copyStrided(float *dst, const float *src, const StridedCopy &copy,
                   std::string &error) override;
  bool ringForward(const Instruction &ins, const float *q, const float *k, const float *v,
                   int keysRank, float *out, float *lse, std::string &error) override;
  bool ringMerge(const Instruction &ins, float *out, float *lse, const float *blockOut,
                 const float *blockLse, std::string &error) override;
  bool ringBackward(const Instruction &ins, const float *dout, const float *q, const float *k,
                    const float *v, const float *out, const float *lse, int keysRank, float *dq,
                    float *dk, float *dv, std::string &error) override;
  bool clearAccumulators(std::string &error) override;
  bool select(const std::vector<int32_t> &tokens, const std::vector<int32_t> &labels, size_t slot,
              std::string &error) override;
  bool widen(const Instruction &ins, std::string &error) override;
  bool narrow(const Instruction &ins, std::string &error) override;
  bool compute(const Instruction &ins, Communicator &comm, std::string &error) override;
  bool computeRun(const Instruction *first, size_t count, Communicator &comm,
                  std::string &error) override;

  struct State;
  std::unique_ptr<State> s;
  /// The micro-batch loop and the data-moving instructions (declared after
  /// `s`: the buffers it holds are freed on `s`'s stream).
  StepDriver driver;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_CUDA_EXECUTOR_H
