// RUN: llm-opt %s | llm-opt | FileCheck %s

// CHECK: exec.program "train_step" ranks [0, 1] arena 4096 outputs {loss = #exec.buf<space = "arena", offset = 1024, name = "", shape = [], dtype = f32>} {
// CHECK-NEXT: exec.kernel "rms_norm_fwd" ins [#exec.buf<space = "input", offset = 0, name = "", shape = [1, 2, 4], dtype = f32>, #exec.buf<space = "state", offset = 0, name = "g", shape = [4], dtype = f32>] outs [#exec.buf<space = "arena", offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] {eps = 1.000000e-05 : f64}
// CHECK-NEXT: exec.all_reduce "dp" "avg" [#exec.buf<space = "arena", offset = 1024, name = "", shape = [], dtype = f32>]
exec.program "train_step" ranks [0, 1] arena 4096 outputs {loss = #exec.buf<space = "arena", offset = 1024, name = "", shape = [], dtype = f32>} {
  exec.kernel "rms_norm_fwd" ins [#exec.buf<space = "input", offset = 0, name = "", shape = [1, 2, 4], dtype = f32>, #exec.buf<space = "state", offset = 0, name = "g", shape = [4], dtype = f32>] outs [#exec.buf<space = "arena", offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] {eps = 1.0e-05 : f64}
  exec.all_reduce "dp" "avg" [#exec.buf<space = "arena", offset = 1024, name = "", shape = [], dtype = f32>]
}
