// RUN: llm-opt %s -split-input-file --llm-specialize-shapes="batch=2 seq=8" -verify-diagnostics | FileCheck %s

// CHECK: module attributes {llm.micro_batch = 2 : i64, llm.seq_len = 8 : i64}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.*}}: tensor<2x8xi32>) -> tensor<2x8x4xf32>
// CHECK: llm.embedding {{.*}} -> tensor<2x8x4xf32>
module {
  func.func @forward(%t: tensor<?x?xi32>) -> tensor<?x?x4xf32> attributes {llm.forward} {
    %w = llm.param "w" normal(0.02) : tensor<10x4xf32>
    %x = llm.embedding %t, %w : tensor<?x?xi32>, tensor<10x4xf32> -> tensor<?x?x4xf32>
    return %x : tensor<?x?x4xf32>
  }
}

// -----

// MoE buffers get a static capacity: dropless, every token of the
// micro-batch (2 x 8); with a capacity factor c, ceil(c * tokens * top_k /
// experts) = ceil(1.25 * 16 * 2 / 4) = 10 rows per expert.
// CHECK-LABEL: func.func @moe
// CHECK: llm.moe_dispatch {{.*}} -> tensor<4x16x8xf32>
module {
  func.func @moe(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) -> tensor<4x?x8xf32> {
    %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    return %d : tensor<4x?x8xf32>
  }
}

// -----

// CHECK-LABEL: func.func @capped
// CHECK: llm.moe_dispatch {{.*}} -> tensor<4x10x8xf32>
module {
  func.func @capped(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) -> tensor<4x?x8xf32> {
    %d = llm.moe_dispatch %x, %i capacity 1.25 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    return %d : tensor<4x?x8xf32>
  }
}

// -----

module {
  func.func @two(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) -> (tensor<4x?x8xf32>, tensor<4x?x8xf32>) {
    %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    // expected-error @+1 {{MoE layers with different capacities (16 and 10 rows per expert) are not supported}}
    %e = llm.moe_dispatch %x, %i capacity 1.25 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    return %d, %e : tensor<4x?x8xf32>, tensor<4x?x8xf32>
  }
}
