//===- Passes.td - passes that write a target ---------------*- tablegen -*-===//

#ifndef LLMOPT_TARGET_PASSES_TD
#define LLMOPT_TARGET_PASSES_TD

include "mlir/Pass/PassBase.td"

def EmitPlan : Pass<"llm-emit-plan", "::mlir::ModuleOp"> {
  let summary = "Write the exec programs as a plan directory";
  let description = [{
    Writes `dir/plan.json` (format `llm-opt-plan`, version 1: the mesh, the
    step inputs, every parameter with its shape and init, and per class of
    ranks the instruction stream), `dir/checksums.sha256` (SHA-256 of
    plan.json, in `sha256sum -c` form) and `dir/run.slurm`, a Slurm batch
    script that launches it with `srun llm-run`. docs/plan-format.md specifies it.
    Files are replaced atomically; identical inputs give identical bytes.
  }];
  let options = [
    Option<"dir", "dir", "std::string", /*default=*/"\"\"", "plan directory">,
    Option<"gpusPerNode", "gpus-per-node", "int64_t", /*default=*/"8",
           "GPUs per node, for the Slurm script">,
  ];
}

#endif // LLMOPT_TARGET_PASSES_TD
