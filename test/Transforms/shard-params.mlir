// RUN: llm-opt %s --llm-shard-params="prefetch=false" | FileCheck %s
// RUN: llm-opt %s --llm-shard-params | FileCheck %s --check-prefix=PREFETCH

// llm-shard-params (ZeRO-3, the plan's zero 3 over dp 2) on a hand-written
// training step: every parameter is marked llm.zero3 and each of its readers
// reads an llm.zero_gather made right before it, tagged with the reader's
// layer; the updates name their parameter and gather nothing.
// CHECK: %[[W0:.*]] = llm.param "layers.0.norm.weight" ones {llm.zero3} : tensor<8xf32>
// CHECK-NEXT: %[[W1:.*]] = llm.param "layers.1.norm.weight" ones {llm.zero3} : tensor<8xf32>
// CHECK-NEXT: %[[G0:.*]] = llm.zero_gather %[[W0]] axis @mesh::@dp {llm.layer = 0 : i64} : tensor<8xf32>
// CHECK-NEXT: %[[A:.*]] = llm.rms_norm %{{.*}}, %[[G0]] {{.*}}{llm.layer = 0 : i64}
// CHECK-NEXT: %[[G1:.*]] = llm.zero_gather %[[W1]] axis @mesh::@dp {llm.layer = 1 : i64} : tensor<8xf32>
// CHECK-NEXT: llm.rms_norm %[[A]], %[[G1]] {{.*}}{llm.layer = 1 : i64}
// CHECK-NEXT: llm.global_norm
// CHECK-NOT: llm.zero_gather
// With prefetching (the default), layer 1's gather moves up to where layer 0
// starts computing (llm.prefetch).
// PREFETCH: %[[G0:.*]] = llm.zero_gather %{{.*}} axis @mesh::@dp {llm.layer = 0 : i64} : tensor<8xf32>
// PREFETCH-NEXT: %[[G1:.*]] = llm.zero_gather %{{.*}} axis @mesh::@dp {llm.layer = 1 : i64, llm.prefetch} : tensor<8xf32>
// PREFETCH-NEXT: %[[A:.*]] = llm.rms_norm %{{.*}}, %[[G0]] {{.*}}{llm.layer = 0 : i64}
// PREFETCH-NEXT: llm.rms_norm %[[A]], %[[G1]] {{.*}}{llm.layer = 1 : i64}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 3, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 1, seq_len = 4, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [2], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>) -> tensor<2x4x8xf32> attributes {llm.train_step} {
    %w0 = llm.param "layers.0.norm.weight" ones : tensor<8xf32>
    %w1 = llm.param "layers.1.norm.weight" ones : tensor<8xf32>
    %a = llm.rms_norm %x, %w0 eps 1.0e-05 {llm.layer = 0 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %b = llm.rms_norm %a, %w1 eps 1.0e-05 {llm.layer = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
    %norm = llm.global_norm %g, %g : tensor<8xf32>, tensor<8xf32> -> tensor<f32>
    llm.adamw "layers.0.norm.weight", %g, %norm lr 1.0e-03 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.0 max_norm 1.0 : tensor<8xf32>, tensor<f32>
    llm.adamw "layers.1.norm.weight", %g, %norm lr 1.0e-03 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.0 max_norm 1.0 : tensor<8xf32>, tensor<f32>
    return %b : tensor<2x4x8xf32>
  }
}
