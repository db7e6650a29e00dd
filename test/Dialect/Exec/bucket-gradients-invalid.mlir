// RUN: llm-opt %s -split-input-file -verify-diagnostics --exec-bucket-gradients="bucket-bytes=100"

// Diagnostics of exec-bucket-gradients (a negative bucket-bytes: in
// bucket-gradients.mlir). The unbucketed step averages over dp once.
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
  // expected-error @+1 {{exec-bucket-gradients: a second dp average in the step; the unbucketed step has one}}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.kernel "global_norm" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] {}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "w", weight_decay = 0.0 : f64}
  exec.kernel "adamw" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 0, name = "", shape = [], dtype = f32>] outs [] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, max_norm = 1.0 : f64, param = "b", weight_decay = 0.0 : f64}
}
