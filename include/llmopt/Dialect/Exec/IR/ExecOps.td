//===- ExecOps.td - per-rank executable programs -----------*- tablegen -*-===//
//
// The `exec` dialect: what one class of ranks runs, as an ordered list of
// kernel calls and collectives on buffers with fixed places (offsets into
// the rank's arena, parameter state by name, step inputs). One-to-one with
// the instruction stream of a plan file (docs/plan-format.md).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_EXEC_IR_EXECOPS_TD
#define LLMOPT_DIALECT_EXEC_IR_EXECOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Exec_Dialect : Dialect {
  let name = "exec";
  let cppNamespace = "::llmopt::exec";
  let summary = "Per-rank instruction streams: kernels and collectives on placed buffers";
  let description = [{
    The last IR before a plan file. Values are gone: every operand is a
    `#exec.buf` naming where the data lives. Instructions run in order; the
    runtime maps kernel names to its CPU or CUDA kernels through
    kernels/include/llmopt-kernels/abi.h.
  }];
  let useDefaultAttributePrinterParser = 1;
}

class Exec_Op<string mnemonic, list<Trait> traits = []>
    : Op<Exec_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Closed sets: enums, printed as bare keywords (`exec.all_reduce "dp" avg`);
// the plan file spells them as here.
//===----------------------------------------------------------------------===//

def Exec_BufferSpace : I32EnumAttr<"BufferSpace", "where a buffer lives", [
    I32EnumAttrCase<"arena", 0>,
    I32EnumAttrCase<"stash", 1>,
    I32EnumAttrCase<"input", 2>,
    I32EnumAttrCase<"state", 3>,
    I32EnumAttrCase<"accum", 4>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_ParamInit : I32EnumAttr<"ParamInit", "how a parameter starts", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_ReduceKind : I32EnumAttr<"ReduceKind", "how a collective combines ranks", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"avg", 1>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_SeqKind : I32EnumAttr<"SeqKind", "a sequence-parallel or context-parallel exchange", [
    I32EnumAttrCase<"all_gather", 0>,
    I32EnumAttrCase<"reduce_scatter", 1>,
    I32EnumAttrCase<"split", 2>,
    I32EnumAttrCase<"cp_all_gather", 3>,
    I32EnumAttrCase<"cp_reduce_scatter", 4>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_Direction : I32EnumAttr<"Direction", "forward or backward", [
    I32EnumAttrCase<"fwd", 0>,
    I32EnumAttrCase<"bwd", 1>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_ExpertExchange : I32EnumAttr<"ExpertExchange", "an expert all-to-all", [
    I32EnumAttrCase<"dispatch", 0>,
    I32EnumAttrCase<"combine", 1>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_TransferKind : I32EnumAttr<"TransferKind", "a pipeline transfer", [
    I32EnumAttrCase<"send", 0>,
    I32EnumAttrCase<"recv", 1>,
  ]> {
  let cppNamespace = "::llmopt::exec";
}

def Exec_BufAttr : AttrDef<Exec_Dialect, "Buf"> {
  let mnemonic = "buf";
  let summary = "a placed buffer";
  let description = [{
    `space` is `arena` (at `offset` bytes into the rank's arena), `stash` (at
    `offset` bytes into the stash of the micro-batch running: pipeline
    stages' values kept from a forward for its backward), `input` (step
    input number `offset`: 0 tokens, 1 labels, of the current micro-batch),
    `state` (the parameter `name`, in the training dtype) or `accum` (the
    accumulator `name`, fp32, zeroed at the start of every step and kept across
    its micro-batches: `grad:<parameter>` and `loss`). `shape` and `dtype`
    describe the data.

    ```mlir
    #exec.buf<space = arena, offset = 4096, name = "", shape = array<i64: 2, 8, 64>, dtype = f32>
    ```
  }];
  let parameters = (ins EnumParameter<Exec_BufferSpace>:$space, "int64_t":$offset,
                        "::mlir::StringAttr":$name, "::mlir::DenseI64ArrayAttr":$shape,
                        "::mlir::Type":$dtype);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getNumElements() const;
    int64_t getBytes() const;
  }];
}

def Exec_PlanOp : Exec_Op<"plan"> {
  let summary = "what a plan file says besides its programs";
  let description = [{
    One per module, made by `convert-llm-to-exec` from the planned `llm`
    module, so that the plan file is a translation of the `exec` module
    alone (`llm-translate --exec-to-plan`, `llm-emit-plan`): the mesh
    (`dp`, `tp`, `pp`, `cp`, `ep`), the number of ranks, the ZeRO stage the
    programs run, the step's inputs per rank (tokens, labels), and where
    known the model's name, the micro-batch and sequence length, the
    planner's prediction and the model FLOPs per token.
    ```mlir
    exec.plan {inputs = [tensor<2x8xi32>, tensor<2x8xi32>], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 0 : i64}
    ```
    Verified: the mesh names dp, tp, pp, cp and ep, each positive, ep
    dividing dp; the world is pp x dp x cp x tp; zero is 0-3.
  }];
  let arguments = (ins DictionaryAttr:$mesh, I64Attr:$world, I64Attr:$zero,
                       TypeArrayAttr:$inputs, OptionalAttr<StrAttr>:$model,
                       OptionalAttr<I64Attr>:$micro_batch, OptionalAttr<I64Attr>:$seq_len,
                       OptionalAttr<DictionaryAttr>:$prediction,
                       OptionalAttr<F64Attr>:$train_flops_per_token);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Exec_ParamOp : Exec_Op<"param"> {
  let summary = "a trainable tensor of the plan";
  let description = [{
    A parameter as the plan file lists it: its checkpoint name, this rank's
    type (its tensor-parallel part where `shard` says so: `{axis, dim,
    blocks, parts[, whole]}`, docs/plan-format.md), and its initialization
    (`zeros`, `ones`, or `normal` with `std`).
    ```mlir
    exec.param "model.norm.weight" : tensor<64xbf16> init ones
    exec.param "lm_head.weight" : tensor<129x32xf32> init normal {std = 1.0e-01 : f64, shard = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, parts = 2 : i64, whole = 257 : i64}}
    ```
    Verified: a static ranked tensor; a normal init exactly with a positive,
    finite std.
  }];
  let arguments = (ins StrAttr:$name, TypeAttr:$type, Exec_ParamInit:$init, OptionalAttr<F64Attr>:$std,
                       OptionalAttr<DictionaryAttr>:$shard);
  let assemblyFormat = "$name `:` $type `init` $init attr-dict";
  let hasVerifier = 1;
}

def Exec_ProgramOp : Exec_Op<"program", [NoTerminator, IsolatedFromAbove]> {
  let summary = "the instruction stream of a class of ranks";
  let description = [{
    A step runs the `micro_batch` region once per micro-batch (forward and
    backward, accumulating gradients and the loss), then the `step` region
    once (averaging, the collectives the plan needs, the norm and the
    optimizer).

    ```mlir
    exec.program "train_step" ranks [0, 1] arena 199936 micro_batches 4 outputs {...}
    micro_batch {
      exec.kernel "embedding_fwd" ins [...] outs [...] {}
      ...
    } step {
      exec.kernel "scale" ...
      exec.all_reduce "dp" avg [...]
      exec.kernel "adamw" ...
    }
    ```
    `outputs` names the buffers the runtime reports (loss, grad_norm).
    Pipeline stages may also have a `stash` (bytes): buffers in space `stash`
    hold what a micro-batch's forward keeps for its backward; the runtime
    keeps one stash per micro-batch in flight and one arena for the rest.
    A pipeline stage's program carries its `schedule` (1f1b, gpipe,
    interleaved or sequential) and the `order` of its parts, spelt out as
    (micro-batch, model chunk, backward) triples, so that the plan file is a
    translation of the program and the runtime only follows it.
    Verified: ranks are distinct and non-negative; at least one micro-batch;
    every arena (stash) buffer fits in `arena` (`stash`) bytes; `schedule`
    and `order` come together, the order naming each part of each
    micro-batch once.
  }];
  let arguments = (ins StrAttr:$name, DenseI64ArrayAttr:$ranks, I64Attr:$arena,
                       I64Attr:$micro_batches, DictionaryAttr:$outputs,
                       OptionalAttr<I64Attr>:$stash, OptionalAttr<StrAttr>:$schedule,
                       OptionalAttr<DenseI64ArrayAttr>:$order);
  let regions = (region MaxSizedRegion<1>:$micro_batch, MaxSizedRegion<1>:$step);
  let assemblyFormat = [{
    $name `ranks` $ranks `arena` $arena `micro_batches` $micro_batches `outputs` $outputs
    attr-dict-with-keyword `micro_batch` $micro_batch `step` $step
  }];
  let hasVerifier = 1;
}

def Exec_KernelOp : Exec_Op<"kernel", [HasParent<"ProgramOp">]> {
  let summary = "calls a kernel of the kernel ABI";
  let description = [{
    ```mlir
    exec.kernel "rms_norm_fwd" ins [#exec.buf<...>, #exec.buf<...>] outs [#exec.buf<...>] {eps = 1.0e-05 : f64}
    ```
    Verified: the kernel exists in the ABI and takes this many buffers; every
    buffer is an `#exec.buf`; outputs are not step inputs.
  }];
  let arguments = (ins StrAttr:$kernel, ArrayAttr:$ins, ArrayAttr:$outs,
                       DictionaryAttr:$params);
  let assemblyFormat = "$kernel `ins` $ins `outs` $outs $params attr-dict";
  let hasVerifier = 1;
}

def Exec_AllReduceOp : Exec_Op<"all_reduce", [HasParent<"ProgramOp">]> {
  let summary = "all-reduces buffers in place over a mesh axis";
  let description = [{
    `reduce` is `sum` or `avg`.
    ```mlir
    exec.all_reduce "dp" avg [#exec.buf<...>, ...]
    ```
  }];
  let arguments = (ins StrAttr:$axis, Exec_ReduceKind:$reduce, ArrayAttr:$buffers);
  let assemblyFormat = "$axis $reduce $buffers attr-dict";
  let hasVerifier = 1;
}

def Exec_BucketAllReduceOp : Exec_Op<"bucket_all_reduce", [HasParent<"ProgramOp">]> {
  let summary = "starts a non-blocking all-reduce of a gradient bucket";
  let description = [{
    In the micro-batch phase, only during the step's last micro-batch: starts
    all-reducing `buffers` (accumulators whose gradients are complete) over
    `axis`; `exec.bucket_wait` with the same `bucket` in the step phase
    completes it. Buckets are started in the same order on every rank.
    ```mlir
    exec.bucket_all_reduce "dp" avg bucket 0 [#exec.buf<...>, ...]
    ```
  }];
  let arguments = (ins StrAttr:$axis, Exec_ReduceKind:$reduce, I64Attr:$bucket, ArrayAttr:$buffers);
  let assemblyFormat = "$axis $reduce `bucket` $bucket $buffers attr-dict";
  let hasVerifier = 1;
}

def Exec_BucketWaitOp : Exec_Op<"bucket_wait", [HasParent<"ProgramOp">]> {
  let summary = "waits for a gradient bucket's all-reduce";
  let arguments = (ins I64Attr:$bucket);
  let assemblyFormat = "$bucket attr-dict";
}

def Exec_GradReduceScatterOp : Exec_Op<"grad_reduce_scatter", [HasParent<"ProgramOp">]> {
  let summary = "reduce-scatters a micro-batch's gradient into a sharded accumulator";
  let description = [{
    ZeRO-2/3: right after a micro-batch's backward makes `input` (a
    parameter's whole gradient), its reduction over `axis` (`sum`, or `avg`:
    divided by the axis size) is reduce-scattered and this rank's chunk
    (ZeRO chunking, see `reduce_scatter`) is added into `accum`, an
    accumulator named `grad_shard:<param>` of `ceil(n / d)` elements (the
    last rank's padding stays zero). The whole gradient is then dead, so
    only chunks of gradients persist between micro-batches (DeepSpeed
    ZeRO-2's partitioned gradients).
    With `bucket`, the gradient joins that bucket instead of going alone:
    the bucket's members wait (zero-padded copies) for the one marked
    `flush`, which starts a single reduce-scatter of all of them (each
    rank's chunks side by side), as DDP buckets its all-reduces. A bucket's
    members share axis and reduction and lie in one part of the schedule.
    ```mlir
    exec.grad_reduce_scatter "dp" avg #exec.buf<space = arena, ...> into #exec.buf<space = accum, name = "grad_shard:w", ...>
    exec.grad_reduce_scatter "dp" avg #exec.buf<...> into #exec.buf<...> {bucket = 0 : i64, flush}
    ```
  }];
  let arguments = (ins StrAttr:$axis, Exec_ReduceKind:$reduce, Exec_BufAttr:$input, Exec_BufAttr:$accum,
                       OptionalAttr<I64Attr>:$bucket, UnitAttr:$flush);
  let assemblyFormat = "$axis $reduce $input `into` $accum attr-dict";
  let hasVerifier = 1;
}

def Exec_ReduceScatterOp : Exec_Op<"reduce_scatter", [HasParent<"ProgramOp">]> {
  let summary = "reduces buffers over a mesh axis, each rank keeping its chunk";
  let description = [{
    ZeRO sharding of a buffer of `n` elements over an axis of size `d`: rank
    `r` of the axis owns the chunk `[r * c, min(n, (r + 1) * c))` with
    `c = ceil(n / d)`. After `reduce_scatter`, each rank's chunk of each
    buffer holds the reduction (`sum` or `avg`) over the axis; the rest of
    the buffer is unspecified.
    ```mlir
    exec.reduce_scatter "dp" avg [#exec.buf<...>, ...]
    ```
  }];
  let arguments = (ins StrAttr:$axis, Exec_ReduceKind:$reduce, ArrayAttr:$buffers);
  let assemblyFormat = "$axis $reduce $buffers attr-dict";
  let hasVerifier = 1;
}

def Exec_AllGatherOp : Exec_Op<"all_gather", [HasParent<"ProgramOp">]> {
  let summary = "gathers each rank's chunk of buffers over a mesh axis";
  let description = [{
    The inverse of `reduce_scatter`'s split: every rank contributes its chunk
    (same chunking) and ends with the whole buffer.
    ```mlir
    exec.all_gather "dp" [#exec.buf<...>, ...]
    ```
  }];
  let arguments = (ins StrAttr:$axis, ArrayAttr:$buffers);
  let assemblyFormat = "$axis $buffers attr-dict";
  let hasVerifier = 1;
}

def Exec_SeqOp : Exec_Op<"seq", [HasParent<"ProgramOp">]> {
  let summary = "sequence-parallel data movement over a mesh axis";
  let description = [{
    On `[b, s, h]` activations whose sequence is split into one chunk
    `[b, s/t, h]` per rank of `axis` (`t` ranks):
    - `all_gather`: chunk in, whole sequence out (every rank's chunk in rank
      order);
    - `reduce_scatter`: the ranks' whole partial sums in, this rank's chunk of
      their sum out;
    - `split`: whole sequence in, this rank's chunk out (no communication);
    - `cp_all_gather`, `cp_reduce_scatter`: the same for context parallelism,
      where rank `r`'s local sequence is chunks `r` and `2t - 1 - r` of the
      `2t` chunks of the whole.
    ```mlir
    exec.seq all_gather "tp" ins [#exec.buf<...>] outs [#exec.buf<...>]
    ```
  }];
  let arguments = (ins Exec_SeqKind:$kind, StrAttr:$axis, ArrayAttr:$ins, ArrayAttr:$outs);
  let assemblyFormat = "$kind $axis `ins` $ins `outs` $outs attr-dict";
  let hasVerifier = 1;
}

def Exec_RingAttentionOp : Exec_Op<"ring_attention", [HasParent<"ProgramOp">]> {
  let summary = "context-parallel attention over a ring of ranks";
  let description = [{
    Ring attention (Liu et al. 2023) with causal load balancing: each rank of
    `axis` holds its two sequence chunks of q, k and v; the key / value
    blocks travel around the ring (each rank sends to the next and receives
    from the previous) while every rank attends its queries to each block at
    the block's positions and merges the partial results by their
    log-sum-exp. `fwd`: ins q, k, v; outs out. `bwd`: ins dout, q, k, v, out;
    outs dq, dk, dv (the blocks' key / value gradients travel with them and
    arrive home after a full turn). `params` are the attention kernel's.
    ```mlir
    exec.ring_attention fwd "cp" ins [...] outs [...] {causal = true, ...}
    ```
  }];
  let arguments = (ins Exec_Direction:$kind, StrAttr:$axis, ArrayAttr:$ins, ArrayAttr:$outs,
                       DictionaryAttr:$params);
  let assemblyFormat = "$kind $axis `ins` $ins `outs` $outs $params attr-dict";
  let hasVerifier = 1;
}

def Exec_AllToAllOp : Exec_Op<"all_to_all", [HasParent<"ProgramOp">]> {
  let summary = "expert-parallel all-to-all of expert rows over a mesh axis";
  let description = [{
    With `t` ranks on `axis`, each owning `E/t` consecutive experts:
    - `dispatch`: `[E, C, h]` rows in (this rank's tokens for every expert),
      `[E/t, t C, h]` out (this rank's experts' rows from every rank, rank
      `i`'s at `[i C, (i+1) C)`);
    - `combine`: the inverse, `[E/t, t C, h]` in, `[E, C, h]` out.
    ```mlir
    exec.all_to_all dispatch "ep" ins [#exec.buf<...>] outs [#exec.buf<...>]
    ```
  }];
  let arguments = (ins Exec_ExpertExchange:$kind, StrAttr:$axis, ArrayAttr:$ins, ArrayAttr:$outs);
  let assemblyFormat = "$kind $axis `ins` $ins `outs` $outs attr-dict";
  let hasVerifier = 1;
}

def Exec_P2POp : Exec_Op<"p2p", [HasParent<"ProgramOp">]> {
  let summary = "pipeline send or receive of one buffer to or from another stage";
  let description = [{
    `send` hands the buffer to stage `peer` (same coordinates on every other
    axis) and returns; `recv` blocks until it arrives. `tag` names the
    transfer (the same on both sides): transfers with one tag are matched in
    order, so schedules may reorder transfers of different tags (the
    interleaved schedule does).
    ```mlir
    exec.p2p send peer 1 tag 3 #exec.buf<...>
    ```
  }];
  let arguments = (ins Exec_TransferKind:$kind, I64Attr:$peer, I64Attr:$tag, Exec_BufAttr:$buffer);
  let assemblyFormat = "$kind `peer` $peer `tag` $tag $buffer attr-dict";
  let hasVerifier = 1;
}

def Exec_BackwardOp : Exec_Op<"backward", [HasParent<"ProgramOp">]> {
  let summary = "marks where a micro-batch's backward half begins";
  let description = [{
    In a pipeline stage's micro-batch instructions, what precedes is the
    forward half and what follows the backward half; a 1F1B or GPipe
    schedule runs the halves of different micro-batches interleaved, each
    micro-batch in flight in its own copy of the arena.
  }];
  let assemblyFormat = "attr-dict";
}

def Exec_FusedOp : Exec_Op<"fused", [HasParent<"ProgramOp">]> {
  let summary = "a fused kernel: row-wise kernels run as one";
  let description = [{
    Runs the kernels of `body` in order as one kernel `name` (the generated
    CUDA source defines it; the CPU backend runs the body). Each body entry
    is `{kernel, ins, outs, params}` where `ins` and `outs` number buffers:
    first this op's `ins`, then its `outs`, then `temps` (f32 values
    internal to the kernel, never in the arena, one shape each). Body
    kernels are row-wise: `add`, `gelu_fwd` / `gelu_bwd`, `swiglu_fwd` /
    `swiglu_bwd`, `rms_norm_fwd`, `layer_norm_fwd`.
    ```mlir
    exec.fused "fused_0123abcd" ins [...] outs [...] temps [] body [{ins = array<i64: 0, 1>, kernel = "add", outs = array<i64: 3>, params = {}}, ...]
    ```
  }];
  let arguments = (ins StrAttr:$name, ArrayAttr:$ins, ArrayAttr:$outs, ArrayAttr:$temps,
                       ArrayAttr:$body);
  let assemblyFormat = "$name `ins` $ins `outs` $outs `temps` $temps `body` $body attr-dict";
  let hasVerifier = 1;
}

def Exec_ChunkOp : Exec_Op<"chunk", [HasParent<"ProgramOp">]> {
  let summary = "marks that the following instructions belong to a model chunk";
  let description = [{
    A stage of an interleaved pipeline holds several model chunks (virtual
    stages); its micro-batch instructions are the chunks' forward parts,
    then their backward parts. `exec.chunk 1` says the instructions up to the
    next marker are chunk 1's, so that the runtime can run the forward or
    backward part of one chunk for one micro-batch (the interleaved 1F1B
    schedule). Instructions before the first marker are chunk 0's.
    ```mlir
    exec.chunk 1
    ```
  }];
  let arguments = (ins I64Attr:$index);
  let assemblyFormat = "$index attr-dict";
}

def Exec_ParamGatherOp : Exec_Op<"param_gather", [HasParent<"ProgramOp">]> {
  let summary = "ZeRO-3: gathers a parameter's chunks into a whole buffer";
  let description = [{
    Every rank of `axis` contributes its chunk of parameter `param` (ZeRO
    chunking, see `reduce_scatter`); `buffer` receives the whole value.
    With an `event` the gather is a prefetch: it is started on the axis's
    communication stream and runs while the compute stream goes on;
    `exec.param_wait` with the same event, placed before the first reader of
    `buffer`, makes the compute stream wait for it. Prefetches are started in
    the same order on every rank of the axis.
    ```mlir
    exec.param_gather "dp" "w" #exec.buf<space = arena, ...>
    exec.param_gather "dp" "w2" #exec.buf<space = arena, ...> event 3
    ```
  }];
  let arguments = (ins StrAttr:$axis, StrAttr:$param, Exec_BufAttr:$buffer,
                       OptionalAttr<I64Attr>:$event);
  let assemblyFormat = "$axis $param $buffer (`event` $event^)? attr-dict";
}

def Exec_ParamWaitOp : Exec_Op<"param_wait", [HasParent<"ProgramOp">]> {
  let summary = "waits for a prefetched parameter gather";
  let description = [{
    The compute stream waits until the `exec.param_gather` started with
    `event` (earlier in the same micro-batch segment) has completed.
  }];
  let arguments = (ins I64Attr:$event);
  let assemblyFormat = "$event attr-dict";
}

#endif // LLMOPT_DIALECT_EXEC_IR_EXECOPS_TD
