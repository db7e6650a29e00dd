// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-plan-memory="alignment=3"
// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-plan-memory="alignment=0"
// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-plan-memory="alignment=-256"

// Diagnostics of llm-plan-memory that plan-memory.mlir does not cover.

// Buffers are placed at multiples of the alignment, which must be a power
// of two (0 and negative values are none).
// expected-error @+1 {{llm-plan-memory: alignment must be a power of two, got}}
module {
  func.func @train_step(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> attributes {llm.train_step} {
    %g = llm.param "g" ones : tensor<8xf32>
    %a = llm.rms_norm %x, %g eps 1.0e-05 : tensor<1x4x8xf32>, tensor<8xf32>
    return %a : tensor<1x4x8xf32>
  }
}
