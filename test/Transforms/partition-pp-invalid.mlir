// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-partition-pp

// Diagnostics of llm-partition-pp on hand-written training steps: the stage
// of an op is that of its llm.layer under the plan's stage_layers.

// A training step with no layer ops has nothing to split.
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 4, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  // expected-error @+1 {{llm-partition-pp: no layers to split into stages}}
  func.func @train_step(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %y = llm.add %x, %x : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
}

// -----

// Layer 2 has no stage in stage_layers [1, 1].
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 4, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %a = llm.add %x, %x {llm.layer = 0 : i64} : tensor<2x4x8xf32>
    // expected-error @+1 {{'llm.add' op llm-partition-pp: layer 2 is outside the plan's stage_layers}}
    %b = llm.add %a, %a {llm.layer = 2 : i64} : tensor<2x4x8xf32>
    return %b : tensor<2x4x8xf32>
  }
}

// -----

// Interleaved stages need equal chunks: 4 layers as [3, 1] are not 2 x 2
// chunks of one layer.
// expected-error @+1 {{llm-partition-pp: interleaved stages need the 4 layers to split evenly into pp x vpp = 4 chunks; plan with fix=vpp:1 or a divisor}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 2, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 4, schedule = "interleaved-1f1b", placement = "tp-cp-dp-pp", stage_layers = [3, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %a = llm.add %x, %x {llm.layer = 0 : i64} : tensor<2x4x8xf32>
    return %a : tensor<2x4x8xf32>
  }
}

// -----

// Only the first and the last stage may share a weight (a tied embedding);
// here stages 0 and 1 of 3 do.
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 3, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 3, seq_len = 4, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    // expected-error-re @+1 {{'llm.param' op llm-partition-pp: parameter 'norm.weight' is used by stages {{[01]}} and {{[01]}}; only the first and last stage may share a weight}}
    %w = llm.param "norm.weight" ones : tensor<8xf32>
    %a = llm.rms_norm %x, %w eps 1.0e-05 {llm.layer = 0 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %b = llm.rms_norm %a, %w eps 1.0e-05 {llm.layer = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %c = llm.add %b, %b {llm.layer = 2 : i64} : tensor<2x4x8xf32>
    return %c : tensor<2x4x8xf32>
  }
}

// -----

// A weight shared by the first and the last stage needs an update whose
// gradient adds the two stages' parts; this step has no update at all.
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 4, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    // expected-error @+1 {{'llm.param' op llm-partition-pp: the gradient of shared parameter 'norm.weight' is not a sum of the two stages' parts}}
    %w = llm.param "norm.weight" ones : tensor<8xf32>
    %a = llm.rms_norm %x, %w eps 1.0e-05 {llm.layer = 0 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %b = llm.rms_norm %a, %w eps 1.0e-05 {llm.layer = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    return %b : tensor<2x4x8xf32>
  }
}
