//===- abi.h - the kernels a plan may call ------------------------*- C++ -*-===//
//
// The one contract between the compiler and the kernels: each kernel's name
// in plan files, its buffers (inputs, then outputs) and its scalar
// parameters. The compiler emits these names; the runtime's CPU and CUDA
// backends dispatch on them. Plain header, no dependencies.
//
// LLMOPT_KERNEL(id, "name", inputs, outputs, "params")
//  - inputs / outputs: buffer counts (-1: as many as the instruction lists);
//  - params: the scalar parameters, comma-separated, in the plan's `attrs`.
// Shapes come with each buffer: rows = batch * seq, etc. are read from them.
// `shard` (optional, a mesh axis name): the kernel touches only this rank's
// ZeRO chunk of each buffer, [r * c, min(n, (r + 1) * c)) with
// c = ceil(n / axis size), as exec.reduce_scatter leaves it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_ABI_H
#define LLMOPT_KERNELS_ABI_H

#define LLMOPT_KERNELS(LLMOPT_KERNEL)                                                       \
  LLMOPT_KERNEL(EmbeddingFwd, "embedding_fwd", 2, 1, "")                                 \
  LLMOPT_KERNEL(EmbeddingBwd, "embedding_bwd", 2, 1, "")                                 \
  LLMOPT_KERNEL(PositionEmbeddingFwd, "position_embedding_fwd", 2, 1, "")                \
  LLMOPT_KERNEL(PositionEmbeddingBwd, "position_embedding_bwd", 1, 1, "")                \
  LLMOPT_KERNEL(LayerNormFwd, "layer_norm_fwd", -1, 1, "eps")                            \
  LLMOPT_KERNEL(LayerNormBwd, "layer_norm_bwd", 3, -1, "eps")                            \
  LLMOPT_KERNEL(RMSNormFwd, "rms_norm_fwd", 2, 1, "eps")                                 \
  LLMOPT_KERNEL(RMSNormBwd, "rms_norm_bwd", 3, 2, "eps")                                 \
  LLMOPT_KERNEL(LinearFwd, "linear_fwd", -1, -1, "transposed,epilogue,fp8,amax_axis")   \
  LLMOPT_KERNEL(LinearBwd, "linear_bwd", 3, -1, "transposed,fp8,amax_axis")              \
  LLMOPT_KERNEL(Split, "split", 1, -1, "")                                               \
  LLMOPT_KERNEL(Concat, "concat", -1, 1, "")                                             \
  LLMOPT_KERNEL(Rotary, "rotary", 2, 2,                                                  \
                "head_dim,theta,inverse,factor,low_freq_factor,high_freq_factor,"         \
                "original_max_positions,linear_factor")                                  \
  LLMOPT_KERNEL(AttentionFwd, "attention_fwd", 3, 1,                                     \
                "heads,kv_heads,head_dim,scale,causal,window")                           \
  LLMOPT_KERNEL(AttentionBwd, "attention_bwd", 5, 3,                                     \
                "heads,kv_heads,head_dim,scale,causal,window")                           \
  LLMOPT_KERNEL(GeluFwd, "gelu_fwd", 1, 1, "tanh")                                       \
  LLMOPT_KERNEL(GeluBwd, "gelu_bwd", 2, 1, "tanh")                                       \
  LLMOPT_KERNEL(SwiGLUFwd, "swiglu_fwd", 2, 1, "")                                       \
  LLMOPT_KERNEL(SwiGLUBwd, "swiglu_bwd", 3, 2, "")                                       \
  LLMOPT_KERNEL(Add, "add", 2, 1, "")                                                    \
  LLMOPT_KERNEL(Copy, "copy", 1, 1, "")                                                  \
  LLMOPT_KERNEL(BiasAdd, "bias_add", 2, 1, "")                                           \
  LLMOPT_KERNEL(SumRows, "sum_rows", 1, 1, "")                                           \
  LLMOPT_KERNEL(Fill, "fill", 0, 1, "value")                                             \
  LLMOPT_KERNEL(Scale, "scale", 1, 1, "factor")                                          \
  LLMOPT_KERNEL(CrossEntropyFwd, "cross_entropy_fwd", 2, 1, "ignore_index")              \
  LLMOPT_KERNEL(CrossEntropyBwd, "cross_entropy_bwd", 3, 1, "ignore_index")              \
  LLMOPT_KERNEL(VPCEStats, "vp_ce_stats", 2, 2, "shard,ignore_index")                  \
  LLMOPT_KERNEL(VPCELoss, "vp_ce_loss", 3, 1, "ignore_index")                            \
  LLMOPT_KERNEL(VPCEBwd, "vp_ce_bwd", 4, 1, "shard,ignore_index")                        \
  LLMOPT_KERNEL(MoERouterFwd, "moe_router_fwd", 2, 2, "top_k,normalize")                 \
  LLMOPT_KERNEL(MoERouterBwd, "moe_router_bwd", -1, 2,                                   \
                "top_k,normalize,aux_loss,aux_tokens,aux_scale")                         \
  LLMOPT_KERNEL(MoEExpertCounts, "moe_expert_counts", 1, 1, "top_k")                     \
  LLMOPT_KERNEL(MoEDispatchFwd, "moe_dispatch_fwd", 2, 1, "")                            \
  LLMOPT_KERNEL(MoEDispatchBwd, "moe_dispatch_bwd", 2, 1, "")                            \
  LLMOPT_KERNEL(MoEExpertsFwd, "moe_experts_fwd", -1, 1, "swiglu,fp8,amax_axis")         \
  LLMOPT_KERNEL(MoEExpertsBwd, "moe_experts_bwd", -1, -1, "swiglu,fp8,amax_axis,accumulate") \
  LLMOPT_KERNEL(MoECombineFwd, "moe_combine_fwd", 3, 1, "")                              \
  LLMOPT_KERNEL(MoECombineBwd, "moe_combine_bwd", 4, 2, "")                              \
  LLMOPT_KERNEL(TPSlice, "tp_slice", 1, 1, "shard,parts")                              \
  LLMOPT_KERNEL(TPUnslice, "tp_unslice", 1, 1, "shard,parts")                          \
  LLMOPT_KERNEL(Fused, "fused", -1, -1, "")                                              \
  LLMOPT_KERNEL(GlobalNorm, "global_norm", -1, 1, "")                                    \
  LLMOPT_KERNEL(SumSquares, "sum_squares", -1, 1, "shard")                               \
  LLMOPT_KERNEL(Sqrt, "sqrt", 1, 1, "")                                                  \
  LLMOPT_KERNEL(LossScaleFill, "loss_scale_fill", 0, 1, "")                               \
  LLMOPT_KERNEL(LossUnscale, "loss_unscale", -1, 1, "shard")                               \
  LLMOPT_KERNEL(LossScaleUpdate, "loss_scale_update", 1, 0, "")                            \
  LLMOPT_KERNEL(AdamW, "adamw", -1, 0,                                                   \
                "lr,beta1,beta2,eps,weight_decay,max_norm,shard")

namespace llmopt::kernels {

enum class KernelId {
#define LLMOPT_KERNEL_ENUM(id, name, in, out, params) id,
  LLMOPT_KERNELS(LLMOPT_KERNEL_ENUM)
#undef LLMOPT_KERNEL_ENUM
      NumKernels
};

struct KernelInfo {
  KernelId id;
  const char *name;
  int inputs;
  int outputs;
  const char *params;
};

inline constexpr KernelInfo kKernels[] = {
#define LLMOPT_KERNEL_INFO(id, name, in, out, params) {KernelId::id, name, in, out, params},
    LLMOPT_KERNELS(LLMOPT_KERNEL_INFO)
#undef LLMOPT_KERNEL_INFO
};

/// The kernel named `name`, or null.
inline const KernelInfo *findKernel(const char *name) {
  for (const KernelInfo &k : kKernels) {
    const char *a = k.name, *b = name;
    while (*a && *a == *b)
      ++a, ++b;
    if (*a == *b)
      return &k;
  }
  return nullptr;
}

} // namespace llmopt::kernels

#endif // LLMOPT_KERNELS_ABI_H
