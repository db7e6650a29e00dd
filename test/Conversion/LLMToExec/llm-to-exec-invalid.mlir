// RUN: llm-opt %s -split-input-file -verify-diagnostics --convert-llm-to-exec

// Diagnostics of convert-llm-to-exec that errors.test and the model tests
// (llm-auto-parallel-options.test, rope-scaling.test) do not cover. Most
// cases start from the planned step of the smallest model: a head over the
// input activations, its loss and backward, the update (llm-plan-memory
// placed it: llm.offsets, llm.arena_bytes).

// The plan shards ZeRO over groups of 2 of its 4 data-parallel ranks
// (hybrid sharding), which the lowering does not run.
// expected-error @+1 {{convert-llm-to-exec: the plan shards ZeRO over groups of 2 ranks (hybrid sharding), which the lowering does not run; plan with fix=shard:0 or stack=llm-run-cpu}}
module attributes {llm.plan = #llm.plan<dp = 4, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 1, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 1, seq_len = 2, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1, shard = 2>} {
  func.func @train_step() attributes {llm.arena_bytes = 0 : i64, llm.train_step} {
    return
  }
}

// -----

// A pipeline plan whose step was not split into stages (no llm.pp).
// expected-error @+1 {{convert-llm-to-exec: the plan has pp 2; run llm-partition-pp first}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 2, seq_len = 2, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [1, 1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @train_step() attributes {llm.arena_bytes = 0 : i64, llm.train_step} {
    return
  }
}

// -----

// A forward-only step: no global norm, no update, one result.
module {
  // expected-error @+1 {{convert-llm-to-exec: @train_step must end in one llm.global_norm and llm.adamw updates, and return (loss, grad_norm)}}
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> tensor<f32> attributes {llm.arena_bytes = 320 : i64, llm.train_step} {
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %x, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 256>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// The logits have no place in the arena (no llm.offsets): the step was not
// memory-planned after this op was made.
module {
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 324 : i64, llm.train_step} {
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    // expected-error @+1 {{convert-llm-to-exec: a value has no arena offset; run llm-plan-memory first}}
    %logits = llm.lm_head %x, %w : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
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

// A fused region's results are values made inside it, each once: yielding
// a block argument has no kernel output to number.
module {
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 324 : i64, llm.train_step} {
    // expected-error @+1 {{'llm.fused' op convert-llm-to-exec: a fused region yields one value twice or yields an input}}
    %s, %a = llm.fused (%x, %x) {llm.offsets = array<i64: 0, 64>} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> (tensor<1x2x8xf32>, tensor<1x2x8xf32>) {
    ^bb0(%a0: tensor<1x2x8xf32>, %a1: tensor<1x2x8xf32>):
      %0 = llm.add %a0, %a1 : tensor<1x2x8xf32>
      llm.fused_yield %0, %a0 : tensor<1x2x8xf32>, tensor<1x2x8xf32>
    }
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %s, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 256>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    %one = arith.constant {llm.offsets = array<i64: 320>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    %dx, %dw = llm.lm_head_grad %dlogits, %s, %w {llm.offsets = array<i64: 0, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %norm = llm.global_norm %dw {llm.offsets = array<i64: 0>} : tensor<16x8xf32> -> tensor<f32>
    llm.adamw "head", %dw, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// Constants become `fill` kernels: one float value, not a list of them.
module {
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 324 : i64, llm.train_step} {
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %x, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 256>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    // expected-error @+1 {{'arith.constant' op convert-llm-to-exec: only splat float constants}}
    %c = arith.constant {llm.offsets = array<i64: 320>} dense<[1.0, 2.0]> : tensor<2xf32>
    %one = arith.constant {llm.offsets = array<i64: 320>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    %dx, %dw = llm.lm_head_grad %dlogits, %x, %w {llm.offsets = array<i64: 0, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %norm = llm.global_norm %dw {llm.offsets = array<i64: 0>} : tensor<16x8xf32> -> tensor<f32>
    llm.adamw "head", %dw, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// An op the conversion has no kernel for (here an arith op on tensors).
module {
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 324 : i64, llm.train_step} {
    // expected-error @+1 {{'arith.addf' op convert-llm-to-exec: no kernel for this op yet}}
    %y = arith.addf %x, %x {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %y, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 256>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    %one = arith.constant {llm.offsets = array<i64: 320>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    %dx, %dw = llm.lm_head_grad %dlogits, %y, %w {llm.offsets = array<i64: 0, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %norm = llm.global_norm %dw {llm.offsets = array<i64: 0>} : tensor<16x8xf32> -> tensor<f32>
    llm.adamw "head", %dw, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// The head's weight gradient is read only by the global norm: its backward
// would add it in place into an accumulator, but no llm.adamw updates
// "head", so there is none (only "wte" is updated).
module {
  func.func @train_step(%t: tensor<1x2xi32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 580 : i64, llm.train_step} {
    %wte = llm.param "wte" normal(0.02) : tensor<16x8xf32>
    %x = llm.embedding %t, %wte {llm.offsets = array<i64: 256>} : tensor<1x2xi32>, tensor<16x8xf32> -> tensor<1x2x8xf32>
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %x, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 576>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    %one = arith.constant {llm.offsets = array<i64: 320>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    // expected-error @+1 {{'llm.lm_head_grad' op convert-llm-to-exec: a weight gradient added in place has no accumulator on this stage}}
    %dx, %dw = llm.lm_head_grad %dlogits, %x, %w {llm.offsets = array<i64: 512, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %dwte = llm.embedding_grad %t, %dx {llm.offsets = array<i64: 0>} : tensor<1x2xi32>, tensor<1x2x8xf32> -> tensor<16x8xf32>
    %norm = llm.global_norm %dwte, %dw {llm.offsets = array<i64: 0>} : tensor<16x8xf32>, tensor<16x8xf32> -> tensor<f32>
    llm.adamw "wte", %dwte, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// A ZeRO-3 gather prefetched (llm.prefetch: the compute stream waits for it
// right before its first reader) that no op reads.
module {
  llm.grid @mesh {
    llm.grid_axis @dp size 2
  }
  // expected-error @+1 {{convert-llm-to-exec: a prefetched parameter gather has no reader on its stage}}
  func.func @train_step(%x: tensor<1x2x8xf32>, %l: tensor<1x2xi32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 324 : i64, llm.train_step} {
    %w = llm.param "head" normal(0.02) : tensor<16x8xf32>
    %logits = llm.lm_head %x, %w {llm.offsets = array<i64: 0>} : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
    %loss = llm.cross_entropy %logits, %l {llm.offsets = array<i64: 256>} : tensor<1x2x16xf32>, tensor<1x2xi32> -> tensor<f32>
    %one = arith.constant {llm.offsets = array<i64: 320>} dense<1.0> : tensor<f32>
    %dlogits = llm.cross_entropy_grad %logits, %l, %one {llm.offsets = array<i64: 128>} : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<f32>
    %dx, %dw = llm.lm_head_grad %dlogits, %x, %w {llm.offsets = array<i64: 0, -1>} : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<16x8xf32>
    %g = llm.zero_gather %w axis @mesh::@dp {llm.offsets = array<i64: 0>, llm.prefetch} : tensor<16x8xf32>
    %norm = llm.global_norm %dw {llm.offsets = array<i64: 0>} : tensor<16x8xf32> -> tensor<f32>
    llm.adamw "head", %dw, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<16x8xf32>, tensor<f32>
    return %loss, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// Pipeline stages: the norm weight "g" lives on stage 1, but its gradient
// is computed on stage 0, so stage 1's program has nothing to accumulate
// for its update. (A cut-down step: the norm stands in for the loss.)
module attributes {llm.pp = 2 : i64} {
  // expected-error @+1 {{convert-llm-to-exec: a parameter gradient is not computed on the stage that updates it}}
  func.func @train_step(%x: tensor<1x2x8xf32>, %dy: tensor<1x2x8xf32>) -> (tensor<f32>, tensor<f32>) attributes {llm.arena_bytes = 128 : i64, llm.train_step} {
    %g = llm.param "g" ones {llm.stage = 1 : i64} : tensor<8xf32>
    %dx, %dg = llm.rms_norm_grad %dy, %x, %g eps 1.0e-05 {llm.offsets = array<i64: 0, 64>, llm.stage = 0 : i64} : tensor<1x2x8xf32>, tensor<8xf32>
    %norm = llm.global_norm %dg {llm.offsets = array<i64: 96>} : tensor<8xf32> -> tensor<f32>
    llm.adamw "g", %dg, %norm lr 3.0e-04 betas(0.9, 0.95) eps 1.0e-08 weight_decay 0.1 max_norm 1.0 : tensor<8xf32>, tensor<f32>
    return %norm, %norm : tensor<f32>, tensor<f32>
  }
}
