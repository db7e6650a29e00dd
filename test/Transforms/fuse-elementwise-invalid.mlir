// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-fuse-elementwise | FileCheck %s

// llm-fuse-elementwise emits no diagnostics: an input it cannot or should
// not fuse is left as it is, silently (-verify-diagnostics fails on any
// diagnostic). These are such inputs; nothing is fused in any of them.
// CHECK-NOT: llm.fused

// No function marked llm.train_step: nothing to do (a @forward is not
// fused, whatever its ops).
module {
  func.func @forward(%x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.forward} {
    %s = llm.add %x, %y : tensor<2x4x8xf32>
    %g = llm.gelu %s none : tensor<2x4x8xf32>
    return %g : tensor<2x4x8xf32>
  }
}

// -----

// Dynamic shapes (before llm-specialize-shapes): no static row shape.
module {
  func.func @train_step(%x: tensor<?x?x8xf32>, %y: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.train_step} {
    %s = llm.add %x, %y : tensor<?x?x8xf32>
    %g = llm.gelu %s none : tensor<?x?x8xf32>
    return %g : tensor<?x?x8xf32>
  }
}

// -----

// Adjacent ops on different pipeline stages are not fused, nor are ops that
// do not read each other, nor ops over different row shapes.
module {
  func.func @train_step(%x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>, %z: tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>) attributes {llm.train_step} {
    %s = llm.add %x, %y {llm.stage = 0 : i64} : tensor<2x4x8xf32>
    %g = llm.gelu %s none {llm.stage = 1 : i64} : tensor<2x4x8xf32>
    %t = llm.add %x, %x {llm.stage = 1 : i64} : tensor<2x4x8xf32>
    %u, %v = llm.split %z [8, 8] : tensor<2x4x16xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %w = llm.gelu %z none : tensor<2x4x16xf32>
    %r = llm.add %u, %v : tensor<2x4x8xf32>
    return %g, %r, %w : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>
  }
}

// -----

// A linear and its tanh GeLU are fused into a GEMM epilogue only when the
// pre-activation is read elsewhere too (the backward's input), and not for
// an fp8 GEMM nor an exact (erf) GeLU.
module {
  func.func @train_step(%x: tensor<2x4x8xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) attributes {llm.train_step} {
    %w = llm.param "up" normal(0.02) : tensor<16x8xf32>
    %u = llm.linear %x, %w : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
    %a = llm.gelu %u tanh : tensor<2x4x16xf32>
    %u8 = llm.linear %x, %w gemm f8E4M3FN : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
    %a8 = llm.gelu %u8 tanh : tensor<2x4x16xf32>
    %ue = llm.linear %x, %w : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
    %ae = llm.gelu %ue none : tensor<2x4x16xf32>
    return %a, %u8, %a8, %ue, %ae : tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
  }
}
