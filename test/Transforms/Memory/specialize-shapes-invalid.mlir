// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-specialize-shapes="batch=2 seq=8"

// Diagnostics of llm-specialize-shapes that specialize-shapes.mlir,
// specialize-shapes-defaults.mlir and the model tests (partition-tp.test,
// partition-cp.test, llm-auto-parallel-options.test) do not cover.

// Only the first two dimensions ([batch, seq, ...]) may be dynamic: a
// dynamic feature dimension has no size to take. Function arguments are
// reported at their function.
module {
  // expected-error @+1 {{llm-specialize-shapes: dimension 2 of 'tensor<?x?x?xf32>' is dynamic and is not batch or sequence}}
  func.func @features(%x: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
    return %x : tensor<?x?x?xf32>
  }
}

// -----

// [4, ?, 8] is an MoE buffer [experts, capacity, hidden]; without an
// llm.moe_dispatch to size the capacity, its dynamic dimension is no batch
// or sequence either.
module {
  // expected-error @+1 {{llm-specialize-shapes: dimension 1 of 'tensor<4x?x8xf32>' is dynamic and is not batch or sequence}}
  func.func @capacity(%x: tensor<4x?x8xf32>) -> tensor<4x?x8xf32> {
    return %x : tensor<4x?x8xf32>
  }
}

// -----

// The plan was made for sequences of 32 tokens: seq=8 would specialize the
// module for another job than the plan's.
// expected-error @+1 {{llm-specialize-shapes: seq=8 differs from the plan's sequence length of 32; leave seq= out, or plan again with seq-len=8}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 2, num_micro_batches = 1, seq_len = 32, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @forward(%t: tensor<?x?xi32>) -> tensor<?x?x4xf32> attributes {llm.forward} {
    %w = llm.param "w" normal(0.02) : tensor<10x4xf32>
    %x = llm.embedding %t, %w : tensor<?x?xi32>, tensor<10x4xf32> -> tensor<?x?x4xf32>
    return %x : tensor<?x?x4xf32>
  }
}
