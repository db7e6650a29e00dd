// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-partition-ep="ep=2"

// Diagnostics of llm-partition-ep on hand-written models (ep 2).

// expected-error @+1 {{llm-partition-ep: no function marked 'llm.forward' to partition; import a model (llm-opt config.json) or mark the model function with it}}
module {
}

// -----

// Expert-parallel ranks are data-parallel ranks: ep 2 does not divide dp 3.
// expected-error @+1 {{llm-partition-ep: ep 2 does not divide dp 3 (expert-parallel ranks are data-parallel ranks)}}
module attributes {llm.plan = #llm.plan<dp = 3, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 2, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 1, seq_len = 4, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    return %x : tensor<?x?x8xf32>
  }
}

// -----

// One parameter as both the gate and the up projection of the experts
// cannot be split for each.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %wg = llm.param "moe.gate.weight" normal(0.02) : tensor<4x8xf32>
    %p, %i = llm.moe_router %x, %wg top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
    %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    %w1 = llm.param "moe.experts.*.w1.weight" normal(0.02) : tensor<4x16x8xf32>
    %w2 = llm.param "moe.experts.*.w2.weight" normal(0.02) : tensor<4x8x16xf32>
    // expected-error @+1 {{'llm.moe_experts' op llm-partition-ep: expects expert weights that are llm.param used only here}}
    %e = llm.moe_experts %d, %w1, %w1, %w2 swiglu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
    %c = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
    return %c : tensor<?x?x8xf32>
  }
}
