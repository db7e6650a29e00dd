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

#endif // LLMOPT_DIALECT_LLM_IR_LLMINTERFACES_TD
