//===- LLMGradOps.td - backward and optimizer ops ----------*- tablegen -*-===//
//
// The ops `llm-build-training-step` emits: one per backward kernel, the
// gradient-norm reduction and the AdamW update. Backward ops take the
// forward op's inputs (and output, where the kernel needs it) and recompute
// cheap statistics (norm mean / rstd, attention log-sum-exp); conversion to
// the exec dialect reuses the buffers the forward kernels saved.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMGRADOPS_TD
#define LLMOPT_DIALECT_LLM_IR_LLMGRADOPS_TD

def LLM_ConcatOp : LLM_CostOp<"concat", [Pure]> {
  let summary = "concatenates along the last dimension (the gradient of split)";
  let description = [{
    ```mlir
    %g = llm.concat %dq, %dk, %dv : tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<?x?x768xf32> -> tensor<?x?x2304xf32>
    ```
    Verified: at least one input; leading dimensions and element types agree;
    the result's features are the inputs' sum.
  }];
  let arguments = (ins Variadic<LLM_Activation>:$inputs);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
}

def LLM_EmbeddingGradOp : LLM_CostOp<"embedding_grad", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "gradient of the embedding table";
  let description = [{
    `dtable[t, :] = sum over positions n with tokens[n] = t of grad[n, :]`.
    ```mlir
    %dw = llm.embedding_grad %tokens, %g : tensor<?x?xi32>, tensor<?x?x768xf32> -> tensor<50257x768xf32>
    ```
    Verified: the result is [vocab, hidden] with the gradient's hidden size.
  }];
  let arguments = (ins LLM_IndexTensor:$tokens, LLM_Activation:$grad);
  let results = (outs LLM_Weight:$result);
  let assemblyFormat = [{
    $tokens `,` $grad attr-dict `:` type($tokens) `,` type($grad) `->` type($result)
  }];
}

def LLM_PositionEmbeddingGradOp : LLM_CostOp<"position_embedding_grad", [Pure]> {
  let summary = "gradient of a learned position table";
  let description = [{
    `dtable[s, :] = sum_b grad[b, s, :]`, zero beyond the sequence length.
    ```mlir
    %dp = llm.position_embedding_grad %g : tensor<?x?x768xf32> -> tensor<1024x768xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad);
  let results = (outs LLM_Weight:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
}

def LLM_LayerNormGradOp : LLM_CostOp<"layer_norm_grad", [Pure,
    AllTypesMatch<["grad", "input", "input_grad"]>, AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradients of a layer norm";
  let description = [{
    Input, weight and (with `bias`) bias gradients of `llm.layer_norm`.
    ```mlir
    %dx, %dw, %db = llm.layer_norm_grad %g, %x, %w bias eps 1.000000e-05 : tensor<?x?x768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$input, LLM_Weight:$weight,
                       UnitAttr:$bias, F64Attr:$eps);
  let results = (outs LLM_Activation:$input_grad, LLM_Weight:$weight_grad,
                      Optional<LLM_Weight>:$bias_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight (`bias` $bias^)? `eps` $eps attr-dict `:`
    type($input) `,` type($weight) (`->` type($bias_grad)^)?
  }];
}

def LLM_RMSNormGradOp : LLM_CostOp<"rms_norm_grad", [Pure,
    AllTypesMatch<["grad", "input", "input_grad"]>, AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradients of an RMS norm";
  let description = [{
    ```mlir
    %dx, %dw = llm.rms_norm_grad %g, %x, %w eps 1.000000e-05 : tensor<?x?x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$input, LLM_Weight:$weight,
                       F64Attr:$eps);
  let results = (outs LLM_Activation:$input_grad, LLM_Weight:$weight_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `eps` $eps attr-dict `:` type($input) `,` type($weight)
  }];
}

def LLM_LinearGradOp : LLM_CostOp<"linear_grad", [Pure,
    AllTypesMatch<["input", "input_grad"]>, AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradients of a linear layer";
  let description = [{
    `dx = grad W` (or `grad W^T` when `transposed`), `dW = grad^T x`, and with
    `bias` the bias gradient `sum_n grad`. `gemm` is the forward's: with an
    fp8 type the GEMMs read `input` and `weight` in it and `grad` in
    `f8E5M2` (the hybrid recipe: more range for gradients), each with
    per-tensor scaling.
    ```mlir
    %dx, %dw = llm.linear_grad %g, %x, %w : tensor<?x?x256xf32>, tensor<?x?x64xf32>, tensor<256x64xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$input, LLM_Weight:$weight,
                       UnitAttr:$transposed, UnitAttr:$bias, OptionalAttr<TypeAttr>:$gemm);
  let results = (outs LLM_Activation:$input_grad, LLM_Weight:$weight_grad,
                      Optional<LLM_Weight>:$bias_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight (`transposed` $transposed^)? (`bias` $bias^)?
    (`gemm` $gemm^)? attr-dict
    `:` type($grad) `,` type($input) `,` type($weight) (`->` type($bias_grad)^)?
  }];
}

def LLM_AttentionGradOp : LLM_CostOp<"attention_grad", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    AllTypesMatch<["q", "q_grad", "out", "grad"]>,
    AllTypesMatch<["k", "v", "k_grad", "v_grad"]>]> {
  let summary = "gradients of the attention core";
  let description = [{
    Query, key and value gradients of `llm.attention` with the same
    attributes; `out` is the forward output. Key and value gradients sum over
    the query heads that share them (GQA).
    ```mlir
    %dq, %dk, %dv = llm.attention_grad %g, %q, %k, %v, %o heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 causal : tensor<?x?x64xf32>, tensor<?x?x32xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$q, LLM_Activation:$k,
                       LLM_Activation:$v, LLM_Activation:$out,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       F64Attr:$scale, UnitAttr:$causal, OptionalAttr<I64Attr>:$window);
  let results = (outs LLM_Activation:$q_grad, LLM_Activation:$k_grad,
                      LLM_Activation:$v_grad);
  let assemblyFormat = [{
    $grad `,` $q `,` $k `,` $v `,` $out `heads` $num_heads `kv_heads` $num_kv_heads
    `head_dim` $head_dim `scale` $scale (`causal` $causal^)? (`window` $window^)?
    attr-dict `:` type($q) `,` type($k)
  }];
}

def LLM_GeluGradOp : LLM_CostOp<"gelu_grad", [Pure,
    AllTypesMatch<["grad", "input", "result"]>]> {
  let summary = "gradient of GeLU";
  let description = [{
    ```mlir
    %dx = llm.gelu_grad %g, %x tanh : tensor<?x?x256xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$input,
                       LLM_GeluApprox:$approximate);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$grad `,` $input $approximate attr-dict `:` type($input)";
}

def LLM_SwiGLUGradOp : LLM_CostOp<"swiglu_grad", [Pure,
    AllTypesMatch<["grad", "gate", "up", "gate_grad", "up_grad"]>]> {
  let summary = "gradients of SwiGLU";
  let description = [{
    ```mlir
    %dg, %du = llm.swiglu_grad %g, %gate, %up : tensor<?x?x160xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$gate, LLM_Activation:$up);
  let results = (outs LLM_Activation:$gate_grad, LLM_Activation:$up_grad);
  let assemblyFormat = "$grad `,` $gate `,` $up attr-dict `:` type($gate)";
}

def LLM_LMHeadGradOp : LLM_CostOp<"lm_head_grad", [Pure,
    AllTypesMatch<["input", "input_grad"]>, AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradients of the LM head";
  let description = [{
    ```mlir
    %dx, %dw = llm.lm_head_grad %g, %x, %w : tensor<?x?x96xf32>, tensor<?x?x64xf32>, tensor<96x64xf32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$input, LLM_Weight:$weight);
  let results = (outs LLM_Activation:$input_grad, LLM_Weight:$weight_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight attr-dict `:` type($grad) `,` type($input) `,` type($weight)
  }];
}

def LLM_CrossEntropyGradOp : LLM_CostOp<"cross_entropy_grad", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of the mean cross-entropy with respect to the logits";
  let description = [{
    `(softmax(logits) - onehot(label)) * dloss / (labels not ignored)`, zero
    rows for ignored labels; with `vocab_size` (a padded vocabulary, as
    `llm.cross_entropy`), zero for the padding entries.
    ```mlir
    %dl = llm.cross_entropy_grad %logits, %labels, %one : tensor<?x?x96xf32>, tensor<?x?xi32>, tensor<f32>
    ```
  }];
  let arguments = (ins LLM_Activation:$logits, LLM_IndexTensor:$labels,
                       LLM_Scalar:$loss_grad,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       OptionalAttr<SymbolRefAttr>:$vocab_axis,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $loss_grad attr-dict `:` type($logits) `,` type($labels) `,`
    type($loss_grad)
  }];
}

def LLM_MoERouterGradOp : LLM_CostOp<"moe_router_grad", [Pure,
    AllTypesMatch<["input", "input_grad"]>, AllTypesMatch<["gate", "gate_grad"]>,
    AllTypesMatch<["grad", "weights"]>]> {
  let summary = "gradients of the top-k router";
  let description = [{
    Input and gate gradients of `llm.moe_router` from the gradient of its
    routing weights; `weights` and `indices` are the forward's results (the
    selection is not redone, so the gradient follows the forward's choice),
    plus, with `aux_loss`, the load-balancing loss's gradient.
    ```mlir
    %dx, %dg = llm.moe_router_grad %dw, %x, %wg, %w, %i top_k 2 normalize : tensor<?x?x2xf32>, tensor<?x?x32xf32>, tensor<4x32xf32>, tensor<?x?x2xi32>
    ```
    Verified: weights, their gradient and the indices have one shape
    [batch, seq, top_k].
  }];
  let arguments = (ins LLM_ProbTensor:$grad, LLM_Activation:$input, LLM_Weight:$gate,
                       LLM_ProbTensor:$weights, LLM_IndexTensor:$indices,
                       I64Attr:$top_k, UnitAttr:$normalize, OptionalAttr<F64Attr>:$aux_loss);
  let results = (outs LLM_Activation:$input_grad, LLM_Weight:$gate_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $gate `,` $weights `,` $indices `top_k` $top_k
    (`normalize` $normalize^)? (`aux_loss` $aux_loss^)? attr-dict `:` type($grad) `,` type($input) `,`
    type($gate) `,` type($indices)
  }];
}

def LLM_MoEDispatchGradOp : LLM_CostOp<"moe_dispatch_grad", [Pure]> {
  let summary = "gradient of the dispatch: each token sums its copies";
  let description = [{
    ```mlir
    %dx = llm.moe_dispatch_grad %g, %i : tensor<4x8x32xf32>, tensor<?x?x2xi32> -> tensor<?x?x32xf32>
    ```
    Verified: the result is [batch, seq, hidden] with the gradient's hidden size.
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_IndexTensor:$indices);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $grad `,` $indices attr-dict `:` type($grad) `,` type($indices) `->` type($result)
  }];
}

def LLM_MoEExpertsGradOp : LLM_CostOp<"moe_experts_grad", [Pure,
    AllTypesMatch<["grad", "input", "input_grad"]>]> {
  let summary = "gradients of the expert MLPs";
  let description = [{
    Input and weight gradients of `llm.moe_experts`; the experts' hidden
    activations are recomputed from `input`, not saved. `gemm` as the
    forward's (fp8: Transformer Engine's hybrid recipe, gradients E5M2).
    ```mlir
    %dx, %dw1, %dw3, %dw2 = llm.moe_experts_grad %g, %d, %w1, %w3, %w2 swiglu : tensor<4x8x32xf32>, tensor<4x48x32xf32>, tensor<4x48x32xf32>, tensor<4x32x48xf32> -> tensor<4x48x32xf32>, tensor<4x48x32xf32>, tensor<4x32x48xf32>
    ```
    Verified: one weight gradient per weight, of its type.
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$input,
                       Variadic<LLM_Weight>:$weights, LLM_ExpertActivation:$activation,
                       OptionalAttr<TypeAttr>:$gemm);
  let results = (outs LLM_Activation:$input_grad, Variadic<LLM_Weight>:$weight_grads);
  let assemblyFormat = [{
    $grad `,` $input `,` $weights $activation (`gemm` $gemm^)? attr-dict `:` type($input) `,`
    type($weights) `->` type($weight_grads)
  }];
}

def LLM_MoECombineGradOp : LLM_CostOp<"moe_combine_grad", [Pure,
    AllTypesMatch<["expert_out", "expert_out_grad"]>,
    AllTypesMatch<["weights", "weights_grad"]>]> {
  let summary = "gradients of the combine: expert outputs and routing weights";
  let description = [{
    ```mlir
    %de, %dw = llm.moe_combine_grad %g, %e, %w, %i : tensor<?x?x32xf32>, tensor<4x8x32xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32>
    ```
  }];
  let arguments = (ins LLM_Activation:$grad, LLM_Activation:$expert_out,
                       LLM_ProbTensor:$weights, LLM_IndexTensor:$indices);
  let results = (outs LLM_Activation:$expert_out_grad, LLM_ProbTensor:$weights_grad);
  let assemblyFormat = [{
    $grad `,` $expert_out `,` $weights `,` $indices attr-dict `:` type($grad) `,`
    type($expert_out) `,` type($weights) `,` type($indices)
  }];
}

def LLM_GlobalNormOp : LLM_CostOp<"global_norm", [Pure]> {
  let summary = "the L2 norm of all gradients";
  let description = [{
    `sqrt(sum over tensors and elements of g^2)`, accumulated in fp32 (over
    every rank once the gradients are sharded).
    ```mlir
    %n = llm.global_norm %g0, %g1 : tensor<96x64xf32>, tensor<64xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<LLM_Weight>:$grads);
  let results = (outs LLM_Scalar:$result);
  let assemblyFormat = "$grads attr-dict `:` type($grads) `->` type($result)";
}

def LLM_AdamWOp : LLM_CostOp<"adamw", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "AdamW update of a named parameter, in place";
  let description = [{
    Updates the state of parameter `name` (fp32 master weights, first and
    second moments, the step count) with its gradient, clipped by global norm
    when `max_norm` > 0: the gradient is scaled by
    `min(1, max_norm / (norm + 1e-6))`. Decoupled weight decay as PyTorch's
    AdamW applies it (Loshchilov and Hutter 2019).
    ```mlir
    llm.adamw "model.norm.weight", %g, %norm lr 3.000000e-04 betas(9.000000e-01, 9.500000e-01) eps 1.000000e-08 weight_decay 1.000000e-01 max_norm 1.000000e+00 : tensor<64xf32>, tensor<f32>
    ```
    Verified: the name is a parameter of the function (an `llm.param` of that
    name and the gradient's type); hyperparameters are finite, lr > 0,
    betas in [0, 1), eps > 0, weight decay and max_norm >= 0.
  }];
  let arguments = (ins StrAttr:$name, LLM_Weight:$grad, LLM_Scalar:$norm,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, F64Attr:$max_norm);
  let assemblyFormat = [{
    $name `,` $grad `,` $norm `lr` $lr `betas` `(` $beta1 `,` $beta2 `)` `eps` $eps
    `weight_decay` $weight_decay `max_norm` $max_norm attr-dict `:` type($grad) `,`
    type($norm)
  }];
}

#endif // LLMOPT_DIALECT_LLM_IR_LLMGRADOPS_TD
