// RUN: llm-opt %s -split-input-file -verify-diagnostics

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{unknown kernel 'softmax_fwd': not in kernels/include/llmopt-kernels/abi.h}}
  exec.kernel "softmax_fwd" ins [] outs [] {}
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{kernel 'add' takes 2 inputs, got 1}}
  exec.kernel "add" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32>] outs [#exec.buf<space = arena, offset = 16, name = "", shape = [4], dtype = f32>] {}
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{buffer at offset 48 of 32 bytes overruns the 64-byte arena}}
  exec.kernel "fill" ins [] outs [#exec.buf<space = arena, offset = 48, name = "", shape = [8], dtype = f32>] {value = 1.0 : f64}
} step {
}

// -----

// expected-error @+1 {{ranks must be distinct and non-negative}}
exec.program "p" ranks [0, 0] arena 64 micro_batches 1 outputs {} micro_batch {
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{must not write a step input}}
  exec.kernel "fill" ins [] outs [#exec.buf<space = input, offset = 0, name = "", shape = [4], dtype = f32>] {value = 1.0 : f64}
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // A closed set is an enum: a value outside it is refused where it is read.
  // expected-error @+1 {{invalid reduce attribute specification: "max"}}
  exec.all_reduce "dp" "max" [#exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32>]
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{buf: state and accum buffers have a name, other buffers none}}
  exec.kernel "fill" ins [] outs [#exec.buf<space = state, offset = 0, name = "", shape = [4], dtype = f32>] {value = 1.0 : f64}
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+2 {{expected ::llmopt::exec::BufferSpace to be one of: arena, stash, input, state, accum}}
  // expected-error @+1 {{failed to parse Exec_BufAttr parameter 'space'}}
  exec.kernel "fill" ins [] outs [#exec.buf<space = host, offset = 0, name = "", shape = [4], dtype = f32>] {value = 1.0 : f64}
} step {
}

// -----

// expected-error @+1 {{needs at least one micro-batch}}
exec.program "p" ranks [0] arena 64 micro_batches 0 outputs {} micro_batch {
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
} step {
  // expected-error @+1 {{invalid reduce attribute specification: "max"}}
  exec.reduce_scatter "dp" "max" [#exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32>]
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
} step {
  // expected-error @+1 {{must not write a step input}}
  exec.all_gather "dp" [#exec.buf<space = input, offset = 0, name = "", shape = [4], dtype = i32>]
}

// -----

exec.program "p" ranks [0] arena 256 micro_batches 1 outputs {} micro_batch {
} step {
  // expected-error @+1 {{needs at least one buffer}}
  exec.all_gather "dp" []
}

// -----

exec.program "p" ranks [0] arena 256 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{invalid kind attribute specification: "shuffle"}}
  exec.seq "shuffle" "tp" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 32, name = "", shape = [1, 4, 4], dtype = f32>]
} step {
}

// -----

exec.program "p" ranks [0] arena 256 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{sequence 3 is not several chunks of 2}}
  exec.seq all_gather "tp" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [1, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 32, name = "", shape = [1, 3, 4], dtype = f32>]
} step {
}

// -----

exec.program "p" ranks [0] arena 512 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{invalid kind attribute specification: "scatter"}}
  exec.all_to_all "scatter" "ep" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [4, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 128, name = "", shape = [2, 4, 4], dtype = f32>]
} step {
}

// -----

exec.program "p" ranks [0] arena 512 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{expects expert rows [E, C, h] and a share [E/t, t C, h]}}
  exec.all_to_all combine "ep" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [2, 2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 128, name = "", shape = [4, 2, 4], dtype = f32>]
} step {
}

// -----

exec.program "p" ranks [0] arena 512 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{body entry 0: kernel 'attention_fwd' is not row-wise and cannot be fused}}
  exec.fused "f" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 64, name = "", shape = [2, 4], dtype = f32>] temps [] body [{kernel = "attention_fwd", ins = array<i64: 0>, outs = array<i64: 1>, params = {}}]
} step {
}

// -----

exec.program "p" ranks [0] arena 512 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{body entry 0 writes input 0}}
  exec.fused "f" ins [#exec.buf<space = arena, offset = 0, name = "", shape = [2, 4], dtype = f32>] outs [#exec.buf<space = arena, offset = 64, name = "", shape = [2, 4], dtype = f32>] temps [] body [{kernel = "gelu_fwd", ins = array<i64: 1>, outs = array<i64: 0>, params = {}}]
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{flush needs a bucket}}
  exec.grad_reduce_scatter "dp" avg #exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32> into #exec.buf<space = accum, offset = 0, name = "grad_shard:w", shape = [2], dtype = f32> {flush}
} step {
}

// -----

exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{bucket must be non-negative}}
  exec.grad_reduce_scatter "dp" avg #exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32> into #exec.buf<space = accum, offset = 0, name = "grad_shard:w", shape = [2], dtype = f32> {bucket = -1 : i64, flush}
} step {
}

// -----

// A pipeline stage's program carries its schedule and the order of its
// parts (convert-llm-to-exec lays them out; the plan file translates them).
// expected-error @+1 {{schedule and order come together (a pipeline stage's program)}}
exec.program "p" ranks [0] arena 64 micro_batches 2 outputs {} attributes {schedule = "1f1b"} micro_batch {
} step {
}

// -----

// expected-error @+1 {{unknown schedule 'zb': 1f1b, gpipe, interleaved or sequential}}
exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} attributes {schedule = "zb", order = array<i64: 0, 0, 0, 0, 0, 1>} micro_batch {
} step {
}

// -----

// expected-error @+1 {{order entry 1 (2, 0, 0) names no part of this program's 2 micro-batches}}
exec.program "p" ranks [0] arena 64 micro_batches 2 outputs {} attributes {schedule = "1f1b", order = array<i64: 0, 0, 0, 2, 0, 0>} micro_batch {
} step {
}

// -----

// expected-error @+1 {{order names part (0, 0, 1) twice}}
exec.program "p" ranks [0] arena 64 micro_batches 1 outputs {} attributes {schedule = "gpipe", order = array<i64: 0, 0, 0, 0, 0, 1, 0, 0, 1>} micro_batch {
} step {
}

// -----

// expected-error @+1 {{order has 3 parts; 2 micro-batches of 1 chunk(s) have 4}}
exec.program "p" ranks [0] arena 64 micro_batches 2 outputs {} attributes {schedule = "1f1b", order = array<i64: 0, 0, 0, 1, 0, 0, 0, 0, 1>} micro_batch {
} step {
}

// -----

// exec.plan: what the plan file says besides the programs.
// expected-error @+1 {{mesh lacks axis 'ep'}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 0 : i64}

// -----

// expected-error @+1 {{world 4 is not pp x dp x cp x tp = 2}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 4 : i64, zero = 0 : i64}

// -----

// expected-error @+1 {{ep 2 does not divide dp 3}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 3 : i64, ep = 2 : i64, pp = 1 : i64, tp = 1 : i64}, world = 3 : i64, zero = 0 : i64}

// -----

// expected-error @+1 {{mesh axis 'sp' must be one of dp, tp, pp, cp, ep with a positive size}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 1 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64, sp = 2 : i64}, world = 1 : i64, zero = 0 : i64}

// -----

// expected-error @+1 {{zero must be 0, 1, 2 or 3, got 4}}
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 1 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 1 : i64, zero = 4 : i64}

// -----

// expected-error @+1 {{must be a static ranked tensor, got 'tensor<?x4xf32>'}}
exec.param "w" : tensor<?x4xf32> init zeros

// -----

// expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'init' [zeros, ones, normal]}}
exec.param "w" : tensor<4xf32> init uniform

// -----

// expected-error @+1 {{a normal init needs a positive std, and only it}}
exec.param "w" : tensor<4xf32> init normal

// -----

// expected-error @+1 {{a normal init needs a positive std, and only it}}
exec.param "w" : tensor<4xf32> init ones {std = 2.0e-02 : f64}

// -----

// plan.json holds the std as a JSON number: an infinite one is not one.
// expected-error @+1 {{std must be finite, got INF}}
exec.param "w" : tensor<4xf32> init normal {std = 0x7FF0000000000000 : f64}

// -----

// With an exec.plan, the programs' axes are its mesh's (or edp, pp_tied).
exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 1 : i64}, world = 2 : i64, zero = 0 : i64}
exec.program "p" ranks [0, 1] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{names mesh axis 'xp', which exec.plan's mesh does not have (dp, tp, pp, cp, ep, or the derived edp and pp_tied)}}
  exec.all_reduce "xp" sum [#exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32>]
} step {
}

// -----

exec.plan {inputs = [], mesh = {cp = 1 : i64, dp = 2 : i64, ep = 1 : i64, pp = 1 : i64, tp = 2 : i64}, world = 4 : i64, zero = 0 : i64}
exec.program "p" ranks [0, 1, 2, 3] arena 64 micro_batches 1 outputs {} micro_batch {
  // expected-error @+1 {{names mesh axis 'cq', which exec.plan's mesh does not have}}
  exec.kernel "fill" ins [] outs [#exec.buf<space = arena, offset = 0, name = "", shape = [4], dtype = f32>] {value = 1.0 : f64, amax_axis = "tp,cq"}
} step {
}
