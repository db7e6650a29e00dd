//===- Passes.td - llm dialect passes ----------------------*- tablegen -*-===//

#ifndef LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_TD
#define LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def LLMStats : Pass<"llm-stats", "::mlir::ModuleOp"> {
  let summary = "Print parameter counts, training FLOPs per token and memory";
  let description = [{
    Sums the `CostOpInterface` of every op of the model function (`@forward`,
    or the only function) and prints, on standard output, parameters (total,
    active per token, input embedding, LM head, per layer), training FLOPs per
    token counted as Narayanan et al. 2021 do (6 N + attention, N the GEMM
    weights a token passes through, LM head included, embedding lookups
    excluded), the sum of the ops' own FLOPs, and weights / model state /
    activation bytes. The IR is left unchanged. The report is printed only
    when the whole run succeeds; when it goes to standard output `llm-opt`
    does not print the module there too.

    `dtype-bytes` evaluates the model in another precision than its IR
    (weights and activations alike); `fused-attention=false` costs a
    non-fused attention kernel, whose softmax probabilities are what
    selective recomputation (Korthikanti et al. 2022) recomputes.

    ```
    $ llm-opt examples/models/gpt2-124m.json --llm-stats
    model gpt2-124m (GPT2LMHeadModel), 12 layers, seq_len 1024
    parameters
      total                                   124.440 M  124,439,808
      ...
    $ llm-opt examples/models/gpt2-124m.json --llm-stats="format=json"
    {"params_total": 124439808, "params_active": 124439808, ...}
    ```
  }];
  let options = [
    Option<"format", "format", "std::string", /*default=*/"\"table\"",
           "output format: table or json">,
    Option<"seqLen", "seq-len", "int64_t", /*default=*/"0",
           "sequence length, 1 to 2^26 (default: the model's `llm.seq_len`)">,
    Option<"microBatch", "micro-batch", "int64_t", /*default=*/"1",
           "micro-batch size for the activation figures (1 to 2^20)">,
    Option<"dtypeBytes", "dtype-bytes", "unsigned", /*default=*/"0",
           "bytes per weight and activation element: 1, 2, 4 or 8; 0 takes "
           "each tensor's element type from the IR">,
    Option<"fusedAttention", "fused-attention", "bool", /*default=*/"true",
           "assume a fused (flash) attention kernel that keeps only the "
           "softmax log-sum-exp; false keeps the probabilities, which "
           "selective recomputation then drops">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}


def LLMAutoParallel : Pass<"llm-auto-parallel", "::mlir::ModuleOp"> {
  let summary = "Search the parallel plan of a training job and attach the best";
  let description = [{
    Extracts the planner's per-layer summary from the model, searches data,
    tensor, pipeline (with virtual stages), context and expert parallelism,
    sequence parallelism, ZeRO 0-3, optimizer offload, recomputation,
    micro-batching, the pipeline schedule and the placement of the mesh axes
    with the analytical cost model, and attaches the best plan to the module
    as `llm.plan`. Prints a table of the top plans on standard output, writes
    the JSON report to `report` (`-` for standard output instead of the
    table), and can export the plan for Megatron-LM, DeepSpeed or torchtitan.
    `report-html` writes one self-contained web page of the search (no
    network needed to view it). Under `llm-opt` the files appear only once
    the whole run has succeeded: a later pass that fails leaves none. Searches that run longer than a second show
    a progress line on standard error when it is a terminal
    (`LLMOPT_PROGRESS=1` forces it, `0` turns it off).

    ```
    $ llm-opt examples/models/llama3-70b.json -o /dev/null \
        --llm-auto-parallel="cluster=dgx-h100 gpus=64 global-batch=512 seq-len=8192"
    ```

    The module gains:
    ```mlir
    module attributes {llm.plan = {dp = 2 : i64, tp = 8 : i64, pp = 4 : i64, ...}}
    ```

    When nothing fits, the pass fails with the closest candidate and why.
  }];
  let options = [
    Option<"cluster", "cluster", "std::string", /*default=*/"\"\"",
           "a cluster preset (dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200, "
           "pcie-8x-h100) or a cluster JSON file">,
    ListOption<"clusterSet", "set", "std::string",
           "cluster overrides path=value (gpu.hbm_gib=96,network.nics_per_node=4)">,
    Option<"gpus", "gpus", "int64_t", /*default=*/"-1",
           "number of GPUs (sets the node count; default: one node of the preset)">,
    Option<"globalBatch", "global-batch", "int64_t", /*default=*/"0",
           "sequences per step">,
    Option<"seqLen", "seq-len", "int64_t", /*default=*/"-1",
           "tokens per sequence (default: the model's llm.seq_len)">,
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"",
           "training precision: bf16 or fp16">,
    Option<"fp8", "fp8", "bool", /*default=*/"false", "fp8 GEMMs">,
    Option<"gradDtype", "grad-dtype", "std::string", /*default=*/"\"bf16\"",
           "gradient precision: bf16 (16 bytes/param with AdamW) or fp32 "
           "(Megatron's main grads, 18 bytes/param)">,
    Option<"flashAttention", "flash-attention", "bool", /*default=*/"true",
           "fused attention kernel">,
    Option<"dropout", "dropout", "bool", /*default=*/"false", "dropout layers">,
    Option<"fix", "fix", "std::string", /*default=*/"\"\"",
           "fixed dimensions, key:value,... (dp tp pp vpp cp ep sp zero offload "
           "recompute micro_batch num_micro_batches schedule placement)">,
    Option<"stack", "stack", "std::string", /*default=*/"\"\"",
           "the training stack that will run the plan: megatron (default), torchtitan, "
           "deepspeed, llm-foundry or llm-run, optionally with a variant "
           "(torchtitan:eager); the search returns only plans it runs, costed with its "
           "efficiency profile (data/stacks/NAME.json)">,
    Option<"stackProfile", "stack-profile", "std::string", /*default=*/"\"\"",
           "a stack profile JSON file of your own (the schema of data/stacks/*.json) "
           "instead of a built-in stack">,
    Option<"topK", "top-k", "int64_t", /*default=*/"5", "plans to report">,
    Option<"compare", "compare", "bool", /*default=*/"true",
           "with fix=, also search freely and report where the best plan gains on "
           "the fixed one, by category, and how sure the gain is">,
    Option<"calibrate", "calibrate", "std::string", /*default=*/"\"\"",
           "set the GPU's GEMM, attention and memory efficiencies from a kernel profile "
           "(llm-run --profile) before planning">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "write the JSON report here (- for standard output)">,
    Option<"exportFormat", "export", "std::string", /*default=*/"\"\"",
           "export the best plan: megatron, deepspeed, torchtitan (0.3.x) or torchtitan-0.2">,
    Option<"exportFile", "export-file", "std::string", /*default=*/"\"-\"",
           "where the export goes (default: standard output)">,
    Option<"reportHtml", "report-html", "std::string", /*default=*/"\"\"",
           "write a self-contained HTML page of the search here (top plans, "
           "memory, step time, pipeline schedule, rejections)">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

//===----------------------------------------------------------------------===//
// The lowering passes on the llm dialect (docs/lowering.md,
// docs/pass-contracts.md).
//===----------------------------------------------------------------------===//

def BuildTrainingStep : Pass<"llm-build-training-step", "::mlir::ModuleOp"> {
  let summary = "Materialize forward, backward and the AdamW update as @train_step";
  let description = [{
    Turns the model function `@forward(%tokens, %labels) -> loss` into
    `@train_step(%tokens, %labels) -> (loss, grad_norm)`:

    1. the `llm.layer` regions are inlined, each op tagged `llm.layer = N`
       (pipeline partitioning groups by it);
    2. reverse-mode differentiation: from d(loss) = 1, the ops are visited in
       reverse and each emits its backward through `GradientOpInterface`;
       gradients of values used twice (the residual stream, a tied embedding)
       are summed;
    3. the global gradient norm is computed over every parameter's gradient
       and each parameter is updated in place by `llm.adamw`, clipped to
       `max-grad-norm`.

    Before:
    ```mlir
    func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> {
      %w = llm.param "w" normal(0.02) : tensor<96x64xf32>
      %x = llm.embedding %t, %w : ...
      ...
      %loss = llm.cross_entropy %logits, %l : ... -> tensor<f32>
      return %loss : tensor<f32>
    }
    ```
    After:
    ```mlir
    func.func @train_step(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> (tensor<f32>, tensor<f32>) {
      ... forward ...
      %one = arith.constant dense<1.0> : tensor<f32>
      %dlogits = llm.cross_entropy_grad %logits, %l, %one : ...
      ... backward ...
      %norm = llm.global_norm %dw, ... : ...
      llm.adamw "w", %dw, %norm lr ... : tensor<96x64xf32>
      return %loss, %norm : tensor<f32>, tensor<f32>
    }
    ```
    With full activation recomputation (`recompute=full`, or the module's
    `llm.plan` saying so), each layer's forward ops are cloned (tagged
    `llm.recompute`) right before that layer's backward, which reads the
    clones: only the layers' inputs stay alive between forward and backward.
    `selective` recomputes the norm outputs and the MLP activation output in
    the backward (the attention backward recomputes its scores anyway); with
    sequence parallelism the gathered inputs of column-parallel linears are
    gathered again in the backward in every mode.

    Dynamic loss scaling (`loss-scale=dynamic`, or `auto` for fp16 models):
    the backward starts from the runtime's current loss scale instead of 1
    (the seed constant carries `llm.loss_scale_seed`), and the module gets
    `llm.loss_scale = #llm.loss_scaling<dynamic>`; the conversion to `exec` unscales the
    gradients, skips the update when one is not finite and lets the runtime
    halve or grow the scale (Micikevicius et al. 2018).

    MoE models: `moe-aux-loss` > 0 sets every router's `aux_loss`, so that
    the backward adds the load-balancing loss's gradient (per micro-batch and
    rank and sequence, as Megatron's `aux_loss`).

    Fails with an error on the op when a forward op has no backward yet.
  }];
  let options = [
    Option<"lossScale", "loss-scale", "std::string", /*default=*/"\"auto\"",
           "none, dynamic, or auto (dynamic when the parameters are fp16)">,
    Option<"moeAuxLoss", "moe-aux-loss", "double", /*default=*/"0.0",
           "MoE load-balancing loss coefficient (Megatron's --moe-aux-loss-coeff)">,
    Option<"recompute", "recompute", "std::string", /*default=*/"\"\"",
           "none, selective or full (default: the module's llm.plan, else none)">,
    Option<"lr", "lr", "double", /*default=*/"3e-4", "learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.95", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.1",
           "decoupled weight decay">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"1.0",
           "clip gradients to this global norm (0: no clipping)">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect", "::mlir::arith::ArithDialect"];
}


def PartitionTP : Pass<"llm-partition-tp", "::mlir::ModuleOp"> {
  let summary = "Megatron tensor parallelism: shard attention by heads and the MLP";
  let description = [{
    Rewrites `@forward` into the program of one rank of a tensor-parallel
    group of `tp` ranks (Shoeybi et al. 2019). In each layer:

    - the linears producing attention's q, k, v (through `llm.rotary` and
      GPT-2's fused `llm.split`) and those feeding GeLU / SwiGLU are
      column-parallel: their weight (and bias) keep `1/tp` of the output
      features, in equal blocks when a split follows; their input enters
      through `llm.tp_copy` (all-reduce of its gradient);
    - attention keeps `heads/tp` query heads and `kv_heads/tp` KV heads
      (GQA-aware); with fewer KV heads than `tp` (a multiple of them) every
      rank computes the whole, small K/V projections and keeps its query
      heads' KV head with `llm.tp_slice`;
    - the linear after attention and the one after the activation are
      row-parallel: their weight keeps `1/tp` of the input features, their
      output is summed by `llm.tp_reduce`, which adds the bias once.

    - MoE layers split each expert's ffn the same way (expert tensor
      parallelism): the router runs whole on every rank, the dispatch reads
      its input and the combine its routing weights through `llm.tp_copy`,
      and the combine's output is reduced.

    Norms stay replicated; the token embedding and the LM head (tied or not)
    are vocabulary-parallel: V/tp rows per rank (a vocabulary tp does not
    divide is padded to the next multiple of tp first, as Megatron pads it,
    with a remark), lookups of other tokens give zeros and are summed over
    `tp`, the cross-entropy's softmax spans the ranks and leaves the padding
    out. With the plan's `sp`, the residual stream between
    the parallel regions is a sequence chunk (`llm.sp_split`, `llm.sp_gather`,
    `llm.sp_scatter`). Each sharded `llm.param` gets `llm.shard =
    #llm.shard<axis = "tp", dim, blocks, parts[, whole]>`: the runtime initializes the whole tensor as
    the unpartitioned model would and keeps its part, so the partitioned
    model computes the same function.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"0",
           "tensor-parallel degree (default: the module's llm.plan, else 1)">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

def PartitionEP : Pass<"llm-partition-ep", "::mlir::ModuleOp"> {
  let summary = "expert parallelism: each rank of an `ep` group keeps E/ep experts";
  let description = [{
    Rewrites the MoE layers of `@forward` for expert parallelism over the
    mesh axis `ep` (GShard, Lepikhin et al. 2020; Megatron-Core's EP): the
    `ep` ranks are data-parallel ranks, each routing its own tokens. Every
    expert weight keeps `E/ep` experts (`llm.shard = #llm.shard<axis = "ep", dim = 0, blocks = 1, parts = ep>`);
    the dispatched rows go to their experts' ranks through `llm.ep_dispatch`
    (all-to-all) and come back through `llm.ep_combine`. The router and the
    combine stay local.

    Expert gradients then already sum the contributions of the `ep` ranks'
    tokens; the conversion to `exec` averages them over the remaining
    expert-data-parallel ranks (`edp`, dp / ep) and divides by `ep`.
  }];
  let options = [
    Option<"ep", "ep", "int64_t", /*default=*/"0",
           "expert-parallel degree (default: the module's llm.plan, else 1)">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

def PartitionCP : Pass<"llm-partition-cp", "::mlir::ModuleOp"> {
  let summary = "context parallelism: each rank of a `cp` group holds two sequence chunks";
  let description = [{
    Splits the sequence over the mesh axis `cp` (`t` ranks) with causal load
    balancing: the sequence is cut into `2t` chunks and rank `r` holds chunks
    `r` and `2t - 1 - r`, so every rank does the same attention work. All ops
    but attention are token-wise and run on the local chunks unchanged.
    Attention either runs as ring attention (`comm=ring`, the default:
    `llm.cp_ring` on the op; key / value blocks travel around the ranks and
    partial results merge by log-sum-exp, so no rank holds the whole keys)
    or reads keys and values gathered whole (`comm=all-gather`:
    `llm.cp_gather`, as Llama 3 was trained); its queries keep their
    positions. `llm-specialize-shapes` then gives activations `s / t`
    positions, and the kernels of rotary embeddings, learned positions and
    attention (`cp` parameter) place the local rows at their positions.

    Gradients of replicated parameters are averaged over `cp` as over `dp`.
  }];
  let options = [
    Option<"cp", "cp", "int64_t", /*default=*/"0",
           "context-parallel degree (default: the module's llm.plan, else 1)">,
    Option<"comm", "comm", "std::string", /*default=*/"\"ring\"",
           "ring (key / value blocks travel around the ranks, Liu et al. 2023) or "
           "all-gather (whole keys and values gathered, as Llama 3)">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

def FuseElementwise : Pass<"llm-fuse-elementwise", "::mlir::ModuleOp"> {
  let summary = "groups consecutive row-wise ops of @train_step into llm.fused regions";
  let description = [{
    Elementwise ops (residual add, GeLU, SwiGLU and their backward) and the
    norms' forward work row by row: when such ops follow one another in the
    step and each uses a value of the ones before (a residual add and the
    norm that reads its sum), they become one `llm.fused` region, one kernel
    that keeps the intermediate values on chip. Members share their
    activation shape (norm weights and biases are the only other inputs) and
    their pipeline stage and chunk. A linear followed by the tanh GeLU of its
    result (GPT-2's MLP) becomes one region too, lowered as a GEMM with a
    GeLU epilogue. Runs after the partition and sharding passes, before
    `llm-plan-memory` (fused intermediates need no arena space).
  }];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

def PartitionPP : Pass<"llm-partition-pp", "::mlir::ModuleOp"> {
  let summary = "Pipeline parallelism: assign @train_step's ops to stages";
  let description = [{
    Tags every op of `@train_step` with `llm.stage` from the plan's
    `stage_layers`: a layer's forward and backward ops go to its stage, the
    embeddings (and their backward) to the first stage, the final norm, LM
    head and loss (and their backward) to the last. Where a value crosses a
    stage boundary, `llm.pp_transfer` carries it: activations forward,
    gradients backward. Each stage's ops keep the step's order, so running
    every stage's ops in that order, with blocking sends and receives, is a
    valid (sequential) pipeline schedule.

    A weight shared by the first and the last stage (an LM head tied to the
    token embedding) is copied to both (`llm.pp_tied`); its gradient parts
    are summed over the two stages in the step, as Megatron's embedding
    group does. With `vpp` > 1 (interleaved stages) the layers form pp x vpp
    equal chunks and chunk v goes to stage v mod pp.
  }];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

def ShardParams : Pass<"llm-shard-params", "::mlir::ModuleOp"> {
  let summary = "ZeRO-3: parameters stored as dp chunks, gathered where used";
  let description = [{
    When the plan has ZeRO stage 3 (and dp > 1), every use of a parameter in
    `@train_step` (forward and backward, not the AdamW update) reads an
    `llm.zero_gather` placed right before it, so a gathered copy lives only
    as long as its use; parameters are marked `llm.zero3`. The runtime keeps
    each rank's chunk of the values and moments only.

    With `prefetch` (the default), the gathers of each layer are moved ahead
    to where the previous layer's computation starts and marked
    `llm.prefetch`, so that they run while that layer computes (FSDP's
    forward and backward prefetch, DeepSpeed's ZeRO-3 prefetch): in program
    order, gathers form groups of one layer (`llm.layer`; ops outside layers
    form their own groups), within one segment that the runtime runs as a
    unit (pipeline stage, model chunk, forward or backward). Group k > 0 of a
    segment starts right before the first reader of group k - 1's first
    gather. At most two layers' gathered weights are alive at once.

    ```mlir
    // before: each gather right before its reader
    %g0 = llm.zero_gather %w0 axis @mesh::@dp {llm.layer = 0}
    %y0 = llm.linear %x, %g0 {llm.layer = 0}
    %g1 = llm.zero_gather %w1 axis @mesh::@dp {llm.layer = 1}
    %y1 = llm.linear %y0, %g1 {llm.layer = 1}
    // after: layer 1's gather runs while layer 0 computes
    %g0 = llm.zero_gather %w0 axis @mesh::@dp {llm.layer = 0}
    %g1 = llm.zero_gather %w1 axis @mesh::@dp {llm.layer = 1, llm.prefetch}
    %y0 = llm.linear %x, %g0 {llm.layer = 0}
    %y1 = llm.linear %y0, %g1 {llm.layer = 1}
    ```
  }];
  let options = [
    Option<"prefetch", "prefetch", "bool", /*default=*/"true",
           "start each layer's gathers while the previous layer computes">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

def SpecializeShapes : Pass<"llm-specialize-shapes", "::mlir::ModuleOp"> {
  let summary = "Fix the batch and sequence dimensions to the plan's";
  let description = [{
    Replaces the dynamic batch and sequence dimensions of every function's
    values (`tensor<?x?x768xbf16>`) by the micro-batch and sequence length
    (`tensor<4x1024x768xbf16>`), so that buffers get sizes and kernels get
    shapes. The defaults come from the module's `#llm.plan` (micro_batch) and
    `llm.seq_len`; the options override them. MoE buffers `[experts,
    capacity, hidden]` get a static capacity from their `llm.moe_dispatch`
    (ceil(capacity factor x tokens x top_k / experts) rows, or every token
    of the micro-batch when dropless); other dynamic dimensions are an
    error.

    ```mlir
    // --llm-specialize-shapes="batch=2 seq=8"
    %x = llm.embedding %t, %w : tensor<2x8xi32>, tensor<96x64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let options = [
    Option<"batch", "batch", "int64_t", /*default=*/"0",
           "micro-batch size (default: the plan's)">,
    Option<"seq", "seq", "int64_t", /*default=*/"0",
           "sequence length (default: llm.seq_len)">,
  ];
}

def PlanMemory : Pass<"llm-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Assign arena offsets to every transient tensor by liveness";
  let description = [{
    Static memory planning of `@train_step` (or the only function) with
    static shapes: each op result other than a parameter is a transient
    buffer live from its definition to its last use (results returned live to
    the end). Buffers are placed greedily by size, largest first, at the
    lowest 256-byte aligned offset that overlaps no buffer with an
    overlapping lifetime. Each op gets `llm.offsets` (one per result, -1 for
    parameters, which live in the persistent state), the function gets
    `llm.arena_bytes` (the peak) and `llm.state_bytes` (parameters in the
    training dtype plus fp32 master weights, gradients accumulation and AdamW
    moments, as the cost model counts them). With `report=-` it prints the
    arena beside the planner's prediction for the same plan.

    ```mlir
    %0 = llm.rms_norm %x, %w eps 1.0e-05 {llm.offsets = array<i64: 4096>} : ...
    func.func @train_step(...) attributes {llm.arena_bytes = 1048576 : i64, llm.state_bytes = ...}
    ```
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"256",
           "buffer alignment in bytes">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "print the memory plan summary (- for standard output)">,
  ];
}


#endif // LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_TD
