//===- Model.h - what the cost model knows of a model and a job -*- C++ -*-===//
//
// A compact, MLIR-free description of a transformer: per layer the shapes
// that parallelism splits (heads, kv heads, ffn, experts) and the exact
// parameter counts. Extracted once from llm IR (`extractModelDesc`) or built
// directly (tests, the Python frontend), so the planner scores candidates
// without touching IR.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_COSTMODEL_MODEL_H
#define LLMOPT_COSTMODEL_MODEL_H

#include "llmopt/CostModel/Hardware.h"
#include "llmopt/CostModel/Stack.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::cost {

struct LayerDesc {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  /// MLP width (per expert for MoE).
  int64_t ffn = 0;
  /// SwiGLU (three matrices) or a plain two-matrix MLP.
  bool gatedMlp = false;
  /// Attention window, 0 for none.
  int64_t window = 0;
  bool causal = true;
  /// Mixture of experts: experts > 0.
  int64_t experts = 0;
  int64_t topK = 0;
  double capacityFactor = 0;
  /// What defines the model beyond its shapes, which an export must carry
  /// for the trainer to build this model and not another (extractModelDesc
  /// reads them from the IR): the norm ("rms" or "layer") and its epsilon,
  /// biases on the q/k/v projections, on the attention output and on the
  /// MLP (or experts), the activation ("swiglu", "gelu" or "gelu_tanh"),
  /// the router's load-balancing loss coefficient (0: none) and whether it
  /// renormalizes its top-k weights.
  std::string norm;
  double normEps = 0;
  bool qkvBias = false;
  bool outBias = false;
  bool mlpBias = false;
  std::string activation;
  double auxLoss = 0;
  bool routerNormalize = false;

  /// Exact parameter counts from the IR: attention, norms, biases and the
  /// router (`denseParams`), expert weights (`expertParams`).
  double denseParams = 0;
  double expertParams = 0;

  bool isMoE() const { return experts > 0; }
  int64_t qDim() const { return heads * headDim; }
  int64_t kvDim() const { return kvHeads * headDim; }
  double params() const { return denseParams + expertParams; }
  /// GEMM weights a token passes through (attention projections, MLP or its
  /// top-k experts, router).
  double gemmParamsPerToken() const;
};

struct ModelDesc {
  std::string name;
  int64_t vocab = 0;
  int64_t hidden = 0;
  /// Learned position table rows, 0 with rotary embeddings.
  int64_t positions = 0;
  /// Rotary base (theta), 0 without rotary embeddings; and its scaling
  /// type ("" none, "linear", "llama3", ...) with the factor.
  double ropeTheta = 0;
  std::string ropeScaling;
  double ropeFactor = 0;
  /// Llama 3.1's scaling: the low and high frequency factors and the
  /// context it was trained at (0 when absent).
  double ropeLowFreqFactor = 0, ropeHighFreqFactor = 0;
  int64_t ropeOriginalPositions = 0;
  bool tiedEmbeddings = false;
  /// Parameters of the input tables, of the untied head (0 when tied), and
  /// of the final norm.
  double embeddingParams = 0;
  double headParams = 0;
  double finalNormParams = 0;
  std::vector<LayerDesc> layers;

  double totalParams() const;
  /// Whether any layer is a mixture of experts.
  bool hasMoE() const;
  /// 6 N + attention per token at `seqLen` (Narayanan et al. 2021), as
  /// --llm-stats reports it.
  double trainFlopsPerToken(int64_t seqLen) const;

  /// A GPT (Megatron) model: learned positions, layer norm, GeLU MLP of 4h,
  /// biases, tied head.
  static ModelDesc gpt(const std::string &name, int64_t layers, int64_t hidden, int64_t heads,
                       int64_t vocab, int64_t positions);
};

enum class Optimizer { AdamW };

/// The training job.
struct JobSpec {
  int64_t globalBatch = 0; ///< sequences per step
  int64_t seqLen = 0;
  DType dtype = DType::BF16;
  /// fp8 GEMMs (activations and weights cast per GEMM).
  bool fp8 = false;
  /// Bytes of a gradient element: 2 (bf16 grads) or 4 (fp32 main grads, as
  /// Megatron accumulates). Mixed-precision AdamW keeps 12 bytes per
  /// parameter of fp32 master weights, momentum and variance.
  double gradBytes = 2;
  /// Dropout in attention and after each block (Korthikanti et al.'s runs);
  /// modern recipes use none.
  bool dropout = false;
  /// A fused (flash) attention kernel; false materializes the softmax.
  bool flashAttention = true;
  bool gradClipping = true;
  /// The training stack that runs the job: what it can run and how fast.
  /// The default (`neutral`) runs everything at the GPU's efficiencies with
  /// no overlap penalties; the planner loads a real one (`stack=`).
  StackProfile stack;
};

} // namespace llmopt::cost

#endif // LLMOPT_COSTMODEL_MODEL_H
