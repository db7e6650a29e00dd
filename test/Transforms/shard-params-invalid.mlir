// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-shard-params

// Diagnostics of llm-shard-params on hand-written modules. Both are also
// checked from JSON models through the planner (partition-errors.test,
// llm-auto-parallel-stack.test); here the plan alone decides.

// ZeRO over groups of 2 of the 4 dp ranks (hybrid sharding) is not lowered.
// expected-error @+1 {{llm-shard-params: the plan shards ZeRO over groups of 2 ranks (hybrid sharding), which the lowering does not run; plan with fix=shard:0 or stack=llm-run-cpu}}
module attributes {llm.plan = #llm.plan<dp = 4, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 3, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 1, seq_len = 4, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1, shard = 2>} {
}

// -----

// ZeRO-3 gathers parameters in the training step, which the model function
// alone does not have yet.
// expected-error @+1 {{llm-shard-params: no function marked 'llm.train_step'; run llm-build-training-step first}}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 3, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 1, seq_len = 4, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.forward} {
    %w = llm.param "norm.weight" ones : tensor<8xf32>
    %y = llm.rms_norm %x, %w eps 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
    return %y : tensor<2x4x8xf32>
  }
}
