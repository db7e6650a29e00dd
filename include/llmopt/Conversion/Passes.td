//===- Passes.td - conversions -----------------------------*- tablegen -*-===//

#ifndef LLMOPT_CONVERSION_PASSES_TD
#define LLMOPT_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertLLMToExec : Pass<"convert-llm-to-exec", "::mlir::ModuleOp"> {
  let summary = "Turn a memory-planned @train_step into an exec.program";
  let description = [{
    Each llm op of `@train_step` (after `llm-build-training-step`,
    `llm-specialize-shapes` and `llm-plan-memory`) becomes a call of its
    kernel from the kernel ABI, with its operands and results as placed
    buffers: step inputs, parameter state by name, or the arena offsets the
    memory plan assigned. Forward and backward form the micro-batch phase,
    which adds each weight gradient and the loss to fp32 accumulators; the step
    phase averages them over the plan's micro-batches (`scale`) and, with `dp`
    > 1, over the data-parallel ranks (`exec.all_reduce "dp" avg`), then
    computes the norm and applies AdamW. Tensor, sequence, pipeline,
    context and expert parallelism and ZeRO-1/2/3 follow the partition
    passes' ops and attributes (docs/lowering.md).

    The programs are ZeRO-0's with whole gradient accumulators and one
    blocking data-parallel average in the step: `exec-shard-optimizer`
    shards them to the plan's ZeRO stage (which `exec.plan` records) and
    `exec-bucket-gradients` makes the buckets. A GEMM adds its weight
    gradients into their accumulators itself (`accumulate`) exactly where
    llm-plan-memory gave them no buffer (`accumulatesWeightGradients`).

    The lowering of each op lives with its op family
    (lib/Conversion/LLMToExec: Elementwise, Embedding, Norm, Linear,
    Attention, MoE, Loss, Collectives, Fused), registered by op name in a
    `LoweringPatternSet`; buffers come from a `BufferAssignment` of the
    memory plan; the step phase from `lowerStepPhase` (Optimizer.cpp).
  }];
  let dependentDialects = ["::llmopt::exec::ExecDialect"];
}

#endif // LLMOPT_CONVERSION_PASSES_TD
