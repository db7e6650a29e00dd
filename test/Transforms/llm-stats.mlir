// RUN: llm-opt %s --llm-stats | FileCheck %s
// RUN: llm-opt %s --llm-stats="micro-batch=2 seq-len=8" | FileCheck %s --check-prefix=MB2

// A one-layer model written by hand: 4 * 8 (embedding, tied head)
// + 8 (norm) + 8*8 (linear) + 8 (final norm) = 112 parameters.
module attributes {llm.name = "hand", llm.seq_len = 4 : i64} {
  func.func @forward(%tok: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
    %wte = llm.param "wte" normal(0.02) : tensor<4x8xf32>
    %x = llm.embedding %tok, %wte : tensor<?x?xi32>, tensor<4x8xf32> -> tensor<?x?x8xf32>
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %g = llm.param "layers.0.norm.weight" ones : tensor<8xf32>
      %n = llm.rms_norm %in, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
      %w = llm.param "layers.0.fc.weight" normal(0.02) : tensor<8x8xf32>
      %h = llm.linear %n, %w : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      %r = llm.add %in, %h : tensor<?x?x8xf32>
      llm.yield %r : tensor<?x?x8xf32>
    }
    %gf = llm.param "norm.weight" ones : tensor<8xf32>
    %f = llm.rms_norm %y, %gf eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
    %logits = llm.lm_head %f, %wte : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x4xf32>
    %loss = llm.cross_entropy %logits, %labels : tensor<?x?x4xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// CHECK: model hand, 1 layers, seq_len 4
// CHECK: parameters
// CHECK: total {{ *}}112  112
// CHECK: embedding (input tables) {{ *}}32  32
// CHECK: lm head {{ *}}tied  shares the input embedding
// CHECK: per layer {{ *}}72  x 1
// CHECK: other (final norm) {{ *}}8  8
// N = 64 (linear) + 32 (head): 6N = 576 FLOP per token.
// CHECK: N = GEMM weights per token {{ *}}96
// CHECK: total {{ *}}576FLOP

// MB2: model hand, 1 layers, seq_len 8
// MB2: micro-batch 2
