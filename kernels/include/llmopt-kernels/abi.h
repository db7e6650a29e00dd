//===- abi.h - the kernels a plan may call ------------------------*- C++ -*-===//
//
// The one contract between the compiler and the kernels: each kernel's name
// in plan files, its buffers (inputs, then outputs) and its scalar
// parameters. The compiler emits these names; the runtime's CPU and CUDA
// backends dispatch on them. Plain header, no dependencies.
//
// LLMOPT_KERNEL(id, "name", inputs, outputs, "params")
//  - inputs / outputs: buffer counts (-1: as many as the instruction lists);
//  - params: the scalar parameters it takes, comma-separated, each `name` or
//    `name=default` (the value when a plan leaves it out; otherwise the
//    kind's zero: 0, false, ""). Every name is one of LLMOPT_KERNEL_PARAMS.
// Shapes come with each buffer: rows = batch * seq, etc. are read from them.
// `shard` (optional, a mesh axis name): the kernel touches only this rank's
// ZeRO chunk of each buffer, [r * c, min(n, (r + 1) * c)) with
// c = ceil(n / axis size), as exec.reduce_scatter leaves it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_ABI_H
#define LLMOPT_KERNELS_ABI_H

#define LLMOPT_KERNELS(LLMOPT_KERNEL)                                                              \
  LLMOPT_KERNEL(EmbeddingFwd, "embedding_fwd", 2, 1, "shard")                                      \
  LLMOPT_KERNEL(EmbeddingBwd, "embedding_bwd", 2, 1, "shard")                                      \
  LLMOPT_KERNEL(PositionEmbeddingFwd, "position_embedding_fwd", 2, 1, "cp")                        \
  LLMOPT_KERNEL(PositionEmbeddingBwd, "position_embedding_bwd", 1, 1, "cp")                        \
  LLMOPT_KERNEL(LayerNormFwd, "layer_norm_fwd", -1, 1, "eps")                                      \
  LLMOPT_KERNEL(LayerNormBwd, "layer_norm_bwd", 3, -1, "eps")                                      \
  LLMOPT_KERNEL(RMSNormFwd, "rms_norm_fwd", 2, 1, "eps")                                           \
  LLMOPT_KERNEL(RMSNormBwd, "rms_norm_bwd", 3, 2, "eps")                                           \
  LLMOPT_KERNEL(LinearFwd, "linear_fwd", -1, -1, "transposed,epilogue,fp8,amax_axis")              \
  LLMOPT_KERNEL(LinearBwd, "linear_bwd", 3, -1, "transposed,fp8,amax_axis,accumulate")             \
  LLMOPT_KERNEL(Split, "split", 1, -1, "")                                                         \
  LLMOPT_KERNEL(Concat, "concat", -1, 1, "")                                                       \
  LLMOPT_KERNEL(Rotary, "rotary", 2, 2,                                                            \
                "head_dim,theta,inverse,factor,low_freq_factor=1,high_freq_factor=4,"              \
                "original_max_positions=8192,linear_factor=1,cp")                                  \
  LLMOPT_KERNEL(AttentionFwd, "attention_fwd", 3, 1,                                               \
                "heads,kv_heads,head_dim,scale,causal,window,cp")                                  \
  LLMOPT_KERNEL(AttentionBwd, "attention_bwd", 5, 3,                                               \
                "heads,kv_heads,head_dim,scale,causal,window,cp")                                  \
  LLMOPT_KERNEL(GeluFwd, "gelu_fwd", 1, 1, "tanh")                                                 \
  LLMOPT_KERNEL(GeluBwd, "gelu_bwd", 2, 1, "tanh")                                                 \
  LLMOPT_KERNEL(SwiGLUFwd, "swiglu_fwd", 2, 1, "")                                                 \
  LLMOPT_KERNEL(SwiGLUBwd, "swiglu_bwd", 3, 2, "")                                                 \
  LLMOPT_KERNEL(Add, "add", 2, 1, "")                                                              \
  LLMOPT_KERNEL(Copy, "copy", 1, 1, "")                                                            \
  LLMOPT_KERNEL(BiasAdd, "bias_add", 2, 1, "")                                                     \
  LLMOPT_KERNEL(SumRows, "sum_rows", 1, 1, "")                                                     \
  LLMOPT_KERNEL(Fill, "fill", 0, 1, "value")                                                       \
  LLMOPT_KERNEL(Scale, "scale", 1, 1, "factor=1")                                                  \
  LLMOPT_KERNEL(CrossEntropyFwd, "cross_entropy_fwd", 2, 1, "ignore_index=-100")                   \
  LLMOPT_KERNEL(CrossEntropyBwd, "cross_entropy_bwd", 3, 1, "ignore_index=-100")                   \
  LLMOPT_KERNEL(VPCEStats, "vp_ce_stats", 2, 2, "shard,ignore_index=-100,classes=-1")              \
  LLMOPT_KERNEL(VPCELoss, "vp_ce_loss", 3, 1, "ignore_index=-100")                                 \
  LLMOPT_KERNEL(VPCEBwd, "vp_ce_bwd", 4, 1, "shard,ignore_index=-100,classes=-1")                  \
  LLMOPT_KERNEL(MoERouterFwd, "moe_router_fwd", 2, 2, "top_k,normalize")                           \
  LLMOPT_KERNEL(MoERouterBwd, "moe_router_bwd", -1, 2,                                             \
                "top_k,normalize,aux_loss,aux_tokens,aux_scale=1")                                 \
  LLMOPT_KERNEL(MoEExpertCounts, "moe_expert_counts", 1, 1, "top_k")                               \
  LLMOPT_KERNEL(MoEDispatchFwd, "moe_dispatch_fwd", 2, 1, "")                                      \
  LLMOPT_KERNEL(MoEDispatchBwd, "moe_dispatch_bwd", 2, 1, "")                                      \
  LLMOPT_KERNEL(MoEExpertsFwd, "moe_experts_fwd", -1, 1, "swiglu,fp8,amax_axis")                   \
  LLMOPT_KERNEL(MoEExpertsBwd, "moe_experts_bwd", -1, -1, "swiglu,fp8,amax_axis,accumulate")       \
  LLMOPT_KERNEL(MoECombineFwd, "moe_combine_fwd", 3, 1, "")                                        \
  LLMOPT_KERNEL(MoECombineBwd, "moe_combine_bwd", 4, 2, "")                                        \
  LLMOPT_KERNEL(TPSlice, "tp_slice", 1, 1, "shard,parts")                                          \
  LLMOPT_KERNEL(TPUnslice, "tp_unslice", 1, 1, "shard,parts")                                      \
  LLMOPT_KERNEL(Fused, "fused", -1, -1, "")                                                        \
  LLMOPT_KERNEL(GlobalNorm, "global_norm", -1, 1, "")                                              \
  LLMOPT_KERNEL(SumSquares, "sum_squares", -1, 1, "shard")                                         \
  LLMOPT_KERNEL(Sqrt, "sqrt", 1, 1, "")                                                            \
  LLMOPT_KERNEL(LossScaleFill, "loss_scale_fill", 0, 1, "")                                        \
  LLMOPT_KERNEL(LossUnscale, "loss_unscale", -1, 1, "shard")                                       \
  LLMOPT_KERNEL(LossScaleUpdate, "loss_scale_update", 1, 0, "")                                    \
  LLMOPT_KERNEL(AdamW, "adamw", -1, 0, "lr,beta1,beta2,eps,weight_decay,max_norm,shard,param")

// LLMOPT_KERNEL_PARAM(name, Kind): every scalar parameter a kernel may take,
// by kind:
//  - Number: a finite number; Integer: an integer; Flag: true or false;
//  - Text: a string; Axis: a mesh axis name ("" for none); Axes: mesh axis
//    names, comma-separated.
// A plan's value of another kind, a name the kernel does not take, or an axis
// the mesh lacks is refused when the plan is loaded.
#define LLMOPT_KERNEL_PARAMS(LLMOPT_KERNEL_PARAM)                                                  \
  LLMOPT_KERNEL_PARAM(eps, Number)                                                                 \
  LLMOPT_KERNEL_PARAM(transposed, Flag)                                                            \
  LLMOPT_KERNEL_PARAM(epilogue, Text)                                                              \
  LLMOPT_KERNEL_PARAM(fp8, Text)                                                                   \
  LLMOPT_KERNEL_PARAM(amax_axis, Axes)                                                             \
  LLMOPT_KERNEL_PARAM(accumulate, Flag)                                                            \
  LLMOPT_KERNEL_PARAM(shard, Axis)                                                                 \
  LLMOPT_KERNEL_PARAM(parts, Integer)                                                              \
  LLMOPT_KERNEL_PARAM(cp, Axis)                                                                    \
  LLMOPT_KERNEL_PARAM(head_dim, Integer)                                                           \
  LLMOPT_KERNEL_PARAM(theta, Number)                                                               \
  LLMOPT_KERNEL_PARAM(inverse, Flag)                                                               \
  LLMOPT_KERNEL_PARAM(factor, Number)                                                              \
  LLMOPT_KERNEL_PARAM(low_freq_factor, Number)                                                     \
  LLMOPT_KERNEL_PARAM(high_freq_factor, Number)                                                    \
  LLMOPT_KERNEL_PARAM(original_max_positions, Number)                                              \
  LLMOPT_KERNEL_PARAM(linear_factor, Number)                                                       \
  LLMOPT_KERNEL_PARAM(heads, Integer)                                                              \
  LLMOPT_KERNEL_PARAM(kv_heads, Integer)                                                           \
  LLMOPT_KERNEL_PARAM(scale, Number)                                                               \
  LLMOPT_KERNEL_PARAM(causal, Flag)                                                                \
  LLMOPT_KERNEL_PARAM(window, Integer)                                                             \
  LLMOPT_KERNEL_PARAM(tanh, Flag)                                                                  \
  LLMOPT_KERNEL_PARAM(value, Number)                                                               \
  LLMOPT_KERNEL_PARAM(ignore_index, Integer)                                                       \
  LLMOPT_KERNEL_PARAM(classes, Integer)                                                            \
  LLMOPT_KERNEL_PARAM(top_k, Integer)                                                              \
  LLMOPT_KERNEL_PARAM(normalize, Flag)                                                             \
  LLMOPT_KERNEL_PARAM(aux_loss, Number)                                                            \
  LLMOPT_KERNEL_PARAM(aux_tokens, Integer)                                                         \
  LLMOPT_KERNEL_PARAM(aux_scale, Number)                                                           \
  LLMOPT_KERNEL_PARAM(swiglu, Flag)                                                                \
  LLMOPT_KERNEL_PARAM(lr, Number)                                                                  \
  LLMOPT_KERNEL_PARAM(beta1, Number)                                                               \
  LLMOPT_KERNEL_PARAM(beta2, Number)                                                               \
  LLMOPT_KERNEL_PARAM(weight_decay, Number)                                                        \
  LLMOPT_KERNEL_PARAM(max_norm, Number)                                                            \
  LLMOPT_KERNEL_PARAM(param, Text)

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

/// Whether a fused kernel may run `id` in its body: the kernel is elementwise
/// or works row by row over the last dimension, and every output has its
/// first input's size (the exec verifier, the plan loader and the generated
/// CUDA source rely on it).
inline constexpr bool isRowWise(KernelId id) {
  return id == KernelId::Add || id == KernelId::GeluFwd || id == KernelId::GeluBwd ||
         id == KernelId::SwiGLUFwd || id == KernelId::SwiGLUBwd || id == KernelId::RMSNormFwd ||
         id == KernelId::LayerNormFwd;
}

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
