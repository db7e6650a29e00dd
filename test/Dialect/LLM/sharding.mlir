// RUN: llm-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation))' | FileCheck %s --check-prefix=PROP
// RUN: llm-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(sharding-propagation,cse),func.func(shard-partition,canonicalize))' | FileCheck %s

// Upstream `shard` on llm ops (ShardingInterface external models): the
// weights' shardings propagate through llm.linear (a matmul over leading x
// out x in loops), llm.gelu / llm.swiglu / llm.add (elementwise), and
// shard-partition turns the MLP into Megatron's column / row split with one
// all-reduce.

// PROP-LABEL: func.func @mlp
// PROP: %[[H:.*]] = llm.linear
// PROP-NEXT: shard.sharding @tp split_axes = {{\[\[\], \[\], \[0\]\]}}
// PROP: llm.gelu
// PROP: %[[Y:.*]] = llm.linear
// PROP-NEXT: shard.sharding @tp split_axes = {{\[\[\]\]}}

// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:.*]]: tensor<4x8x16xf32>, %[[W1:.*]]: tensor<16x16xf32>, %[[W2:.*]]: tensor<16x16xf32>)
// CHECK-NEXT: %[[H:.*]] = llm.linear %[[X]], %[[W1]] : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
// CHECK-NEXT: %[[A:.*]] = llm.gelu %[[H]] none : tensor<4x8x16xf32>
// CHECK-NEXT: %[[Y:.*]] = llm.linear %[[A]], %[[W2]] : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[Y]] on @tp grid_axes = [0] : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
// CHECK-NEXT: return %[[R]]
shard.grid @tp(shape = 2)
func.func @mlp(%x: tensor<4x8x16xf32>, %w1: tensor<32x16xf32>, %w2: tensor<16x32xf32>) -> tensor<4x8x16xf32> {
  %s1 = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %w1s = shard.shard %w1 to %s1 annotate_for_users : tensor<32x16xf32>
  %s2 = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %w2s = shard.shard %w2 to %s2 annotate_for_users : tensor<16x32xf32>
  %h = llm.linear %x, %w1s : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %a = llm.gelu %h none : tensor<4x8x32xf32>
  %y = llm.linear %a, %w2s : tensor<4x8x32xf32>, tensor<16x32xf32> -> tensor<4x8x16xf32>
  return %y : tensor<4x8x16xf32>
}

// -----

// Llama's gated MLP over 4 ranks, GPT-2's transposed ([in, out]) weights:
// gate and up column-split, SwiGLU on the parts, down row-split.
// CHECK-LABEL: func.func @swiglu
// CHECK: llm.linear {{.*}} : tensor<1x2x8xf32>, tensor<4x8xf32> -> tensor<1x2x4xf32>
// CHECK: llm.linear {{.*}} : tensor<1x2x8xf32>, tensor<4x8xf32> -> tensor<1x2x4xf32>
// CHECK: llm.swiglu {{.*}} : tensor<1x2x4xf32>
// CHECK: llm.linear {{.*}} transposed : tensor<1x2x4xf32>, tensor<4x8xf32> -> tensor<1x2x8xf32>
// CHECK-NEXT: shard.all_reduce {{.*}} on @g4 grid_axes = [0]
shard.grid @g4(shape = 4)
func.func @swiglu(%x: tensor<1x2x8xf32>, %wg: tensor<16x8xf32>, %wu: tensor<16x8xf32>, %wd: tensor<16x8xf32>) -> tensor<1x2x8xf32> {
  %col = shard.sharding @g4 split_axes = [[0]] : !shard.sharding
  %wgs = shard.shard %wg to %col annotate_for_users : tensor<16x8xf32>
  %wus = shard.shard %wu to %col annotate_for_users : tensor<16x8xf32>
  %wds = shard.shard %wd to %col annotate_for_users : tensor<16x8xf32>
  %g = llm.linear %x, %wgs : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
  %u = llm.linear %x, %wus : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
  %h = llm.swiglu %g, %u : tensor<1x2x16xf32>
  %y = llm.linear %h, %wds transposed : tensor<1x2x16xf32>, tensor<16x8xf32> -> tensor<1x2x8xf32>
  return %y : tensor<1x2x8xf32>
}

// -----

// A Llama attention block: only the weights are annotated (q/k/v by rows, o
// by columns); the norm stays whole, rotary and attention run on this rank's
// heads (4 -> 2 query heads, 2 -> 1 KV heads), the output projection's
// partial sums are all-reduced before the residual add.
// CHECK-LABEL: func.func @attention_block
// CHECK: llm.rms_norm {{.*}} : tensor<1x8x64xf32>, tensor<64xf32>
// CHECK: llm.rotary {{.*}} head_dim 16 {{.*}} : tensor<1x8x32xf32>, tensor<1x8x16xf32>
// CHECK: llm.attention {{.*}} heads 2 kv_heads 1 head_dim 16 {{.*}} : tensor<1x8x32xf32>, tensor<1x8x16xf32>
// CHECK: %[[O:.*]] = llm.linear {{.*}} : tensor<1x8x32xf32>, tensor<64x32xf32> -> tensor<1x8x64xf32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[O]] on @tp grid_axes = [0]
// CHECK-NEXT: llm.add %{{.*}}, %[[R]] : tensor<1x8x64xf32>
shard.grid @tp(shape = 2)
func.func @attention_block(%x: tensor<1x8x64xf32>, %g: tensor<64xf32>, %wq: tensor<64x64xf32>, %wk: tensor<32x64xf32>, %wv: tensor<32x64xf32>, %wo: tensor<64x64xf32>) -> tensor<1x8x64xf32> {
  %rows = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %cols = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %wqs = shard.shard %wq to %rows annotate_for_users : tensor<64x64xf32>
  %wks = shard.shard %wk to %rows annotate_for_users : tensor<32x64xf32>
  %wvs = shard.shard %wv to %rows annotate_for_users : tensor<32x64xf32>
  %wos = shard.shard %wo to %cols annotate_for_users : tensor<64x64xf32>
  %n = llm.rms_norm %x, %g eps 1.0e-05 : tensor<1x8x64xf32>, tensor<64xf32>
  %q = llm.linear %n, %wqs : tensor<1x8x64xf32>, tensor<64x64xf32> -> tensor<1x8x64xf32>
  %k = llm.linear %n, %wks : tensor<1x8x64xf32>, tensor<32x64xf32> -> tensor<1x8x32xf32>
  %v = llm.linear %n, %wvs : tensor<1x8x64xf32>, tensor<32x64xf32> -> tensor<1x8x32xf32>
  %qr, %kr = llm.rotary %q, %k head_dim 16 theta 10000.0 : tensor<1x8x64xf32>, tensor<1x8x32xf32>
  %a = llm.attention %qr, %kr, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 causal : tensor<1x8x64xf32>, tensor<1x8x32xf32>
  %o = llm.linear %a, %wos : tensor<1x8x64xf32>, tensor<64x64xf32> -> tensor<1x8x64xf32>
  %y = llm.add %x, %o : tensor<1x8x64xf32>
  return %y : tensor<1x8x64xf32>
}

// -----

// Megatron's LM head: the weight's rows (the vocabulary) split, the logits
// stay this rank's part of the vocabulary and the cross-entropy spans the
// ranks itself (vocab_axis): no all-reduce, the loss whole on every rank.
// CHECK-LABEL: func.func @lm_head
// CHECK: %[[Z:.*]] = llm.linear {{.*}} : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[L:.*]] = llm.cross_entropy %[[Z]], %{{.*}} {vocab_axis = "tp"} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>
// CHECK-NOT: shard.all_reduce
// CHECK: return %[[L]]
shard.grid @tp(shape = 2)
func.func @lm_head(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %rows = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %ws = shard.shard %w to %rows annotate_for_users : tensor<16x8xf32>
  %z = llm.linear %x, %ws : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %l = llm.cross_entropy %z, %labels : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// An embedding table split by columns (the hidden size): a lookup in this
// rank's columns, no communication.
// CHECK-LABEL: func.func @embedding_columns
// CHECK: llm.embedding {{.*}} : tensor<2x4xi32>, tensor<16x4xf32> -> tensor<2x4x4xf32>
// CHECK-NOT: shard.all_reduce
shard.grid @tp(shape = 2)
func.func @embedding_columns(%t: tensor<2x4xi32>, %w: tensor<16x8xf32>) -> tensor<2x4x8xf32> {
  %cols = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %ws = shard.shard %w to %cols annotate_for_users : tensor<16x8xf32>
  %x = llm.embedding %t, %ws : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return %x : tensor<2x4x8xf32>
}

// -----

// The linear's backward: its tokens split (data parallelism) all-reduce the
// weight gradient, dx stays split; its output features split (the
// column-parallel backward) all-reduce dx, the weight gradient stays this
// rank's rows.
// CHECK-LABEL: func.func @linear_grad_data_parallel
// CHECK: %[[DX:.*]], %[[DW:.*]] = llm.linear_grad {{.*}} : tensor<2x8x16xf32>, tensor<2x8x32xf32>, tensor<16x32xf32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[DW]] on @dp grid_axes = [0] : tensor<16x32xf32>
// CHECK-NEXT: return %[[DX]], %[[R]]
shard.grid @dp(shape = 2)
func.func @linear_grad_data_parallel(%g: tensor<4x8x16xf32>, %x: tensor<4x8x32xf32>, %w: tensor<16x32xf32>) -> (tensor<4x8x32xf32>, tensor<16x32xf32>) {
  %b = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %gs = shard.shard %g to %b annotate_for_users : tensor<4x8x16xf32>
  %xs = shard.shard %x to %b annotate_for_users : tensor<4x8x32xf32>
  %dx, %dw = llm.linear_grad %gs, %xs, %w : tensor<4x8x16xf32>, tensor<4x8x32xf32>, tensor<16x32xf32>
  return %dx, %dw : tensor<4x8x32xf32>, tensor<16x32xf32>
}

// -----

// CHECK-LABEL: func.func @linear_grad_column_parallel
// CHECK: %[[DX:.*]], %[[DW:.*]] = llm.linear_grad {{.*}} : tensor<4x8x8xf32>, tensor<4x8x32xf32>, tensor<8x32xf32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[DX]] on @tp grid_axes = [0] : tensor<4x8x32xf32>
// CHECK-NEXT: return %[[R]], %[[DW]]
shard.grid @tp(shape = 2)
func.func @linear_grad_column_parallel(%g: tensor<4x8x16xf32>, %x: tensor<4x8x32xf32>, %w: tensor<16x32xf32>) -> (tensor<4x8x32xf32>, tensor<16x32xf32>) {
  %rows = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %ws = shard.shard %w to %rows annotate_for_users : tensor<16x32xf32>
  %c = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %gs = shard.shard %g to %c annotate_for_users : tensor<4x8x16xf32>
  %dx, %dw = llm.linear_grad %gs, %x, %ws : tensor<4x8x16xf32>, tensor<4x8x32xf32>, tensor<16x32xf32>
  return %dx, %dw : tensor<4x8x32xf32>, tensor<16x32xf32>
}

// -----

// The norms' backward with the tokens split: dx stays split, the weight
// and bias gradients are all-reduced; SwiGLU's backward is elementwise.
// CHECK-LABEL: func.func @norm_grad_data_parallel
// CHECK: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = llm.layer_norm_grad {{.*}} : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[RW:.*]] = shard.all_reduce %[[DW]] on @dp grid_axes = [0]
// CHECK-NEXT: %[[RB:.*]] = shard.all_reduce %[[DB]] on @dp grid_axes = [0]
// CHECK-NEXT: return %[[DX]], %[[RW]], %[[RB]]
// CHECK-LABEL: func.func @swiglu_grad_data_parallel
// CHECK: llm.swiglu_grad {{.*}} : tensor<2x8x16xf32>
// CHECK-NOT: shard.all_reduce
shard.grid @dp(shape = 2)
func.func @norm_grad_data_parallel(%g: tensor<4x8x16xf32>, %x: tensor<4x8x16xf32>, %w: tensor<16xf32>) -> (tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %b = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %gs = shard.shard %g to %b annotate_for_users : tensor<4x8x16xf32>
  %xs = shard.shard %x to %b annotate_for_users : tensor<4x8x16xf32>
  %dx, %dw, %db = llm.layer_norm_grad %gs, %xs, %w bias eps 1.0e-05 : tensor<4x8x16xf32>, tensor<16xf32> -> tensor<16xf32>
  return %dx, %dw, %db : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
}
func.func @swiglu_grad_data_parallel(%g: tensor<4x8x16xf32>, %a: tensor<4x8x16xf32>, %u: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<4x8x16xf32>) {
  %b = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %gs = shard.shard %g to %b annotate_for_users : tensor<4x8x16xf32>
  %dg, %du = llm.swiglu_grad %gs, %a, %u : tensor<4x8x16xf32>
  return %dg, %du : tensor<4x8x16xf32>, tensor<4x8x16xf32>
}

// -----

// The loss's backward on this rank's vocabulary (vocab_axis), the
// embedding's table gradient all-reduced over a split of the tokens, the
// attention's backward on this rank's heads.
// CHECK-LABEL: func.func @cross_entropy_grad_vocabulary
// CHECK: llm.cross_entropy_grad {{.*}} {vocab_axis = "tp"} : tensor<2x4x8xf32>, tensor<2x4xi32>, tensor<f32>
// CHECK-LABEL: func.func @embedding_grad_data_parallel
// CHECK: %[[D:.*]] = llm.embedding_grad {{.*}} : tensor<2x8xi32>, tensor<2x8x16xf32> -> tensor<32x16xf32>
// CHECK-NEXT: shard.all_reduce %[[D]] on @dp grid_axes = [0]
// CHECK-LABEL: func.func @attention_grad_heads
// CHECK: llm.attention_grad {{.*}} heads 2 kv_heads 1 head_dim 16 {{.*}} : tensor<1x8x32xf32>, tensor<1x8x16xf32>
// CHECK-NOT: shard.all_reduce
shard.grid @tp(shape = 2)
shard.grid @dp(shape = 2)
func.func @cross_entropy_grad_vocabulary(%z: tensor<2x4x16xf32>, %labels: tensor<2x4xi32>, %one: tensor<f32>) -> tensor<2x4x16xf32> {
  %v = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %zs = shard.shard %z to %v annotate_for_users : tensor<2x4x16xf32>
  %d = llm.cross_entropy_grad %zs, %labels, %one : tensor<2x4x16xf32>, tensor<2x4xi32>, tensor<f32>
  return %d : tensor<2x4x16xf32>
}
func.func @embedding_grad_data_parallel(%t: tensor<4x8xi32>, %g: tensor<4x8x16xf32>) -> tensor<32x16xf32> {
  %b = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %gs = shard.shard %g to %b annotate_for_users : tensor<4x8x16xf32>
  %ts = shard.shard %t to %b annotate_for_users : tensor<4x8xi32>
  %d = llm.embedding_grad %ts, %gs : tensor<4x8xi32>, tensor<4x8x16xf32> -> tensor<32x16xf32>
  return %d : tensor<32x16xf32>
}
func.func @attention_grad_heads(%g: tensor<1x8x64xf32>, %q: tensor<1x8x64xf32>, %k: tensor<1x8x32xf32>, %v: tensor<1x8x32xf32>, %o: tensor<1x8x64xf32>) -> (tensor<1x8x64xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>) {
  %h = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %qs = shard.shard %q to %h annotate_for_users : tensor<1x8x64xf32>
  %ks = shard.shard %k to %h annotate_for_users : tensor<1x8x32xf32>
  %vs = shard.shard %v to %h annotate_for_users : tensor<1x8x32xf32>
  %dq, %dk, %dv = llm.attention_grad %g, %qs, %ks, %vs, %o heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 causal : tensor<1x8x64xf32>, tensor<1x8x32xf32>
  return %dq, %dk, %dv : tensor<1x8x64xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>
}

// -----

// Mixtral's experts: split by expert (expert parallelism), this rank's
// experts on their rows; split by ffn (tensor parallelism inside the
// experts), the down-projection's partial sums all-reduced.
// CHECK-LABEL: func.func @experts_by_expert
// CHECK: llm.moe_experts {{.*}} swiglu : tensor<2x2x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>
// CHECK-NOT: shard.all_reduce
// CHECK-LABEL: func.func @experts_by_ffn
// CHECK: %[[Y:.*]] = llm.moe_experts {{.*}} swiglu : tensor<4x2x8xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
// CHECK-NEXT: shard.all_reduce %[[Y]] on @tp grid_axes = [0]
shard.grid @ep(shape = 2)
shard.grid @tp(shape = 2)
func.func @experts_by_expert(%d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> tensor<4x2x8xf32> {
  %s = shard.sharding @ep split_axes = [[0]] : !shard.sharding
  %ds = shard.shard %d to %s annotate_for_users : tensor<4x2x8xf32>
  %w1s = shard.shard %w1 to %s annotate_for_users : tensor<4x16x8xf32>
  %w3s = shard.shard %w3 to %s annotate_for_users : tensor<4x16x8xf32>
  %w2s = shard.shard %w2 to %s annotate_for_users : tensor<4x8x16xf32>
  %y = llm.moe_experts %ds, %w1s, %w3s, %w2s swiglu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return %y : tensor<4x2x8xf32>
}
func.func @experts_by_ffn(%d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> tensor<4x2x8xf32> {
  %f = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %g = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %w1s = shard.shard %w1 to %f annotate_for_users : tensor<4x16x8xf32>
  %w3s = shard.shard %w3 to %f annotate_for_users : tensor<4x16x8xf32>
  %w2s = shard.shard %w2 to %g annotate_for_users : tensor<4x8x16xf32>
  %y = llm.moe_experts %d, %w1s, %w3s, %w2s swiglu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return %y : tensor<4x2x8xf32>
}

// -----

// The experts' backward: an ffn split all-reduces the rows' gradient (the
// weights' gradients stay split); a split of the slots all-reduces the
// weights' gradients.
// CHECK-LABEL: func.func @experts_grad_by_ffn
// CHECK: %[[DX:.*]], %[[DW:.*]]:2 = llm.moe_experts_grad {{.*}} gelu : tensor<4x2x8xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[DX]] on @tp grid_axes = [0]
// CHECK-NEXT: return %[[R]], %[[DW]]#0, %[[DW]]#1
// CHECK-LABEL: func.func @experts_grad_by_slot
// CHECK: %[[DX:.*]], %[[DW:.*]]:2 = llm.moe_experts_grad {{.*}} gelu : tensor<4x1x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
// CHECK-NEXT: %[[R1:.*]] = shard.all_reduce %[[DW]]#0 on @dp grid_axes = [0]
// CHECK-NEXT: %[[R2:.*]] = shard.all_reduce %[[DW]]#1 on @dp grid_axes = [0]
// CHECK-NEXT: return %[[DX]], %[[R1]], %[[R2]]
shard.grid @tp(shape = 2)
shard.grid @dp(shape = 2)
func.func @experts_grad_by_ffn(%g: tensor<4x2x8xf32>, %d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> (tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) {
  %f = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %f2 = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %w1s = shard.shard %w1 to %f annotate_for_users : tensor<4x16x8xf32>
  %w2s = shard.shard %w2 to %f2 annotate_for_users : tensor<4x8x16xf32>
  %dx, %dw1, %dw2 = llm.moe_experts_grad %g, %d, %w1s, %w2s gelu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32> -> tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return %dx, %dw1, %dw2 : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
}
func.func @experts_grad_by_slot(%g: tensor<4x2x8xf32>, %d: tensor<4x2x8xf32>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) -> (tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) {
  %c = shard.sharding @dp split_axes = [[], [0]] : !shard.sharding
  %gs = shard.shard %g to %c annotate_for_users : tensor<4x2x8xf32>
  %ds = shard.shard %d to %c annotate_for_users : tensor<4x2x8xf32>
  %dx, %dw1, %dw2 = llm.moe_experts_grad %gs, %ds, %w1, %w2 gelu : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32> -> tensor<4x16x8xf32>, tensor<4x8x16xf32>
  return %dx, %dw1, %dw2 : tensor<4x2x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
}

// -----

// GPT-2's positions with the batch split: the forward on this rank's rows
// with the whole table, the table's gradient all-reduced.
// CHECK-LABEL: func.func @positions_data_parallel
// CHECK: llm.position_embedding {{.*}} : tensor<2x8x16xf32>, tensor<32x16xf32>
// CHECK-NEXT: %[[D:.*]] = llm.position_embedding_grad {{.*}} : tensor<2x8x16xf32> -> tensor<32x16xf32>
// CHECK-NEXT: shard.all_reduce %[[D]] on @dp grid_axes = [0]
shard.grid @dp(shape = 2)
func.func @positions_data_parallel(%x: tensor<4x8x16xf32>, %t: tensor<32x16xf32>, %g: tensor<4x8x16xf32>) -> (tensor<4x8x16xf32>, tensor<32x16xf32>) {
  %b = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %b annotate_for_users : tensor<4x8x16xf32>
  %gs = shard.shard %g to %b annotate_for_users : tensor<4x8x16xf32>
  %y = llm.position_embedding %xs, %t : tensor<4x8x16xf32>, tensor<32x16xf32>
  %d = llm.position_embedding_grad %gs : tensor<4x8x16xf32> -> tensor<32x16xf32>
  return %y, %d : tensor<4x8x16xf32>, tensor<32x16xf32>
}

// -----

// A whole Megatron training step of the MLP through upstream `shard`: the
// parameters' parts carry llm.shard (the runtime's form), the backward runs
// on the parts, the global norm sums squared norms over tp for the split
// gradients and once for the whole one (the norm weight), AdamW updates the
// parts. The column-parallel linear's input gradient is all-reduced
// before the norm's backward (Megatron's f operator).
// CHECK-LABEL: func.func @tp_training_step
// CHECK: %[[W1:.*]] = llm.param "w1" normal(2.000000e-02) {llm.shard = {axis = "tp", blocks = 1 : i64, dim = 0 : i64, parts = 2 : i64}} : tensor<16x16xf32>
// CHECK: %[[W2:.*]] = llm.param "w2" normal(2.000000e-02) {llm.shard = {axis = "tp", blocks = 1 : i64, dim = 1 : i64, parts = 2 : i64}} : tensor<16x16xf32>
// CHECK: llm.param "g" ones : tensor<16xf32>
// CHECK: %{{.*}}, %[[DW2:.*]] = llm.linear_grad {{.*}}, %[[W2]] : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<16x16xf32>
// CHECK: %[[DXN:.*]], %[[DW1:.*]] = llm.linear_grad {{.*}}, %[[W1]] : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<16x16xf32>
// CHECK-NEXT: %[[DXR:.*]] = shard.all_reduce %[[DXN]] on @tp grid_axes = [0] : tensor<4x8x16xf32>
// CHECK-NEXT: %{{.*}}, %[[DG:.*]] = llm.rms_norm_grad %[[DXR]]
// CHECK-NOT: shard.all_gather
// CHECK-DAG: %[[NW:.*]] = llm.global_norm %[[DG]] : tensor<16xf32> -> tensor<f32>
// CHECK-DAG: %[[NW2:.*]] = arith.mulf %[[NW]], %[[NW]] : tensor<f32>
// CHECK-DAG: %[[NS:.*]] = llm.global_norm %[[DW1]], %[[DW2]] : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<f32>
// CHECK-DAG: %[[NS2:.*]] = arith.mulf %[[NS]], %[[NS]] : tensor<f32>
// CHECK-DAG: %[[R:.*]] = shard.all_reduce %[[NS2]] on @tp grid_axes = [0] : tensor<f32> -> tensor<f32>
// CHECK: %[[SUM:.*]] = arith.addf
// CHECK: %[[NORM:.*]] = math.sqrt %[[SUM]] : tensor<f32>
// CHECK: llm.adamw "w1", %[[DW1]], %[[NORM]] {{.*}} : tensor<16x16xf32>, tensor<f32>
// CHECK: llm.adamw "w2", %[[DW2]], %[[NORM]] {{.*}} : tensor<16x16xf32>, tensor<f32>
// CHECK: llm.adamw "g", %[[DG]], %[[NORM]] {{.*}} : tensor<16xf32>, tensor<f32>
shard.grid @tp(shape = 2)
func.func @tp_training_step(%x: tensor<4x8x16xf32>, %dy: tensor<4x8x16xf32>) {
  %w1 = llm.param "w1" normal(0.02) : tensor<32x16xf32>
  %w2 = llm.param "w2" normal(0.02) : tensor<16x32xf32>
  %g = llm.param "g" ones : tensor<16xf32>
  %s1 = shard.sharding @tp split_axes = [[0]] : !shard.sharding
  %w1s = shard.shard %w1 to %s1 annotate_for_users : tensor<32x16xf32>
  %s2 = shard.sharding @tp split_axes = [[], [0]] : !shard.sharding
  %w2s = shard.shard %w2 to %s2 annotate_for_users : tensor<16x32xf32>
  %xn = llm.rms_norm %x, %g eps 1.0e-05 : tensor<4x8x16xf32>, tensor<16xf32>
  %h = llm.linear %xn, %w1s : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %a = llm.gelu %h none : tensor<4x8x32xf32>
  %da, %dw2 = llm.linear_grad %dy, %a, %w2s : tensor<4x8x16xf32>, tensor<4x8x32xf32>, tensor<16x32xf32>
  %dh = llm.gelu_grad %da, %h none : tensor<4x8x32xf32>
  %dxn, %dw1 = llm.linear_grad %dh, %xn, %w1s : tensor<4x8x32xf32>, tensor<4x8x16xf32>, tensor<32x16xf32>
  %dx, %dg = llm.rms_norm_grad %dxn, %x, %g eps 1.0e-05 : tensor<4x8x16xf32>, tensor<16xf32>
  %n = llm.global_norm %dw1, %dw2, %dg : tensor<32x16xf32>, tensor<16x32xf32>, tensor<16xf32> -> tensor<f32>
  llm.adamw "w1", %dw1, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<32x16xf32>, tensor<f32>
  llm.adamw "w2", %dw2, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<16x32xf32>, tensor<f32>
  llm.adamw "g", %dg, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.0 max_norm 1.0 : tensor<16xf32>, tensor<f32>
  return
}

// -----

// The same step on a 2 x 2 grid, data parallel over axis 0 and tensor
// parallel over axis 1: the weight gradients are all-reduced over the data
// axis, the norm's squares over the tensor axis (the parameters' parts name
// their grid axis).
// CHECK-LABEL: func.func @dp_tp_training_step
// CHECK-SAME: (%{{.*}}: tensor<2x8x16xf32>, %{{.*}}: tensor<2x8x16xf32>)
// CHECK: llm.param "w1" normal(2.000000e-02) {llm.shard = {axis = "mesh", blocks = 1 : i64, dim = 0 : i64, grid_axes = array<i64: 1>, parts = 2 : i64}} : tensor<16x16xf32>
// CHECK: %{{.*}}, %[[DW2:.*]] = llm.linear_grad
// CHECK-NEXT: %[[R2:.*]] = shard.all_reduce %[[DW2]] on @mesh grid_axes = [0] : tensor<16x16xf32>
// CHECK: %{{.*}}, %[[DW1:.*]] = llm.linear_grad
// CHECK-NEXT: %[[R1:.*]] = shard.all_reduce %[[DW1]] on @mesh grid_axes = [0] : tensor<16x16xf32>
// CHECK-NEXT: %[[N:.*]] = llm.global_norm %[[R1]], %[[R2]]
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[N]], %[[N]]
// CHECK-NEXT: %[[S:.*]] = shard.all_reduce %[[SQ]] on @mesh grid_axes = [1] : tensor<f32> -> tensor<f32>
// CHECK-NEXT: %[[NORM:.*]] = math.sqrt %[[S]]
// CHECK-NEXT: llm.adamw "w1", %[[R1]], %[[NORM]]
// CHECK-NEXT: llm.adamw "w2", %[[R2]], %[[NORM]]
shard.grid @mesh(shape = 2x2)
func.func @dp_tp_training_step(%x: tensor<4x8x16xf32>, %dy: tensor<4x8x16xf32>) {
  %w1 = llm.param "w1" normal(0.02) : tensor<32x16xf32>
  %w2 = llm.param "w2" normal(0.02) : tensor<16x32xf32>
  %sx = shard.sharding @mesh split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %sx annotate_for_users : tensor<4x8x16xf32>
  %dys = shard.shard %dy to %sx annotate_for_users : tensor<4x8x16xf32>
  %s1 = shard.sharding @mesh split_axes = [[1]] : !shard.sharding
  %w1s = shard.shard %w1 to %s1 annotate_for_users : tensor<32x16xf32>
  %s2 = shard.sharding @mesh split_axes = [[], [1]] : !shard.sharding
  %w2s = shard.shard %w2 to %s2 annotate_for_users : tensor<16x32xf32>
  %h = llm.linear %xs, %w1s : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %a = llm.gelu %h none : tensor<4x8x32xf32>
  %da, %dw2 = llm.linear_grad %dys, %a, %w2s : tensor<4x8x16xf32>, tensor<4x8x32xf32>, tensor<16x32xf32>
  %dh = llm.gelu_grad %da, %h none : tensor<4x8x32xf32>
  %dx, %dw1 = llm.linear_grad %dh, %xs, %w1s : tensor<4x8x32xf32>, tensor<4x8x16xf32>, tensor<32x16xf32>
  %n = llm.global_norm %dw1, %dw2 : tensor<32x16xf32>, tensor<16x32xf32> -> tensor<f32>
  llm.adamw "w1", %dw1, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<32x16xf32>, tensor<f32>
  llm.adamw "w2", %dw2, %n lr 1.0e-3 betas(0.9, 0.95) eps 1.0e-8 weight_decay 0.1 max_norm 1.0 : tensor<16x32xf32>, tensor<f32>
  return
}

// -----

// MoE routing, data parallel: the router and its backward on this rank's
// tokens, the gate's gradient all-reduced.
// CHECK-LABEL: func.func @router_data_parallel
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[WG:.*]]: tensor<4x16xf32>, %[[DP:.*]]: tensor<2x8x2xf32>)
// CHECK-NEXT: %[[P:.*]], %[[I:.*]] = llm.moe_router %[[X]], %[[WG]] top_k 2 normalize : tensor<2x8x16xf32>, tensor<4x16xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
// CHECK-NEXT: %[[DX:.*]], %[[DG:.*]] = llm.moe_router_grad %[[DP]], %[[X]], %[[WG]], %[[P]], %[[I]] top_k 2 normalize : tensor<2x8x2xf32>, tensor<2x8x16xf32>, tensor<4x16xf32>, tensor<2x8x2xi32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[DG]] on @dp grid_axes = [0] : tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: return %[[P]], %[[I]], %[[DX]], %[[R]]
shard.grid @dp(shape = 2)
func.func @router_data_parallel(%x: tensor<4x8x16xf32>, %wg: tensor<4x16xf32>, %dp: tensor<4x8x2xf32>) -> (tensor<4x8x2xf32>, tensor<4x8x2xi32>, tensor<4x8x16xf32>, tensor<4x16xf32>) {
  %s = shard.sharding @dp split_axes = [[0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<4x8x16xf32>
  %p, %i = llm.moe_router %xs, %wg top_k 2 normalize : tensor<4x8x16xf32>, tensor<4x16xf32> -> tensor<4x8x2xf32>, tensor<4x8x2xi32>
  %dx, %dg = llm.moe_router_grad %dp, %xs, %wg, %p, %i top_k 2 normalize : tensor<4x8x2xf32>, tensor<4x8x16xf32>, tensor<4x16xf32>, tensor<4x8x2xi32>
  %pr = shard.shard %p to %s : tensor<4x8x2xf32>
  %ir = shard.shard %i to %s : tensor<4x8x2xi32>
  %dxr = shard.shard %dx to %s : tensor<4x8x16xf32>
  return %pr, %ir, %dxr, %dg : tensor<4x8x2xf32>, tensor<4x8x2xi32>, tensor<4x8x16xf32>, tensor<4x16xf32>
}

// -----

// Dispatch, combine and their backward on a split hidden size: each rank
// moves its columns of every row; the routing weights' gradient (a dot
// product over the hidden size) is all-reduced.
// CHECK-LABEL: func.func @routing_hidden
// CHECK: llm.moe_dispatch {{.*}} : tensor<2x4x8xf32>, tensor<2x4x2xi32> -> tensor<4x8x8xf32>
// CHECK-NEXT: llm.moe_combine {{.*}} : tensor<4x8x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DE:.*]], %[[DW:.*]] = llm.moe_combine_grad {{.*}} : tensor<2x4x8xf32>, tensor<4x8x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[DW]] on @tp grid_axes = [0] : tensor<2x4x2xf32>
// CHECK-NEXT: llm.moe_dispatch_grad %[[DE]], {{.*}} : tensor<4x8x8xf32>, tensor<2x4x2xi32> -> tensor<2x4x8xf32>
shard.grid @tp(shape = 2)
func.func @routing_hidden(%x: tensor<2x4x16xf32>, %p: tensor<2x4x2xf32>, %i: tensor<2x4x2xi32>, %g: tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x2xf32>, tensor<2x4x16xf32>) {
  %s = shard.sharding @tp split_axes = [[], [], [0]] : !shard.sharding
  %xs = shard.shard %x to %s annotate_for_users : tensor<2x4x16xf32>
  %gs = shard.shard %g to %s annotate_for_users : tensor<2x4x16xf32>
  %d = llm.moe_dispatch %xs, %i capacity 0.0 : tensor<2x4x16xf32>, tensor<2x4x2xi32> -> tensor<4x8x16xf32>
  %y = llm.moe_combine %d, %p, %i : tensor<4x8x16xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32> -> tensor<2x4x16xf32>
  %de, %dw = llm.moe_combine_grad %gs, %d, %p, %i : tensor<2x4x16xf32>, tensor<4x8x16xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>
  %dx = llm.moe_dispatch_grad %de, %i : tensor<4x8x16xf32>, tensor<2x4x2xi32> -> tensor<2x4x16xf32>
  %yr = shard.shard %y to %s : tensor<2x4x16xf32>
  %dxr = shard.shard %dx to %s : tensor<2x4x16xf32>
  return %yr, %dw, %dxr : tensor<2x4x16xf32>, tensor<2x4x2xf32>, tensor<2x4x16xf32>
}

