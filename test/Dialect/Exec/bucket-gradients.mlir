// RUN: llm-opt %s -split-input-file --exec-bucket-gradients="bucket-bytes=100" | FileCheck %s
// RUN: llm-opt %s -split-input-file --exec-bucket-gradients="bucket-bytes=0" | FileCheck %s --check-prefix=NONE
// RUN: not llm-opt %s -split-input-file --exec-bucket-gradients="bucket-bytes=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NONE-NOT: bucket
// NEGATIVE: error: exec-bucket-gradients: bucket-bytes must be 0 (no buckets) or positive, got -1

// Data parallelism: grad:w (128 bytes) fills a bucket of 100 bytes as soon
// as the GEMM has added into it, so its all-reduce starts right after the
// GEMM; grad:b (32 bytes) starts when the backward ends, before the loss is
// added. The step waits for both and all-reduces only the loss.
// CHECK-LABEL: exec.program "train_step"
// CHECK-NEXT: exec.kernel "linear_bwd" {{.*}}accumulate = true
// CHECK-NEXT: exec.bucket_all_reduce "dp" avg bucket 0 [#exec.buf<{{.*}}name = "grad:w"{{.*}}>]
// CHECK-NEXT: exec.kernel "add" {{.*}}name = "grad:b"
// CHECK-NEXT: exec.bucket_all_reduce "dp" avg bucket 1 [#exec.buf<{{.*}}name = "grad:b"{{.*}}>]
// CHECK-NEXT: exec.kernel "add" {{.*}}name = "loss"
// CHECK-NEXT: } step {
// CHECK-NEXT: exec.bucket_wait 0
// CHECK-NEXT: exec.bucket_wait 1
// CHECK-NEXT: exec.kernel "scale"
// CHECK-NEXT: exec.all_reduce "dp" avg [#exec.buf<{{.*}}name = "loss"{{.*}}>]
// CHECK-NEXT: exec.kernel "global_norm"
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

// -----

// Experts go in buckets of their own over edp; a shared pipeline weight
// (summed over pp_tied in the step first; this is stage 0 of 2) stays out of
// the buckets.
// CHECK-LABEL: exec.program "train_step"
// CHECK-NEXT: exec.kernel "linear_bwd"
// CHECK-NEXT: exec.bucket_all_reduce "dp" avg bucket 0 [#exec.buf<{{.*}}name = "grad:w"{{.*}}>]
// CHECK-NEXT: exec.kernel "add" {{.*}}name = "grad:b"
// CHECK-NEXT: exec.kernel "add" {{.*}}name = "grad:e"
// CHECK-NEXT: exec.bucket_all_reduce "edp" avg bucket 1 [#exec.buf<{{.*}}name = "grad:e"{{.*}}>]
// CHECK-NEXT: exec.kernel "add" {{.*}}name = "loss"
// CHECK-NEXT: } step {
// CHECK-NEXT: exec.bucket_wait 0
// CHECK-NEXT: exec.bucket_wait 1
// CHECK-NEXT: exec.all_reduce "pp_tied" sum
// CHECK-NEXT: exec.all_reduce "dp" avg [#exec.buf<{{.*}}name = "grad:b"{{.*}}>, #exec.buf<{{.*}}name = "loss"{{.*}}>]
// CHECK-NEXT: exec.kernel "scale" {{.*}}name = "grad:e"
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 4 : i64, ep = 2 : i64, pp = 2 : i64, tp = 1 : i64}, world = 8 : i64, zero = 0 : i64}
exec.param "w" : tensor<4x8xf32> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xf32> init zeros
exec.param "e" : tensor<2x3xf32> init normal {std = 2.0e-02 : f64, shard = {axis = "ep", blocks = 1 : i64, dim = 0 : i64, parts = 2 : i64}}
exec.program "train_step" ranks [0, 1, 2, 3] arena 1024 micro_batches 1 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "linear_bwd" ins [#exec.buf<space = arena, offset = 448, name = "", shape = [2, 8], dtype = f32>, #exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "w", shape = [4, 8], dtype = f32>] outs [#exec.buf<space = arena, offset = 384, name = "", shape = [2, 4], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>] {accumulate = true, transposed = false}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>, #exec.buf<space = arena, offset = 320, name = "", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] {}
  exec.kernel "add" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>, #exec.buf<space = arena, offset = 16, name = "", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {}
} step {
  exec.all_reduce "pp_tied" sum [#exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>]
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:w", shape = [4, 8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "grad:b", shape = [8], dtype = f32>, #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.all_reduce "edp" avg [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>]
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "grad:e", shape = [2, 3], dtype = f32>] {factor = 5.000000e-01 : f64}
}

// -----

// ZeRO-2's reduce-scatters: per axis, closed when full (grad:w's 128 bytes)
// or where a part of the schedule ends (exec.backward) and at the end; the
// member that closes a bucket flushes it.
// CHECK-LABEL: exec.program "train_step"
// CHECK-NEXT: exec.grad_reduce_scatter "dp" avg {{.*}} into <{{.*}}name = "grad_shard:w"{{.*}}> {bucket = 0 : i64, flush}
// CHECK-NEXT: exec.grad_reduce_scatter "edp" avg {{.*}} into <{{.*}}name = "grad_shard:e"{{.*}}> {bucket = 1 : i64, flush}
// CHECK-NEXT: exec.backward
// CHECK-NEXT: exec.grad_reduce_scatter "dp" avg {{.*}} into <{{.*}}name = "grad_shard:b"{{.*}}> {bucket = 2 : i64}
// CHECK-NEXT: exec.grad_reduce_scatter "dp" avg {{.*}} into <{{.*}}name = "grad_shard:c"{{.*}}> {bucket = 2 : i64, flush}
// CHECK-NOT: bucket_
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 4 : i64, ep = 2 : i64, pp = 1 : i64, tp = 1 : i64}, world = 4 : i64, zero = 2 : i64}
exec.param "w" : tensor<4x8xf32> init normal {std = 2.0e-02 : f64}
exec.param "b" : tensor<8xf32> init zeros
exec.param "e" : tensor<2x3xf32> init normal {std = 2.0e-02 : f64, shard = {axis = "ep", blocks = 1 : i64, dim = 0 : i64, parts = 2 : i64}}
exec.param "c" : tensor<4xf32> init zeros
exec.program "train_step" ranks [0, 1, 2, 3] arena 1024 micro_batches 1 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.grad_reduce_scatter "dp" avg #exec.buf<space = arena, offset = 64, name = "", shape = [4, 8], dtype = f32> into #exec.buf<space = accum, offset = 0, name = "grad_shard:w", shape = [8], dtype = f32>
  exec.grad_reduce_scatter "edp" avg #exec.buf<space = arena, offset = 320, name = "", shape = [2, 3], dtype = f32> into #exec.buf<space = accum, offset = 0, name = "grad_shard:e", shape = [3], dtype = f32>
  exec.backward
  exec.grad_reduce_scatter "dp" avg #exec.buf<space = arena, offset = 256, name = "", shape = [8], dtype = f32> into #exec.buf<space = accum, offset = 0, name = "grad_shard:b", shape = [2], dtype = f32>
  exec.grad_reduce_scatter "dp" avg #exec.buf<space = arena, offset = 512, name = "", shape = [4], dtype = f32> into #exec.buf<space = accum, offset = 0, name = "grad_shard:c", shape = [1], dtype = f32>
} step {
}
