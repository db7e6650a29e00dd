// RUN: llm-opt %s -split-input-file --llm-specialize-shapes="batch=2 seq=8" -verify-diagnostics | FileCheck %s

// CHECK: module attributes {llm.micro_batch = 2 : i64, llm.seq_len = 8 : i64}
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.*}}: tensor<2x8xi32>) -> tensor<2x8x4xf32>
// CHECK: llm.embedding {{.*}} -> tensor<2x8x4xf32>
module {
  func.func @forward(%t: tensor<?x?xi32>) -> tensor<?x?x4xf32> {
    %w = llm.param "w" normal(0.02) : tensor<10x4xf32>
    %x = llm.embedding %t, %w : tensor<?x?xi32>, tensor<10x4xf32> -> tensor<?x?x4xf32>
    return %x : tensor<?x?x4xf32>
  }
}

// -----

module {
  func.func @moe(%x: tensor<?x?x8xf32>, %i: tensor<?x?x2xi32>) -> tensor<4x?x8xf32> {
    // expected-error @+1 {{llm-specialize-shapes: dimension 1 of 'tensor<4x?x8xf32>' is dynamic and is not batch or sequence}}
    %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    return %d : tensor<4x?x8xf32>
  }
}
