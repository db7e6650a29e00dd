//===- LLMParallelOps.td - tensor-parallel communication ops -*- tablegen -*-===//
//
// The two conjugate operators of Megatron-style tensor parallelism
// (Shoeybi et al. 2019, section 3): `tp_copy` (identity forward, all-reduce
// backward) before a column-parallel linear and `tp_reduce` (all-reduce
// forward, identity backward) after a row-parallel one, plus the ops their
// backward needs. `llm-partition-tp` inserts them.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMPARALLELOPS_TD
#define LLMOPT_DIALECT_LLM_IR_LLMPARALLELOPS_TD

def LLM_TPCopyOp : LLM_DiffOp<"tp_copy", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "enters a tensor-parallel region: identity, all-reduce in backward";
  let description = [{
    Every rank of `axis` holds the same `input`; each feeds it to its shard
    of a column-parallel linear. The gradient is the sum of the ranks'
    partial gradients: `llm.all_reduce`.
    ```mlir
    %x1 = llm.tp_copy %x axis "tp" : tensor<?x?x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, StrAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input)";
}

def LLM_TPReduceOp : LLM_DiffOp<"tp_reduce", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "leaves a tensor-parallel region: all-reduce, then the bias";
  let description = [{
    Sums the ranks' partial outputs of a row-parallel linear over `axis`,
    then adds the (replicated) `bias` once, broadcast over the last
    dimension. Backward: the gradient passes through unchanged; the bias
    gradient is `llm.bias_grad`.
    ```mlir
    %y = llm.tp_reduce %partial bias %b : tensor<768xbf16> axis "tp" : tensor<?x?x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, Optional<LLM_Weight>:$bias, StrAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input (`bias` $bias^ `:` type($bias))? `axis` $axis attr-dict `:` type($input)
  }];
}

def LLM_AllReduceOp : LLM_CostOp<"all_reduce", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "sum over the ranks of a mesh axis";
  let description = [{
    ```mlir
    %g = llm.all_reduce %partial axis "tp" : tensor<?x?x768xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, StrAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input)";
}

def LLM_BiasGradOp : LLM_CostOp<"bias_grad", [Pure]> {
  let summary = "gradient of a bias: the gradient summed over all but the last dimension";
  let description = [{
    ```mlir
    %db = llm.bias_grad %g : tensor<?x?x768xf32> -> tensor<768xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad);
  let results = (outs LLM_Weight:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
}

#endif // LLMOPT_DIALECT_LLM_IR_LLMPARALLELOPS_TD
