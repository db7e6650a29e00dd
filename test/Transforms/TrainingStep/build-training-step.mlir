// RUN: llm-opt %s --llm-build-training-step | FileCheck %s

// The smallest model with a layer, a residual and a tied embedding:
// @forward stays as it is; @train_step is its copy with the layer inlined
// (its ops tagged llm.layer = 0), the backward from d(loss) = 1 in reverse
// order (the residual's and the tied table's gradients summed, the layer's
// backward tagged too), one global norm over every parameter's gradient and
// an llm.adamw per parameter in declaration order; it returns (loss, norm).

// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {llm.forward}
// CHECK: llm.layer 0

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[T:.*]]: tensor<?x?xi32>, %[[L:.*]]: tensor<?x?xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.train_step}
// CHECK-NEXT: %[[WTE:.*]] = llm.param "wte"
// CHECK-NEXT: %[[X:.*]] = llm.embedding %[[T]], %[[WTE]] :
// CHECK-NEXT: %[[G:.*]] = llm.param "norm" ones {llm.layer = 0 : i64}
// CHECK-NEXT: %[[N:.*]] = llm.rms_norm %[[X]], %[[G]] eps {{.*}} {llm.layer = 0 : i64}
// CHECK-NEXT: %[[S:.*]] = llm.add %[[X]], %[[N]] {llm.layer = 0 : i64}
// CHECK-NEXT: %[[LOGITS:.*]] = llm.lm_head %[[S]], %[[WTE]] :
// CHECK-NEXT: %[[LOSS:.*]] = llm.cross_entropy %[[LOGITS]], %[[L]] :
// CHECK-NEXT: %[[ONE:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DLOGITS:.*]] = llm.cross_entropy_grad %[[LOGITS]], %[[L]], %[[ONE]] :
// CHECK-NEXT: %[[DS:.*]], %[[DHEAD:.*]] = llm.lm_head_grad %[[DLOGITS]], %[[S]], %[[WTE]] :
// CHECK-NEXT: %[[DN:.*]], %[[DG:.*]] = llm.rms_norm_grad %[[DS]], %[[X]], %[[G]] eps {{.*}} {llm.layer = 0 : i64}
// CHECK-NEXT: %[[DX:.*]] = llm.add %[[DS]], %[[DN]] {llm.layer = 0 : i64}
// CHECK-NEXT: %[[DEMB:.*]] = llm.embedding_grad %[[T]], %[[DX]] :
// CHECK-NEXT: %[[DWTE:.*]] = llm.add %[[DHEAD]], %[[DEMB]] : tensor<16x8xf32>
// CHECK-NEXT: %[[NORM:.*]] = llm.global_norm %[[DWTE]], %[[DG]] : tensor<16x8xf32>, tensor<8xf32> -> tensor<f32>
// CHECK-NEXT: llm.adamw "wte", %[[DWTE]], %[[NORM]] lr 3.000000e-04
// CHECK-NEXT: llm.adamw "norm", %[[DG]], %[[NORM]] lr 3.000000e-04
// CHECK-NEXT: return %[[LOSS]], %[[NORM]] : tensor<f32>, tensor<f32>
// CHECK-NOT: llm.layer 0
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %g = llm.param "norm" ones : tensor<8xf32>
      %n = llm.rms_norm %in, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
      %s = llm.add %in, %n : tensor<?x?x8xf32>
      llm.yield %s : tensor<?x?x8xf32>
    }
    %logits = llm.lm_head %y, %wte : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
