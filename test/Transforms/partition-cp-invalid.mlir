// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-partition-cp="cp=2"

// Diagnostics of llm-partition-cp on hand-written models (cp 2).

// expected-error @+1 {{llm-partition-cp: no function marked 'llm.forward' to partition; import a model (llm-opt config.json) or mark the model function with it}}
module {
}

// -----

// Queries already cut into sequence chunks (type encoding {seq_parts = 2},
// as llm-partition-tp leaves them under sequence parallelism) cannot be cut
// again by context.
module {
  func.func @forward(%x: tensor<?x?x8xf32, {seq_parts = 2 : i64}>) -> tensor<?x?x8xf32, {seq_parts = 2 : i64}> attributes {llm.forward} {
    // expected-error @+1 {{'llm.attention' op llm-partition-cp: attention on sequence-parallel chunks; run llm-partition-cp on whole-sequence attention}}
    %a = llm.attention %x, %x, %x heads 2 kv_heads 2 head_dim 4 scale 0.5 causal : tensor<?x?x8xf32, {seq_parts = 2 : i64}>, tensor<?x?x8xf32, {seq_parts = 2 : i64}>
    return %a : tensor<?x?x8xf32, {seq_parts = 2 : i64}>
  }
}
