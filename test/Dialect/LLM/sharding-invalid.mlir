// RUN: llm-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(sharding-propagation,cse),func.func(shard-partition))'

// What shard-partition refuses on llm ops, by name.

// A vocabulary-parallel embedding needs a masked lookup and an all-reduce.
shard.grid @tp(shape = 2)
func.func @embedding_vocabulary(%t: tensor<2x4xi32>, %w: tensor<16x8xf32>) -> tensor<2x4x8xf32> {
  %rows = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %ws = shard.shard %w to %rows annotate_for_users : tensor<16x8xf32>
  // expected-error @below {{splits its vocabulary: a vocabulary-parallel embedding (masked lookup and all-reduce) is not partitioned by shard-partition}}
  %x = llm.embedding %t, %ws : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return %x : tensor<2x4x8xf32>
}

// -----

// The mean loss over tokens split across ranks.
shard.grid @dp(shape = 2)
func.func @cross_entropy_tokens(%z: tensor<2x4x16xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %batch = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %zs = shard.shard %z to %batch annotate_for_users : tensor<2x4x16xf32>
  // expected-error @below {{splits its tokens: the mean loss would need every rank's count of counted labels}}
  %l = llm.cross_entropy %zs, %labels : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// vocab_axis names one mesh axis: a split over two grid axes is refused.
shard.grid @g(shape = 2x2)
func.func @cross_entropy_two_axes(%z: tensor<2x4x16xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %vocab = shard.sharding @g split_axes = [[], [], [0, 1]] : !shard.sharding
  %zs = shard.shard %z to %vocab annotate_for_users : tensor<2x4x16xf32>
  // expected-error @below {{splits its vocabulary over a grid of 2 axes or again}}
  %l = llm.cross_entropy %zs, %labels : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The norms' backward keeps the features whole, as their forward.
shard.grid @tp(shape = 2)
func.func @rms_norm_grad_features(%g: tensor<2x4x16xf32>, %x: tensor<2x4x16xf32>, %w: tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<16xf32>) {
  %f = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %ws = shard.shard %w to %f annotate_for_users : tensor<16xf32>
  // expected-error @below {{normalizes over its features, which must not be split}}
  %dx, %dw = llm.rms_norm_grad %g, %x, %ws eps 1.0e-05 : tensor<2x4x16xf32>, tensor<16xf32>
  return %dx, %dw : tensor<2x4x16xf32>, tensor<16xf32>
}

// -----

// The attention's backward split by sequence is context parallelism.
shard.grid @cp(shape = 2)
func.func @attention_grad_sequence(%g: tensor<1x8x64xf32>, %q: tensor<1x8x64xf32>, %k: tensor<1x8x32xf32>, %v: tensor<1x8x32xf32>, %o: tensor<1x8x64xf32>) -> (tensor<1x8x64xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>) {
  %s = shard.sharding @cp split_axes = [[], [0]] : !shard.sharding
  %qs = shard.shard %q to %s annotate_for_users : tensor<1x8x64xf32>
  // expected-error @below {{a sequence split is context parallelism: use llm-partition-cp}}
  %dq, %dk, %dv = llm.attention_grad %g, %qs, %k, %v, %o heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 causal : tensor<1x8x64xf32>, tensor<1x8x32xf32>
  return %dq, %dk, %dv : tensor<1x8x64xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>
}

// -----

// The experts' hidden size is what their up-projections contract.
shard.grid @tp(shape = 2)
func.func @experts_hidden(%d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> tensor<4x2x8xf32> {
  %h = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %ds = shard.shard %d to %h annotate_for_users : tensor<4x2x8xf32>
  // expected-error @below {{splits its hidden size, which the experts' up-projections contract}}
  %y = llm.moe_experts %ds, %w1, %w2 gelu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return %y : tensor<4x2x8xf32>
}

// -----

// A rank's positions are not a part of the position table's rows.
shard.grid @sp(shape = 2)
func.func @positions_sequence(%x: tensor<2x8x16xf32>, %t: tensor<32x16xf32>) -> tensor<2x8x16xf32> {
  %s = shard.sharding @sp split_axes = [[], [0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<2x8x16xf32>
  // expected-error @below {{splits its sequence: a rank's positions are not a part of the position table's rows}}
  %y = llm.position_embedding %xs, %t : tensor<2x8x16xf32>, tensor<32x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// Heads split by whole heads only (3 heads over 2 ranks).
shard.grid @tp(shape = 2)
func.func @attention_grad_heads_uneven(%g: tensor<1x8x48xf32>, %q: tensor<1x8x48xf32>, %k: tensor<1x8x48xf32>, %v: tensor<1x8x48xf32>, %o: tensor<1x8x48xf32>) -> (tensor<1x8x48xf32>, tensor<1x8x48xf32>, tensor<1x8x48xf32>) {
  %h = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %qs = shard.shard %q to %h annotate_for_users : tensor<1x8x48xf32>
  // expected-error @below {{3 heads and 3 KV heads do not split into 2 parts}}
  %dq, %dk, %dv = llm.attention_grad %g, %qs, %k, %v, %o heads 3 kv_heads 3 head_dim 16 scale 2.500000e-01 causal : tensor<1x8x48xf32>, tensor<1x8x48xf32>
  return %dq, %dk, %dv : tensor<1x8x48xf32>, tensor<1x8x48xf32>, tensor<1x8x48xf32>
}

// -----

// A token split of the dispatch is expert parallelism's all-to-all.
shard.grid @dp(shape = 2)
func.func @dispatch_tokens(%x: tensor<4x8x16xf32>, %i: tensor<4x8x2xi32>) -> tensor<4x32x16xf32> {
  %s = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<4x8x16xf32>
  // expected-error @below {{places each token in its expert's next free slot, counting the tokens before it, so only the hidden size splits here; a token split is expert parallelism's all-to-all (llm-partition-ep: llm.ep_dispatch and llm.ep_combine)}}
  %d = llm.moe_dispatch %xs, %i capacity 0.0 : tensor<4x8x16xf32>, tensor<4x8x2xi32> -> tensor<4x32x16xf32>
  return %d : tensor<4x32x16xf32>
}

// -----

// The router scores whole hidden vectors.
shard.grid @tp(shape = 2)
func.func @router_hidden(%x: tensor<2x4x16xf32>, %wg: tensor<4x16xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>) {
  %s = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<2x4x16xf32>
  // expected-error @below {{chooses each token's top-k of a softmax over every expert's score of its whole hidden vector: split the tokens}}
  %p, %i = llm.moe_router %xs, %wg top_k 2 : tensor<2x4x16xf32>, tensor<4x16xf32> -> tensor<2x4x2xf32>, tensor<2x4x2xi32>
  return %p, %i : tensor<2x4x2xf32>, tensor<2x4x2xi32>
}

// -----

// ... and chooses among all experts (the gate split by experts).
shard.grid @ep(shape = 2)
func.func @router_experts(%x: tensor<2x4x16xf32>, %wg: tensor<4x16xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>) {
  %s = shard.sharding @ep split_axes = [[0]] : !shard.sharding
  %wgs = shard.shard %wg to %s annotate_for_users : tensor<4x16xf32>
  // expected-error @below {{chooses each token's top-k of a softmax over every expert's score}}
  %p, %i = llm.moe_router %x, %wgs top_k 2 : tensor<2x4x16xf32>, tensor<4x16xf32> -> tensor<2x4x2xf32>, tensor<2x4x2xi32>
  return %p, %i : tensor<2x4x2xf32>, tensor<2x4x2xi32>
}

// -----

// The load-balancing loss's gradient counts every token's choices.
shard.grid @dp(shape = 2)
func.func @router_grad_aux_tokens(%dp: tensor<4x8x2xf32>, %x: tensor<4x8x16xf32>, %wg: tensor<4x16xf32>, %p: tensor<4x8x2xf32>, %i: tensor<4x8x2xi32>) -> (tensor<4x8x16xf32>, tensor<4x16xf32>) {
  %s = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<4x8x16xf32>
  // expected-error @below {{splits its tokens with aux_loss: the load-balancing loss's gradient needs every token's expert counts}}
  %dx, %dg = llm.moe_router_grad %dp, %xs, %wg, %p, %i top_k 2 normalize aux_loss 1.0e-02 : tensor<4x8x2xf32>, tensor<4x8x16xf32>, tensor<4x16xf32>, tensor<4x8x2xi32>
  return %dx, %dg : tensor<4x8x16xf32>, tensor<4x16xf32>
}

// -----

// A parameter's part (llm.shard) splits one dimension.
shard.grid @mesh(shape = 2x2)
func.func @param_two_dims(%x: tensor<1x4x16xf32>) -> tensor<1x4x32xf32> {
  // expected-error @below {{'w' is split along 2 dimensions; a parameter's part (llm.shard) splits one}}
  %w = llm.param "w" normal(0.02) : tensor<32x16xf32>
  %s = shard.sharding @mesh split_axes = [[0], [1]] : !shard.sharding
  %ws = shard.shard %w to %s : tensor<32x16xf32>
  %y = llm.linear %x, %ws : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
  return %y : tensor<1x4x32xf32>
}
