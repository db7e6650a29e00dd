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
    computes the norm and applies AdamW.

    Plans with tensor, pipeline, context or expert parallelism are not lowered
    yet and are rejected with an error saying so.
  }];
  let dependentDialects = ["::llmopt::exec::ExecDialect"];
}

#endif // LLMOPT_CONVERSION_PASSES_TD
