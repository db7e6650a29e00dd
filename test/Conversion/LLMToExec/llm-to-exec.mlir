// RUN: llm-opt %s -split-input-file --convert-llm-to-exec | FileCheck %s

// convert-llm-to-exec on hand-written, memory-planned steps (llm.offsets
// and llm.arena_bytes as llm-plan-memory sets them).

// The smallest step: a head over the input activations, its loss, its
// backward and the update. One program for rank 0; the micro-batch phase
// runs one kernel per op over arena, input and state buffers, the head's
// weight gradient is added in place into its fp32 accumulator (accumulate)
// and the loss into its own; the step phase takes the norm and updates.
// CHECK-LABEL: func.func @train_step
// CHECK: exec.program "train_step" ranks [0] arena 324 micro_batches 1 outputs {grad_norm = #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>, loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
// CHECK-NEXT: exec.kernel "linear_fwd" ins [#exec.buf<space = input, offset = 0, name = "", shape = [1, 2, 8], dtype = f32>, #exec.buf<space = state, offset = 0, name = "head", shape = [16, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 16], dtype = f32>] {transposed = false}
// CHECK-NEXT: exec.kernel "cross_entropy_fwd" ins [#exec.buf<space = arena, offset = 0, {{.*}}>, #exec.buf<space = input, offset = 1, {{.*}}>] outs [#exec.buf<space = arena, offset = 256, {{.*}}>] {ignore_index = -100 : i64}
// CHECK-NEXT: exec.kernel "fill" ins [] outs [#exec.buf<space = arena, offset = 320, {{.*}}>] {value = 1.000000e+00 : f64}
// CHECK-NEXT: exec.kernel "cross_entropy_bwd" ins [{{.*}}] outs [#exec.buf<space = arena, offset = 128, {{.*}}>] {ignore_index = -100 : i64}
// CHECK-NEXT: exec.kernel "linear_bwd" ins [{{.*}}] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:head", shape = [16, 8], dtype = f32>] {accumulate = true, transposed = false}
// CHECK-NEXT: exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", {{.*}}>, #exec.buf<space = arena, offset = 256, {{.*}}>] outs [#exec.buf<space = accum, offset = 0, name = "loss", {{.*}}>] {}
// CHECK-NEXT: } step {
// CHECK-NEXT: exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:head", {{.*}}>] outs [#exec.buf<space = arena, offset = 0, {{.*}}>] {}
// CHECK-NEXT: exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:head", {{.*}}>, #exec.buf<space = arena, offset = 0, {{.*}}>] outs [] {beta1 = 9.000000e-01 : f64, {{.*}}, param = "head", weight_decay = 1.000000e-01 : f64}
// CHECK-NEXT: {{^ *}}}
module {
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 324 : i64, llm.train_step} {
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %x, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 256>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    %one = arith.constant {llm.offsets = array<i64: 320>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    %dx, %dw = llm.lm_head_grad %dlogits, %x, %w {llm.offsets = array<i64: 0, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %norm = llm.global_norm %dw {llm.offsets = array<i64: 0>} : tensor<16x8xf32> -> tensor<f32>
    llm.adamw "head", %dw, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// A plan of 2 data-parallel ranks and 2 micro-batches, and a fused residual
// add + norm. The region becomes one exec.fused over numbered buffers
// (inputs 0-2, outputs 3-4); the step averages the accumulators over the
// micro-batches (scale 0.5), then gradients and loss over dp in one
// all-reduce (buckets are exec-bucket-gradients', test/Dialect/Exec).
// CHECK-LABEL: func.func @train_step
// CHECK: exec.program "train_step" ranks [0, 1] arena 452 micro_batches 2
// CHECK-NEXT: exec.fused "{{fused_[0-9a-f]+}}" ins [#exec.buf<space = input, offset = 0, {{.*}}>, #exec.buf<space = input, offset = 1, {{.*}}>, #exec.buf<space = state, offset = 0, name = "norm", {{.*}}>] outs [#exec.buf<space = arena, offset = 256, {{.*}}>, #exec.buf<space = arena, offset = 320, {{.*}}>] temps [] body [{ins = array<i64: 0, 1>, kernel = "add", outs = array<i64: 3>, params = {}}, {ins = array<i64: 3, 2>, kernel = "rms_norm_fwd", outs = array<i64: 4>, params = {eps = 1.000000e-05 : f64}}]
// CHECK-NEXT: exec.kernel "linear_fwd"
// CHECK: exec.kernel "linear_bwd" {{.*}}name = "grad:head"{{.*}}{accumulate = true, transposed = false}
// CHECK-NEXT: exec.kernel "rms_norm_bwd"
// CHECK-NEXT: exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:norm", {{.*}}>, #exec.buf<space = arena, offset = 128, {{.*}}>]
// CHECK-NEXT: exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss"
// CHECK-NEXT: } step {
// CHECK-NEXT: exec.kernel "scale" {{.*}}name = "grad:norm"{{.*}} {factor = 5.000000e-01 : f64}
// CHECK-NEXT: exec.kernel "scale" {{.*}}name = "grad:head"{{.*}} {factor = 5.000000e-01 : f64}
// CHECK-NEXT: exec.kernel "scale" {{.*}}name = "loss"{{.*}} {factor = 5.000000e-01 : f64}
// CHECK-NEXT: exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:norm", {{.*}}>, #exec.buf<space = accum, offset = 0, name = "grad:head", {{.*}}>, #exec.buf<space = accum, offset = 0, name = "loss", {{.*}}>]
// CHECK-NEXT: exec.kernel "global_norm"
// CHECK-NEXT: exec.kernel "adamw" {{.*}}param = "norm"
// CHECK-NEXT: exec.kernel "adamw" {{.*}}param = "head", weight_decay
// CHECK-NEXT: {{^ *}}}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 2, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step(%x: tensor<1x2x8xf32>, %b: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 452 : i64, llm.train_step} {
    %g = llm.param "norm" ones : tensor<8xf32>
    %s, %n = llm.fused (%x, %b, %g) {llm.offsets = array<i64: 256, 320>} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<8xf32>) -> (tensor<1x2x8xf32>, tensor<1x2x8xf32>) {
    ^bb0(%a0: tensor<1x2x8xf32>, %a1: tensor<1x2x8xf32>, %a2: tensor<8xf32>):
      %0 = llm.add %a0, %a1 : tensor<1x2x8xf32>
      %1 = llm.rms_norm %0, %a2 eps 1.0e-05 : tensor<1x2x8xf32>, tensor<8xf32>
      llm.fused_yield %0, %1 : tensor<1x2x8xf32>, tensor<1x2x8xf32>
    }
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %n, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 384>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    %one = arith.constant {llm.offsets = array<i64: 448>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    %dn, %dw = llm.lm_head_grad %dlogits, %n, %w {llm.offsets = array<i64: 0, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %ds, %dg = llm.rms_norm_grad %dn, %s, %g eps 1.0e-05 {llm.offsets = array<i64: 64, 128>} : tensor<1x2x8xf32>, tensor<8xf32>
    %norm = llm.global_norm %dw, %dg {llm.offsets = array<i64: 0>} : tensor<16x8xf32>, tensor<8xf32> -> tensor<f32>
    llm.adamw "norm", %dg, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<8xf32>, tensor<f32>
    llm.adamw "head", %dw, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}
