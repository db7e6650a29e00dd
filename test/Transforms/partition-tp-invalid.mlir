// RUN: llm-opt %s -split-input-file -verify-diagnostics --llm-partition-tp="tp=2"

// Diagnostics of llm-partition-tp on hand-written layers (tp 2 throughout).

// expected-error @+1 {{llm-partition-tp: no function marked 'llm.forward' to partition; import a model (llm-opt config.json) or mark the model function with it}}
module {
}

// -----

// A column-parallel weight shared by two linears cannot be split for one.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %w = llm.param "mlp.up_proj.weight" normal(0.02) : tensor<16x8xf32>
      // expected-error @+1 {{'llm.linear' op llm-partition-tp: expects an llm.param used only here}}
      %g = llm.linear %in, %w : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
      %u = llm.linear %in, %w : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
      %a = llm.swiglu %g, %u : tensor<?x?x16xf32>
      %wd = llm.param "mlp.down_proj.weight" normal(0.02) : tensor<8x16xf32>
      %d = llm.linear %a, %wd : tensor<?x?x16xf32>, tensor<8x16xf32> -> tensor<?x?x8xf32>
      llm.yield %d : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// A weight computed from parameters is no parameter to shard.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %p = llm.param "mlp.fc1.weight" normal(0.02) : tensor<16x8xf32>
      %w = llm.add %p, %p : tensor<16x8xf32>
      // expected-error @+1 {{'llm.linear' op llm-partition-tp: expects an llm.param used only here}}
      %h = llm.linear %in, %w : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
      %a = llm.gelu %h tanh : tensor<?x?x16xf32>
      %wd = llm.param "mlp.fc2.weight" normal(0.02) : tensor<8x16xf32>
      %d = llm.linear %a, %wd : tensor<?x?x16xf32>, tensor<8x16xf32> -> tensor<?x?x8xf32>
      llm.yield %d : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// A fused gate / up weight splits in 2 blocks of tp parts: 6 rows do not
// make 2 x 2.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      // expected-error @+1 {{'llm.param' op llm-partition-tp: dimension 0 of 'mlp.gate_up_proj.weight' (6) does not split into 2 block(s) of 2 parts; choose a tp that divides it}}
      %w = llm.param "mlp.gate_up_proj.weight" normal(0.02) : tensor<6x8xf32>
      %gu = llm.linear %in, %w : tensor<?x?x8xf32>, tensor<6x8xf32> -> tensor<?x?x6xf32>
      %g, %u = llm.split %gu [3, 3] : tensor<?x?x6xf32> -> tensor<?x?x3xf32>, tensor<?x?x3xf32>
      %a = llm.swiglu %g, %u : tensor<?x?x3xf32>
      %wd = llm.param "mlp.down_proj.weight" normal(0.02) : tensor<8x3xf32>
      %d = llm.linear %a, %wd : tensor<?x?x3xf32>, tensor<8x3xf32> -> tensor<?x?x8xf32>
      llm.yield %d : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// A fused q / k / v projection splits in equal blocks only.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %w = llm.param "attn.qkv_proj.weight" normal(0.02) : tensor<16x8xf32>
      %qkv = llm.linear %in, %w : tensor<?x?x8xf32>, tensor<16x8xf32> -> tensor<?x?x16xf32>
      // expected-error @+1 {{'llm.split' op llm-partition-tp: only equal split sizes are partitioned}}
      %q, %k, %v = llm.split %qkv [8, 4, 4] : tensor<?x?x16xf32> -> tensor<?x?x8xf32>, tensor<?x?x4xf32>, tensor<?x?x4xf32>
      %a = llm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 2 scale 0.5 causal : tensor<?x?x8xf32>, tensor<?x?x4xf32>
      %wo = llm.param "attn.o_proj.weight" normal(0.02) : tensor<8x8xf32>
      %o = llm.linear %a, %wo : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      llm.yield %o : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// The router and the dispatch must read the same tokens.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %wg = llm.param "moe.gate.weight" normal(0.02) : tensor<4x8xf32>
      %p, %i = llm.moe_router %in, %wg top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
      %nw = llm.param "moe.norm.weight" ones : tensor<8xf32>
      %n = llm.rms_norm %in, %nw eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
      %d = llm.moe_dispatch %n, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
      %w1 = llm.param "moe.experts.*.fc1.weight" normal(0.02) : tensor<4x16x8xf32>
      %w2 = llm.param "moe.experts.*.fc2.weight" normal(0.02) : tensor<4x8x16xf32>
      // expected-error @+1 {{'llm.moe_experts' op llm-partition-tp: expects router -> dispatch -> experts -> combine on one input; cannot partition this MoE layer}}
      %e = llm.moe_experts %d, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
      %c = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
      llm.yield %c : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// Attention must read column-parallel projections...
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      // expected-error @+1 {{'llm.attention' op llm-partition-tp: the projection before attention is not an llm.linear; cannot partition this layer}}
      %a = llm.attention %in, %in, %in heads 2 kv_heads 2 head_dim 4 scale 0.5 causal : tensor<?x?x8xf32>, tensor<?x?x8xf32>
      %wo = llm.param "attn.o_proj.weight" normal(0.02) : tensor<8x8xf32>
      %o = llm.linear %a, %wo : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      llm.yield %o : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// ... and feed a row-parallel one.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %wq = llm.param "attn.q_proj.weight" normal(0.02) : tensor<8x8xf32>
      %q = llm.linear %in, %wq : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      %wk = llm.param "attn.k_proj.weight" normal(0.02) : tensor<8x8xf32>
      %k = llm.linear %in, %wk : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      %wv = llm.param "attn.v_proj.weight" normal(0.02) : tensor<8x8xf32>
      %v = llm.linear %in, %wv : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      // expected-error @+1 {{'llm.attention' op llm-partition-tp: the projection after attention is not an llm.linear; cannot partition this layer}}
      %a = llm.attention %q, %k, %v heads 2 kv_heads 2 head_dim 4 scale 0.5 causal : tensor<?x?x8xf32>, tensor<?x?x8xf32>
      %r = llm.add %in, %a : tensor<?x?x8xf32>
      llm.yield %r : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// An MLP activation must read a column-parallel linear...
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      // expected-error @+1 {{'llm.gelu' op llm-partition-tp: the linear before the activation is not an llm.linear; cannot partition this layer}}
      %a = llm.gelu %in tanh : tensor<?x?x8xf32>
      %wd = llm.param "mlp.fc2.weight" normal(0.02) : tensor<8x8xf32>
      %d = llm.linear %a, %wd : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      llm.yield %d : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// ... and feed a row-parallel one.
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %wu = llm.param "mlp.fc1.weight" normal(0.02) : tensor<8x8xf32>
      %h = llm.linear %in, %wu : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      // expected-error @+1 {{'llm.gelu' op llm-partition-tp: the linear after the activation is not an llm.linear; cannot partition this layer}}
      %a = llm.gelu %h tanh : tensor<?x?x8xf32>
      llm.yield %a : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// One KV head over tp 2 is replicated: each rank computes it whole, which
// needs K and V from projections of their own (here one linear feeds both).
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %wq = llm.param "attn.q_proj.weight" normal(0.02) : tensor<8x8xf32>
      %q = llm.linear %in, %wq : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      %wkv = llm.param "attn.kv_proj.weight" normal(0.02) : tensor<4x8xf32>
      %kv = llm.linear %in, %wkv : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x4xf32>
      // expected-error @+1 {{'llm.attention' op llm-partition-tp: KV heads to replicate must come straight from their own projection}}
      %a = llm.attention %q, %kv, %kv heads 2 kv_heads 1 head_dim 4 scale 0.5 causal : tensor<?x?x8xf32>, tensor<?x?x4xf32>
      %wo = llm.param "attn.o_proj.weight" normal(0.02) : tensor<8x8xf32>
      %o = llm.linear %a, %wo : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      llm.yield %o : tensor<?x?x8xf32>
    }
    return %y : tensor<?x?x8xf32>
  }
}

// -----

// Under sequence parallelism (the plan's sp) the residual stream after a
// layer is a sequence chunk; an op other than a norm, a residual add, the
// LM head or an MoE op cannot run on it.
module attributes {llm.plan = #llm.plan<dp = 1, tp = 2, pp = 1, vpp = 1, cp = 1, ep = 1, sp = true, zero = 0, offload = false, recompute = "none", stage_recompute = [], micro_batch = 1, num_micro_batches = 1, seq_len = 8, schedule = "none", placement = "tp-cp-dp-pp", stage_layers = [1], step_time_s = 1.0 : f64, peak_memory_bytes = 1>} {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %y = llm.layer 0 (%x) : tensor<?x?x8xf32> {
    ^bb0(%in: tensor<?x?x8xf32>):
      %s = llm.add %in, %in : tensor<?x?x8xf32>
      llm.yield %s : tensor<?x?x8xf32>
    }
    // expected-error @+1 {{'llm.gelu' op llm-partition-tp: sequence parallelism does not know how to run this op on a sequence chunk}}
    %g = llm.gelu %y tanh : tensor<?x?x8xf32>
    return %g : tensor<?x?x8xf32>
  }
}

// -----

// The grid the partition passes declare their axes in is @mesh; another
// symbol of that name is refused rather than shadowed.
// expected-error @+1 {{the module has a symbol @mesh that is not its llm.grid; rename it}}
module {
  func.func private @mesh()
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    return %x : tensor<?x?x8xf32>
  }
}

// -----

// A grid with the axis at another size: the plan and the grid disagree.
// expected-error @+1 {{the mesh axis 'tp' has 4 ranks, not 2}}
module {
  llm.grid @mesh {
    llm.grid_axis @tp size 4
  }
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    return %x : tensor<?x?x8xf32>
  }
}
