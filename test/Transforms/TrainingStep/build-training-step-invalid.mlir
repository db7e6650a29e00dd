// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-build-training-step

// Diagnostics of llm-build-training-step that errors.mlir and the model
// tests (loss-scale.test, recompute.test, mixtral.test,
// llm-auto-parallel-stack.test) do not cover.

// A module is converted once: a function named @train_step is there already.
// expected-error @+1 {{llm-build-training-step: the module already has a training step}}
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    %logits = llm.lm_head %x, %wte : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
  func.func @train_step() {
    return
  }
}

// -----

// The same when the existing step is found by its mark rather than its name.
// expected-error @+1 {{llm-build-training-step: the module already has a training step}}
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    %logits = llm.lm_head %x, %wte : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
  func.func @step() attributes {llm.train_step} {
    return
  }
}

// -----

// llm.concat (the backward of llm.split) has no backward of its own: a
// forward that uses it on the way to the loss cannot be differentiated.
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    // expected-error @+1 {{'llm.concat' op has no backward yet: llm-build-training-step cannot differentiate it}}
    %c = llm.concat %x, %x : tensor<?x?x8xf32>, tensor<?x?x8xf32> -> tensor<?x?x16xf32>
    %head = llm.param "head" normal(0.02) : tensor<16x16xf32>
    %logits = llm.lm_head %c, %head : tensor<?x?x16xf32>, tensor<16x16xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A multi-result op whose results do not all reach the loss: its backward
// (here llm.split's, an llm.concat of every part's gradient) refuses to
// make up a zero gradient for the unused one.
module {
  func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> attributes {llm.forward} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<16x8xf32> -> tensor<?x?x8xf32>
    // expected-error @+1 {{'llm.split' op result 1 is unused: its gradient would be zero; remove it}}
    %a, %b = llm.split %x [4, 4] : tensor<?x?x8xf32> -> tensor<?x?x4xf32>, tensor<?x?x4xf32>
    %head = llm.param "head" normal(0.02) : tensor<16x4xf32>
    %logits = llm.lm_head %a, %head : tensor<?x?x4xf32>, tensor<16x4xf32> -> tensor<?x?x16xf32>
    %loss = llm.cross_entropy %logits, %l : tensor<?x?x16xf32>, tensor<?x?xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
