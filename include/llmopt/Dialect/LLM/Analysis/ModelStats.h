//===- ModelStats.h - whole-model statistics from llm IR --------*- C++ -*-===//
//
// Sums the CostOpInterface of a model into parameter counts, training FLOPs
// per token and memory figures, per layer and in total. `--llm-stats` prints
// it; the planner starts from the per-layer summary.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_ANALYSIS_MODELSTATS_H
#define LLMOPT_DIALECT_LLM_ANALYSIS_MODELSTATS_H

#include "llmopt/Dialect/LLM/IR/LLMInterfaces.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/JSON.h"
#include <string>
#include <vector>

namespace mlir::func {
class FuncOp;
}

namespace llmopt::llm {

/// One `llm.layer`.
struct LayerStats {
  int64_t index = 0;
  int64_t params = 0;
  /// Parameters a token passes through (a top_k / num_experts share of the
  /// expert weights).
  int64_t paramsActive = 0;
  bool moe = false;
  /// Per micro-batch of the context's batch and sequence length.
  double fwdFlops = 0;
  double bwdFlops = 0;
  /// Activation bytes kept for backward with no recomputation, with
  /// selective recomputation, and with full recomputation (layer input only).
  double actBytesNone = 0;
  double actBytesSelective = 0;
  double actBytesFull = 0;
};

struct ModelStats {
  std::string name;
  std::string architecture;
  int64_t seqLen = 0;
  int64_t batch = 1;

  int64_t paramsTotal = 0;
  int64_t paramsActive = 0;
  /// Input embedding tables (token and learned position).
  int64_t paramsEmbedding = 0;
  /// LM head weight when untied; 0 when tied to the input embedding.
  int64_t paramsLMHead = 0;
  bool tiedEmbeddings = false;
  /// Parameters outside the layers and not embeddings or head (final norm).
  int64_t paramsOther = 0;
  int64_t numLayers = 0;
  int64_t numMoELayers = 0;

  /// GEMM weights a token passes through, LM head included and input
  /// embedding lookups excluded: the N of 6N.
  double gemmParamsActive = 0;
  /// 12 * sum over attention layers of seq * heads * head_dim.
  double attentionFlopsPerToken = 0;
  /// 6 N + attention (Narayanan et al. 2021).
  double trainFlopsPerToken = 0;
  /// Sum of every op's forward + backward FLOPs over the micro-batch, per
  /// token (causal masking counted, biases, norms and activations included).
  double opFlopsPerToken = 0;

  /// Bytes of the weights: each parameter's elements times its element size
  /// (the context's dtype override when set).
  double weightBytes = 0;
  /// Weights, gradients and mixed-precision AdamW state (fp32 master weights,
  /// momentum and variance): 2 + 2 + 12 bytes per parameter (ZeRO, Rajbhandari
  /// et al. 2020).
  double modelStateBytes = 0;
  /// Activation bytes of one micro-batch outside the layers (embeddings,
  /// final norm, logits and loss).
  double actBytesOutside = 0;

  std::vector<LayerStats> layers;

  llvm::json::Value toJSON() const;
  void printTable(llvm::raw_ostream &os) const;
};

/// Computes the statistics of `func` for the micro-batch in `ctx`. Emits an
/// error and fails when the IR is not a model that can be counted: no
/// parameters, duplicate parameter names, a parameter total over 64 bits, two
/// layers with one index, or a sequence longer than a learned position table.
mlir::FailureOr<ModelStats> computeModelStats(mlir::func::FuncOp func, const CostContext &ctx);

/// The function holding the model: `@forward`, else the only function.
/// Emits an error on `module` when there is none or it is ambiguous.
mlir::FailureOr<mlir::func::FuncOp> findModelFunc(mlir::ModuleOp module);

/// The default training sequence length recorded by the importer
/// (`llm.seq_len` on the module) as written, or 0 when the module has no
/// integer `llm.seq_len`; callers reject values that are not positive.
int64_t getDefaultSeqLen(mlir::ModuleOp module);

} // namespace llmopt::llm

#endif // LLMOPT_DIALECT_LLM_ANALYSIS_MODELSTATS_H
