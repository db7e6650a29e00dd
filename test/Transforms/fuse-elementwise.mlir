// RUN: llm-opt %s -split-input-file --llm-fuse-elementwise | FileCheck %s

// llm-fuse-elementwise on a hand-written @train_step: a residual add and the
// norm that reads its sum become one llm.fused region (the norm's weight,
// declared between them, is an input; the layer tag moves to the region;
// both values read after it are results), and a linear whose pre-activation
// is read elsewhere becomes a GEMM with its tanh GeLU as epilogue.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>, %[[B:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[G:.*]] = llm.param "norm"
// CHECK-NEXT: %[[F:.*]]:2 = llm.fused(%[[X]], %[[B]], %[[G]]) {llm.layer = 3 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
// CHECK-NEXT: ^bb0(%[[A0:.*]]: tensor<2x4x8xf32>, %[[A1:.*]]: tensor<2x4x8xf32>, %[[A2:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[S:.*]] = llm.add %[[A0]], %[[A1]]
// CHECK-NEXT: %[[N:.*]] = llm.rms_norm %[[S]], %[[A2]]
// CHECK-NEXT: llm.fused_yield %[[S]], %[[N]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %[[W:.*]] = llm.param "up"
// CHECK-NEXT: %[[E:.*]]:2 = llm.fused(%[[F]]#1, %[[W]]) : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
// CHECK-NEXT: ^bb0(%[[I0:.*]]: tensor<2x4x8xf32>, %[[I1:.*]]: tensor<16x8xf32>):
// CHECK-NEXT: %[[U:.*]] = llm.linear %[[I0]], %[[I1]]
// CHECK-NEXT: %[[A:.*]] = llm.gelu %[[U]] tanh
// CHECK-NEXT: llm.fused_yield %[[U]], %[[A]] : tensor<2x4x16xf32>, tensor<2x4x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: llm.gelu_grad %[[E]]#1, %[[E]]#0 tanh
// CHECK: return %[[F]]#0,
module {
  func.func @train_step(%x: tensor<2x4x8xf32>, %b: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) attributes {llm.train_step} {
    %s = llm.add %x, %b {llm.layer = 3 : i64} : tensor<2x4x8xf32>
    %g = llm.param "norm" ones {llm.layer = 3 : i64} : tensor<8xf32>
    %n = llm.rms_norm %s, %g eps 1.0e-05 {llm.layer = 3 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %w = llm.param "up" normal(0.02) : tensor<16x8xf32>
    %u = llm.linear %n, %w : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
    %a = llm.gelu %u tanh : tensor<2x4x16xf32>
    %da = llm.gelu_grad %a, %u tanh : tensor<2x4x16xf32>
    %w2 = llm.param "down" normal(0.02) : tensor<8x16xf32>
    %d = llm.linear %da, %w2 : tensor<2x4x16xf32>, tensor<8x16xf32> -> tensor<2x4x8xf32>
    return %s, %d : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  }
}

// -----

// A chain of three (add, GeLU, add) over one activation shape is one
// region; only the last value is read after it, so it is the one result.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: %[[F:.*]] = llm.fused(%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: llm.add
// CHECK-NEXT: llm.gelu
// CHECK-NEXT: llm.add
// CHECK-NEXT: llm.fused_yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]] : tensor<2x4x8xf32>
module {
  func.func @train_step(%x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %s = llm.add %x, %y : tensor<2x4x8xf32>
    %g = llm.gelu %s none : tensor<2x4x8xf32>
    %t = llm.add %g, %x : tensor<2x4x8xf32>
    return %t : tensor<2x4x8xf32>
  }
}
