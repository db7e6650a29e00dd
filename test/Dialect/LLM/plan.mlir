// RUN: llm-opt %s -split-input-file | llm-opt -split-input-file | FileCheck %s
// RUN: llm-opt %s -split-input-file -verify-diagnostics --mlir-print-op-generic -o /dev/null

// CHECK: module attributes {llm.plan = #llm.plan<dp = 2, tp = 8, pp = 4, vpp = 5, cp = 1, ep = 1, sp = true, zero = 1, offload = false, recompute = "selective", stage_recompute = [], micro_batch = 1, num_micro_batches = 256, seq_len = 1024, schedule = "interleaved-1f1b", placement = "tp-cp-dp-pp", stage_layers = [20, 20, 20, 20], step_time_s = 4.250000e+01 : f64, peak_memory_bytes = 60000000000>}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 8, pp = 4, vpp = 5, cp = 1, ep = 1, sp = true, zero = 1, offload = false, recompute = "selective", stage_recompute = [], micro_batch = 1, num_micro_batches = 256, seq_len = 1024, schedule = "interleaved-1f1b", placement = "tp-cp-dp-pp", stage_layers = [20, 20, 20, 20], step_time_s = 42.5 : f64, peak_memory_bytes = 60000000000>} {
}

// -----

// CHECK: recompute = "per-stage", stage_recompute = ["full", "selective", "none"]
module attributes {llm.plan = #llm.plan<dp = 1, tp = 8, pp = 3, vpp = 1, cp = 1, ep = 1, sp = true, zero = 1, offload = false, recompute = "per-stage", stage_recompute = ["full", "selective", "none"], micro_batch = 1, num_micro_batches = 12, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [10, 11, 9], step_time_s = 1.5 : f64, peak_memory_bytes = 1000>} {
}
