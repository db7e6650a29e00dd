// RUN: llm-opt %s -split-input-file --exec-shard-optimizer | FileCheck %s
// RUN: llm-opt %s -split-input-file --exec-shard-optimizer | FileCheck %s --check-prefix=NOWHOLE

// ZeRO-1 over dp 2: the step all-reduces the loss alone and reduce-scatters
// the gradients; each rank squares (the sum all-reduced), unscales and
// updates its chunk; the updated chunks are all-gathered into the whole
// (bf16) parameters. The micro-batches are unchanged: the GEMM still adds
// into its whole accumulator.
// CHECK-LABEL: exec.program "train_step" ranks [0, 1]
// CHECK: exec.kernel "linear_bwd" {{.*}}name = "grad:w"{{.*}}accumulate = true
// CHECK: } step {
// CHECK-NEXT: exec.kernel "scale"
// CHECK-NEXT: exec.all_reduce "dp" avg [#exec.buf<{{.*}}name = "loss"{{.*}}>]
// CHECK-NEXT: exec.reduce_scatter "dp" avg [#exec.buf<{{.*}}name = "grad:w"{{.*}}>, #exec.buf<{{.*}}name = "grad:b"{{.*}}>]
// CHECK-NEXT: exec.kernel "sum_squares" {{.*}} {shard = "dp"}
// CHECK-NEXT: exec.all_reduce "dp" sum [#exec.buf<space = arena
// CHECK-NEXT: exec.kernel "sqrt"
// CHECK-NEXT: exec.kernel "adamw" {{.*}}param = "w", shard = "dp"
// CHECK-NEXT: exec.kernel "adamw" {{.*}}param = "b", shard = "dp"
// CHECK-NEXT: exec.all_gather "dp" [#exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = bf16>, #exec.buf<space = state, offset = 0, name = "b", shape = [8], dtype = bf16>]
// CHECK-NEXT: {{^ *}}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 1 : i64}
exec.param "w" : tensor<4x8xbf16> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xbf16> init zeros
exec.program "train_step" ranks [0, 1] arena 1024 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "linear_bwd" ins [#exec.buf<space = arena, offset = 448, name = "", shape = [2, 8], dtype = f32>, #exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {accumulate = true, transposed = false}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}

// -----

// ZeRO-2 over dp 4 with experts over edp (ep 2, so chunks of dp / ep = 2):
// each micro-batch's gradient is reduce-scattered into its chunk
// accumulator (ceil(32 / 4) = 8 dense elements, ceil(6 / 2) = 3 expert
// elements), which replaces the whole one everywhere; no reduce-scatter in
// the step, the experts' average over edp goes; squares and unscaling per
// chunk axis.
// CHECK-LABEL: exec.program "train_step" ranks [0, 1, 2, 3]
// CHECK-NEXT: exec.grad_reduce_scatter "dp" avg <space = arena, offset = 64{{.*}}> into <space = accum, offset = 0, name = "grad_shard:w", shape = [8], dtype = f32>
// CHECK-NEXT: exec.grad_reduce_scatter "edp" avg <space = arena, offset = 320{{.*}}> into <space = accum, offset = 0, name = "grad_shard:e", shape = [3], dtype = f32>
// CHECK-NEXT: exec.kernel "add" {{.*}}name = "loss"
// CHECK-NEXT: } step {
// CHECK-NEXT: exec.all_reduce "dp" avg [#exec.buf<{{.*}}name = "loss"{{.*}}>]
// CHECK-NEXT: exec.kernel "scale" ins [#exec.buf<{{.*}}name = "grad_shard:e"
// CHECK-NEXT: exec.kernel "loss_unscale" ins [#exec.buf<{{.*}}name = "grad_shard:w"{{.*}} {shard = "dp"}
// CHECK-NEXT: exec.kernel "loss_unscale" ins [#exec.buf<{{.*}}name = "grad_shard:e"{{.*}} {shard = "edp"}
// CHECK-NEXT: exec.kernel "sum_squares" {{.*}} {shard = "dp"}
// CHECK-NEXT: exec.all_reduce "dp" sum
// CHECK-NEXT: exec.kernel "sum_squares" {{.*}} {shard = "edp"}
// CHECK-NEXT: exec.all_reduce "edp" sum
// CHECK-NEXT: exec.all_reduce "ep" sum
// CHECK-NEXT: exec.kernel "adamw" ins [#exec.buf<{{.*}}name = "grad_shard:w"{{.*}}shard = "dp"
// CHECK-NEXT: exec.kernel "adamw" ins [#exec.buf<{{.*}}name = "grad_shard:e"{{.*}}shard = "edp"
// CHECK-NEXT: exec.all_gather "dp" [#exec.buf<space = state, offset = 0, name = "w"
// CHECK-NEXT: exec.all_gather "edp" [#exec.buf<space = state, offset = 0, name = "e"
// CHECK-NEXT: {{^ *}}}
// Under ZeRO-2 no whole accumulator is left anywhere in the program.
// NOWHOLE-LABEL: exec.program "train_step" ranks [0, 1, 2, 3]
// NOWHOLE-NOT: name = "grad:
// NOWHOLE: exec.all_gather "edp"
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 4 : i64, ep = 2 : i64, pp = 1 : i64, tp = 1 : i64}, world = 4 : i64, zero = 2 : i64}
exec.param "w" : tensor<4x8xf32> init normal {std = 2.0e-02 : f64}
exec.param "e" : tensor<2x3xf32> init normal {std = 2.0e-02 : f64, shard = {axis = "ep", blocks = 1 : i64, dim = 0 : i64, parts = 2 : i64}}
exec.program "train_step" ranks [0, 1, 2, 3] arena 1024 micro_batches 1 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 64, name = "", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>, #exec.buf<space = arena, offset = 320, name = "", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.all_reduce "edp" avg [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>]
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.kernel "loss_unscale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "scratch:found_inf", shape = [], dtype = f32>] {}
  exec.kernel "loss_unscale" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "scratch:found_inf_experts", shape = [], dtype = f32>] {}
  exec.kernel "sum_squares" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "sum_squares" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "scratch:norm_sq_experts", shape = [], dtype = f32>] {}
  exec.all_reduce "ep" sum [#exec.buf<space = accum, offset = 0, name = "scratch:norm_sq_experts", shape = [], dtype = f32>]
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "e", weight_decay = 0.0 : f64}
}

// -----

// ZeRO-3: as ZeRO-2, without the all-gathers (the parameters stay chunks,
// gathered where used).
// CHECK-LABEL: exec.program "train_step" ranks [0, 1, 2, 3]
// CHECK: exec.kernel "adamw" {{.*}}shard = "edp"
// CHECK-NEXT: {{^ *}}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 4 : i64, ep = 2 : i64, pp = 1 : i64, tp = 1 : i64}, world = 4 : i64, zero = 3 : i64}
exec.param "w" : tensor<4x8xf32> init normal {std = 2.0e-02 : f64}
exec.param "e" : tensor<2x3xf32> init normal {std = 2.0e-02 : f64, shard = {axis = "ep", blocks = 1 : i64, dim = 0 : i64, parts = 2 : i64}}
exec.program "train_step" ranks [0, 1, 2, 3] arena 1024 micro_batches 1 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 64, name = "", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>, #exec.buf<space = arena, offset = 320, name = "", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.all_reduce "edp" avg [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>]
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.kernel "loss_unscale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "scratch:found_inf", shape = [], dtype = f32>] {}
  exec.kernel "loss_unscale" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "scratch:found_inf_experts", shape = [], dtype = f32>] {}
  exec.kernel "sum_squares" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "sum_squares" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "scratch:norm_sq_experts", shape = [], dtype = f32>] {}
  exec.all_reduce "ep" sum [#exec.buf<space = accum, offset = 0, name = "scratch:norm_sq_experts", shape = [], dtype = f32>]
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "e", weight_decay = 0.0 : f64}
}

// -----

// ZeRO-0: nothing changes.
// CHECK-LABEL: exec.program "train_step" ranks [0, 1]
// CHECK-NOT: shard
// CHECK: exec.all_reduce "dp" avg [#exec.buf<{{.*}}name = "grad:w"
// CHECK-NOT: shard
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 0 : i64}
exec.param "w" : tensor<4x8xbf16> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xbf16> init zeros
exec.program "train_step" ranks [0, 1] arena 1024 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "linear_bwd" ins [#exec.buf<space = arena, offset = 448, name = "", shape = [2, 8], dtype = f32>, #exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {accumulate = true, transposed = false}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}
