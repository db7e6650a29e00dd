//===- Passes.td - exec dialect passes ---------------------*- tablegen -*-===//

#ifndef LLMOPT_DIALECT_EXEC_TRANSFORMS_PASSES_TD
#define LLMOPT_DIALECT_EXEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ExecShardOptimizer : Pass<"exec-shard-optimizer", "::mlir::ModuleOp"> {
  let summary = "Shard gradients and optimizer state over the data-parallel ranks (ZeRO)";
  let description = [{
    Rewrites the programs `convert-llm-to-exec` made (the unsharded form:
    each gradient added to a whole fp32 accumulator `grad:<param>`, the step
    averaging them over `dp` with one `exec.all_reduce`) into the ZeRO stage
    `exec.plan` names (Rajbhandari et al. 2020; nothing to do at stage 0):
    - ZeRO-1: the step reduce-scatters the gradients instead
      (`exec.reduce_scatter "dp" avg`; the loss alone is all-reduced), each
      rank unscales, squares (`shard` on `loss_unscale` / `sum_squares`, the
      sums all-reduced over the axis) and updates (`adamw ... shard`) its
      chunk only, and the updated chunks are all-gathered
      (`exec.all_gather`). The norm's `global_norm` becomes `sum_squares`,
      an all-reduce and `sqrt`.
    - ZeRO-2 and 3: as 1, but each micro-batch's gradient is
      reduce-scattered as soon as it is made (`exec.grad_reduce_scatter`)
      into a chunk accumulator `grad_shard:<param>` of ceil(n / d) elements,
      which replaces `grad:<param>` everywhere. ZeRO-3 keeps the chunks (no
      all-gather): `llm-shard-params` gathered the parameters where they are
      used.
    Expert parameters (`exec.param` sharded over `ep`) go over the ranks
    holding the same experts (`edp`, d = dp / ep), the rest over `dp`.

    Refused: a module without `exec.plan`; a program without the step's
    data-parallel average; one already sharded or bucketed (this pass runs
    before `exec-bucket-gradients`); under ZeRO-2/3 a gradient a kernel adds
    in place (`accumulate`: lower with the plan's ZeRO stage).
  }];
  let dependentDialects = ["::llmopt::exec::ExecDialect"];
}

def ExecBucketGradients : Pass<"exec-bucket-gradients", "::mlir::ModuleOp"> {
  let summary = "Reduce gradients in buckets that overlap the backward";
  let description = [{
    Data-parallel gradients (no ZeRO: the step's `exec.all_reduce "dp" avg`,
    and `"edp" avg` for experts) are all-reduced in buckets of about
    `bucket-bytes`: an accumulator joins its axis' open bucket right after
    the micro-batch's last write to it (its `add`, or the GEMM that adds
    into it, `accumulate`), in the order the backward completes them (as
    PyTorch DDP does); the member that fills a bucket starts its
    non-blocking all-reduce there (`exec.bucket_all_reduce`, run during the
    last micro-batch only), the rest start at the end of the backward. The
    step waits for every bucket first (`exec.bucket_wait`) and no longer
    all-reduces the bucketed accumulators. Shared pipeline weights
    (`"pp_tied"`), whose two stages' parts are summed in the step, stay
    unbucketed.

    ZeRO-2/3's per-micro-batch `exec.grad_reduce_scatter`s go in buckets of
    about `bucket-bytes` of gradients per axis (DeepSpeed's
    `reduce_bucket_size`): `bucket` on each, `flush` on the one that fills
    the bucket or is the last before a part of the schedule ends
    (`exec.backward`, `exec.chunk`, the block's end).

    `bucket-bytes=0` changes nothing: one blocking all-reduce in the step,
    one reduce-scatter per gradient.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"25 << 20",
           "gradient bytes per data-parallel all-reduce or ZeRO-2/3 reduce-scatter "
           "bucket (0: no buckets)">,
  ];
  let dependentDialects = ["::llmopt::exec::ExecDialect"];
}

#endif // LLMOPT_DIALECT_EXEC_TRANSFORMS_PASSES_TD
