// RUN: llm-opt %s --llm-stats | FileCheck %s
// RUN: llm-opt %s --llm-stats="micro-batch=2 seq-len=8" | FileCheck %s --check-prefix=MB2

// A one-layer model written by hand: 4 * 8 (embedding, tied head)
// + 8 (norm) + 8*8 (linear) + 8 (final norm) = 112 parameters.
module attributes {llm.name = "hand", llm.seq_len = 4 : i64} {
  func.func @forward(%tok: tensor<?x?xi32>, %labels: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
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

// The label column is as wide as the longest label, so every value and note
// lines up; FLOPs take SI prefixes, bytes binary ones.
// CHECK: model hand, 1 layers, seq_len 4
// CHECK-NEXT: parameters
// CHECK-NEXT: {{^}}  total                                      112  112{{$}}
// CHECK-NEXT: {{^}}  embedding (input tables)                    32  32{{$}}
// CHECK-NEXT: {{^}}  lm head                                   tied  shares the input embedding{{$}}
// CHECK-NEXT: {{^}}  per layer                                   72  x 1{{$}}
// CHECK-NEXT: {{^}}  other (final norm)                           8  8{{$}}
// CHECK-NEXT: training FLOPs per token
// N = 64 (linear) + 32 (head): 6N = 576 FLOP per token.
// CHECK-NEXT: {{^}}  N = GEMM weights per token                  96  LM head in, embedding lookups out{{$}}
// CHECK-NEXT: {{^}}  6N                                    576 FLOP{{$}}
// CHECK-NEXT: {{^}}  attention 12 * s * heads * head_dim     0 FLOP  per token, summed over layers{{$}}
// CHECK-NEXT: {{^}}  total                                 576 FLOP{{$}}
// CHECK-NEXT: {{^}}  sum of op costs                       {{ *[0-9]+}} FLOP  causal masking, norms and activations counted{{$}}
// CHECK-NEXT: bytes
// 112 fp32 parameters: 448 B of weights, 16 * 112 = 1792 B = 1.75 KiB of state.
// CHECK-NEXT: {{^}}  weights                                   448 B{{$}}
// CHECK-NEXT: {{^}}  weights + grads + AdamW (16 B/param)  1.75 KiB{{$}}
// Full recompute keeps the layer input: 4 tokens * 8 * 4 B = 128 B.
// CHECK: {{^}}  activations, full recompute              128 B  per layer, micro-batch 1{{$}}

// MB2: model hand, 1 layers, seq_len 8
// MB2: activations, full recompute {{ *}}512 B  per layer, micro-batch 2
