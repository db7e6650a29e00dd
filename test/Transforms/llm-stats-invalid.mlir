// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-stats -o /dev/null

// expected-error @+1 {{no model function: expected a func.func marked llm.forward}}
module attributes {llm.seq_len = 4 : i64} {
}

// -----

// expected-error @+1 {{several functions and none marked llm.forward}}
module attributes {llm.seq_len = 4 : i64} {
  func.func @a() { return }
  func.func @b() { return }
}

// -----

module attributes {llm.seq_len = 4 : i64} {
  // expected-error @+1 {{model has no llm.param: nothing to count}}
  func.func @forward() { return }
}

// -----

module attributes {llm.seq_len = 4 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    // expected-note @+1 {{first declared here}}
    %a = llm.param "w" ones : tensor<4xf32>
    // expected-error @+1 {{duplicate parameter name 'w'}}
    %b = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{no sequence length: the module has no llm.seq_len; pass --llm-stats="seq-len=N"}}
module {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// The verifier refuses a malformed llm.seq_len where the module is read.
// expected-error @+1 {{'builtin.module' op 'llm.seq_len' must be a positive i64, got 0 : i64}}
module attributes {llm.seq_len = 0 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{'llm.seq_len' must be a positive i64, got -3 : i64}}
module attributes {llm.seq_len = -3 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{'llm.seq_len' must be a positive i64, got "long"}}
module attributes {llm.seq_len = "long"} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// A well-formed one out of range is llm-stats' to refuse.
// expected-error @+1 {{llm-stats: module attribute llm.seq_len is invalid: 134217728 : i64 is not a sequence length from 1 to 67108864 (2^26); fix the attribute or pass --llm-stats="seq-len=N"}}
module attributes {llm.seq_len = 134217728 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

// Two parameters of 2^62 elements: each is valid, their sum is not.
module attributes {llm.seq_len = 4 : i64} {
  func.func @forward() -> tensor<4611686018427387904xf32> attributes {llm.forward} {
    %a = llm.param "a" zeros : tensor<4611686018427387904xf32>
    // expected-error @+1 {{total parameter count overflows 64 bits at 'b': check the parameter shapes}}
    %b = llm.param "b" zeros : tensor<4611686018427387904xf32>
    return %a : tensor<4611686018427387904xf32>
  }
}

// -----

module attributes {llm.seq_len = 4 : i64} {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    // expected-note @+1 {{layer 0 first defined here}}
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %g = llm.param "layers.0.norm.weight" ones : tensor<8xf32>
      %n = llm.rms_norm %in, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
      llm.yield %n : tensor<?x?x8xf32>
    }
    // expected-error @+1 {{duplicate layer index 0: every llm.layer needs its own index}}
    %z = llm.layer 0 (%y) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %g = llm.param "layers.1.norm.weight" ones : tensor<8xf32>
      %n = llm.rms_norm %in, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
      llm.yield %n : tensor<?x?x8xf32>
    }
    return %z : tensor<?x?x8xf32>
  }
}

// -----

module attributes {llm.seq_len = 64 : i64} {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %wpe = llm.param "wpe" normal(0.01) : tensor<32x8xf32>
    // expected-error @+1 {{sequence length 64 exceeds the 32 positions of the learned position table 'wpe'; use a sequence length of at most 32}}
    %y = llm.position_embedding %x, %wpe : tensor<?x?x8xf32>, tensor<32x8xf32>
    return %y : tensor<?x?x8xf32>
  }
}
