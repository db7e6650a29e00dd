//===- Passes.td - lowering passes -------------------------*- tablegen -*-===//
//
// The passes that turn a model and its plan into an executable per-rank
// training program (issue "Lowering"), in pipeline order.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_TRANSFORMS_PASSES_TD
#define LLMOPT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

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
    Fails with an error on the op when a forward op has no backward yet.
  }];
  let options = [
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

#endif // LLMOPT_TRANSFORMS_PASSES_TD
