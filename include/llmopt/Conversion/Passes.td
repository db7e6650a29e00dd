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

    Data-parallel gradients (no ZeRO) are all-reduced in buckets of about
    `bucket-bytes` as soon as the last micro-batch has added the bucket's
    last gradient (`exec.bucket_all_reduce`, non-blocking, in the order the
    backward makes them, as PyTorch DDP does); the step waits for them
    (`exec.bucket_wait`) before it uses the gradients, so the reduction of
    early buckets overlaps the rest of the backward. Under ZeRO-2/3 the
    micro-batches' gradient reduce-scatters go in buckets of about
    `bucket-bytes` of gradients likewise (`exec.grad_reduce_scatter` with
    `bucket`, the last member `flush`), within one part of the schedule.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"25 << 20",
           "gradient bytes per data-parallel all-reduce or ZeRO-2/3 reduce-scatter "
           "bucket (0: one blocking all-reduce in the step; one reduce-scatter per "
           "gradient)">,
  ];
  let dependentDialects = ["::llmopt::exec::ExecDialect"];
}

#endif // LLMOPT_CONVERSION_PASSES_TD
