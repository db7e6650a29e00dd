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

def LLM_GridOp : LLM_Op<"grid", [Symbol, SymbolTable, NoTerminator, SingleBlock,
                                  IsolatedFromAbove, HasParent<"::mlir::ModuleOp">]> {
  let summary = "the device mesh whose axes the parallel ops name";
  let description = [{
    The mesh of a partitioned model: one `llm.grid_axis` per axis the
    partition passes split over, with its number of ranks. Parallel ops name
    their axis through it (`axis @mesh::@tp`), so an axis is declared once
    with its size and a misspelt or undeclared one is refused by the
    verifier. The partition passes make the grid (`llm-partition-tp`: tp,
    `llm-partition-ep`: ep, `llm-partition-cp`: cp, `llm-shard-params`: dp
    and edp, the ranks holding the same experts).
    ```mlir
    llm.grid @mesh {
      llm.grid_axis @tp size 2
      llm.grid_axis @cp size 2
    }
    ```
    Verified: at most one axis of a name (the symbol table's check).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
}

def LLM_GridAxisOp : LLM_Op<"grid_axis", [Symbol, HasParent<"GridOp">]> {
  let summary = "an axis of the device mesh and its number of ranks";
  let description = [{
    ```mlir
    llm.grid_axis @tp size 2
    ```
    Verified: the size is positive.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$size);
  let assemblyFormat = "$sym_name `size` $size attr-dict";
  let hasVerifier = 1;
}

def LLM_TPCopyOp : LLM_DiffOp<"tp_copy", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "enters a tensor-parallel region: identity, all-reduce in backward";
  let description = [{
    Every rank of `axis` holds the same `input`; each feeds it to its shard
    of a column-parallel linear. The gradient is the sum of the ranks'
    partial gradients: `llm.all_reduce`.
    ```mlir
    %x1 = llm.tp_copy %x axis @mesh::@tp : tensor<?x?x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input)";
}

def LLM_TPReduceOp : LLM_DiffOp<"tp_reduce", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "leaves a tensor-parallel region: all-reduce, then the bias";
  let description = [{
    Sums the ranks' partial outputs of a row-parallel linear over `axis`,
    then adds the (replicated) `bias` once, broadcast over the last
    dimension. Backward: the gradient passes through unchanged; the bias
    gradient is `llm.bias_grad`.
    ```mlir
    %y = llm.tp_reduce %partial bias %b : tensor<768xbf16> axis @mesh::@tp : tensor<?x?x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, Optional<LLM_Weight>:$bias, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input (`bias` $bias^ `:` type($bias))? `axis` $axis attr-dict `:` type($input)
  }];
}

def LLM_AllReduceOp : LLM_CostOp<"all_reduce", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "sum over the ranks of a mesh axis";
  let description = [{
    ```mlir
    %g = llm.all_reduce %partial axis @mesh::@tp : tensor<?x?x768xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
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

def LLM_SPGatherOp : LLM_DiffOp<"sp_gather", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "sequence parallelism: all-gather the sequence chunks";
  let description = [{
    Each rank of `axis` holds a chunk of the sequence, `[b, s/t, h]` (a type
    whose encoding is `{seq_parts = t}`); the result is the whole `[b, s, h]`
    on every rank (Korthikanti et al. 2022, the `g` operator before a
    column-parallel linear). Backward: `llm.sp_scatter` (reduce-scatter): the
    ranks' consumers are partitioned, so their gradients are partial sums.
    With `replicated` (before the LM head, which every rank computes whole)
    the gradient is the same on every rank and the backward is `llm.sp_split`.
    ```mlir
    %full = llm.sp_gather %chunk axis @mesh::@tp : tensor<?x?x64xf32, {seq_parts = 2 : i64}> -> tensor<?x?x64xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis, UnitAttr:$replicated);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `axis` $axis (`replicated` $replicated^)? attr-dict `:` type($input) `->` type($result)
  }];
}

def LLM_SPScatterOp : LLM_DiffOp<"sp_scatter", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "sequence parallelism: reduce-scatter into sequence chunks";
  let description = [{
    Sums the ranks' partial `[b, s, h]` (a row-parallel linear's output) and
    keeps this rank's sequence chunk, then adds the replicated `bias` (the
    `g-bar` operator). Backward: `llm.sp_gather` of the gradient; the bias
    gradient is partial over the chunks (`llm.sp_partial` on the parameter).
    ```mlir
    %y = llm.sp_scatter %partial bias %b : tensor<64xf32> axis @mesh::@tp : tensor<?x?x64xf32> -> tensor<?x?x64xf32, {seq_parts = 2 : i64}>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, Optional<LLM_Weight>:$bias, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input (`bias` $bias^ `:` type($bias))? `axis` $axis attr-dict `:` type($input) `->` type($result)
  }];
}

def LLM_SPSplitOp : LLM_DiffOp<"sp_split", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "sequence parallelism: keep this rank's chunk of a replicated sequence";
  let description = [{
    Enters the sequence-parallel region from a value every rank holds whole
    (the embeddings). Backward: `llm.sp_gather` of the chunks' gradients.
    ```mlir
    %chunk = llm.sp_split %x axis @mesh::@tp : tensor<?x?x64xf32> -> tensor<?x?x64xf32, {seq_parts = 2 : i64}>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input) `->` type($result)";
}

def LLM_PPTransferOp : LLM_CostOp<"pp_transfer", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "pipeline parallelism: a value sent from one stage to another";
  let description = [{
    `input` is computed on stage `from`; the result is its copy on stage `to`
    (a send there, a receive here). Inserted by `llm-partition-pp` where a
    value crosses a stage boundary: activations forward, gradients backward.
    ```mlir
    %y1 = llm.pp_transfer %y from 0 to 1 : tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$from, I64Attr:$to);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `from` $from `to` $to attr-dict `:` type($input)";
}

def LLM_TPSliceOp : LLM_DiffOp<"tp_slice", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "tensor parallelism: this rank's part of a replicated value's features";
  let description = [{
    The last dimension holds `parts` equal parts; the `axis` ranks are split
    into `parts` consecutive groups and a rank keeps its group's part. With
    fewer KV heads than `tp`, every rank computes all KV heads (a small,
    replicated projection) and keeps the one its query heads read (Megatron
    replicates KV heads the same way). Backward: `llm.tp_unslice`.
    ```mlir
    %k1 = llm.tp_slice %k axis @mesh::@tp parts 2 : tensor<?x?x32xf32> -> tensor<?x?x16xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis, I64Attr:$parts);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis `parts` $parts attr-dict `:` type($input) `->` type($result)";
}

def LLM_TPUnsliceOp : LLM_DiffOp<"tp_unslice", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "the gradient of llm.tp_slice: this rank's part, zeros elsewhere";
  let description = [{
    ```mlir
    %dk = llm.tp_unslice %dk1 axis @mesh::@tp parts 2 : tensor<?x?x16xf32> -> tensor<?x?x32xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis, I64Attr:$parts);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis `parts` $parts attr-dict `:` type($input) `->` type($result)";
}

def LLM_EPDispatchOp : LLM_DiffOp<"ep_dispatch", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "expert parallelism: all-to-all of dispatched tokens to their experts' ranks";
  let description = [{
    Each rank of `axis` (`t` ranks) holds the rows it routed to every expert,
    `[E, C, h]`; rank `j` owns experts `[j E/t, (j+1) E/t)`. The result holds
    this rank's experts' rows from every rank, `[E/t, t C, h]` (rank `i`'s rows
    at `[i C, (i+1) C)`), marked by the encoding `{ep_parts = t}` (its
    capacity dimension is `t` times the dispatch's). Backward:
    `llm.ep_combine`.
    ```mlir
    %local = llm.ep_dispatch %d axis @mesh::@ep : tensor<8x?x64xf32> -> tensor<4x?x64xf32, {ep_parts = 2 : i64}>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input) `->` type($result)";
}

def LLM_EPCombineOp : LLM_DiffOp<"ep_combine", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "expert parallelism: all-to-all of expert outputs back to their tokens' ranks";
  let description = [{
    The inverse of `llm.ep_dispatch`: `[E/t, t C, h]` expert outputs in,
    `[E, C, h]` (every expert's rows for this rank's tokens) out. Backward:
    `llm.ep_dispatch`.
    ```mlir
    %rows = llm.ep_combine %y axis @mesh::@ep : tensor<4x?x64xf32, {ep_parts = 2 : i64}> -> tensor<8x?x64xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input) `->` type($result)";
}

def LLM_CPGatherOp : LLM_DiffOp<"cp_gather", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "context parallelism: all-gather keys or values over the sequence";
  let description = [{
    Under context parallelism each rank of `axis` (`t` ranks) holds two of
    the sequence's `2t` chunks, `t` and `2t - 1 - r` for rank `r` (causal load
    balancing), as one `[b, s/t, h]` tensor. Attention's keys and values are
    gathered into the whole sequence in position order, `[b, s, h]`, marked
    by the encoding `{cp_parts = t}` (its sequence is `t` local lengths).
    This is the all-gather form of context parallelism (Megatron-Core's
    `all_gather` communication, as Llama 3 was trained). Backward:
    `llm.cp_scatter` (each rank's queries contribute to every key).
    ```mlir
    %k_all = llm.cp_gather %k axis @mesh::@cp : tensor<?x?x32xf32> -> tensor<?x?x32xf32, {cp_parts = 2 : i64}>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input) `->` type($result)";
}

def LLM_CPScatterOp : LLM_DiffOp<"cp_scatter", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure]> {
  let summary = "context parallelism: reduce-scatter whole-sequence gradients to their ranks";
  let description = [{
    Sums the ranks' `[b, s, h]` partial gradients (encoding `{cp_parts = t}`)
    and keeps this rank's two chunks, `[b, s/t, h]`. Backward: `llm.cp_gather`.
    ```mlir
    %dk = llm.cp_scatter %dk_all axis @mesh::@cp : tensor<?x?x32xf32, {cp_parts = 2 : i64}> -> tensor<?x?x32xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, SymbolRefAttr:$axis);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input) `->` type($result)";
}

def LLM_ZeroGatherOp : LLM_CostOp<"zero_gather", [DeclareOpInterfaceMethods<SymbolUserOpInterface>, Pure, AllTypesMatch<["param", "result"]>]> {
  let summary = "ZeRO-3: the whole parameter, gathered from the ranks' chunks";
  let description = [{
    Under ZeRO-3 each rank of `axis` stores only its chunk of every
    parameter; each use reads a gathered copy that lives only as long as that
    use needs it. Inserted by `llm-shard-params`.
    ```mlir
    %w = llm.zero_gather %param axis @mesh::@dp : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins LLM_Weight:$param, SymbolRefAttr:$axis);
  let results = (outs LLM_Weight:$result);
  let assemblyFormat = "$param `axis` $axis attr-dict `:` type($param)";
}

#endif // LLMOPT_DIALECT_LLM_IR_LLMPARALLELOPS_TD
