//===- executor.h - running a plan on the CPU -----------------------*- C++ -*-===//
//
// The CPU backend: one arena per rank, parameters with their fp32 master
// copy and AdamW moments, the rank's instruction stream executed with the
// reference kernels. It runs fp32 plans, and bf16 / fp16 plans by computing
// each kernel in fp32 on its 16-bit buffers and rounding the results back:
// it is the numerical proof that distributed plans train like the
// single-device model, not a fast path. The step's loop, pipeline order and
// data-moving instructions are the shared step driver's (step_driver.h);
// this class is its memory and kernels.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_EXECUTOR_H
#define LLMOPT_RUNTIME_EXECUTOR_H

#include "llmopt-kernels/cpu.h"
#include "llmopt-runtime/comm.h"
#include "llmopt-runtime/param_store.h"
#include "llmopt-runtime/plan.h"
#include "llmopt-runtime/step_driver.h"

#include <array>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace llmopt::runtime {

/// An attention instruction's shape (attention_* and cp_ring_attention_*:
/// `q` and `k` its query and key buffers; parameters heads, kv_heads,
/// head_dim, scale, causal, window).
kernels::cpu::AttentionShape attentionShape(const Instruction &ins, const Buffer &q,
                                            const Buffer &k);

struct StepResult {
  float loss = 0;
  float gradNorm = 0;
  /// Dynamic loss scaling (fp16 plans): the scale after this step, and
  /// whether a non-finite gradient made the step skip its update.
  bool lossScaling = false;
  float lossScale = 0;
  bool skipped = false;
  /// The CUDA backend: device memory in use after the step (0 elsewhere).
  int64_t deviceBytes = 0;
};

/// The CPU backend: its memory and kernels under the shared step driver,
/// and its parameter store (host memory).
class CpuExecutor : public ParamStore, private StepBackend {
public:
  /// Prepares rank `rank` of `plan`: checks the plan is fp32, allocates the
  /// arena, initializes parameters from their specs (seeded, as the
  /// reference interpreter does).
  bool init(const Plan &plan, int rank, uint64_t seed, std::string &error);

  /// Runs one step on this rank's micro-batches of token ids and labels (as
  /// many as the plan's num_micro_batches).
  bool step(const std::vector<std::vector<int32_t>> &tokens,
            const std::vector<std::vector<int32_t>> &labels, Communicator &comm, StepResult &result,
            std::string &error);

  std::map<std::string, ParamState> params;

  // The parameter store (param_store.h) over `params`.
  bool holds(const std::string &name) const override { return params.count(name) != 0; }
  void layout(const std::string &name, Chunk &shard, bool &valueChunked) const override;
  bool read(const std::string &name, ParamState &out, std::string &error) const override;
  bool write(const std::string &name, ParamState &&in, std::string &error) override;
  void release() override;

  /// False when another backend (CUDA) runs the plan and this executor only
  /// initializes and holds the parameters: no host arena is allocated.
  bool arenasWanted = true;
  /// Micro-batches a pipeline schedule has in flight at most (each with its
  /// own stash, or in older plans without one its own arena).
  size_t arenaSlots() const { return driver.slots(); }
  /// Bytes of arenas and stashes this rank holds.
  int64_t activationBytes() const;
  /// Per-kernel timing (`--profile`): kernel instructions of the same kind
  /// and shape, their calls, wall time, FLOPs (GEMMs, attention) and bytes
  /// read and written, and the host's time issuing them (the CUDA backend:
  /// its launches, against the GPU's `seconds`; the CPU backend: the same
  /// as `seconds`); collected while `profiling` is set.
  struct KernelProfile {
    std::string kernel;
    std::vector<int64_t> dims; // GEMM [rows, in, out]; attention [b, heads, sq, sk, d]
    int64_t calls = 0;
    double seconds = 0, flops = 0, bytes = 0, hostSeconds = 0;
  };
  bool profiling = false;
  std::map<std::pair<std::string, std::vector<int64_t>>, KernelProfile> profile;
  /// Adds one call of `ins` taking `seconds` to `profile`, `hostSeconds` of
  /// them on the host (the CUDA backend times its instructions with events
  /// and its launches with the host's clock).
  void record(const Instruction &ins, double seconds, double hostSeconds);
  /// Bytes of `param`'s gradient accumulator on this rank (whole, or its
  /// ZeRO-2/3 chunk; 0 when this rank has none).
  int64_t gradientBytes(const std::string &param) const;

private:
  const Plan *plan = nullptr;
  const Program *program = nullptr;
  /// The micro-batch loop, the pipeline order and the data-moving
  /// instructions (step_driver.h).
  StepDriver driver;
  /// One arena per micro-batch in flight (pipeline schedules); `slot` is
  /// the one instructions address now.
  std::vector<std::vector<float>> arenas;
  /// Pipeline stages whose plan has a stash: one per micro-batch in flight
  /// (and then a single shared arena).
  std::vector<std::vector<float>> stashes;
  size_t slot = 0;
  int rank = 0;
  /// This rank's index and the size of a mesh axis.
  bool axis(const std::string &name, int &index, int &size, std::string &error) const;
  std::map<std::string, std::vector<float>> accum;
  const std::vector<int32_t> *tokens = nullptr, *labels = nullptr;

  // The step driver's backend (StepBackend).
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

  const int32_t *ids(const Buffer &b, std::string &error);
  /// An i32 arena buffer (MoE expert indices).
  int32_t *routes(const Buffer &b, std::string &error);
  bool usesLossScaling = false;
  /// Temporaries of the fused kernel running (Buffer::Space::Temp).
  std::vector<std::vector<float>> temps;
  /// 16-bit plans: the buffers of `ins` computed on fp32 copies, made and
  /// rounded back around it.
  std::vector<const Buffer *> wideBuffers(const Instruction &ins) const;
  void widenBuffers(const std::vector<const Buffer *> &wide);
  void narrowBuffers(const std::vector<const Buffer *> &wide);
  /// Those of the data-moving instruction the step driver runs now
  /// (widen / narrow; such instructions do not nest).
  std::vector<const Buffer *> widened;
  /// One kernel instruction's call: its buffers and, for a kernel with
  /// `shard`, this rank's position on that axis.
  struct KernelCall {
    const Instruction &ins;
    const std::vector<Buffer> &in, &out;
    Communicator &comm;
    std::string &error;
    int shardIndex = 0, shardSize = 1;
  };
  using KernelFn = bool (CpuExecutor::*)(const KernelCall &);
  /// The CPU implementation of each kernel, by kernels::KernelId.
  static const std::array<KernelFn, size_t(kernels::KernelId::NumKernels)> &kernelTable();
  /// The implementations (a forward and backward that share their setup
  /// share one).
  bool kernelEmbeddingFwd(const KernelCall &call);
  bool kernelEmbeddingBwd(const KernelCall &call);
  bool kernelPositionEmbedding(const KernelCall &call);
  bool kernelLayerNormFwd(const KernelCall &call);
  bool kernelLayerNormBwd(const KernelCall &call);
  bool kernelRMSNormFwd(const KernelCall &call);
  bool kernelRMSNormBwd(const KernelCall &call);
  bool kernelLinearFwd(const KernelCall &call);
  bool kernelLinearBwd(const KernelCall &call);
  bool kernelSplit(const KernelCall &call);
  bool kernelConcat(const KernelCall &call);
  bool kernelRotary(const KernelCall &call);
  bool kernelAttention(const KernelCall &call);
  bool kernelGeluFwd(const KernelCall &call);
  bool kernelGeluBwd(const KernelCall &call);
  bool kernelSwiGLUFwd(const KernelCall &call);
  bool kernelSwiGLUBwd(const KernelCall &call);
  bool kernelCopy(const KernelCall &call);
  bool kernelBiasAdd(const KernelCall &call);
  bool kernelSumRows(const KernelCall &call);
  bool kernelAdd(const KernelCall &call);
  bool kernelFill(const KernelCall &call);
  bool kernelScale(const KernelCall &call);
  bool kernelCrossEntropyFwd(const KernelCall &call);
  bool kernelCrossEntropyBwd(const KernelCall &call);
  bool kernelSumSquares(const KernelCall &call);
  bool kernelSqrt(const KernelCall &call);
  bool kernelVPCEStats(const KernelCall &call);
  bool kernelVPCELoss(const KernelCall &call);
  bool kernelVPCEBwd(const KernelCall &call);
  bool kernelMoERouterFwd(const KernelCall &call);
  bool kernelMoERouterBwd(const KernelCall &call);
  bool kernelMoEExpertCounts(const KernelCall &call);
  bool kernelMoEDispatchCombine(const KernelCall &call);
  bool kernelMoEExperts(const KernelCall &call);
  bool kernelTPSlice(const KernelCall &call);
  bool kernelFused(const KernelCall &call);
  bool kernelGlobalNorm(const KernelCall &call);
  bool kernelLossScaleFill(const KernelCall &call);
  bool kernelLossUnscale(const KernelCall &call);
  bool kernelLossScaleUpdate(const KernelCall &call);
  bool kernelAdamW(const KernelCall &call);
  void zero(const Buffer &b);
  bool runWide(const Instruction &ins, Communicator &comm, std::string &error);
  /// fp32 copies of the running instruction's bf16 / fp16 buffers, by buffer.
  std::map<const Buffer *, std::vector<float>> shadows;
  uint16_t *storage16(const Buffer &b);

public:
  /// Whether every kernel of the ABI has a CPU implementation.
  static bool implementsEveryKernel();

  /// bf16 / fp16 bits to and from fp32 (round to nearest, ties to even; fp16
  /// overflows to infinity).
  static float fromStorage(DType t, uint16_t bits);
  static uint16_t toStorage(DType t, float f);

private:
  /// fp8 GEMMs (kernel parameter `fp8`: "e4m3", or "hybrid" with each
  /// operand's own format): the operands rounded to fp8 with per-tensor
  /// scaling into `rounded`, in order; nothing without the parameter.
  bool fp8Inputs(const Instruction &ins,
                 std::initializer_list<std::pair<const Buffer *, kernels::cpu::Fp8>> operands,
                 std::vector<std::vector<float>> &rounded, Communicator &comm, std::string &error);
  /// Under context parallelism (a `cp` kernel parameter): the positions of
  /// this rank's `local` rows in the whole sequence; empty otherwise.
  bool cpPositions(const Instruction &ins, int64_t local, std::vector<int32_t> &positions,
                   std::string &error);
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_EXECUTOR_H
