// RUN: llm-opt %s -split-input-file -verify-diagnostics

// One case per verifier diagnostic of the llm dialect (LLMOps.cpp), plus a few
// ODS-level constraints. Each function is named after what it checks.

//===----------------------------------------------------------------------===//
// llm.param
//===----------------------------------------------------------------------===//

func.func @param_empty_name() {
  // expected-error @+1 {{parameter name must not be empty}}
  %w = llm.param "" zeros : tensor<4xf32>
  return
}

// -----

func.func @param_zero_dimension() {
  // expected-error @+1 {{parameter 'w' must have positive dimensions, got 'tensor<0x4xf32>'}}
  %w = llm.param "w" zeros : tensor<0x4xf32>
  return
}

// -----

func.func @param_element_count_overflows() {
  // expected-error @+1 {{has more than 2^63 elements}}
  %w = llm.param "w" zeros : tensor<4294967296x4294967296xf32>
  return
}

// -----

func.func @param_normal_without_std() {
  // expected-error @+1 {{normal initialization of 'w' needs a standard deviation}}
  %w = llm.param "w" normal : tensor<4xf32>
  return
}

// -----

func.func @param_negative_std() {
  // expected-error @+1 {{standard deviation of 'w' must be positive, got -5.000000e-01}}
  %w = llm.param "w" normal(-0.5) : tensor<4xf32>
  return
}

// -----

func.func @param_zero_std() {
  // expected-error @+1 {{standard deviation of 'w' must be positive, got 0.000000e+00}}
  %w = llm.param "w" normal(0.0) : tensor<4xf32>
  return
}

// -----

// An infinite std would reach plan.json as `inf`, which is not JSON.
func.func @param_infinite_std() {
  // expected-error @+1 {{standard deviation of 'w' must be finite, got INF}}
  %w = llm.param "w" normal(0x7FF0000000000000) : tensor<4xf32>
  return
}

// -----

func.func @param_std_on_non_normal_init() {
  // expected-error @+1 {{only normal initialization takes a standard deviation}}
  %w = llm.param "w" ones(0.02) : tensor<4xf32>
  return
}

// -----

func.func @param_expert_stack_rank_1() {
  // expected-error @+1 {{per-expert parameter 'experts.*.w1.weight' must have rank >= 2}}
  %w = llm.param "experts.*.w1.weight" normal(0.02) : tensor<8xf32>
  return
}

// -----

// ODS: parameters are statically shaped.
func.func @param_dynamic_shape() {
  // expected-error @+1 {{result #0 must be statically shaped tensor}}
  %w = llm.param "w" zeros : tensor<?x4xf32>
  return
}

// -----

// ODS: parameters are floating point.
func.func @param_integer_element_type() {
  // expected-error @+1 {{result #0 must be statically shaped tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %w = llm.param "w" zeros : tensor<4xi32>
  return
}

//===----------------------------------------------------------------------===//
// llm.layer / llm.yield
//===----------------------------------------------------------------------===//

// -----

func.func @layer_body_without_argument(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{body must take one argument of the input type 'tensor<?x?x8xf32>'}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    llm.yield %x : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @layer_body_argument_type_mismatch(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{body must take one argument of the input type 'tensor<?x?x8xf32>'}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xbf16>):
    llm.yield %x : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @layer_body_two_arguments(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{body must take one argument of the input type}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%a: tensor<?x?x8xf32>, %b: tensor<?x?x8xf32>):
    llm.yield %a : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

// The body's terminator is not llm.yield (the layer verifies before its body,
// so func.return's own parent check is never reached).
func.func @layer_body_not_ending_with_yield(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{body must end with llm.yield}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    func.return %in : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

// ODS (SingleBlock): the body is not empty.
func.func @layer_empty_body(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{expects a non-empty block}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
  }
  return %y : tensor<?x?x8xf32>
}

// -----

// ODS (SizedRegion<1>): the body has exactly one block.
func.func @layer_no_block(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{region #0 ('body') failed to verify constraint: region with 1 blocks}}
  %y = "llm.layer"(%x) <{index = 0 : i64}> ({}) : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @yield_type_mismatch(%x: tensor<?x?x8xf32>, %z: tensor<2x?x8xf32>) -> tensor<?x?x8xf32> {
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    // expected-error @+1 {{yields 'tensor<2x?x8xf32>' but the layer's type is 'tensor<?x?x8xf32>'}}
    llm.yield %z : tensor<2x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

// ODS (HasParent): llm.yield only terminates an llm.layer.
func.func @yield_outside_layer(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{expects parent op 'llm.layer'}}
  llm.yield %x : tensor<?x?x8xf32>
}

//===----------------------------------------------------------------------===//
// llm.embedding
//===----------------------------------------------------------------------===//

// -----

func.func @embedding_tokens_not_rank_2(%t: tensor<?xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{tokens must be rank 2 [batch, seq], got 'tensor<?xi32>'}}
  %e = llm.embedding %t, %w : tensor<?xi32>, tensor<100x8xf32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @embedding_table_not_rank_2(%t: tensor<?x?xi32>, %w: tensor<100x8x2xf32>) {
  // expected-error @+1 {{table must be rank 2 [vocab, hidden], got 'tensor<100x8x2xf32>'}}
  %e = llm.embedding %t, %w : tensor<?x?xi32>, tensor<100x8x2xf32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @embedding_result_not_rank_3(%t: tensor<?x?xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result must be rank 3 [batch, seq, features], got rank 2}}
  %e = llm.embedding %t, %w : tensor<?x?xi32>, tensor<100x8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @embedding_result_dynamic_features(%t: tensor<?x?xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result must have a static feature dimension}}
  %e = llm.embedding %t, %w : tensor<?x?xi32>, tensor<100x8xf32> -> tensor<?x?x?xf32>
  return
}

// -----

func.func @embedding_hidden_size_mismatch(%t: tensor<?x?xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result hidden size (16) does not match the table's (8)}}
  %e = llm.embedding %t, %w : tensor<?x?xi32>, tensor<100x8xf32> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @embedding_result_batch_mismatch(%t: tensor<2x?xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result dimension 0 (3) does not match the tokens' (2)}}
  %e = llm.embedding %t, %w : tensor<2x?xi32>, tensor<100x8xf32> -> tensor<3x?x8xf32>
  return
}

// -----

func.func @embedding_result_seq_mismatch(%t: tensor<?x16xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result dimension 1 (32) does not match the tokens' (16)}}
  %e = llm.embedding %t, %w : tensor<?x16xi32>, tensor<100x8xf32> -> tensor<?x32x8xf32>
  return
}

// -----

func.func @embedding_element_type_mismatch(%t: tensor<?x?xi32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{element type of result ('bf16') does not match that of table ('f32')}}
  %e = llm.embedding %t, %w : tensor<?x?xi32>, tensor<100x8xf32> -> tensor<?x?x8xbf16>
  return
}

// -----

// ODS: token ids are integers.
func.func @embedding_float_tokens(%t: tensor<?x?xf32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %e = llm.embedding %t, %w : tensor<?x?xf32>, tensor<100x8xf32> -> tensor<?x?x8xf32>
  return
}

// -----

// ODS: weights are statically shaped.
func.func @embedding_dynamic_table(%t: tensor<?x?xi32>, %w: tensor<?x8xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor}}
  %e = llm.embedding %t, %w : tensor<?x?xi32>, tensor<?x8xf32> -> tensor<?x?x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.position_embedding
//===----------------------------------------------------------------------===//

// -----

func.func @position_embedding_input_not_rank_3(%x: tensor<?x8xf32>, %w: tensor<64x8xf32>) {
  // expected-error @+1 {{input must be rank 3 [batch, seq, features], got rank 2}}
  %y = llm.position_embedding %x, %w : tensor<?x8xf32>, tensor<64x8xf32>
  return
}

// -----

func.func @position_embedding_table_hidden_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<64x16xf32>) {
  // expected-error @+1 {{table must be [positions, 8], got 'tensor<64x16xf32>'}}
  %y = llm.position_embedding %x, %w : tensor<?x?x8xf32>, tensor<64x16xf32>
  return
}

// -----

func.func @position_embedding_table_not_rank_2(%x: tensor<?x?x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{table must be [positions, 8], got 'tensor<8xf32>'}}
  %y = llm.position_embedding %x, %w : tensor<?x?x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @position_embedding_sequence_too_long(%x: tensor<?x128x8xf32>, %w: tensor<64x8xf32>) {
  // expected-error @+1 {{sequence length 128 exceeds the table's 64 positions}}
  %y = llm.position_embedding %x, %w : tensor<?x128x8xf32>, tensor<64x8xf32>
  return
}

// -----

func.func @position_embedding_element_type_mismatch(%x: tensor<?x?x8xbf16>, %w: tensor<64x8xf32>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of table ('f32')}}
  %y = llm.position_embedding %x, %w : tensor<?x?x8xbf16>, tensor<64x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.rotary
//===----------------------------------------------------------------------===//

// -----

func.func @rotary_q_not_rank_3(%q: tensor<?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{q must be rank 3 [batch, seq, features], got rank 2}}
  %a, %b = llm.rotary %q, %k head_dim 16 theta 1.0e+04 : tensor<?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @rotary_k_dynamic_features(%q: tensor<?x?x64xf32>, %k: tensor<?x?x?xf32>) {
  // expected-error @+1 {{k must have a static feature dimension}}
  %a, %b = llm.rotary %q, %k head_dim 16 theta 1.0e+04 : tensor<?x?x64xf32>, tensor<?x?x?xf32>
  return
}

// -----

func.func @rotary_sequence_mismatch(%q: tensor<?x16x64xf32>, %k: tensor<?x32x64xf32>) {
  // expected-error @+1 {{sequence dimension of q (16) does not match that of k (32)}}
  %a, %b = llm.rotary %q, %k head_dim 16 theta 1.0e+04 : tensor<?x16x64xf32>, tensor<?x32x64xf32>
  return
}

// -----

func.func @rotary_odd_head_dim(%q: tensor<?x?x63xf32>, %k: tensor<?x?x63xf32>) {
  // expected-error @+1 {{head_dim must be positive and even, got 21}}
  %a, %b = llm.rotary %q, %k head_dim 21 theta 1.0e+04 : tensor<?x?x63xf32>, tensor<?x?x63xf32>
  return
}

// -----

func.func @rotary_negative_head_dim(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{head_dim must be positive and even, got -16}}
  %a, %b = llm.rotary %q, %k head_dim -16 theta 1.0e+04 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @rotary_head_dim_not_dividing_q(%q: tensor<?x?x72xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{head_dim (16) does not divide q's 72 features}}
  %a, %b = llm.rotary %q, %k head_dim 16 theta 1.0e+04 : tensor<?x?x72xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @rotary_head_dim_not_dividing_k(%q: tensor<?x?x64xf32>, %k: tensor<?x?x40xf32>) {
  // expected-error @+1 {{head_dim (16) does not divide k's 40 features}}
  %a, %b = llm.rotary %q, %k head_dim 16 theta 1.0e+04 : tensor<?x?x64xf32>, tensor<?x?x40xf32>
  return
}

// -----

func.func @rotary_non_positive_theta(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{theta must be positive and finite, got 0.000000e+00}}
  %a, %b = llm.rotary %q, %k head_dim 16 theta 0.0 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.layer_norm / llm.rms_norm
//===----------------------------------------------------------------------===//

// -----

func.func @layer_norm_input_not_rank_3(%x: tensor<?x?x?x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{input must be rank 3 [batch, seq, features], got rank 4}}
  %y = llm.layer_norm %x, %g eps 1.0e-05 : tensor<?x?x?x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_weight_size_mismatch(%x: tensor<?x?x8xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{weight must be a vector of 8 elements, got 'tensor<16xf32>'}}
  %y = llm.layer_norm %x, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<16xf32>
  return
}

// -----

func.func @layer_norm_bias_not_vector(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>, %b: tensor<1x8xf32>) {
  // expected-error @+1 {{bias must be a vector of 8 elements, got 'tensor<1x8xf32>'}}
  %y = llm.layer_norm %x, %g, %b eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>, tensor<1x8xf32>
  return
}

// -----

func.func @layer_norm_non_positive_eps(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{eps must be positive and finite, got 0.000000e+00}}
  %y = llm.layer_norm %x, %g eps 0.0 : tensor<?x?x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_input_dynamic_features(%x: tensor<?x?x?xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{input must have a static feature dimension}}
  %y = llm.rms_norm %x, %g eps 1.0e-05 : tensor<?x?x?xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_weight_size_mismatch(%x: tensor<?x?x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{weight must be a vector of 8 elements, got 'tensor<4xf32>'}}
  %y = llm.rms_norm %x, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @rms_norm_negative_eps(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{eps must be positive and finite, got -1.000000e-05}}
  %y = llm.rms_norm %x, %g eps -1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.linear
//===----------------------------------------------------------------------===//

// -----

func.func @linear_input_not_rank_3(%x: tensor<?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{input must be rank 3 [batch, seq, features], got rank 2}}
  %y = llm.linear %x, %w : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @linear_result_dynamic_features(%x: tensor<?x?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{result must have a static feature dimension}}
  %y = llm.linear %x, %w : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x?xf32>
  return
}

// -----

func.func @linear_batch_mismatch(%x: tensor<2x?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{batch dimension of input (2) does not match that of result (4)}}
  %y = llm.linear %x, %w : tensor<2x?x8xf32>, tensor<16x8xf32> -> tensor<4x?x16xf32>
  return
}

// -----

func.func @linear_weight_not_rank_2(%x: tensor<?x?x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{weight must be rank 2, got 'tensor<8xf32>'}}
  %y = llm.linear %x, %w : tensor<?x?x8xf32>, tensor<8xf32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @linear_in_features_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{weight 'tensor<16x4xf32>' [out, in] expects 4 input features, but the input has 8}}
  %y = llm.linear %x, %w : tensor<?x?x8xf32>, tensor<16x4xf32> -> tensor<?x?x16xf32>
  return
}

// -----

// A [out, in] weight used without `transposed` where [in, out] was meant.
func.func @linear_transposed_in_features_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{weight 'tensor<16x8xf32>' [in, out] expects 16 input features, but the input has 8}}
  %y = llm.linear %x, %w transposed : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @linear_out_features_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{result has 32 features, but the weight gives 16}}
  %y = llm.linear %x, %w : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x32xf32>
  return
}

// -----

func.func @linear_bias_size_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{bias must be a vector of 16 elements, got 'tensor<8xf32>'}}
  %y = llm.linear %x, %w, %b : tensor<?x?x8xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @linear_weight_element_type_mismatch(%x: tensor<?x?x8xbf16>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of weight ('f32')}}
  %y = llm.linear %x, %w : tensor<?x?x8xbf16>, tensor<16x8xf32> -> tensor<?x?x16xbf16>
  return
}

// -----

func.func @linear_result_element_type_mismatch(%x: tensor<?x?x8xbf16>, %w: tensor<16x8xbf16>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of result ('f32')}}
  %y = llm.linear %x, %w : tensor<?x?x8xbf16>, tensor<16x8xbf16> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @linear_bad_gemm_type(%x: tensor<?x?x8xbf16>, %w: tensor<16x8xbf16>) {
  // expected-error @+1 {{gemm input type must be f8E4M3FN, f8E5M2, bf16 or f16, got 'i8'}}
  %y = llm.linear %x, %w gemm i8 : tensor<?x?x8xbf16>, tensor<16x8xbf16> -> tensor<?x?x16xbf16>
  return
}

// -----

// ODS: weights are statically shaped.
func.func @linear_dynamic_weight(%x: tensor<?x?x8xf32>, %w: tensor<?x8xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<?x8xf32>'}}
  %y = llm.linear %x, %w : tensor<?x?x8xf32>, tensor<?x8xf32> -> tensor<?x?x16xf32>
  return
}

// -----

// ODS: activations are floating point.
func.func @linear_integer_input(%x: tensor<?x?x8xi32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<?x?x8xi32>'}}
  %y = llm.linear %x, %w : tensor<?x?x8xi32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.split
//===----------------------------------------------------------------------===//

// -----

func.func @split_input_dynamic_features(%x: tensor<?x?x?xf32>) {
  // expected-error @+1 {{input must have a static feature dimension}}
  %a, %b = llm.split %x [4, 4] : tensor<?x?x?xf32> -> tensor<?x?x4xf32>, tensor<?x?x4xf32>
  return
}

// -----

func.func @split_sizes_results_count_mismatch(%x: tensor<?x?x12xf32>) {
  // expected-error @+1 {{has 3 sizes but 2 results}}
  %a, %b = llm.split %x [4, 4, 4] : tensor<?x?x12xf32> -> tensor<?x?x4xf32>, tensor<?x?x4xf32>
  return
}

// -----

func.func @split_non_positive_size(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{size 1 must be positive, got 0}}
  %a, %b = llm.split %x [8, 0] : tensor<?x?x8xf32> -> tensor<?x?x8xf32>, tensor<?x?x0xf32>
  return
}

// -----

func.func @split_result_not_rank_3(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{result must be rank 3 [batch, seq, features], got rank 2}}
  %a, %b = llm.split %x [4, 4] : tensor<?x?x8xf32> -> tensor<?x?x4xf32>, tensor<?x4xf32>
  return
}

// -----

func.func @split_result_sequence_mismatch(%x: tensor<?x16x8xf32>) {
  // expected-error @+1 {{sequence dimension of input (16) does not match that of result (32)}}
  %a, %b = llm.split %x [4, 4] : tensor<?x16x8xf32> -> tensor<?x16x4xf32>, tensor<?x32x4xf32>
  return
}

// -----

func.func @split_result_features_mismatch(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{result 0 has 6 features, expected 4}}
  %a, %b = llm.split %x [4, 4] : tensor<?x?x8xf32> -> tensor<?x?x6xf32>, tensor<?x?x4xf32>
  return
}

// -----

func.func @split_result_element_type_mismatch(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{element type of input ('f32') does not match that of result ('bf16')}}
  %a, %b = llm.split %x [4, 4] : tensor<?x?x8xf32> -> tensor<?x?x4xf32>, tensor<?x?x4xbf16>
  return
}

// -----

func.func @split_sizes_do_not_add_up(%x: tensor<?x?x12xf32>) {
  // expected-error @+1 {{sizes add up to 8 but the input has 12 features}}
  %a, %b = llm.split %x [4, 4] : tensor<?x?x12xf32> -> tensor<?x?x4xf32>, tensor<?x?x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.attention
//===----------------------------------------------------------------------===//

// -----

func.func @attention_q_not_rank_3(%q: tensor<?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{q must be rank 3 [batch, seq, features], got rank 2}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim 16 scale 0.25 causal : tensor<?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @attention_k_dynamic_features(%q: tensor<?x?x64xf32>, %k: tensor<?x?x?xf32>) {
  // expected-error @+1 {{k must have a static feature dimension}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x?xf32>
  return
}

// -----

func.func @attention_batch_mismatch(%q: tensor<2x?x64xf32>, %k: tensor<3x?x64xf32>) {
  // expected-error @+1 {{batch dimension of q (2) does not match that of k (3)}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim 16 scale 0.25 causal : tensor<2x?x64xf32>, tensor<3x?x64xf32>
  return
}

// -----

func.func @attention_zero_heads(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{heads (0), kv_heads (4) and head_dim (16) must be positive}}
  %o = llm.attention %q, %k, %k heads 0 kv_heads 4 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @attention_negative_head_dim(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{heads (4), kv_heads (4) and head_dim (-16) must be positive}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim -16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @attention_kv_heads_not_dividing_heads(%q: tensor<?x?x64xf32>, %k: tensor<?x?x48xf32>) {
  // expected-error @+1 {{num_kv_heads (3) does not divide num_heads (4)}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 3 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x48xf32>
  return
}

// -----

func.func @attention_q_features_mismatch(%q: tensor<?x?x64xf32>, %k: tensor<?x?x32xf32>) {
  // expected-error @+1 {{q has 64 features, expected heads * head_dim = 8 * 16 = 128}}
  %o = llm.attention %q, %k, %k heads 8 kv_heads 2 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x32xf32>
  return
}

// -----

func.func @attention_kv_features_mismatch(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{k and v have 64 features, expected kv_heads * head_dim = 2 * 16 = 32}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 2 head_dim 16 scale 0.25 causal : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @attention_non_positive_scale(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{scale must be positive and finite, got -2.500000e-01}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim 16 scale -0.25 causal : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @attention_non_positive_window(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{window must be positive, got 0}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim 16 scale 0.25 causal window 0 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

// ODS (AllTypesMatch): k and v have the same type.
func.func @attention_k_v_type_mismatch(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xbf16>) {
  // expected-error @+1 {{failed to verify that all of {k, v} have same type}}
  %o = "llm.attention"(%q, %k, %v) <{num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64}> : (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xbf16>) -> tensor<?x?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.gelu / llm.swiglu / llm.add
//===----------------------------------------------------------------------===//

// -----

func.func @gelu_input_not_rank_3(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{input must be rank 3 [batch, seq, features], got rank 2}}
  %y = llm.gelu %x tanh : tensor<?x8xf32>
  return
}

// -----

func.func @swiglu_gate_dynamic_features(%x: tensor<?x?x?xf32>) {
  // expected-error @+1 {{gate must have a static feature dimension}}
  %y = llm.swiglu %x, %x : tensor<?x?x?xf32>
  return
}

// -----

// Activations are [batch, seq, features]; only static tensors (gradients of
// weights being summed) may have another rank.
func.func @add_dynamic_lhs_not_rank_3(%x: tensor<?xf32>) {
  // expected-error @+1 {{lhs must be rank 3 [batch, seq, features], got rank 1}}
  %y = llm.add %x, %x : tensor<?xf32>
  return
}

// -----

// ODS (AllTypesMatch): both sides of a residual add have the same type.
func.func @add_operand_type_mismatch(%a: tensor<?x?x8xf32>, %b: tensor<?x?x8xbf16>) {
  // expected-error @+1 {{failed to verify that all of {lhs, rhs, result} have same type}}
  %y = "llm.add"(%a, %b) : (tensor<?x?x8xf32>, tensor<?x?x8xbf16>) -> tensor<?x?x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.moe_router
//===----------------------------------------------------------------------===//

// -----

func.func @moe_router_input_not_rank_3(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{input must be rank 3 [batch, seq, features], got rank 2}}
  %p, %i = llm.moe_router %x, %g top_k 2 : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
  return
}

// -----

func.func @moe_router_gate_hidden_mismatch(%x: tensor<?x?x8xf32>, %g: tensor<4x16xf32>) {
  // expected-error @+1 {{gate must be [experts, 8], got 'tensor<4x16xf32>'}}
  %p, %i = llm.moe_router %x, %g top_k 2 : tensor<?x?x8xf32>, tensor<4x16xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
  return
}

// -----

func.func @moe_router_zero_top_k(%x: tensor<?x?x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{top_k must be at least 1, got 0}}
  %p, %i = llm.moe_router %x, %g top_k 0 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x0xf32>, tensor<?x?x0xi32>
  return
}

// -----

func.func @moe_router_top_k_exceeds_experts(%x: tensor<?x?x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{top_k (5) exceeds the number of experts (4)}}
  %p, %i = llm.moe_router %x, %g top_k 5 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x5xf32>, tensor<?x?x5xi32>
  return
}

// -----

func.func @moe_router_result_top_k_mismatch(%x: tensor<?x?x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{routing results must be [batch, seq, top_k = 2], got 'tensor<?x?x3xi32>'}}
  %p, %i = llm.moe_router %x, %g top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x3xi32>
  return
}

// -----

// A leading-dimension mismatch is reported once.
func.func @moe_router_result_batch_mismatch(%x: tensor<2x?x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{batch dimension of input (2) does not match that of routing result (3)}}
  %p, %i = llm.moe_router %x, %g top_k 2 : tensor<2x?x8xf32>, tensor<4x8xf32> -> tensor<3x?x2xf32>, tensor<2x?x2xi32>
  return
}

// -----

// ODS: expert indices are integers.
func.func @moe_router_float_indices(%x: tensor<?x?x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{result #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %p, %i = llm.moe_router %x, %g top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.moe_dispatch
//===----------------------------------------------------------------------===//

// -----

func.func @moe_dispatch_input_dynamic_features(%x: tensor<?x?x?xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{input must have a static feature dimension}}
  %d = llm.moe_dispatch %x, %i capacity 1.0 : tensor<?x?x?xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
  return
}

// -----

func.func @moe_dispatch_indices_not_rank_3(%x: tensor<?x?x8xf32>, %i: tensor<?x?xi32>) {
  // expected-error @+1 {{indices must be [batch, seq, top_k], got 'tensor<?x?xi32>'}}
  %d = llm.moe_dispatch %x, %i capacity 1.0 : tensor<?x?x8xf32>, tensor<?x?xi32> -> tensor<4x?x8xf32>
  return
}

// -----

// A leading-dimension mismatch is reported once, as for llm.moe_router.
func.func @moe_dispatch_indices_sequence_mismatch(%x: tensor<?x16x8xf32>, %i: tensor<?x8x2xi32>) {
  // expected-error @+1 {{sequence dimension of input (16) does not match that of indices (8)}}
  %d = llm.moe_dispatch %x, %i capacity 1.0 : tensor<?x16x8xf32>, tensor<?x8x2xi32> -> tensor<4x?x8xf32>
  return
}

// -----

func.func @moe_dispatch_capacity_below_one(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{capacity factor must be 0 (dropless) or a finite value of at least 1, got 5.000000e-01}}
  %d = llm.moe_dispatch %x, %i capacity 0.5 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
  return
}

// -----

func.func @moe_dispatch_negative_capacity(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{capacity factor must be 0 (dropless) or a finite value of at least 1, got -1.000000e+00}}
  %d = llm.moe_dispatch %x, %i capacity -1.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
  return
}

// -----

func.func @moe_dispatch_dynamic_expert_count(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{result must be [experts, capacity, 8] with a static expert count, got 'tensor<?x?x8xf32>'}}
  %d = llm.moe_dispatch %x, %i capacity 1.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @moe_dispatch_result_hidden_mismatch(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{result must be [experts, capacity, 8] with a static expert count, got 'tensor<4x?x16xf32>'}}
  %d = llm.moe_dispatch %x, %i capacity 1.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x16xf32>
  return
}

// -----

func.func @moe_dispatch_element_type_mismatch(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{element type of input ('f32') does not match that of result ('bf16')}}
  %d = llm.moe_dispatch %x, %i capacity 1.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xbf16>
  return
}

//===----------------------------------------------------------------------===//
// llm.moe_experts
//===----------------------------------------------------------------------===//

// -----

func.func @moe_experts_dynamic_expert_count(%d: tensor<?x?x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{input must be [experts, capacity, hidden] with static experts and hidden, got 'tensor<?x?x8xf32>'}}
  %y = llm.moe_experts %d, %w1, %w2 gelu : tensor<?x?x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_bf16_gemm(%d: tensor<4x?x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expert GEMMs take f8E4M3FN inputs (gradients E5M2), got 'bf16'}}
  %y = llm.moe_experts %d, %w1, %w2 gelu gemm bf16 : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_grad_e5m2_gemm(%g: tensor<4x2x8xf32>, %d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expert GEMMs take f8E4M3FN inputs (gradients E5M2), got 'f8E5M2'}}
  %dx, %dw1, %dw2 = llm.moe_experts_grad %g, %d, %w1, %w2 gelu gemm f8E5M2 : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32> -> tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_swiglu_with_two_weights(%d: tensor<4x?x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{swiglu experts take 3 weights, got 2}}
  %y = llm.moe_experts %d, %w1, %w2 swiglu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_gelu_with_three_weights(%d: tensor<4x?x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{gelu experts take 2 weights, got 3}}
  %y = llm.moe_experts %d, %w1, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_up_weight_ffn_mismatch(%d: tensor<4x?x8xf32>, %w1: tensor<4x16x8xf32>, %w3: tensor<4x32x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{weight 1 must be [4, 16, 8] (experts, ffn, hidden), got 'tensor<4x32x8xf32>'}}
  %y = llm.moe_experts %d, %w1, %w3, %w2 swiglu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x32x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_down_weight_not_transposed(%d: tensor<4x?x8xf32>, %w1: tensor<4x16x8xf32>) {
  // expected-error @+1 {{weight 1 must be [4, 8, 16] (experts, hidden, ffn), got 'tensor<4x16x8xf32>'}}
  %y = llm.moe_experts %d, %w1, %w1 gelu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>
  return
}

// -----

func.func @moe_experts_weight_expert_count_mismatch(%d: tensor<4x?x8xf32>, %w1: tensor<2x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{weight 0 must be [4, 16, 8] (experts, ffn, hidden), got 'tensor<2x16x8xf32>'}}
  %y = llm.moe_experts %d, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<2x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

func.func @moe_experts_weight_element_type_mismatch(%d: tensor<4x?x8xf32>, %w1: tensor<4x16x8xbf16>, %w2: tensor<4x8x16xbf16>) {
  // expected-error @+1 {{element type of input ('f32') does not match that of weight ('bf16')}}
  %y = llm.moe_experts %d, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>
  return
}

//===----------------------------------------------------------------------===//
// llm.moe_combine
//===----------------------------------------------------------------------===//

// -----

func.func @moe_combine_input_dynamic_hidden(%e: tensor<4x?x?xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{input must be [experts, capacity, hidden], got 'tensor<4x?x?xf32>'}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x?xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @moe_combine_weights_indices_shape_mismatch(%e: tensor<4x?x8xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x3xi32>) {
  // expected-error @+1 {{weights 'tensor<?x?x2xf32>' and indices 'tensor<?x?x3xi32>' must both be [batch, seq, top_k]}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x3xi32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @moe_combine_weights_not_rank_3(%e: tensor<4x?x8xf32>, %p: tensor<?x2xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{must both be [batch, seq, top_k]}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x2xf32>, tensor<?x2xi32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @moe_combine_result_not_rank_3(%e: tensor<4x?x8xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{result must be rank 3 [batch, seq, features], got rank 2}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x8xf32>
  return
}

// -----

func.func @moe_combine_result_batch_mismatch(%e: tensor<4x?x8xf32>, %p: tensor<2x?x2xf32>, %i: tensor<2x?x2xi32>) {
  // expected-error @+1 {{batch dimension of result (3) does not match that of weights (2)}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<2x?x2xf32>, tensor<2x?x2xi32> -> tensor<3x?x8xf32>
  return
}

// -----

func.func @moe_combine_hidden_mismatch(%e: tensor<4x?x8xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{result hidden size (16) does not match the experts' (8)}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x16xf32>
  return
}

// -----

func.func @moe_combine_element_type_mismatch(%e: tensor<4x?x8xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{element type of input ('f32') does not match that of result ('f16')}}
  %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf16>
  return
}

//===----------------------------------------------------------------------===//
// llm.lm_head
//===----------------------------------------------------------------------===//

// -----

func.func @lm_head_input_not_rank_3(%x: tensor<?x8xf32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{input must be rank 3 [batch, seq, features], got rank 2}}
  %l = llm.lm_head %x, %w : tensor<?x8xf32>, tensor<100x8xf32> -> tensor<?x?x100xf32>
  return
}

// -----

func.func @lm_head_result_dynamic_vocab(%x: tensor<?x?x8xf32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result must have a static feature dimension}}
  %l = llm.lm_head %x, %w : tensor<?x?x8xf32>, tensor<100x8xf32> -> tensor<?x?x?xf32>
  return
}

// -----

func.func @lm_head_sequence_mismatch(%x: tensor<?x16x8xf32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{sequence dimension of input (16) does not match that of result (15)}}
  %l = llm.lm_head %x, %w : tensor<?x16x8xf32>, tensor<100x8xf32> -> tensor<?x15x100xf32>
  return
}

// -----

func.func @lm_head_weight_hidden_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<100x16xf32>) {
  // expected-error @+1 {{weight must be [vocab, 8], got 'tensor<100x16xf32>'}}
  %l = llm.lm_head %x, %w : tensor<?x?x8xf32>, tensor<100x16xf32> -> tensor<?x?x100xf32>
  return
}

// -----

func.func @lm_head_vocab_mismatch(%x: tensor<?x?x8xf32>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{result has 128 logits, but the vocabulary has 100}}
  %l = llm.lm_head %x, %w : tensor<?x?x8xf32>, tensor<100x8xf32> -> tensor<?x?x128xf32>
  return
}

// -----

func.func @lm_head_element_type_mismatch(%x: tensor<?x?x8xbf16>, %w: tensor<100x8xf32>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of weight ('f32')}}
  %l = llm.lm_head %x, %w : tensor<?x?x8xbf16>, tensor<100x8xf32> -> tensor<?x?x100xf32>
  return
}

//===----------------------------------------------------------------------===//
// llm.cross_entropy
//===----------------------------------------------------------------------===//

// -----

func.func @cross_entropy_logits_not_rank_3(%l: tensor<?x100xf32>, %t: tensor<?x?xi32>) {
  // expected-error @+1 {{logits must be rank 3 [batch, seq, features], got rank 2}}
  %loss = llm.cross_entropy %l, %t : tensor<?x100xf32>, tensor<?x?xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_labels_not_rank_2(%l: tensor<?x?x100xf32>, %t: tensor<?x?x1xi32>) {
  // expected-error @+1 {{labels must be rank 2 [batch, seq], got 'tensor<?x?x1xi32>'}}
  %loss = llm.cross_entropy %l, %t : tensor<?x?x100xf32>, tensor<?x?x1xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_labels_leading_dims_mismatch(%l: tensor<?x16x100xf32>, %t: tensor<?x8xi32>) {
  // expected-error @+1 {{labels 'tensor<?x8xi32>' do not match the logits' leading dimensions 'tensor<?x16x100xf32>'}}
  %loss = llm.cross_entropy %l, %t : tensor<?x16x100xf32>, tensor<?x8xi32> -> tensor<f32>
  return
}

// -----

// A padded vocabulary's size marks a vocabulary-parallel loss.
func.func @cross_entropy_vocab_size_without_axis(%l: tensor<?x?x129xf32>, %t: tensor<?x?xi32>) {
  // expected-error @+1 {{vocab_size 257 needs vocab_axis (it marks a padded vocabulary-parallel loss)}}
  %loss = llm.cross_entropy %l, %t {vocab_size = 257 : i64} : tensor<?x?x129xf32>, tensor<?x?xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_vocab_size_not_positive(%l: tensor<?x?x129xf32>, %t: tensor<?x?xi32>) {
  // expected-error @+1 {{vocab_size must be positive, got 0}}
  %loss = llm.cross_entropy %l, %t {vocab_axis = @mesh::@tp, vocab_size = 0 : i64} : tensor<?x?x129xf32>, tensor<?x?xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_grad_vocab_size_without_axis(%l: tensor<?x?x129xf32>, %t: tensor<?x?xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{vocab_size 257 needs vocab_axis}}
  %g = llm.cross_entropy_grad %l, %t, %d {vocab_size = 257 : i64} : tensor<?x?x129xf32>, tensor<?x?xi32>, tensor<f32>
  return
}

// -----

// ODS: the loss is an f32 scalar.
func.func @cross_entropy_non_scalar_loss(%l: tensor<?x?x100xf32>, %t: tensor<?x?xi32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %loss = llm.cross_entropy %l, %t : tensor<?x?x100xf32>, tensor<?x?xi32> -> tensor<1xf32>
  return
}

// -----

func.func @layer_negative_index(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{layer index must be non-negative, got -1}}
  %y = llm.layer -1 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    llm.yield %in : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @layer_body_without_terminator(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  // expected-error @+1 {{body must end with llm.yield}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    %a = llm.add %in, %in : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @activation_zero_features(%x: tensor<?x?x0xf32>) {
  // expected-error @+1 {{input must have a positive feature dimension, got 0}}
  %y = llm.gelu %x tanh : tensor<?x?x0xf32>
  return
}

// -----

func.func @split_no_sizes(%x: tensor<?x?x4xf32>) {
  // expected-error @+1 {{needs at least one size}}
  "llm.split"(%x) <{sizes = array<i64>}> : (tensor<?x?x4xf32>) -> ()
  return
}

// -----

func.func @split_sizes_overflow(%x: tensor<?x?x1xf32>) {
  // expected-error @+1 {{sizes overflow 64 bits}}
  %a:3 = llm.split %x [9223372036854775807, 9223372036854775807, 3] : tensor<?x?x1xf32> -> tensor<?x?x9223372036854775807xf32>, tensor<?x?x9223372036854775807xf32>, tensor<?x?x3xf32>
  return
}

// -----

func.func @attention_heads_times_head_dim_overflow(%q: tensor<?x?x4294967296xbf16>) {
  // expected-error @+1 {{heads * head_dim overflows 64 bits}}
  %o = llm.attention %q, %q, %q heads 4294967297 kv_heads 1 head_dim 4294967296 scale 1.0 : tensor<?x?x4294967296xbf16>, tensor<?x?x4294967296xbf16>
  return
}

// -----

func.func @attention_negative_window(%q: tensor<?x?x64xf32>) {
  // expected-error @+1 {{window must be positive, got -4}}
  %o = llm.attention %q, %q, %q heads 1 kv_heads 1 head_dim 64 scale 1.0 causal window -4 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @moe_experts_weight_not_rank_3(%d: tensor<4x?x8xf32>, %w: tensor<16x8xf32>, %w2: tensor<4x16x8xf32>, %w3: tensor<4x8x16xf32>) {
  // expected-error @+1 {{weight 0 must be rank 3 [experts, ffn, hidden], got 'tensor<16x8xf32>'}}
  %e = llm.moe_experts %d, %w, %w2, %w3 swiglu : tensor<4x?x8xf32>, tensor<16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return
}

// -----

// A layer reads only its input and its own parameters.
func.func @layer_uses_value_from_above(%x: tensor<?x?x8xf32>, %w: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    // expected-error @+1 {{using value defined outside the region}}
    %h = llm.linear %in, %w : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
    llm.yield %h : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

// ODS (HasParent): layers sit directly in the model function; a nested layer
// would be counted twice and is no pipeline unit.
func.func @layer_nested_in_layer(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
  ^bb0(%in: tensor<?x?x8xf32>):
    // expected-error @+1 {{expects parent op 'func.func'}}
    %z = llm.layer 1 (%in) : tensor<?x?x8xf32> {
    ^bb0(%in2: tensor<?x?x8xf32>):
      llm.yield %in2 : tensor<?x?x8xf32>
    }
    llm.yield %z : tensor<?x?x8xf32>
  }
  return %y : tensor<?x?x8xf32>
}

// -----

func.func @rms_norm_weight_element_type_mismatch(%x: tensor<?x?x8xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of weight ('f32')}}
  %y = llm.rms_norm %x, %g eps 1.0e-05 : tensor<?x?x8xbf16>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_weight_element_type_mismatch(%x: tensor<?x?x8xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of weight ('f32')}}
  %y = llm.layer_norm %x, %g eps 1.0e-05 : tensor<?x?x8xbf16>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_bias_element_type_mismatch(%x: tensor<?x?x8xbf16>, %g: tensor<8xbf16>, %b: tensor<8xf16>) {
  // expected-error @+1 {{element type of input ('bf16') does not match that of bias ('f16')}}
  %y = llm.layer_norm %x, %g, %b eps 1.0e-05 : tensor<?x?x8xbf16>, tensor<8xbf16>, tensor<8xf16>
  return
}

// -----

// 0x7FF0000000000000 is +inf.
func.func @rms_norm_infinite_eps(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{eps must be positive and finite, got INF}}
  %y = llm.rms_norm %x, %g eps 0x7FF0000000000000 : tensor<?x?x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_nan_eps(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{eps must be positive and finite, got nan}}
  %y = llm.layer_norm %x, %g eps 0x7FF8000000000000 : tensor<?x?x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @attention_q_k_element_type_mismatch(%q: tensor<?x?x64xbf16>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{element type of q ('bf16') does not match that of k and v ('f32')}}
  %o = llm.attention %q, %k, %k heads 1 kv_heads 1 head_dim 64 scale 1.0 causal : tensor<?x?x64xbf16>, tensor<?x?x64xf32>
  return
}

// -----

func.func @attention_infinite_scale(%q: tensor<?x?x64xf32>) {
  // expected-error @+1 {{scale must be positive and finite, got INF}}
  %o = llm.attention %q, %q, %q heads 1 kv_heads 1 head_dim 64 scale 0x7FF0000000000000 causal : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @rotary_infinite_theta(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>) {
  // expected-error @+1 {{theta must be positive and finite, got INF}}
  %qr, %kr = llm.rotary %q, %k head_dim 64 theta 0x7FF0000000000000 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
  return
}

// -----

func.func @moe_dispatch_infinite_capacity(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{capacity factor must be 0 (dropless) or a finite value of at least 1, got INF}}
  %d = llm.moe_dispatch %x, %i capacity 0x7FF0000000000000 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
  return
}

// -----

func.func @moe_dispatch_zero_experts(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{result must have at least one expert, got 'tensor<0x?x8xf32>'}}
  %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<0x?x8xf32>
  return
}

// -----

// Weights given as function arguments are not llm.param, so nothing else
// stops a zero-sized expert stack.
func.func @moe_experts_zero_experts(%d: tensor<0x?x8xf32>, %w1: tensor<0x16x8xf32>, %w2: tensor<0x8x16xf32>) {
  // expected-error @+1 {{input must have at least one expert and a positive hidden size, got 'tensor<0x?x8xf32>'}}
  %e = llm.moe_experts %d, %w1, %w2 gelu : tensor<0x?x8xf32>, tensor<0x16x8xf32>, tensor<0x8x16xf32>
  return
}

// -----

func.func @moe_experts_zero_ffn(%d: tensor<4x?x8xf32>, %w1: tensor<4x0x8xf32>, %w2: tensor<4x8x0xf32>) {
  // expected-error @+1 {{expert ffn size must be positive, got 0 in weight 0 'tensor<4x0x8xf32>'}}
  %e = llm.moe_experts %d, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<4x0x8xf32>, tensor<4x8x0xf32>
  return
}

// -----

func.func @moe_combine_zero_experts(%e: tensor<0x?x8xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x2xi32>) {
  // expected-error @+1 {{input must have at least one expert, got 'tensor<0x?x8xf32>'}}
  %y = llm.moe_combine %e, %p, %i : tensor<0x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
  return
}

// -----

func.func @bad_bias(%x: tensor<?x?x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{bias 'tensor<4xf32>' must be a vector of the last dimension of 'tensor<?x?x8xf32>'}}
  %r = llm.tp_reduce %x bias %b : tensor<4xf32> axis @mesh::@tp : tensor<?x?x8xf32>
  return
}

// -----

// A parallel op names its axis through the module's grid: an axis no
// llm.grid declares is refused.
func.func @undeclared_axis(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{'llm.tp_copy' op names axis @mesh::@tp, which no llm.grid declares (the partition passes declare the axes they split over)}}
  %c = llm.tp_copy %x axis @mesh::@tp : tensor<?x?x8xf32>
  return
}

// -----

llm.grid @mesh {
  llm.grid_axis @tp size 2
}
func.func @misspelt_axis(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{'llm.all_reduce' op names axis @mesh::@pt, which no llm.grid declares}}
  %c = llm.all_reduce %x axis @mesh::@pt : tensor<?x?x8xf32>
  return
}

// -----

func.func @flat_axis(%x: tensor<?x?x8xf32>) {
  // expected-error @+1 {{names its axis as @grid::@axis, got @tp}}
  %c = llm.tp_copy %x axis @tp : tensor<?x?x8xf32>
  return
}

// -----

llm.grid @mesh {
  // expected-error @+1 {{'llm.grid_axis' op has 0 ranks; an axis has at least one}}
  llm.grid_axis @tp size 0
}

// -----

llm.grid @mesh {
  // expected-note @+1 {{see existing symbol definition here}}
  llm.grid_axis @tp size 2
  // expected-error @+1 {{redefinition of symbol named 'tp'}}
  llm.grid_axis @tp size 4
}

// -----

func.func @grid_in_a_function() {
  // expected-error @+1 {{'llm.grid' op expects parent op 'builtin.module'}}
  llm.grid @mesh {
  }
  return
}

// -----

func.func @vocab_axis_undeclared(%logits: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) {
  // expected-error @+1 {{'llm.cross_entropy' op names axis @mesh::@tp, which no llm.grid declares}}
  %loss = llm.cross_entropy %logits, %l {vocab_axis = @mesh::@tp} : tensor<1x2x8xf32>, tensor<1x2xi32> -> tensor<f32>
  return
}

// -----

func.func @cp_ring_not_an_axis(%q: tensor<?x?x256xbf16>) {
  // expected-error @+1 {{'llm.cp_ring' must be a mesh axis @grid::@axis, got "cp"}}
  %o = llm.attention %q, %q, %q heads 4 kv_heads 4 head_dim 64 scale 0.125 causal {llm.cp_ring = "cp"} : tensor<?x?x256xbf16>, tensor<?x?x256xbf16>
  return
}

// -----

func.func @bad_bias_grad(%g: tensor<?x?x8xf32>) {
  // expected-error @+1 {{must be a vector of the last dimension}}
  %b = llm.bias_grad %g : tensor<?x?x8xf32> -> tensor<8x2xf32>
  return
}

// -----

func.func @ep_dispatch_share(%d: tensor<8x16x64xf32>) {
  // expected-error @+1 {{expects expert rows [E, C, h] and this rank's share [E/t, t C, h] with encoding {ep_parts = t}}}
  %s = llm.ep_dispatch %d axis @mesh::@ep : tensor<8x16x64xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @ep_combine_capacity(%s: tensor<4x16x64xf32, {ep_parts = 2 : i64}>) {
  // expected-error @+1 {{capacity 16 is not 2 x 16}}
  %c = llm.ep_combine %s axis @mesh::@ep : tensor<4x16x64xf32, {ep_parts = 2 : i64}> -> tensor<8x16x64xf32>
  return
}

// -----

func.func @cp_gather_length(%k: tensor<2x8x32xf32>) {
  // expected-error @+1 {{sequence 12 is not 2 x 8}}
  %w = llm.cp_gather %k axis @mesh::@cp : tensor<2x8x32xf32> -> tensor<2x12x32xf32, {cp_parts = 2 : i64}>
  return
}

// -----

func.func @attention_cp_keys(%q: tensor<2x8x32xf32>, %k: tensor<2x8x32xf32, {cp_parts = 2 : i64}>) {
  // expected-error @+1 {{context-parallel keys 'tensor<2x8x32xf32, {cp_parts = 2 : i64}>' must be the whole sequence of 2 ranks' queries}}
  %o = llm.attention %q, %k, %k heads 4 kv_heads 4 head_dim 8 scale 0.35 causal : tensor<2x8x32xf32>, tensor<2x8x32xf32, {cp_parts = 2 : i64}>
  return
}

// -----

// The training step (llm.train_step): every update names a parameter of the
// function with its gradient's type, checked once per function.
func.func @train_step_ok(%g: tensor<4xf32>, %n: tensor<f32>) attributes {llm.train_step} {
  %w = llm.param "w" zeros : tensor<4xf32>
  llm.adamw "w", %g, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @train_step_unknown_param(%g: tensor<4xf32>, %n: tensor<f32>) attributes {llm.train_step} {
  %w = llm.param "w" zeros : tensor<4xf32>
  // expected-error @+1 {{updates 'v', which is no llm.param of that type in this function}}
  llm.adamw "v", %g, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @train_step_param_type(%g: tensor<4xf32>, %n: tensor<f32>) attributes {llm.train_step} {
  %w = llm.param "w" zeros : tensor<8xf32>
  // expected-error @+1 {{updates 'w', which is no llm.param of that type in this function}}
  llm.adamw "w", %g, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<4xf32>, tensor<f32>
  return
}

// -----

// expected-error @+1 {{'llm.train_step' must be a unit attribute}}
func.func @train_step_not_unit() attributes {llm.train_step = 1 : i64} {
  return
}

// -----

func.func @train_step_not_function() {
  // expected-error @+1 {{'llm.train_step' belongs on a function}}
  %w = llm.param "w" zeros {llm.train_step} : tensor<4xf32>
  return
}

// -----

// Every discardable llm.* attribute is declared: a misspelt one is refused.
func.func @undeclared_attribute() {
  // expected-error @+1 {{carries 'llm.stages', which the llm dialect does not declare (a misspelling? LLMDialect.cpp lists its discardable attributes)}}
  %w = llm.param "w" zeros {llm.stages = 1 : i64} : tensor<4xf32>
  return
}

// -----

func.func @stage_not_an_index() {
  // expected-error @+1 {{'llm.stage' must be a pipeline stage (an i64 >= 0, or -1: every stage), got -2 : i64}}
  %w = llm.param "w" zeros {llm.stage = -2 : i64} : tensor<4xf32>
  return
}

// -----

func.func @shard_malformed() {
  // expected-error @+1 {{'llm.shard' must be an #llm.shard, got {axis = "tp", dim = 0 : i64}}}
  %w = llm.param "w" zeros {llm.shard = {axis = "tp", dim = 0 : i64}} : tensor<4xf32>
  return
}

// -----

func.func @shard_not_on_a_param(%x: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{'llm.shard' belongs on an llm.param}}
  %y = llm.add %x, %x {llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 1, parts = 2>} : tensor<?x?x4xf32>
  return %y : tensor<?x?x4xf32>
}

// -----

// expected-error @+1 {{'llm.seq_len' belongs on a module}}
func.func @module_attribute_on_a_function() attributes {llm.seq_len = 8 : i64} {
  return
}

// -----

module attributes {llm.loss_scale = "dynamic"} {
// expected-error @-1 {{'llm.loss_scale' must be an #llm.loss_scaling (none or dynamic), got "dynamic"}}
}

// -----

// expected-error @+2 {{expected ::llmopt::llm::LossScaling to be one of: none, dynamic}}
// expected-error @+1 {{failed to parse LLM_LossScalingAttr parameter 'value'}}
module attributes {llm.loss_scale = #llm.loss_scaling<static>} {
}

// -----

func.func @shard_axis() {
  // expected-error @+1 {{#llm.shard: parameters split over tp or ep, not 'dp'}}
  %w = llm.param "w" zeros {llm.shard = #llm.shard<axis = "dp", dim = 0, blocks = 1, parts = 2>} : tensor<4xf32>
  return
}

// -----

func.func @shard_dim_out_of_rank() {
  // expected-error @+1 {{'llm.shard' splits dimension 1 of a rank-1 tensor}}
  %w = llm.param "w" zeros {llm.shard = #llm.shard<axis = "tp", dim = 1, blocks = 1, parts = 2>} : tensor<4xf32>
  return
}

// -----

func.func @shard_whole_too_big() {
  // expected-error @+1 {{'llm.shard' has a whole of 9 rows, more than its 2 parts of 4 hold}}
  %w = llm.param "w" zeros {llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 1, parts = 2, whole = 9>} : tensor<4xf32>
  return
}

// -----

module {
  func.func @f() attributes {llm.forward} {
    return
  }
  // expected-error @+1 {{is a second function marked 'llm.forward'; a module has one}}
  func.func @g() attributes {llm.forward} {
    return
  }
}

// -----

func.func @cp_ring_undeclared(%q: tensor<?x?x256xbf16>) {
  // expected-error @+1 {{'llm.attention' op names axis @mesh::@cp, which no llm.grid declares}}
  %o = llm.attention %q, %q, %q heads 4 kv_heads 4 head_dim 64 scale 0.125 causal {llm.cp_ring = @mesh::@cp} : tensor<?x?x256xbf16>, tensor<?x?x256xbf16>
  return
}

// -----

func.func @vocab_axis_mark_undeclared(%t: tensor<?x?xi32>, %w: tensor<48x64xbf16>) {
  // expected-error @+1 {{'llm.embedding' op names axis @mesh::@tp, which no llm.grid declares}}
  %x = llm.embedding %t, %w {llm.vocab_axis = @mesh::@tp} : tensor<?x?xi32>, tensor<48x64xbf16> -> tensor<?x?x64xbf16>
  return
}

// -----

func.func @shard_blocks() {
  // expected-error @+1 {{'llm.shard' cuts dimension 0 (4) into 3 blocks, which do not divide it}}
  %w = llm.param "w" zeros {llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 3, parts = 2>} : tensor<4xf32>
  return
}

// -----

func.func @shard_padded_blocks() {
  // expected-error @+1 {{'llm.shard' pads (whole) a dimension of 2 blocks; only one block is padded}}
  %w = llm.param "w" zeros {llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 2, parts = 2, whole = 7>} : tensor<4xf32>
  return
}

// -----

// The loss-scale seed without dynamic loss scaling would leave the gradients
// scaled.
module attributes {llm.loss_scale = #llm.loss_scaling<none>} {
  func.func @seed() -> tensor<f32> {
    // expected-error @+1 {{seeds the backward with the loss scale, but the module's llm.loss_scale is not #llm.loss_scaling<dynamic>: the gradients would stay scaled}}
    %one = arith.constant {llm.loss_scale_seed} dense<1.0> : tensor<f32>
    return %one : tensor<f32>
  }
}
