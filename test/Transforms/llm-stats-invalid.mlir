// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-stats -o /dev/null

// expected-error @+1 {{no model function: expected a func.func @forward}}
module attributes {llm.seq_len = 4 : i64} {
}

// -----

// expected-error @+1 {{several functions and none named @forward}}
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
  func.func @forward() -> tensor<4xf32> {
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
  func.func @forward() -> tensor<4xf32> {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
