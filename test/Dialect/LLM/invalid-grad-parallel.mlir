// RUN: llm-opt %s -split-input-file -verify-diagnostics

// One case per verifier diagnostic of the gradient and optimizer ops
// (LLMGradOps.cpp) and the parallel ops (LLMParallelOps.cpp) that no other
// test checks; the forward ops' cases are in invalid.mlir. Each function is
// named after what it checks.

//===----------------------------------------------------------------------===//
// llm.concat
//===----------------------------------------------------------------------===//

// The custom syntax cannot spell an empty type list: the generic form.
func.func @concat_no_input() {
  // expected-error @+1 {{needs at least one input}}
  %c = "llm.concat"() : () -> tensor<?x?x8xf32>
  return
}

// -----

func.func @concat_input_not_rank_3(%a: tensor<?x?x8xf32>, %b: tensor<?x8xf32>) {
  // expected-error @+1 {{inputs must be [batch, seq, features] of one element type, got 'tensor<?x8xf32>'}}
  %c = llm.concat %a, %b : tensor<?x?x8xf32>, tensor<?x8xf32> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @concat_result_features(%a: tensor<?x?x8xf32>, %b: tensor<?x?x8xf32>) {
  // expected-error @+1 {{result must have 16 features, got 'tensor<?x?x12xf32>'}}
  %c = llm.concat %a, %b : tensor<?x?x8xf32>, tensor<?x?x8xf32> -> tensor<?x?x12xf32>
  return
}

//===----------------------------------------------------------------------===//
// Embedding gradients
//===----------------------------------------------------------------------===//

// -----

func.func @embedding_grad_hidden_mismatch(%t: tensor<?x?xi32>, %g: tensor<?x?x8xf32>) {
  // expected-error @+1 {{result must be [vocab, 8], got 'tensor<100x16xf32>'}}
  %d = llm.embedding_grad %t, %g : tensor<?x?xi32>, tensor<?x?x8xf32> -> tensor<100x16xf32>
  return
}

// -----

func.func @position_embedding_grad_not_rank_2(%g: tensor<?x?x8xf32>) {
  // expected-error @+1 {{result must be [positions, 8], got 'tensor<64x8x1xf32>'}}
  %d = llm.position_embedding_grad %g : tensor<?x?x8xf32> -> tensor<64x8x1xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.layer_norm_grad
//===----------------------------------------------------------------------===//

// -----

// `bias` without a bias gradient.
func.func @layer_norm_grad_bias_without_gradient(%g: tensor<?x?x8xf32>, %x: tensor<?x?x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{has a bias gradient exactly when `bias` is set}}
  %dx, %dw = llm.layer_norm_grad %g, %x, %w bias eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_grad_bias_gradient_type(%g: tensor<?x?x8xf32>, %x: tensor<?x?x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{bias gradient must have the weight's type}}
  %dx, %dw, %db = llm.layer_norm_grad %g, %x, %w bias eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32> -> tensor<8xbf16>
  return
}

//===----------------------------------------------------------------------===//
// llm.linear_grad
//===----------------------------------------------------------------------===//

// -----

func.func @linear_grad_weight_not_rank_2(%g: tensor<?x?x8xf32>, %x: tensor<?x?x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{weight must be rank 2, got 'tensor<8xf32>'}}
  %dx, %dw = llm.linear_grad %g, %x, %w : tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<8xf32>
  return
}

// -----

// The weight is [out, in] = [16, 8]: the input must have 8 features.
func.func @linear_grad_input_features(%g: tensor<?x?x16xf32>, %x: tensor<?x?x4xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{input must have 8 features}}
  %dx, %dw = llm.linear_grad %g, %x, %w : tensor<?x?x16xf32>, tensor<?x?x4xf32>, tensor<16x8xf32>
  return
}

// -----

// Transposed, the weight is [in, out] = [8, 16]: the gradient must have 16
// features.
func.func @linear_grad_gradient_features(%g: tensor<?x?x8xf32>, %x: tensor<?x?x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{gradient must have 16 features}}
  %dx, %dw = llm.linear_grad %g, %x, %w transposed : tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<8x16xf32>
  return
}

// -----

// A bias gradient without `bias`.
func.func @linear_grad_bias_gradient_without_bias(%g: tensor<?x?x16xf32>, %x: tensor<?x?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{has a bias gradient exactly when `bias` is set}}
  %dx, %dw, %db = llm.linear_grad %g, %x, %w : tensor<?x?x16xf32>, tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<16xf32>
  return
}

// -----

func.func @linear_grad_bias_gradient_size(%g: tensor<?x?x16xf32>, %x: tensor<?x?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{bias gradient must be a vector of 16 elements}}
  %dx, %dw, %db = llm.linear_grad %g, %x, %w bias : tensor<?x?x16xf32>, tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.attention_grad
//===----------------------------------------------------------------------===//

// -----

func.func @attention_grad_kv_heads_do_not_divide(%g: tensor<?x?x64xf32>, %q: tensor<?x?x64xf32>, %k: tensor<?x?x48xf32>) {
  // expected-error @+1 {{needs positive heads divisible by kv_heads}}
  %dq, %dk, %dv = llm.attention_grad %g, %q, %k, %k, %g heads 4 kv_heads 3 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x48xf32>
  return
}

// -----

// kv_heads * head_dim = 2 * 16 = 32, but k and v have 16 features.
func.func @attention_grad_kv_features(%g: tensor<?x?x64xf32>, %q: tensor<?x?x64xf32>, %k: tensor<?x?x16xf32>) {
  // expected-error @+1 {{q must have heads * head_dim and k, v kv_heads * head_dim features}}
  %dq, %dk, %dv = llm.attention_grad %g, %q, %k, %k, %g heads 4 kv_heads 2 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.lm_head_grad, llm.cross_entropy_grad
//===----------------------------------------------------------------------===//

// -----

// The gradient has 96 logits, the weight a vocabulary of 100.
func.func @lm_head_grad_vocab_mismatch(%g: tensor<?x?x96xf32>, %x: tensor<?x?x64xf32>, %w: tensor<100x64xf32>) {
  // expected-error @+1 {{gradient [.., vocab], input [.., hidden] and weight [vocab, hidden] disagree}}
  %dx, %dw = llm.lm_head_grad %g, %x, %w : tensor<?x?x96xf32>, tensor<?x?x64xf32>, tensor<100x64xf32>
  return
}

// -----

func.func @cross_entropy_grad_labels_not_rank_2(%l: tensor<?x?x100xf32>, %t: tensor<?x?x1xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{logits must be [batch, seq, vocab] and labels [batch, seq]}}
  %g = llm.cross_entropy_grad %l, %t, %d : tensor<?x?x100xf32>, tensor<?x?x1xi32>, tensor<f32>
  return
}

//===----------------------------------------------------------------------===//
// MoE gradients
//===----------------------------------------------------------------------===//

// -----

// The indices select 3 experts per token, the weights 2.
func.func @moe_router_grad_indices_shape(%dw: tensor<?x?x2xf32>, %x: tensor<?x?x32xf32>, %wg: tensor<4x32xf32>, %w: tensor<?x?x2xf32>, %i: tensor<?x?x3xi32>) {
  // expected-error @+1 {{weights, their gradient and the indices must share one [batch, seq, top_k] shape}}
  %dx, %dg = llm.moe_router_grad %dw, %x, %wg, %w, %i top_k 2 normalize : tensor<?x?x2xf32>, tensor<?x?x32xf32>, tensor<4x32xf32>, tensor<?x?x3xi32>
  return
}

// -----

func.func @moe_dispatch_grad_hidden_mismatch(%g: tensor<4x16x32xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{result must be [batch, seq, 32], got 'tensor<?x?x16xf32>'}}
  %dx = llm.moe_dispatch_grad %g, %i : tensor<4x16x32xf32>, tensor<?x?x2xi32> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @moe_experts_grad_missing_weight_gradient(%g: tensor<4x2x8xf32>, %d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{needs one weight gradient per weight}}
  %dx, %dw1 = llm.moe_experts_grad %g, %d, %w1, %w2 gelu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32> -> tensor<4x16x8xf32>
  return
}

// -----

func.func @moe_experts_grad_weight_gradient_type(%g: tensor<4x2x8xf32>, %d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{weight gradient type 'tensor<4x8x16xbf16>' does not match weight type 'tensor<4x8x16xf32>'}}
  %dx, %dw1, %dw2 = llm.moe_experts_grad %g, %d, %w1, %w2 gelu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32> -> tensor<4x16x8xf32>, tensor<4x8x16xbf16>
  return
}

//===----------------------------------------------------------------------===//
// llm.global_norm, llm.adamw
//===----------------------------------------------------------------------===//

// -----

// The generic form, as for llm.concat.
func.func @global_norm_no_gradient() {
  // expected-error @+1 {{needs at least one gradient}}
  %n = "llm.global_norm"() : () -> tensor<f32>
  return
}

// -----

// 0x7FF0000000000000 is +inf.
func.func @adamw_infinite_max_norm(%g: tensor<4xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{hyperparameters must be finite}}
  llm.adamw "w", %g, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 0x7FF0000000000000 : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_zero_lr(%g: tensor<4xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{lr must be positive, got 0.000000e+00}}
  llm.adamw "w", %g, %n lr 0.0 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_beta_one(%g: tensor<4xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{betas must be in [0, 1), got (9.000000e-01, 1.000000e+00)}}
  llm.adamw "w", %g, %n lr 1.0e-3 betas(0.9, 1.0) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_zero_eps(%g: tensor<4xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{eps must be positive, got 0.000000e+00}}
  llm.adamw "w", %g, %n lr 1.0e-3 betas(0.9, 0.95) eps 0.0 weight_decay 0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @adamw_negative_weight_decay(%g: tensor<4xf32>, %n: tensor<f32>) {
  // expected-error @+1 {{weight_decay and max_norm must not be negative}}
  llm.adamw "w", %g, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay -0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

//===----------------------------------------------------------------------===//
// Sequence parallelism
//===----------------------------------------------------------------------===//

// -----

// The chunk lacks the {seq_parts = t} encoding.
func.func @sp_gather_chunk_without_encoding(%c: tensor<2x8x64xf32>) {
  // expected-error @+1 {{expects a whole [b, s, h] tensor and its chunk [b, s/t, h] with encoding {seq_parts = t}, got 'tensor<2x16x64xf32>' and 'tensor<2x8x64xf32>'}}
  %w = llm.sp_gather %c axis @mesh::@tp : tensor<2x8x64xf32> -> tensor<2x16x64xf32>
  return
}

// -----

func.func @sp_split_sequence(%x: tensor<2x16x64xf32>) {
  // expected-error @+1 {{sequence 16 is not 2 chunks of 6}}
  %c = llm.sp_split %x axis @mesh::@tp : tensor<2x16x64xf32> -> tensor<2x6x64xf32, {seq_parts = 2 : i64}>
  return
}

//===----------------------------------------------------------------------===//
// KV-head replication
//===----------------------------------------------------------------------===//

// -----

func.func @tp_slice_parts(%k: tensor<?x?x32xf32>) {
  // expected-error @+1 {{expects 'tensor<?x?x32xf32>' to be 2 parts of 'tensor<?x?x8xf32>'}}
  %k1 = llm.tp_slice %k axis @mesh::@tp parts 2 : tensor<?x?x32xf32> -> tensor<?x?x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Context parallelism
//===----------------------------------------------------------------------===//

// -----

// The whole sequence lacks the {cp_parts = t} encoding.
func.func @cp_gather_whole_without_encoding(%k: tensor<2x8x32xf32>) {
  // expected-error @+1 {{expects a local [b, s/t, h] tensor and the whole sequence [b, s, h] with encoding {cp_parts = t}, got 'tensor<2x8x32xf32>' and 'tensor<2x16x32xf32>'}}
  %w = llm.cp_gather %k axis @mesh::@cp : tensor<2x8x32xf32> -> tensor<2x16x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// Pipeline parallelism, ZeRO-3
//===----------------------------------------------------------------------===//

// -----

func.func @pp_transfer_to_itself(%y: tensor<2x32x64xf32>) {
  // expected-error @+1 {{sends stage 1 to itself}}
  %y1 = llm.pp_transfer %y from 1 to 1 : tensor<2x32x64xf32>
  return
}

// -----

// A function argument is no llm.param.
func.func @zero_gather_not_a_param(%w: tensor<64x64xf32>) {
  // expected-error @+1 {{gathers an llm.param}}
  %g = llm.zero_gather %w axis @mesh::@dp : tensor<64x64xf32>
  return
}
