//===- LLMOps.td - llm dialect operations ------------------*- tablegen -*-===//
//
// Conventions shared by every op below:
//  - activations are [batch, seq, features] with batch and seq dynamic;
//  - weights follow PyTorch's nn.Linear layout [out, in] unless `transposed`;
//  - every op implements CostOpInterface (LLMInterfaces.td).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_IR_LLMOPS_TD
#define LLMOPT_DIALECT_LLM_IR_LLMOPS_TD

include "llmopt/Dialect/LLM/IR/LLMBase.td"
include "llmopt/Dialect/LLM/IR/LLMInterfaces.td"
include "llmopt/Dialect/LLM/IR/LLMAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/SymbolInterfaces.td"

class LLM_CostOp<string mnemonic, list<Trait> traits = []>
    : LLM_Op<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<LLM_CostOpInterface>])> {
  let hasVerifier = 1;
}

/// A forward op with a backward (GradientOpInterface).
class LLM_DiffOp<string mnemonic, list<Trait> traits = []>
    : LLM_CostOp<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<LLM_GradientOpInterface>])>;

//===----------------------------------------------------------------------===//
// Parameters and structure.
//===----------------------------------------------------------------------===//

def LLM_ParamOp : LLM_CostOp<"param", [Pure]> {
  let summary = "a named, trainable parameter";
  let description = [{
    Declares a parameter tensor with the name a checkpoint gives it and its
    initialization. A parameter used twice (tied input embedding and LM head)
    is one `llm.param` with two uses, and is counted once.

    A name containing `*` declares a stack of per-expert tensors: dimension 0
    indexes the expert and `*` stands for the expert number in the checkpoint
    (`model.layers.0.block_sparse_moe.experts.*.w1.weight`).

    ```mlir
    %w = llm.param "model.layers.0.mlp.up_proj.weight" normal(0.02) : tensor<14336x4096xbf16>
    %g = llm.param "model.norm.weight" ones : tensor<4096xbf16>
    ```

    Verified: the name is not empty; the shape is static with positive sizes
    whose product fits in 64 bits; `normal` has a positive, finite standard
    deviation and only `normal` has one; a stacked name has rank >= 2.
  }];
  let arguments = (ins StrAttr:$name, LLM_InitKind:$init,
                       OptionalAttr<F64Attr>:$std);
  let results = (outs LLM_Weight:$result);
  let assemblyFormat = [{
    $name $init (`(` $std^ `)`)? attr-dict `:` type($result)
  }];
  let extraClassDeclaration = [{
    /// Number of scalars in the parameter.
    int64_t getNumElements();
    /// True when dimension 0 stacks per-expert tensors.
    bool isExpertStack() { return getName().contains('*'); }
  }];
}

def LLM_LayerOp : LLM_CostOp<"layer", [
    AllTypesMatch<["input", "result"]>, SingleBlock, IsolatedFromAbove,
    HasParent<"::mlir::func::FuncOp">]> {
  let summary = "one transformer block";
  let description = [{
    Groups the ops of transformer block `index`. The region takes the block's
    input as its only argument and yields its output, which has the same type.
    Layers are the unit the planner balances over pipeline stages and the unit
    of full activation recomputation.

    ```mlir
    %y = llm.layer 0 (%x) : tensor<?x?x768xbf16> {
    ^bb0(%in: tensor<?x?x768xbf16>):
      ...
      llm.yield %out : tensor<?x?x768xbf16>
    }
    ```

    The region is isolated from above: a block reads only its input and the
    parameters it defines, so any cut of the layer list into pipeline stages
    is valid.

    Verified: the layer sits directly in a `func.func` (layers do not nest);
    `index` is non-negative; the region has one block whose single argument
    has the input's type and which ends in `llm.yield`. `--llm-stats` also
    rejects two layers with the same index.
  }];
  let arguments = (ins I64Attr:$index, LLM_Activation:$input);
  let results = (outs LLM_Activation:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $index ` ` `(` $input `)` attr-dict `:` type($input) $body
  }];
}

def LLM_YieldOp : LLM_Op<"yield", [Pure, Terminator, ReturnLike,
                                   HasParent<"LayerOp">]> {
  let summary = "returns the output of a transformer block";
  let description = [{
    Terminates an `llm.layer` body; its operand type is the layer's type.

    ```mlir
    llm.yield %out : tensor<?x?x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Embeddings.
//===----------------------------------------------------------------------===//

def LLM_EmbeddingOp : LLM_DiffOp<"embedding", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "token embedding lookup";
  let description = [{
    Gathers rows of `table` [vocab, hidden] for integer `tokens` [batch, seq].

    ```mlir
    %x = llm.embedding %tokens, %wte : tensor<?x?xi32>, tensor<50257x768xbf16> -> tensor<?x?x768xbf16>
    ```

    Verified: tokens are rank 2; the table is rank 2; the result is
    [batch, seq, hidden] with the table's element type.
  }];
  let arguments = (ins LLM_IndexTensor:$tokens, LLM_Weight:$table);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $tokens `,` $table attr-dict `:` type($tokens) `,` type($table) `->` type($result)
  }];
}

def LLM_PositionEmbeddingOp : LLM_DiffOp<"position_embedding", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "adds learned absolute position embeddings";
  let description = [{
    `result[b, s, :] = input[b, s, :] + table[s, :]` with `table` of shape
    [max_positions, hidden] (GPT-2's `wpe`).

    ```mlir
    %y = llm.position_embedding %x, %wpe : tensor<?x?x768xbf16>, tensor<1024x768xbf16>
    ```

    Verified: the table's hidden size matches the input's; a static sequence
    length does not exceed the table's positions.
  }];
  let arguments = (ins LLM_Activation:$input, LLM_Weight:$table);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $table attr-dict `:` type($input) `,` type($table)
  }];
}

def LLM_RotaryOp : LLM_DiffOp<"rotary", [Pure,
    AllTypesMatch<["q", "q_out"]>, AllTypesMatch<["k", "k_out"]>]> {
  let summary = "rotary position embedding of queries and keys";
  let description = [{
    Rotates each head of `q` [batch, seq, heads * head_dim] and `k`
    [batch, seq, kv_heads * head_dim] by position-dependent angles with base
    `theta` (RoFormer, Su et al. 2021). `inverse` rotates back: it is the
    gradient of the rotation. `scaling` carries a context-extension
    rule as Hugging Face names it (`rope_type`, `factor`, `low_freq_factor`,
    `high_freq_factor`, `original_max_position_embeddings`).

    ```mlir
    %qr, %kr = llm.rotary %q, %k head_dim 128 theta 5.000000e+05 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
    ```

    Verified: `head_dim` is positive and even and divides the last dimension
    of `q` and `k`; `theta` is positive and finite.
  }];
  let arguments = (ins LLM_Activation:$q, LLM_Activation:$k,
                       I64Attr:$head_dim, F64Attr:$theta,
                       OptionalAttr<DictionaryAttr>:$scaling, UnitAttr:$inverse);
  let results = (outs LLM_Activation:$q_out, LLM_Activation:$k_out);
  let assemblyFormat = [{
    $q `,` $k `head_dim` $head_dim `theta` $theta (`scaling` $scaling^)?
    (`inverse` $inverse^)? attr-dict `:` type($q) `,` type($k)
  }];
  let extraClassDeclaration = [{
    /// `scaling`'s type: `rope_type`, or `type` as older configs name it;
    /// "default" without scaling.
    ::llvm::StringRef getRopeType();
    /// A number of `scaling` (written as a float or an integer), or `dflt`.
    double getScalingNumber(::llvm::StringRef key, double dflt);
  }];
}

//===----------------------------------------------------------------------===//
// Norms, linear layers, activations.
//===----------------------------------------------------------------------===//

def LLM_LayerNormOp : LLM_DiffOp<"layer_norm", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + eps) * weight + bias` over the last dimension.

    ```mlir
    %y = llm.layer_norm %x, %g, %b eps 1.000000e-05 : tensor<?x?x768xbf16>, tensor<768xbf16>, tensor<768xbf16>
    ```

    Verified: weight (and bias, when present) are vectors of the input's last
    dimension with the input's element type; `eps` is positive and finite.
  }];
  let arguments = (ins LLM_Activation:$input, LLM_Weight:$weight,
                       Optional<LLM_Weight>:$bias, F64Attr:$eps);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? `eps` $eps attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)?
  }];
}

def LLM_RMSNormOp : LLM_DiffOp<"rms_norm", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "RMS normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x^2) + eps) * weight` over the last dimension (Zhang and
    Sennrich 2019).

    ```mlir
    %y = llm.rms_norm %x, %g eps 1.000000e-05 : tensor<?x?x4096xbf16>, tensor<4096xbf16>
    ```

    Verified: weight is a vector of the input's last dimension with the
    input's element type; `eps` is positive and finite.
  }];
  let arguments = (ins LLM_Activation:$input, LLM_Weight:$weight, F64Attr:$eps);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weight `eps` $eps attr-dict `:` type($input) `,` type($weight)
  }];
}

def LLM_LinearOp : LLM_DiffOp<"linear", [Pure]> {
  let summary = "affine map over the last dimension";
  let description = [{
    `y = x W^T + b` with `weight` [out, in] (nn.Linear), or `y = x W + b` with
    `weight` [in, out] when `transposed` is set (GPT-2's Conv1D checkpoints).
    `gemm` sets the GEMM input type: fp8 (`f8E4M3FN`, `f8E5M2`) with per-tensor
    scaling, or `bf16` / `f16` to compute an fp32 model in 16 bits; the output
    keeps the activation type.

    ```mlir
    %y = llm.linear %x, %w : tensor<?x?x4096xbf16>, tensor<14336x4096xbf16> -> tensor<?x?x14336xbf16>
    %z = llm.linear %x, %w, %b transposed : tensor<?x?x768xbf16>, tensor<768x2304xbf16>, tensor<2304xbf16> -> tensor<?x?x2304xbf16>
    ```

    Verified: the weight is rank 2 and its `in` size equals the input's last
    dimension; the bias is a vector of size `out`; the result keeps the
    leading dimensions and has last dimension `out`; element types agree.
  }];
  let arguments = (ins LLM_Activation:$input, LLM_Weight:$weight,
                       Optional<LLM_Weight>:$bias, UnitAttr:$transposed,
                       OptionalAttr<TypeAttr>:$gemm);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? (`transposed` $transposed^)?
    (`gemm` $gemm^)? attr-dict `:` type($input) `,` type($weight)
    (`,` type($bias)^)? `->` type($result)
  }];
  let extraClassDeclaration = [{
    int64_t getInFeatures();
    int64_t getOutFeatures();
  }];
}

def LLM_SplitOp : LLM_DiffOp<"split", [Pure]> {
  let summary = "splits the last dimension into consecutive pieces";
  let description = [{
    Splits a fused projection (GPT-2's `c_attn`) into its parts.

    ```mlir
    %q, %k, %v = llm.split %qkv [768, 768, 768] : tensor<?x?x2304xbf16> -> tensor<?x?x768xbf16>, tensor<?x?x768xbf16>, tensor<?x?x768xbf16>
    ```

    Verified: one result per size; sizes are positive and add up to the last
    dimension; each result keeps the leading dimensions.
  }];
  let arguments = (ins LLM_Activation:$input, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<LLM_Activation>:$results);
  let assemblyFormat = [{
    $input $sizes attr-dict `:` type($input) `->` type($results)
  }];
}

def LLM_AttentionOp : LLM_DiffOp<"attention", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    AllTypesMatch<["q", "result"]>, AllTypesMatch<["k", "v"]>]> {
  let summary = "scaled dot-product attention core (MHA, GQA, MQA)";
  let description = [{
    `softmax(q k^T * scale + mask) v` per head. `q` is
    [batch, seq, num_heads * head_dim]; `k` and `v` are
    [batch, seq, num_kv_heads * head_dim]; query head `h` reads kv head
    `h / (num_heads / num_kv_heads)` (GQA; MQA when `num_kv_heads` is 1).
    `causal` masks future positions; `window` limits each query to the last
    `window` keys (Mistral's sliding window).

    ```mlir
    %o = llm.attention %q, %k, %v heads 32 kv_heads 8 head_dim 128 scale 0.08838834764831845 causal : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
    ```

    Verified: sizes are positive; `num_kv_heads` divides `num_heads`;
    `q` has `num_heads * head_dim` features and `k`, `v` have
    `num_kv_heads * head_dim`; batch and sequence dimensions agree; `q`, `k`
    and `v` have one element type; `scale` is positive and finite and
    `window` positive.
  }];
  let arguments = (ins LLM_Activation:$q, LLM_Activation:$k, LLM_Activation:$v,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, F64Attr:$scale, UnitAttr:$causal,
                       OptionalAttr<I64Attr>:$window);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `heads` $num_heads `kv_heads` $num_kv_heads
    `head_dim` $head_dim `scale` $scale (`causal` $causal^)?
    (`window` $window^)? attr-dict `:` type($q) `,` type($k)
  }];
}

def LLM_GeluOp : LLM_DiffOp<"gelu", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "GeLU activation (exact or tanh approximation)";
  let description = [{
    Gaussian error linear unit (Hendrycks and Gimpel 2016); `tanh` is GPT-2's
    `gelu_new`.

    ```mlir
    %y = llm.gelu %x tanh : tensor<?x?x3072xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$input, LLM_GeluApprox:$approximate);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$input $approximate attr-dict `:` type($input)";
}

def LLM_SwiGLUOp : LLM_DiffOp<"swiglu", [Pure,
    AllTypesMatch<["gate", "up", "result"]>]> {
  let summary = "SwiGLU gating: silu(gate) * up";
  let description = [{
    The gated activation of Llama-style MLPs (Shazeer 2020).

    ```mlir
    %h = llm.swiglu %gate, %up : tensor<?x?x14336xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$gate, LLM_Activation:$up);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($gate)";
}

def LLM_AddOp : LLM_DiffOp<"add", [Pure, Commutative,
    AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "residual add";
  let description = [{
    Elementwise sum of a block's input and its branch.

    ```mlir
    %y = llm.add %x, %branch : tensor<?x?x768xbf16>
    ```
  }];
  let arguments = (ins LLM_Activation:$lhs, LLM_Activation:$rhs);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs)";
}

//===----------------------------------------------------------------------===//
// Mixture of experts.
//===----------------------------------------------------------------------===//

def LLM_MoERouterOp : LLM_DiffOp<"moe_router", [Pure]> {
  let summary = "top-k expert routing";
  let description = [{
    Scores each token against `num_experts` experts with the gate weight
    [num_experts, hidden], keeps the `top_k` best and returns their routing
    weights and expert indices, each [batch, seq, top_k]. `normalize` renormalizes
    the kept weights to sum to one (Mixtral's softmax over the top-k logits).
    `aux_loss` adds to training the gradient of the load-balancing loss
    `aux_loss * E * sum_e f_e * P_e` (Switch Transformer; Megatron's
    `--moe-aux-loss-coeff`), `f_e` the fraction of the tokens' top-k choices
    that went to expert e and `P_e` its mean router probability over the
    micro-batch's tokens; like Megatron's, the reported loss does not
    include it.

    ```mlir
    %p, %i = llm.moe_router %x, %wg top_k 2 normalize : tensor<?x?x4096xbf16>, tensor<8x4096xbf16> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
    %q, %j = llm.moe_router %x, %wg top_k 2 normalize aux_loss 1.000000e-02 : tensor<?x?x4096xbf16>, tensor<8x4096xbf16> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
    ```

    Verified: `top_k` is at least 1 and at most the number of experts; the
    gate's hidden size matches the input's; results are [batch, seq, top_k].
  }];
  let arguments = (ins LLM_Activation:$input, LLM_Weight:$gate,
                       I64Attr:$top_k, UnitAttr:$normalize, OptionalAttr<F64Attr>:$aux_loss);
  let results = (outs LLM_ProbTensor:$weights, LLM_IndexTensor:$indices);
  let assemblyFormat = [{
    $input `,` $gate `top_k` $top_k (`normalize` $normalize^)? (`aux_loss` $aux_loss^)? attr-dict `:`
    type($input) `,` type($gate) `->` type($weights) `,` type($indices)
  }];
  let extraClassDeclaration = [{
    int64_t getNumExperts();
  }];
}

def LLM_MoEDispatchOp : LLM_DiffOp<"moe_dispatch", [Pure]> {
  let summary = "groups routed tokens by expert";
  let description = [{
    Copies each token to the `top_k` experts its indices name, giving
    [num_experts, capacity, hidden]. With `capacity_factor` c > 0 each expert
    takes at most ceil(c * tokens * top_k / num_experts) tokens and drops the
    rest (GShard, Switch); with 0 it is dropless and the dynamic dimension is
    as large as the busiest expert's load. Under expert parallelism this is
    where the all-to-all goes.

    ```mlir
    %d = llm.moe_dispatch %x, %i capacity 1.250000e+00 : tensor<?x?x4096xbf16>, tensor<?x?x2xi32> -> tensor<8x?x4096xbf16>
    ```

    Verified: the capacity factor is finite and 0 or at least 1 (below 1,
    tokens are always dropped); the result is [experts, ?, hidden] with at
    least one expert and the input's hidden size and type.
  }];
  let arguments = (ins LLM_Activation:$input, LLM_IndexTensor:$indices,
                       F64Attr:$capacity_factor);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $indices `capacity` $capacity_factor attr-dict `:`
    type($input) `,` type($indices) `->` type($result)
  }];
}

def LLM_MoEExpertsOp : LLM_DiffOp<"moe_experts", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "the expert MLPs, applied to their dispatched tokens";
  let description = [{
    Applies expert `e`'s MLP to row `e` of `input` [experts, capacity, hidden].
    With `swiglu` the weights are gate [E, ffn, hidden], up [E, ffn, hidden] and
    down [E, hidden, ffn] (Mixtral's w1, w3, w2); with `gelu` they are
    fc1 [E, ffn, hidden] and fc2 [E, hidden, ffn].

    `gemm f8E4M3FN` runs the experts' GEMMs on fp8 inputs: activations (and,
    backward, their gradients in E5M2) scaled per row, so that a token
    rounds the same whichever tokens share its expert, each expert's weight
    per tensor.

    ```mlir
    %y = llm.moe_experts %d, %w1, %w3, %w2 swiglu : tensor<8x?x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x4096x14336xbf16>
    %z = llm.moe_experts %d, %w1, %w3, %w2 swiglu gemm f8E4M3FN : tensor<8x?x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x4096x14336xbf16>
    ```

    Verified: three weights for `swiglu`, two for `gelu`; at least one
    expert and a positive ffn size; every weight is rank 3 with the input's
    expert count, hidden size and one ffn size; `gemm` is f8E4M3FN.
  }];
  let arguments = (ins LLM_Activation:$input, Variadic<LLM_Weight>:$weights,
                       LLM_ExpertActivation:$activation, OptionalAttr<TypeAttr>:$gemm);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weights $activation (`gemm` $gemm^)? attr-dict `:` type($input) `,` type($weights)
  }];
  let extraClassDeclaration = [{
    int64_t getNumExperts();
    int64_t getFfnSize();
  }];
}

def LLM_MoECombineOp : LLM_DiffOp<"moe_combine", [Pure]> {
  let summary = "returns expert outputs to their tokens, weighted";
  let description = [{
    Sums each token's `top_k` expert outputs weighted by the router's weights,
    inverting `llm.moe_dispatch` (tokens dropped for capacity contribute zero).

    ```mlir
    %y = llm.moe_combine %e, %p, %i : tensor<8x?x4096xbf16>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x4096xbf16>
    ```

    Verified: weights and indices have the same shape; the result is
    [batch, seq, hidden] with the experts' hidden size and type.
  }];
  let arguments = (ins LLM_Activation:$input, LLM_ProbTensor:$weights,
                       LLM_IndexTensor:$indices);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weights `,` $indices attr-dict `:` type($input) `,`
    type($weights) `,` type($indices) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Head and loss.
//===----------------------------------------------------------------------===//

def LLM_LMHeadOp : LLM_DiffOp<"lm_head", [Pure]> {
  let summary = "projection to vocabulary logits";
  let description = [{
    `logits = x W^T` with `weight` [vocab, hidden]. A tied head uses the same
    `llm.param` as `llm.embedding`.

    ```mlir
    %logits = llm.lm_head %x, %wte : tensor<?x?x768xbf16>, tensor<50257x768xbf16> -> tensor<?x?x50257xf32>
    ```

    Verified: the weight's hidden size matches the input's; the result is
    [batch, seq, vocab].
  }];
  let arguments = (ins LLM_Activation:$input, LLM_Weight:$weight);
  let results = (outs LLM_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->` type($result)
  }];
}

def LLM_CrossEntropyOp : LLM_DiffOp<"cross_entropy", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "mean token cross-entropy loss";
  let description = [{
    Mean over tokens of `-log softmax(logits)[label]`, skipping labels equal to
    `ignore_index` (default -100, as PyTorch).

    ```mlir
    %loss = llm.cross_entropy %logits, %labels : tensor<?x?x50257xf32>, tensor<?x?xi32> -> tensor<f32>
    ```

    With `vocab_axis` (tensor parallelism, `llm-partition-tp`), `logits` are
    this rank's part of the vocabulary (rank `i` of the axis holds entries
    `[i * V/t, (i + 1) * V/t)`) and the softmax spans the ranks (Megatron's
    vocabulary-parallel cross-entropy); the loss is the same on every rank.
    With `vocab_size` as well, the vocabulary was padded to a multiple of the
    axis (`llm-partition-tp`, as Megatron pads it): entries from `vocab_size`
    on are padding, left out of the softmax (their logits count as -inf), so
    that the loss is the unpadded model's.

    Verified: labels have the logits' leading dimensions; `vocab_size` is
    positive and comes with `vocab_axis`.
  }];
  let arguments = (ins LLM_Activation:$logits, LLM_IndexTensor:$labels,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       OptionalAttr<SymbolRefAttr>:$vocab_axis,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs LLM_Scalar:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->` type($loss)
  }];
}


//===----------------------------------------------------------------------===//
// Fusion.
//===----------------------------------------------------------------------===//

def LLM_FusedOp : LLM_Op<"fused", [SingleBlock, IsolatedFromAbove,
    SingleBlockImplicitTerminator<"FusedYieldOp">]> {
  let summary = "a chain of row-wise ops run as one kernel";
  let description = [{
    Made by `llm-fuse-elementwise`: elementwise and normalization ops that
    follow one another (a residual add and the norm after it) become one
    region, which the conversion to `exec` turns into one fused kernel
    (generated CUDA source; the CPU backend runs the body's reference
    kernels). Values internal to the region never reach memory; its
    results are the body values used after it.

    ```mlir
    %sum, %normed = llm.fused (%x, %branch, %w) : (tensor<2x32x64xf32>, tensor<2x32x64xf32>, tensor<64xf32>) -> (tensor<2x32x64xf32>, tensor<2x32x64xf32>) {
    ^bb0(%a: tensor<2x32x64xf32>, %b: tensor<2x32x64xf32>, %g: tensor<64xf32>):
      %s = llm.add %a, %b : tensor<2x32x64xf32>
      %n = llm.rms_norm %s, %g eps 1.000000e-05 : tensor<2x32x64xf32>, tensor<64xf32>
      llm.fused_yield %s, %n : tensor<2x32x64xf32>, tensor<2x32x64xf32>
    }
    ```

    Verified: the block's arguments have the inputs' types and the yield
    the results'.
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
}

def LLM_FusedYieldOp : LLM_Op<"fused_yield", [Pure, Terminator, ReturnLike,
                                             HasParent<"FusedOp">]> {
  let summary = "the results of an llm.fused region";
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

include "llmopt/Dialect/LLM/IR/LLMGradOps.td"
include "llmopt/Dialect/LLM/IR/LLMParallelOps.td"

#endif // LLMOPT_DIALECT_LLM_IR_LLMOPS_TD
