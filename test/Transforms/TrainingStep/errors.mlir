// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-build-training-step

// expected-error @+1 {{llm-build-training-step: no function marked 'llm.forward'; import a model (llm-opt config.json) or mark the model function with it}}
module {
}

// -----

module {
  // expected-error @+1 {{llm-build-training-step: @forward must return the loss of one llm.cross_entropy}}
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<?x?xi32> attributes {llm.forward} {
    return %t : tensor<?x?xi32>
  }
}

// -----

// The runtime feeds (tokens, labels): an extra argument is refused.
module {
  // expected-error @+1 {{llm-build-training-step: @forward must take (tokens, labels), two tensor<?x?xi32> [batch, seq]; it takes 3 arguments}}
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>, %x: tensor<?x?xi32>) -> tensor<?x?xi32> attributes {llm.forward} {
    return %t : tensor<?x?xi32>
  }
}

// -----

// A router whose weights never reach the loss (only its indices are used)
// would not be trained.
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    // expected-error @+1 {{parameter 'gate' gets no gradient: it does not affect the loss}}
    %wg = llm.param "gate" normal(0.02) : tensor<4x8xf32>
    %p, %i = llm.moe_router %x, %wg top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
    %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    %w1 = llm.param "e.*.w1" normal(0.02) : tensor<4x16x8xf32>
    %w2 = llm.param "e.*.w2" normal(0.02) : tensor<4x8x16xf32>
    %e = llm.moe_experts %d, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
    %wg2 = llm.param "gate2" normal(0.02) : tensor<4x8xf32>
    %p2, %i2 = llm.moe_router %x, %wg2 top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
    %y = llm.moe_combine %e, %p2, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
    %logits = llm.lm_head %y, %wte : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A parameter that does not reach the loss would never be trained.
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    // expected-error @+1 {{parameter 'unused' gets no gradient: it does not affect the loss}}
    %u = llm.param "unused" zeros : tensor<8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    %logits = llm.lm_head %x, %wte : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
