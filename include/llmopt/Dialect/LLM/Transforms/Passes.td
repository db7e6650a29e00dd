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
    activation bytes. The IR is left unchanged; when the statistics go to
    standard output `llm-opt` does not print the module there too.

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
           "sequence length (default: the model's `llm.seq_len`)">,
    Option<"microBatch", "micro-batch", "int64_t", /*default=*/"1",
           "micro-batch size for the activation figures">,
  ];
  let dependentDialects = ["::llmopt::llm::LLMDialect"];
}

#endif // LLMOPT_DIALECT_LLM_TRANSFORMS_PASSES_TD
