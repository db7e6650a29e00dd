// Defaults: the plan's micro-batch and sequence length, which wins over the
// model's default length (llm.seq_len = 16).
// RUN: llm-opt %s --llm-specialize-shapes | FileCheck %s
// RUN: not llm-opt %S/Inputs/no-seq.mlir --llm-specialize-shapes 2>&1 | FileCheck %s --check-prefix=MISSING

// CHECK: llm.embedding {{.*}} -> tensor<4x32x4xf32>
// MISSING: error: llm-specialize-shapes: no batch or sequence length: pass batch=N seq=N, or plan the module first
module attributes {llm.seq_len = 16 : i64, llm.plan = #llm.plan<dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 4, num_micro_batches = 2, seq_len = 32, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @forward(%t: tensor<?x?xi32>) -> tensor<?x?x4xf32> attributes {llm.forward} {
    %w = llm.param "w" normal(0.02) : tensor<10x4xf32>
    %x = llm.embedding %t, %w : tensor<?x?xi32>, tensor<10x4xf32> -> tensor<?x?x4xf32>
    return %x : tensor<?x?x4xf32>
  }
}
