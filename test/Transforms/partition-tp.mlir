// RUN: llm-opt %s -split-input-file --llm-partition-tp="tp=2" | FileCheck %s

// llm-partition-tp on hand-written layers, tp 2. Attention: q / k / v are
// column-parallel (rows of [out, in] split, llm.shard dim 0) reading one
// llm.tp_copy of the input; heads 4 -> 2, KV heads 2 -> 1; o_proj is
// row-parallel (dim 1) and its partial sums meet in llm.tp_reduce.
// CHECK-LABEL: func.func @forward
// CHECK: llm.param "attn.q_proj.weight" {{.*}}{llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 1, parts = 2>} : tensor<4x8xf32>
// CHECK-NEXT: %[[IN:.*]] = llm.tp_copy %{{.*}} axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK-NEXT: %[[Q:.*]] = llm.linear %[[IN]], %{{.*}} -> tensor<?x?x4xf32>
// CHECK-NEXT: llm.param "attn.k_proj.weight" {{.*}}dim = 0,{{.*}} : tensor<2x8xf32>
// CHECK-NEXT: %[[K:.*]] = llm.linear %[[IN]], %{{.*}} -> tensor<?x?x2xf32>
// CHECK-NEXT: llm.param "attn.v_proj.weight" {{.*}}dim = 0,{{.*}} : tensor<2x8xf32>
// CHECK-NEXT: %[[V:.*]] = llm.linear %[[IN]], %{{.*}} -> tensor<?x?x2xf32>
// CHECK-NEXT: %[[A:.*]] = llm.attention %[[Q]], %[[K]], %[[V]] heads 2 kv_heads 1 head_dim 2 {{.*}} : tensor<?x?x4xf32>, tensor<?x?x2xf32>
// CHECK-NEXT: llm.param "attn.o_proj.weight" {{.*}}{llm.shard = #llm.shard<axis = "tp", dim = 1, blocks = 1, parts = 2>} : tensor<8x4xf32>
// CHECK-NEXT: %[[O:.*]] = llm.linear %[[A]], %{{.*}} : tensor<?x?x4xf32>, tensor<8x4xf32> -> tensor<?x?x8xf32>
// CHECK-NEXT: %[[R:.*]] = llm.tp_reduce %[[O]] axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK-NEXT: llm.add %{{.*}}, %[[R]]
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %wq = llm.param "attn.q_proj.weight" normal(0.02) : tensor<8x8xf32>
      %q = llm.linear %in, %wq : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      %wk = llm.param "attn.k_proj.weight" normal(0.02) : tensor<4x8xf32>
      %k = llm.linear %in, %wk : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x4xf32>
      %wv = llm.param "attn.v_proj.weight" normal(0.02) : tensor<4x8xf32>
      %v = llm.linear %in, %wv : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x4xf32>
      %a = llm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 2 scale 0.5 causal : tensor<?x?x8xf32>, tensor<?x?x4xf32>
      %wo = llm.param "attn.o_proj.weight" normal(0.02) : tensor<8x8xf32>
      %o = llm.linear %a, %wo : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      %r = llm.add %in, %o : tensor<?x?x8xf32>
      llm.yield %r : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// MLP with biases: fc1's weight and bias split by rows, the activation runs
// on 16 / 2 features; fc2's weight splits by columns and its bias moves to
// the llm.tp_reduce, which adds it once.
// CHECK-LABEL: func.func @forward
// CHECK: llm.param "mlp.fc1.weight" {{.*}}dim = 0,{{.*}} : tensor<8x8xf32>
// CHECK-NEXT: llm.param "mlp.fc1.bias" zeros {llm.shard = #llm.shard<axis = "tp", dim = 0, blocks = 1, parts = 2>} : tensor<8xf32>
// CHECK-NEXT: %[[IN:.*]] = llm.tp_copy %{{.*}} axis @mesh::@tp
// CHECK-NEXT: %[[H:.*]] = llm.linear %[[IN]], {{.*}} -> tensor<?x?x8xf32>
// CHECK-NEXT: %[[G:.*]] = llm.gelu %[[H]] tanh : tensor<?x?x8xf32>
// CHECK-NEXT: llm.param "mlp.fc2.weight" {{.*}}dim = 1,{{.*}} : tensor<8x8xf32>
// CHECK-NEXT: %[[B:.*]] = llm.param "mlp.fc2.bias" zeros : tensor<8xf32>
// CHECK-NEXT: %[[O:.*]] = llm.linear %[[G]], %{{[0-9]+}} : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
// CHECK-NEXT: %[[R:.*]] = llm.tp_reduce %[[O]] bias %[[B]] : tensor<8xf32> axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK-NEXT: llm.yield %[[R]]
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %w1 = llm.param "mlp.fc1.weight" normal(0.02) : tensor<16x8xf32>
      %b1 = llm.param "mlp.fc1.bias" zeros : tensor<16xf32>
      %h = llm.linear %in, %w1, %b1 : tensor<?x?x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
      %g = llm.gelu %h tanh : tensor<?x?x16xf32>
      %w2 = llm.param "mlp.fc2.weight" normal(0.02) : tensor<8x16xf32>
      %b2 = llm.param "mlp.fc2.bias" zeros : tensor<8xf32>
      %o = llm.linear %g, %w2, %b2 : tensor<?x?x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<?x?x8xf32>
      llm.yield %o : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}
