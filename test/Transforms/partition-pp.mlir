// RUN: llm-opt %s -split-input-file --llm-partition-pp | FileCheck %s

// llm-partition-pp on hand-written training steps, plan pp 2 with
// stage_layers [1, 1]. Ops of layer l go to its stage; ops before the first
// layer op (embedding) and after the last (embedding backward) to stage 0,
// ops between (head, loss and their backward) to the last stage; parameters
// to the stage of their users. llm.pp_transfer carries a value to the stage
// that reads it.
// CHECK: module attributes {{{.*}}llm.pp = 2 : i64}
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: llm.add {{.*}}{llm.stage = 0 : i64}
// CHECK-NEXT: llm.param "layers.0.norm.weight" ones {llm.stage = 0 : i64}
// CHECK-NEXT: %[[A:.*]] = llm.rms_norm {{.*}}{llm.layer = 0 : i64, llm.stage = 0 : i64}
// CHECK-NEXT: %[[T:.*]] = llm.pp_transfer %[[A]] from 0 to 1 {llm.stage = 1 : i64}
// CHECK-NEXT: llm.param "layers.1.norm.weight" ones {llm.stage = 1 : i64}
// CHECK-NEXT: llm.rms_norm %[[T]], {{.*}}{llm.layer = 1 : i64, llm.stage = 1 : i64}
// CHECK-NEXT: llm.add {{.*}}{llm.stage = 1 : i64}
// CHECK-NEXT: %[[GB:.*]] = llm.add {{.*}}{llm.layer = 1 : i64, llm.stage = 1 : i64}
// CHECK-NEXT: %[[GT:.*]] = llm.pp_transfer %[[GB]] from 1 to 0 {llm.stage = 0 : i64}
// CHECK-NEXT: llm.add %[[GT]], %[[GT]] {llm.layer = 0 : i64, llm.stage = 0 : i64}
// CHECK-NEXT: llm.add {{.*}}{llm.stage = 0 : i64}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 4, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %e = llm.add %x, %x : tensor<2x4x8xf32>
    %w0 = llm.param "layers.0.norm.weight" ones : tensor<8xf32>
    %a = llm.rms_norm %e, %w0 eps 1.0e-05 {llm.layer = 0 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %w1 = llm.param "layers.1.norm.weight" ones : tensor<8xf32>
    %b = llm.rms_norm %a, %w1 eps 1.0e-05 {llm.layer = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %h = llm.add %b, %b : tensor<2x4x8xf32>
    %gb = llm.add %h, %h {llm.layer = 1 : i64} : tensor<2x4x8xf32>
    %ga = llm.add %gb, %gb {llm.layer = 0 : i64} : tensor<2x4x8xf32>
    %ge = llm.add %ga, %ga : tensor<2x4x8xf32>
    return %ge : tensor<2x4x8xf32>
  }
}

// -----

// A weight used by the first and the last stage (a tied embedding) gets a
// copy on each (llm.pp_tied); the sum of the stages' gradient parts moves to
// the per-step tail (stage -1, llm.pp_tied_sum) with the update.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: %[[W0:.*]] = llm.param "tied.weight" ones {llm.pp_tied, llm.stage = 0 : i64}
// CHECK-NEXT: %[[W1:.*]] = llm.param "tied.weight" ones {llm.pp_tied, llm.stage = 1 : i64}
// CHECK-NEXT: llm.rms_norm %{{.*}}, %[[W0]] {{.*}}{llm.layer = 0 : i64, llm.stage = 0 : i64}
// CHECK-NEXT: llm.pp_transfer
// CHECK-NEXT: llm.rms_norm %{{.*}}, %[[W1]] {{.*}}{llm.layer = 1 : i64, llm.stage = 1 : i64}
// CHECK: %[[S:.*]] = llm.add {{.*}}{llm.pp_tied_sum, llm.stage = -1 : i64}
// CHECK-NEXT: llm.global_norm %[[S]] {llm.stage = -1 : i64}
// CHECK-NEXT: llm.adamw "tied.weight", %[[S]], {{.*}}{llm.stage = -1 : i64}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 4, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %w = llm.param "tied.weight" ones : tensor<8xf32>
    %a = llm.rms_norm %x, %w eps 1.0e-05 {llm.layer = 0 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %b = llm.rms_norm %a, %w eps 1.0e-05 {llm.layer = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    // The two stages' parts of the weight's gradient.
    %g1 = llm.add %g, %g {llm.layer = 1 : i64} : tensor<8xf32>
    %g0 = llm.add %g, %g {llm.layer = 0 : i64} : tensor<8xf32>
    %sum = llm.add %g0, %g1 : tensor<8xf32>
    %norm = llm.global_norm %sum : tensor<8xf32> -> tensor<f32>
    llm.adamw "tied.weight", %sum, %norm lr 1.0e-03 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.0 max_norm 1.0 : tensor<8xf32>, tensor<f32>
    return %b : tensor<2x4x8xf32>
  }
}
