//===- LLMAttrs.td - llm dialect attributes ----------------*- tablegen -*-===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMATTRS_TD
#define LLMOPT_DIALECT_LLM_IR_LLMATTRS_TD

include "llmopt/Dialect/LLM/IR/LLMBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"

class LLM_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<LLM_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

/// A plan enum, written as a quoted string (its spellings, "1f1b" or
/// "tp-cp-dp-pp", are no MLIR keywords); a value outside the set is refused
/// where it is read.
class LLM_QuotedEnumParameter<string enumName, string fieldName, string valid>
    : AttrParameter<"::llmopt::llm::" # enumName, fieldName> {
  let parser = "::llmopt::llm::parseQuotedEnum<::llmopt::llm::" # enumName #
               ">($_parser, ::llmopt::llm::symbolize" # enumName # ", \"" # fieldName # "\", \"" #
               valid # "\")";
  let printer = "$_printer << '\"' << ::llmopt::llm::stringify" # enumName # "($_self) << '\"'";
}

def LLM_PlanAttr : LLM_Attr<"Plan", "plan"> {
  let summary = "a parallel training plan and its predicted cost";
  let description = [{
    The configuration `--llm-auto-parallel` chose (or a user gave with `fix=`),
    attached to the module as `llm.plan`, with the cost model's predicted step
    time and peak memory per rank. The lowering passes read it.

    ```mlir
    module attributes {llm.plan = #llm.plan<dp = 16, tp = 1, pp = 1, vpp = 1,
        cp = 4, ep = 1, sp = false, zero = 3, offload = true,
        recompute = "selective", stage_recompute = [], micro_batch = 2,
        num_micro_batches = 16, seq_len = 8192,
        schedule = "none", placement = "tp-cp-dp-pp", stage_layers = array<i64: 80>,
        step_time_s = 44.96 : f64, peak_memory_bytes = 76986433536>} { ... }
    ```

    `recompute = "per-stage"` lets each pipeline stage recompute differently;
    `stage_recompute` then lists the level of each stage, and is empty
    otherwise.

    `seq_len` is the sequence length the plan was made for (the job's, which
    may differ from the model's default `llm.seq_len`).

    `shard` (printed only when not 0) is hybrid sharding: ZeRO over groups of
    that many of the dp x cp ranks, replicated across the groups (0: over
    all of them). The lowering runs ZeRO over all of dp x cp only and
    refuses a plan with `shard`.

    `recompute_layers` (printed only when not 0), with `recompute = "full"`:
    only the first that many layers of each model chunk are recomputed
    (Megatron's block method). The lowering refuses it.

    `recompute`, `schedule` and `placement` are enums (RecomputeLevel,
    PipelineSchedule, Placement) written as quoted strings; a value outside
    the set is refused where the attribute is read.

    Verified: degrees, micro-batch sizes and the sequence length are positive; zero is 0-3;
    one recompute level per stage exactly when recompute is per-stage; the
    schedule is none exactly when pp is 1; pp stage layer counts, each
    positive; vpp > 1 only with the interleaved schedule; shard is 0, or
    divides dp x cp, is smaller, and comes with zero >= 1; recompute_layers
    is 0, or positive with recompute = "full".
  }];
  let parameters = (ins
    "int64_t":$dp, "int64_t":$tp, "int64_t":$pp, "int64_t":$vpp,
    "int64_t":$cp, "int64_t":$ep, "::mlir::BoolAttr":$sp, "int64_t":$zero,
    "::mlir::BoolAttr":$offload,
    LLM_QuotedEnumParameter<"RecomputeLevel", "recompute",
                            "none, selective, full or per-stage">:$recompute,
    "::mlir::ArrayAttr":$stage_recompute,
    "int64_t":$micro_batch, "int64_t":$num_micro_batches, "int64_t":$seq_len,
    LLM_QuotedEnumParameter<"PipelineSchedule", "schedule",
                            "none, gpipe, 1f1b or interleaved-1f1b">:$schedule,
    LLM_QuotedEnumParameter<"Placement", "placement", "tp-cp-dp-pp or tp-cp-pp-dp">:$placement,
    "::mlir::DenseI64ArrayAttr":$stage_layers, "::mlir::FloatAttr":$step_time_s,
    "int64_t":$peak_memory_bytes,
    DefaultValuedParameter<"int64_t", "0">:$shard,
    DefaultValuedParameter<"int64_t", "0">:$recompute_layers
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def LLM_ShardAttr : LLM_Attr<"Shard", "shard"> {
  let summary = "how a parameter is split over a mesh axis";
  let description = [{
    The partition passes' decision for one `llm.param` (its `llm.shard`):
    dimension `dim` of the whole tensor is cut into `blocks` equal blocks
    (GPT-2's fused q/k/v: 3), each block into `parts` equal parts, and the
    rank at position r of `axis` keeps part r of every block; the param's
    type is that part. `whole` (printed only when not 0) is the real size of
    `dim` where the partitioner padded it to split it (a vocabulary tp does
    not divide: the padding rows are zeros and never a class).

    ```mlir
    %w = llm.param "lm_head.weight" normal(0.02) {llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 1, parts = 2, whole = 257>} : tensor<129x32xf32>
    ```

    Verified: `axis` is `tp` or `ep`, `dim` non-negative, `blocks` and
    `parts` positive, `whole` 0 or positive; on its param, `dim` is within
    the rank and `whole` (when given) at most `parts` x the part's size.
  }];
  let parameters = (ins StringRefParameter<"the mesh axis">:$axis, "int64_t":$dim,
                        "int64_t":$blocks, "int64_t":$parts,
                        DefaultValuedParameter<"int64_t", "0">:$whole);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def LLM_LossScalingAttr : EnumAttr<LLM_Dialect, LLM_LossScaling, "loss_scaling"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "the loss scaling of a training step";
  let description = [{
    `llm.loss_scale` on the module, set by `llm-build-training-step`
    (`loss-scale`: `auto` is dynamic for fp16 models): `dynamic` starts the
    backward from the runtime's loss scale, unscales the reduced gradients,
    skips updates with non-finite ones and moves the scale; `none` (or no
    attribute) trains unscaled.
    ```mlir
    module attributes {llm.loss_scale = #llm.loss_scaling<dynamic>} { ... }
    ```
  }];
}

#endif // LLMOPT_DIALECT_LLM_IR_LLMATTRS_TD
