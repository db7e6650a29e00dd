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
    network needed to view it). Searches that run longer than a second show
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
           "export the best plan: megatron, deepspeed or torchtitan">,
    Option<"exportFile", "export-file", "std::string", /*default=*/"\"-\"",
           "where the export goes (default: standard output)">,
    Option<"reportHtml", "report-html", "std::string", /*default=*/"\"\"",
           "write a self-contained HTML page of the search here (top plans, "
           "memory, step time, pipeline schedule, rejections)">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

#endif // LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_TD
