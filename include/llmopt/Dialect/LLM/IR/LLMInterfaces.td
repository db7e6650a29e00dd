//===- LLMInterfaces.td - llm op interfaces ----------------*- tablegen -*-===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_TD
#define LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_TD

include "mlir/IR/OpBase.td"

def LLM_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::llmopt::llm";
  let description = [{
    Analytical cost of one op for one micro-batch: forward and backward FLOPs,
    bytes read and written, the parameters the op owns, and the activations it
    keeps for its backward pass, with and without selective recomputation.

    Costs are functions of the batch size and sequence length that replace the
    dynamic dimensions, and of the element size (taken from the element types
    unless the context overrides it). See `CostContext` and `OpCost` in
    `LLMInterfaces.h` for the conventions.
  }];
  let methods = [
    InterfaceMethod<
      "Returns the cost of this op for the given micro-batch shape and dtype.",
      "::llmopt::llm::OpCost", "getCost",
      (ins "const ::llmopt::llm::CostContext &":$ctx)>,
  ];
}


def LLM_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::llmopt::llm";
  let description = [{
    Reverse-mode differentiation of one op: given the gradients of its results
    (null where no gradient flows), emits the ops computing the gradients of
    its operands at the builder's insertion point. `llm-build-training-step`
    calls it on the forward ops in reverse order.
  }];
  let methods = [
    InterfaceMethod<
      [{Emits the backward of this op. `resultGrads` has one entry per result
        (null: no gradient). Fills `operandGrads` with one entry per operand
        (null: not differentiable or no gradient). Fails with an error on the
        op when it cannot be differentiated.}],
      "::mlir::LogicalResult", "emitGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif // LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_TD
