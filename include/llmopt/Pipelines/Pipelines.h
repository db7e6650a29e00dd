//===- Pipelines.h - pass pipelines -----------------------------*- C++ -*-===//

#ifndef LLMOPT_PIPELINES_PIPELINES_H
#define LLMOPT_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace llmopt {

struct LowerToPlanOptions : public mlir::PassPipelineOptions<LowerToPlanOptions> {
  Option<std::string> dir{*this, "dir", llvm::cl::desc("plan directory to write")};
  Option<double> lr{*this, "lr", llvm::cl::desc("learning rate"), llvm::cl::init(3e-4)};
  Option<double> maxGradNorm{*this, "max-grad-norm",
                             llvm::cl::desc("global-norm clipping (0: none)"), llvm::cl::init(1.0)};
  Option<int64_t> batch{*this, "batch", llvm::cl::desc("micro-batch (default: the plan's)"),
                        llvm::cl::init(0)};
  Option<int64_t> seq{*this, "seq", llvm::cl::desc("sequence length (default: the model's)"),
                      llvm::cl::init(0)};
  Option<int64_t> bucketBytes{
      *this, "bucket-bytes",
      llvm::cl::desc("gradient bytes per data-parallel all-reduce or ZeRO-2/3 reduce-scatter "
                     "bucket (0: one all-reduce; one reduce-scatter per gradient)"),
      llvm::cl::init(25 << 20)};
  Option<std::string> cpComm{*this, "cp-comm",
                             llvm::cl::desc("context parallelism: ring or all-gather"),
                             llvm::cl::init("ring")};
  Option<std::string> lossScale{*this, "loss-scale",
                                llvm::cl::desc("none, dynamic, or auto (dynamic for fp16 models)"),
                                llvm::cl::init("auto")};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("fuse chains of row-wise ops into generated kernels"),
                    llvm::cl::init(true)};
  Option<double> moeAuxLoss{
      *this, "moe-aux-loss",
      llvm::cl::desc("MoE load-balancing loss coefficient (Megatron's --moe-aux-loss-coeff)"),
      llvm::cl::init(0.0)};
  Option<bool> prefetch{*this, "prefetch",
                        llvm::cl::desc("ZeRO-3: gather each layer's parameters while the "
                                       "previous layer computes"),
                        llvm::cl::init(true)};
};

/// From a model (planned or not) to a plan directory:
///  llm-partition-tp / -ep / -cp  tensor, expert and context parallelism
///  llm-build-training-step  forward + backward + AdamW as @train_step
///  llm-specialize-shapes    fixed micro-batch and sequence: buffers get sizes
///  llm-partition-pp         pipeline stages
///  llm-shard-params         ZeRO-3 gathers
///  llm-fuse-elementwise     row-wise op chains as fused kernels (fuse=true)
///  llm-plan-memory          arena offsets by liveness
///  convert-llm-to-exec      kernel calls and collectives per rank class
///  llm-emit-plan            plan.json, kernels.cu + checksums
void buildLowerToPlanPipeline(mlir::OpPassManager &pm, const LowerToPlanOptions &options);

/// Registers `llm-lower-to-plan`.
void registerPipelines();

} // namespace llmopt

#endif // LLMOPT_PIPELINES_PIPELINES_H
