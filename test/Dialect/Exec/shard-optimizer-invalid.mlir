// RUN: llm-opt %s -split-input-file -verify-diagnostics --exec-shard-optimizer

// expected-error @+1 {{exec-shard-optimizer: needs the module's exec.plan (its ZeRO stage and mesh); run convert-llm-to-exec}}
module {
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
}

// -----

// Under ZeRO-2 a GEMM adding into a whole accumulator in place was lowered
// for another stage.
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 2 : i64}
exec.param "w" : tensor<4x8xbf16> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xbf16> init zeros
exec.program "train_step" ranks [0, 1] arena 1024 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  // expected-error @+1 {{exec-shard-optimizer: under ZeRO-2 each gradient is reduce-scattered as it is made, but this kernel adds into "grad:w" in place; lower with the plan's ZeRO stage (llm-plan-memory, convert-llm-to-exec)}}
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
  // expected-error @+1 {{exec-shard-optimizer: the program is sharded already}}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", shard = "dp", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}

// -----

// The step must average over dp (here it sums).
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 1 : i64}
exec.param "w" : tensor<4x8xbf16> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xbf16> init zeros
// expected-error @+1 {{exec-shard-optimizer: the step has no data-parallel average (exec.all_reduce "dp" avg) to shard}}
exec.program "train_step" ranks [0, 1] arena 1024 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "linear_bwd" ins [#exec.buf<space = arena, offset = 448, name = "", shape = [2, 8], dtype = f32>, #exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {accumulate = true, transposed = false}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.all_reduce "dp" sum [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}

// -----

// Buckets come after sharding: a bucketed program is refused.
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 1 : i64}
exec.param "w" : tensor<4x8xbf16> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xbf16> init zeros
exec.program "train_step" ranks [0, 1] arena 1024 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "linear_bwd" ins [#exec.buf<space = arena, offset = 448, name = "", shape = [2, 8], dtype = f32>, #exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {accumulate = true, transposed = false}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
  // expected-error @+1 {{exec-shard-optimizer: the program has gradient buckets already; shard first (exec-shard-optimizer, then exec-bucket-gradients)}}
  exec.bucket_all_reduce "dp" avg bucket 0 [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>]
} step {
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}

// -----

// An update without its accumulator is refused, not indexed past its end.
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 1 : i64}
exec.program "train_step" ranks [0, 1] arena 64 micro_batches 1 outputs {} micro_batch {
} step {
  // expected-error @+1 {{exec-shard-optimizer: an update reads its gradient accumulator and the norm and names its param}}
  exec.kernel "adamw" ins [] outs [] {param = "w"}
}

// -----

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
  // expected-error @+1 {{exec-shard-optimizer: a second dp average in the step; the unsharded step has one}}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}

// -----

// Every update names a declared parameter (its state's type comes from it).
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 1 : i64}
exec.param "b" : tensor<8xbf16> init zeros
exec.program "train_step" ranks [0, 1] arena 1024 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "linear_bwd" ins [#exec.buf<space = arena, offset = 448, name = "", shape = [2, 8], dtype = f32>, #exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {accumulate = true, transposed = false}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {factor = 5.000000e-01 : f64}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  // expected-error @+1 {{exec-shard-optimizer: updates a parameter no exec.param declares}}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}
