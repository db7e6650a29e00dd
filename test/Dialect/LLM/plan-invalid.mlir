// RUN: llm-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{plan: tp must be positive, got 0}}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 0, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 1, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: zero must be 0, 1, 2 or 3, got 4}}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 4, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+2 {{plan: recompute must be none, selective, full or per-stage, got 'some'}}
// expected-error @+1 {{failed to parse LLM_PlanAttr parameter 'recompute'}}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "some", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+2 {{plan: schedule must be none, gpipe, 1f1b or interleaved-1f1b, got 'zb'}}
// expected-error @+1 {{failed to parse LLM_PlanAttr parameter 'schedule'}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "zb", placement = "tp-cp-dp-pp", stage_layers = [6, 6], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: schedule 'none' does not match pp 2}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [6, 6], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: vpp 2 needs the interleaved-1f1b schedule}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 2, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [6, 6], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: stage_layers has 1 entries for pp 2}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: every stage needs at least one layer}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [12, 0], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+2 {{plan: placement must be tp-cp-dp-pp or tp-cp-pp-dp}}
// expected-error @+1 {{failed to parse LLM_PlanAttr parameter 'placement'}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "dp-tp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: predictions must not be negative}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = -1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// A missing field is a parse error naming it.
// expected-error @+1 {{struct is missing required parameter: peak_memory_bytes}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64>} {}

// -----

// expected-error @+1 {{plan: per-stage recompute needs one level per stage, got 1 for pp 2}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "per-stage", stage_recompute = ["full"], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [6, 6], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: stage_recompute entries must be "none", "selective" or "full"}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "per-stage", stage_recompute = ["full", "most"], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [6, 6], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: stage_recompute is only for recompute = "per-stage"}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 2, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "full", stage_recompute = ["full", "none"], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "1f1b", placement = "tp-cp-dp-pp", stage_layers = [6, 6], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: seq_len must be positive, got 0}}
module attributes {llm.plan = #llm.plan<dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 0, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {}

// -----

// expected-error @+1 {{plan: shard must be 0, or a divisor of dp x cp = 16 smaller than it with zero >= 1, got shard 16 with zero 1}}
module attributes {llm.plan = #llm.plan<dp = 16, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 1, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1, shard = 16>} {}

// -----

// expected-error @+1 {{plan: shard must be 0, or a divisor of dp x cp = 16 smaller than it with zero >= 1, got shard 8 with zero 0}}
module attributes {llm.plan = #llm.plan<dp = 16, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1, shard = 8>} {}

// -----

// expected-error @+1 {{plan: recompute_layers must be 0, or positive with recompute = "full", got 2 with "selective"}}
module attributes {llm.plan = #llm.plan<dp = 2, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, sp = false, zero = 1, offload = false, recompute = "selective", stage_recompute = [], micro_batch = 1, num_micro_batches = 4, seq_len = 1024, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [12], step_time_s = 1.0 : f64, peak_memory_bytes = 1, recompute_layers = 2>} {}
