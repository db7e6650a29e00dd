// RUN: llm-opt %s | llm-opt | FileCheck %s

// CHECK: exec.program "train_step" ranks [0, 1] arena 4096 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
// CHECK-NEXT: exec.kernel "rms_norm_fwd" ins [#exec.buf<space = input, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "g", shape = [4], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] {eps = 1.000000e-05 : f64}
// CHECK-NEXT: exec.seq all_gather "tp" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 64, name = "", shape = [1, 4, 4], dtype = f32>]
// CHECK-NEXT: exec.all_to_all dispatch "ep" ins [#exec.buf<space = arena, offset = 128, name = "", shape = [4, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 256, name = "", shape = [2, 4, 4], dtype = f32>]
// CHECK-NEXT: } step {
// CHECK-NEXT: exec.kernel "scale" {{.*}} {factor = 5.000000e-01 : f64}
// CHECK-NEXT: exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
// CHECK-NEXT: exec.reduce_scatter "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:g", shape = [4], dtype = f32>]
// CHECK-NEXT: exec.all_gather "dp" [#exec.buf<space = state, offset = 0, name = "g", shape = [4], dtype = f32>]
exec.program "train_step" ranks [0, 1] arena 4096 micro_batches 2 outputs {loss = #exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>} micro_batch {
  exec.kernel "rms_norm_fwd" ins [#exec.buf<space = input, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>, #exec.buf<space = state, offset = 0, name = "g", shape = [4], dtype = f32>] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] {eps = 1.0e-05 : f64}
  exec.seq all_gather "tp" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 64, name = "", shape = [1, 4, 4], dtype = f32>]
  exec.all_to_all dispatch "ep" ins [#exec.buf<space = arena, offset = 128, name = "", shape = [4, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 256, name = "", shape = [2, 4, 4], dtype = f32>]
} step {
  exec.kernel "scale" ins [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] outs [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>] {factor = 0.5 : f64}
  exec.all_reduce "dp" avg [#exec.buf<space = accum, offset = 0, name = "loss", shape = [], dtype = f32>]
  exec.reduce_scatter "dp" avg [#exec.buf<space = accum, offset = 0, name = "grad:g", shape = [4], dtype = f32>]
  exec.all_gather "dp" [#exec.buf<space = state, offset = 0, name = "g", shape = [4], dtype = f32>]
}
