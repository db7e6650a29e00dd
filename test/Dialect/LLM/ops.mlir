// RUN: llm-opt %s | llm-opt | FileCheck %s
// RUN: llm-opt %s --mlir-print-op-generic | llm-opt | FileCheck %s

// Round trip of every llm op through the custom and the generic form.

// CHECK-LABEL: func.func @params
func.func @params() -> (tensor<768xbf16>, tensor<768xf32>, tensor<2304x768xf16>, tensor<8x14336x4096xbf16>) {
  // CHECK: %[[Z:.*]] = llm.param "model.norm.bias" zeros : tensor<768xbf16>
  %z = llm.param "model.norm.bias" zeros : tensor<768xbf16>
  // CHECK: %[[O:.*]] = llm.param "model.norm.weight" ones : tensor<768xf32>
  %o = llm.param "model.norm.weight" ones : tensor<768xf32>
  // CHECK: %[[N:.*]] = llm.param "h.0.attn.c_attn.weight" normal(2.000000e-02) : tensor<2304x768xf16>
  %n = llm.param "h.0.attn.c_attn.weight" normal(0.02) : tensor<2304x768xf16>
  // A stacked per-expert parameter.
  // CHECK: %[[E:.*]] = llm.param "model.layers.0.block_sparse_moe.experts.*.w1.weight" normal(1.000000e-02) : tensor<8x14336x4096xbf16>
  %e = llm.param "model.layers.0.block_sparse_moe.experts.*.w1.weight" normal(1.0e-2) : tensor<8x14336x4096xbf16>
  // CHECK: return %[[Z]], %[[O]], %[[N]], %[[E]]
  return %z, %o, %n, %e : tensor<768xbf16>, tensor<768xf32>, tensor<2304x768xf16>, tensor<8x14336x4096xbf16>
}

// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x768xbf16>)
func.func @layer(%x: tensor<?x?x768xbf16>) -> tensor<?x?x768xbf16> {
  // CHECK: %[[Y:.*]] = llm.layer 7 (%[[X]]) : tensor<?x?x768xbf16> {
  // CHECK-NEXT: ^bb0(%[[IN:.*]]: tensor<?x?x768xbf16>):
  // CHECK-NEXT: %[[S:.*]] = llm.add %[[IN]], %[[IN]] : tensor<?x?x768xbf16>
  // CHECK-NEXT: llm.yield %[[S]] : tensor<?x?x768xbf16>
  // CHECK-NEXT: }
  %y = llm.layer 7 (%x) : tensor<?x?x768xbf16> {
  ^bb0(%in: tensor<?x?x768xbf16>):
    %s = llm.add %in, %in : tensor<?x?x768xbf16>
    llm.yield %s : tensor<?x?x768xbf16>
  }
  // CHECK: return %[[Y]]
  return %y : tensor<?x?x768xbf16>
}

// CHECK-LABEL: func.func @embeddings
// CHECK-SAME: (%[[TOK:.*]]: tensor<?x?xi32>)
func.func @embeddings(%tokens: tensor<?x?xi32>) -> tensor<?x?x768xbf16> {
  // CHECK: %[[WTE:.*]] = llm.param "wte.weight"
  %wte = llm.param "wte.weight" normal(0.02) : tensor<50257x768xbf16>
  // CHECK: %[[WPE:.*]] = llm.param "wpe.weight"
  %wpe = llm.param "wpe.weight" normal(0.01) : tensor<1024x768xbf16>
  // CHECK: %[[E:.*]] = llm.embedding %[[TOK]], %[[WTE]] : tensor<?x?xi32>, tensor<50257x768xbf16> -> tensor<?x?x768xbf16>
  %e = llm.embedding %tokens, %wte : tensor<?x?xi32>, tensor<50257x768xbf16> -> tensor<?x?x768xbf16>
  // CHECK: %[[P:.*]] = llm.position_embedding %[[E]], %[[WPE]] : tensor<?x?x768xbf16>, tensor<1024x768xbf16>
  %p = llm.position_embedding %e, %wpe : tensor<?x?x768xbf16>, tensor<1024x768xbf16>
  // CHECK: return %[[P]]
  return %p : tensor<?x?x768xbf16>
}

// CHECK-LABEL: func.func @rotary
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x4096xbf16>, %[[K:.*]]: tensor<?x?x1024xbf16>)
func.func @rotary(%q: tensor<?x?x4096xbf16>, %k: tensor<?x?x1024xbf16>)
    -> (tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>) {
  // CHECK: %[[Q1:.*]], %[[K1:.*]] = llm.rotary %[[Q]], %[[K]] head_dim 128 theta 5.000000e+05 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  %q1, %k1 = llm.rotary %q, %k head_dim 128 theta 5.000000e+05 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  // CHECK: %[[Q2:.*]], %[[K2:.*]] = llm.rotary %[[Q]], %[[K]] head_dim 128 theta 5.000000e+05
  // CHECK-SAME: scaling {factor = 8.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, original_max_position_embeddings = 8192 : i64, rope_type = "llama3"}
  // CHECK-SAME: : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  %q2, %k2 = llm.rotary %q, %k head_dim 128 theta 500000.0 scaling {rope_type = "llama3", factor = 8.0 : f64, low_freq_factor = 1.0 : f64, high_freq_factor = 4.0 : f64, original_max_position_embeddings = 8192 : i64} : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  // CHECK: return %[[Q1]], %[[K1]], %[[Q2]], %[[K2]]
  return %q1, %k1, %q2, %k2 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
}

// CHECK-LABEL: func.func @norms
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x768xf32>)
func.func @norms(%x: tensor<?x?x768xf32>) -> (tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<?x?x768xf32>) {
  // CHECK: %[[G:.*]] = llm.param "ln.weight" ones
  %g = llm.param "ln.weight" ones : tensor<768xf32>
  // CHECK: %[[B:.*]] = llm.param "ln.bias" zeros
  %b = llm.param "ln.bias" zeros : tensor<768xf32>
  // CHECK: %[[LN:.*]] = llm.layer_norm %[[X]], %[[G]], %[[B]] eps 1.000000e-05 : tensor<?x?x768xf32>, tensor<768xf32>, tensor<768xf32>
  %ln = llm.layer_norm %x, %g, %b eps 1.000000e-05 : tensor<?x?x768xf32>, tensor<768xf32>, tensor<768xf32>
  // CHECK: %[[LN2:.*]] = llm.layer_norm %[[X]], %[[G]] eps 7.812500e-03 : tensor<?x?x768xf32>, tensor<768xf32>{{$}}
  %ln2 = llm.layer_norm %x, %g eps 0.0078125 : tensor<?x?x768xf32>, tensor<768xf32>
  // CHECK: %[[RMS:.*]] = llm.rms_norm %[[X]], %[[G]] eps 1.000000e-05 : tensor<?x?x768xf32>, tensor<768xf32>
  %rms = llm.rms_norm %x, %g eps 1.000000e-05 : tensor<?x?x768xf32>, tensor<768xf32>
  // CHECK: return %[[LN]], %[[LN2]], %[[RMS]]
  return %ln, %ln2, %rms : tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<?x?x768xf32>
}

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x768xbf16>)
func.func @linear(%x: tensor<?x?x768xbf16>)
    -> (tensor<?x?x3072xbf16>, tensor<?x?x3072xbf16>, tensor<?x?x2304xbf16>, tensor<?x?x3072xbf16>, tensor<?x?x2304xbf16>) {
  // CHECK: %[[W:.*]] = llm.param "mlp.up_proj.weight"
  %w = llm.param "mlp.up_proj.weight" normal(0.02) : tensor<3072x768xbf16>
  // CHECK: %[[B:.*]] = llm.param "mlp.up_proj.bias"
  %b = llm.param "mlp.up_proj.bias" zeros : tensor<3072xbf16>
  // CHECK: %[[WT:.*]] = llm.param "attn.c_attn.weight"
  %wt = llm.param "attn.c_attn.weight" normal(0.02) : tensor<768x2304xbf16>
  // CHECK: %[[BT:.*]] = llm.param "attn.c_attn.bias"
  %bt = llm.param "attn.c_attn.bias" zeros : tensor<2304xbf16>

  // CHECK: %[[Y0:.*]] = llm.linear %[[X]], %[[W]] : tensor<?x?x768xbf16>, tensor<3072x768xbf16> -> tensor<?x?x3072xbf16>
  %y0 = llm.linear %x, %w : tensor<?x?x768xbf16>, tensor<3072x768xbf16> -> tensor<?x?x3072xbf16>
  // CHECK: %[[Y1:.*]] = llm.linear %[[X]], %[[W]], %[[B]] : tensor<?x?x768xbf16>, tensor<3072x768xbf16>, tensor<3072xbf16> -> tensor<?x?x3072xbf16>
  %y1 = llm.linear %x, %w, %b : tensor<?x?x768xbf16>, tensor<3072x768xbf16>, tensor<3072xbf16> -> tensor<?x?x3072xbf16>
  // CHECK: %[[Y2:.*]] = llm.linear %[[X]], %[[WT]], %[[BT]] transposed : tensor<?x?x768xbf16>, tensor<768x2304xbf16>, tensor<2304xbf16> -> tensor<?x?x2304xbf16>
  %y2 = llm.linear %x, %wt, %bt transposed : tensor<?x?x768xbf16>, tensor<768x2304xbf16>, tensor<2304xbf16> -> tensor<?x?x2304xbf16>
  // CHECK: %[[Y3:.*]] = llm.linear %[[X]], %[[W]] gemm f8E4M3FN : tensor<?x?x768xbf16>, tensor<3072x768xbf16> -> tensor<?x?x3072xbf16>
  %y3 = llm.linear %x, %w gemm f8E4M3FN : tensor<?x?x768xbf16>, tensor<3072x768xbf16> -> tensor<?x?x3072xbf16>
  // All optional parts at once.
  // CHECK: %[[Y4:.*]] = llm.linear %[[X]], %[[WT]], %[[BT]] transposed gemm f8E5M2 : tensor<?x?x768xbf16>, tensor<768x2304xbf16>, tensor<2304xbf16> -> tensor<?x?x2304xbf16>
  %y4 = llm.linear %x, %wt, %bt transposed gemm f8E5M2 : tensor<?x?x768xbf16>, tensor<768x2304xbf16>, tensor<2304xbf16> -> tensor<?x?x2304xbf16>
  // CHECK: return %[[Y0]], %[[Y1]], %[[Y2]], %[[Y3]], %[[Y4]]
  return %y0, %y1, %y2, %y3, %y4 : tensor<?x?x3072xbf16>, tensor<?x?x3072xbf16>, tensor<?x?x2304xbf16>, tensor<?x?x3072xbf16>, tensor<?x?x2304xbf16>
}

// CHECK-LABEL: func.func @split
// CHECK-SAME: (%[[QKV:.*]]: tensor<?x?x2304xbf16>)
func.func @split(%qkv: tensor<?x?x2304xbf16>) -> (tensor<?x?x768xbf16>, tensor<?x?x1024xbf16>, tensor<?x?x512xbf16>) {
  // CHECK: %[[S:.*]]:3 = llm.split %[[QKV]] [768, 1024, 512] : tensor<?x?x2304xbf16> -> tensor<?x?x768xbf16>, tensor<?x?x1024xbf16>, tensor<?x?x512xbf16>
  %q, %k, %v = llm.split %qkv [768, 1024, 512] : tensor<?x?x2304xbf16> -> tensor<?x?x768xbf16>, tensor<?x?x1024xbf16>, tensor<?x?x512xbf16>
  // CHECK: return %[[S]]#0, %[[S]]#1, %[[S]]#2
  return %q, %k, %v : tensor<?x?x768xbf16>, tensor<?x?x1024xbf16>, tensor<?x?x512xbf16>
}

// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x4096xbf16>, %[[KV8:.*]]: tensor<?x?x1024xbf16>, %[[KV32:.*]]: tensor<?x?x4096xbf16>, %[[KV1:.*]]: tensor<?x?x128xbf16>)
func.func @attention(%q: tensor<?x?x4096xbf16>, %kv8: tensor<?x?x1024xbf16>, %kv32: tensor<?x?x4096xbf16>, %kv1: tensor<?x?x128xbf16>)
    -> (tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>) {
  // Multi-head attention.
  // CHECK: %[[MHA:.*]] = llm.attention %[[Q]], %[[KV32]], %[[KV32]] heads 32 kv_heads 32 head_dim 128 scale 0.088388347648318447 causal : tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>
  %mha = llm.attention %q, %kv32, %kv32 heads 32 kv_heads 32 head_dim 128 scale 0.08838834764831845 causal : tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>
  // Grouped-query attention.
  // CHECK: %[[GQA:.*]] = llm.attention %[[Q]], %[[KV8]], %[[KV8]] heads 32 kv_heads 8 head_dim 128 scale 0.088388347648318447 causal : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  %gqa = llm.attention %q, %kv8, %kv8 heads 32 kv_heads 8 head_dim 128 scale 0.08838834764831845 causal : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  // Multi-query attention.
  // CHECK: %[[MQA:.*]] = llm.attention %[[Q]], %[[KV1]], %[[KV1]] heads 32 kv_heads 1 head_dim 128 scale 1.250000e-01 causal : tensor<?x?x4096xbf16>, tensor<?x?x128xbf16>
  %mqa = llm.attention %q, %kv1, %kv1 heads 32 kv_heads 1 head_dim 128 scale 0.125 causal : tensor<?x?x4096xbf16>, tensor<?x?x128xbf16>
  // Non-causal: no `causal` keyword survives the round trip.
  // CHECK: %[[BIDI:.*]] = llm.attention %[[Q]], %[[KV8]], %[[KV8]] heads 32 kv_heads 8 head_dim 128 scale 1.250000e-01 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  %bidi = llm.attention %q, %kv8, %kv8 heads 32 kv_heads 8 head_dim 128 scale 0.125 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  // Sliding window.
  // CHECK: %[[SWA:.*]] = llm.attention %[[Q]], %[[KV8]], %[[KV8]] heads 32 kv_heads 8 head_dim 128 scale 1.250000e-01 causal window 4096 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  %swa = llm.attention %q, %kv8, %kv8 heads 32 kv_heads 8 head_dim 128 scale 0.125 causal window 4096 : tensor<?x?x4096xbf16>, tensor<?x?x1024xbf16>
  // CHECK: return %[[MHA]], %[[GQA]], %[[MQA]], %[[BIDI]], %[[SWA]]
  return %mha, %gqa, %mqa, %bidi, %swa : tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>, tensor<?x?x4096xbf16>
}

// CHECK-LABEL: func.func @activations
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x3072xf16>, %[[U:.*]]: tensor<?x?x3072xf16>)
func.func @activations(%x: tensor<?x?x3072xf16>, %u: tensor<?x?x3072xf16>) -> (tensor<?x?x3072xf16>, tensor<?x?x3072xf16>) {
  // CHECK: %[[T:.*]] = llm.gelu %[[X]] tanh : tensor<?x?x3072xf16>
  %t = llm.gelu %x tanh : tensor<?x?x3072xf16>
  // CHECK: %[[N:.*]] = llm.gelu %[[T]] none : tensor<?x?x3072xf16>
  %n = llm.gelu %t none : tensor<?x?x3072xf16>
  // CHECK: %[[S:.*]] = llm.swiglu %[[N]], %[[U]] : tensor<?x?x3072xf16>
  %s = llm.swiglu %n, %u : tensor<?x?x3072xf16>
  // CHECK: %[[A:.*]] = llm.add %[[X]], %[[S]] : tensor<?x?x3072xf16>
  %a = llm.add %x, %s : tensor<?x?x3072xf16>
  // CHECK: return %[[S]], %[[A]]
  return %s, %a : tensor<?x?x3072xf16>, tensor<?x?x3072xf16>
}

// CHECK-LABEL: func.func @moe
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x4096xbf16>)
func.func @moe(%x: tensor<?x?x4096xbf16>) -> (tensor<?x?x4096xbf16>, tensor<?x?x2xf32>, tensor<?x?x2xi64>, tensor<8x?x4096xbf16>) {
  // CHECK: %[[WG:.*]] = llm.param "block_sparse_moe.gate.weight"
  %wg = llm.param "block_sparse_moe.gate.weight" normal(0.02) : tensor<8x4096xbf16>
  // CHECK: %[[W1:.*]] = llm.param "block_sparse_moe.experts.*.w1.weight"
  %w1 = llm.param "block_sparse_moe.experts.*.w1.weight" normal(0.02) : tensor<8x14336x4096xbf16>
  // CHECK: %[[W3:.*]] = llm.param "block_sparse_moe.experts.*.w3.weight"
  %w3 = llm.param "block_sparse_moe.experts.*.w3.weight" normal(0.02) : tensor<8x14336x4096xbf16>
  // CHECK: %[[W2:.*]] = llm.param "block_sparse_moe.experts.*.w2.weight"
  %w2 = llm.param "block_sparse_moe.experts.*.w2.weight" normal(0.02) : tensor<8x4096x14336xbf16>
  // CHECK: %[[FC1:.*]] = llm.param "experts.*.fc1.weight"
  %fc1 = llm.param "experts.*.fc1.weight" normal(0.02) : tensor<8x1024x4096xbf16>
  // CHECK: %[[FC2:.*]] = llm.param "experts.*.fc2.weight"
  %fc2 = llm.param "experts.*.fc2.weight" normal(0.02) : tensor<8x4096x1024xbf16>

  // CHECK: %[[P:.*]], %[[I:.*]] = llm.moe_router %[[X]], %[[WG]] top_k 2 normalize : tensor<?x?x4096xbf16>, tensor<8x4096xbf16> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
  %p, %i = llm.moe_router %x, %wg top_k 2 normalize : tensor<?x?x4096xbf16>, tensor<8x4096xbf16> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
  // CHECK: %[[P2:.*]], %[[I2:.*]] = llm.moe_router %[[X]], %[[WG]] top_k 2 : tensor<?x?x4096xbf16>, tensor<8x4096xbf16> -> tensor<?x?x2xf32>, tensor<?x?x2xi64>
  %p2, %i2 = llm.moe_router %x, %wg top_k 2 : tensor<?x?x4096xbf16>, tensor<8x4096xbf16> -> tensor<?x?x2xf32>, tensor<?x?x2xi64>
  // CHECK: %[[D:.*]] = llm.moe_dispatch %[[X]], %[[I]] capacity 1.250000e+00 : tensor<?x?x4096xbf16>, tensor<?x?x2xi32> -> tensor<8x?x4096xbf16>
  %d = llm.moe_dispatch %x, %i capacity 1.25 : tensor<?x?x4096xbf16>, tensor<?x?x2xi32> -> tensor<8x?x4096xbf16>
  // Dropless dispatch.
  // CHECK: %[[D0:.*]] = llm.moe_dispatch %[[X]], %[[I2]] capacity 0.000000e+00 : tensor<?x?x4096xbf16>, tensor<?x?x2xi64> -> tensor<8x?x4096xbf16>
  %d0 = llm.moe_dispatch %x, %i2 capacity 0.0 : tensor<?x?x4096xbf16>, tensor<?x?x2xi64> -> tensor<8x?x4096xbf16>
  // CHECK: %[[E:.*]] = llm.moe_experts %[[D]], %[[W1]], %[[W3]], %[[W2]] swiglu : tensor<8x?x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x4096x14336xbf16>
  %e = llm.moe_experts %d, %w1, %w3, %w2 swiglu : tensor<8x?x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x4096x14336xbf16>
  // fp8 experts.
  // CHECK: %[[G:.*]] = llm.moe_experts %[[D0]], %[[FC1]], %[[FC2]] gelu gemm f8E4M3FN : tensor<8x?x4096xbf16>, tensor<8x1024x4096xbf16>, tensor<8x4096x1024xbf16>
  %g = llm.moe_experts %d0, %fc1, %fc2 gelu gemm f8E4M3FN : tensor<8x?x4096xbf16>, tensor<8x1024x4096xbf16>, tensor<8x4096x1024xbf16>
  // CHECK: %[[C:.*]] = llm.moe_combine %[[E]], %[[P]], %[[I]] : tensor<8x?x4096xbf16>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x4096xbf16>
  %c = llm.moe_combine %e, %p, %i : tensor<8x?x4096xbf16>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x4096xbf16>
  // CHECK: return %[[C]], %[[P2]], %[[I2]], %[[G]]
  return %c, %p2, %i2, %g : tensor<?x?x4096xbf16>, tensor<?x?x2xf32>, tensor<?x?x2xi64>, tensor<8x?x4096xbf16>
}

// CHECK-LABEL: func.func @head_and_loss
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x768xbf16>, %[[LABELS:.*]]: tensor<?x?xi64>)
func.func @head_and_loss(%x: tensor<?x?x768xbf16>, %labels: tensor<?x?xi64>) -> (tensor<f32>, tensor<f32>) {
  // CHECK: %[[WTE:.*]] = llm.param "wte.weight"
  %wte = llm.param "wte.weight" normal(0.02) : tensor<50257x768xbf16>
  // CHECK: %[[LOGITS:.*]] = llm.lm_head %[[X]], %[[WTE]] : tensor<?x?x768xbf16>, tensor<50257x768xbf16> -> tensor<?x?x50257xf32>
  %logits = llm.lm_head %x, %wte : tensor<?x?x768xbf16>, tensor<50257x768xbf16> -> tensor<?x?x50257xf32>
  // The default ignore_index (-100) is elided, whether written or not.
  // CHECK: %[[L0:.*]] = llm.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<?x?x50257xf32>, tensor<?x?xi64> -> tensor<f32>
  %l0 = llm.cross_entropy %logits, %labels : tensor<?x?x50257xf32>, tensor<?x?xi64> -> tensor<f32>
  // CHECK: %[[L1:.*]] = llm.cross_entropy %[[LOGITS]], %[[LABELS]] {ignore_index = 0 : i64} : tensor<?x?x50257xf32>, tensor<?x?xi64> -> tensor<f32>
  %l1 = llm.cross_entropy %logits, %labels {ignore_index = 0 : i64} : tensor<?x?x50257xf32>, tensor<?x?xi64> -> tensor<f32>
  // CHECK: return %[[L0]], %[[L1]]
  return %l0, %l1 : tensor<f32>, tensor<f32>
}

// CHECK-LABEL: func.func @cross_entropy_explicit_default
// CHECK-SAME: (%[[LOGITS:.*]]: tensor<?x?x32000xf32>, %[[LABELS:.*]]: tensor<?x?xi32>)
func.func @cross_entropy_explicit_default(%logits: tensor<?x?x32000xf32>, %labels: tensor<?x?xi32>) -> tensor<f32> {
  // CHECK: %[[L:.*]] = llm.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<?x?x32000xf32>, tensor<?x?xi32> -> tensor<f32>
  %l = llm.cross_entropy %logits, %labels {ignore_index = -100 : i64} : tensor<?x?x32000xf32>, tensor<?x?xi32> -> tensor<f32>
  // CHECK: return %[[L]]
  return %l : tensor<f32>
}

// The MoE backward ops.
// CHECK-LABEL: func.func @moe_grads
func.func @moe_grads(%g: tensor<2x8x32xf32>, %x: tensor<2x8x32xf32>, %dw: tensor<2x8x2xf32>, %w: tensor<2x8x2xf32>, %i: tensor<2x8x2xi32>, %d: tensor<4x16x32xf32>, %de: tensor<4x16x32xf32>) -> (tensor<2x8x32xf32>, tensor<4x32xf32>, tensor<2x8x32xf32>, tensor<4x16x32xf32>, tensor<4x48x32xf32>, tensor<4x16x32xf32>, tensor<2x8x2xf32>) {
  %wg = llm.param "gate.weight" normal(0.02) : tensor<4x32xf32>
  %w1 = llm.param "experts.*.w1.weight" normal(0.02) : tensor<4x48x32xf32>
  %w3 = llm.param "experts.*.w3.weight" normal(0.02) : tensor<4x48x32xf32>
  %w2 = llm.param "experts.*.w2.weight" normal(0.02) : tensor<4x32x48xf32>
  // CHECK: llm.moe_router_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} top_k 2 normalize : tensor<2x8x2xf32>, tensor<2x8x32xf32>, tensor<4x32xf32>, tensor<2x8x2xi32>
  %dx, %dg = llm.moe_router_grad %dw, %x, %wg, %w, %i top_k 2 normalize : tensor<2x8x2xf32>, tensor<2x8x32xf32>, tensor<4x32xf32>, tensor<2x8x2xi32>
  // CHECK: llm.moe_dispatch_grad %{{.*}}, %{{.*}} : tensor<4x16x32xf32>, tensor<2x8x2xi32> -> tensor<2x8x32xf32>
  %dxd = llm.moe_dispatch_grad %d, %i : tensor<4x16x32xf32>, tensor<2x8x2xi32> -> tensor<2x8x32xf32>
  // CHECK: llm.moe_experts_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} swiglu : tensor<4x16x32xf32>, tensor<4x48x32xf32>, tensor<4x48x32xf32>, tensor<4x32x48xf32> -> tensor<4x48x32xf32>, tensor<4x48x32xf32>, tensor<4x32x48xf32>
  %dd, %dw1, %dw3, %dw2 = llm.moe_experts_grad %de, %d, %w1, %w3, %w2 swiglu : tensor<4x16x32xf32>, tensor<4x48x32xf32>, tensor<4x48x32xf32>, tensor<4x32x48xf32> -> tensor<4x48x32xf32>, tensor<4x48x32xf32>, tensor<4x32x48xf32>
  // CHECK: llm.moe_combine_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x32xf32>, tensor<4x16x32xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32>
  %dc, %dp = llm.moe_combine_grad %g, %d, %w, %i : tensor<2x8x32xf32>, tensor<4x16x32xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32>
  return %dx, %dg, %dxd, %dd, %dw1, %dc, %dp : tensor<2x8x32xf32>, tensor<4x32xf32>, tensor<2x8x32xf32>, tensor<4x16x32xf32>, tensor<4x48x32xf32>, tensor<4x16x32xf32>, tensor<2x8x2xf32>
}

// CHECK-LABEL: func.func @fused
// CHECK: %[[F:.*]]:2 = llm.fused(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
// CHECK: llm.fused_yield %{{.*}}, %{{.*}} : tensor<2x8x32xf32>, tensor<2x8x32xf32>
func.func @fused(%x: tensor<2x8x32xf32>, %b: tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  %w = llm.param "norm.weight" ones : tensor<32xf32>
  %s, %n = llm.fused (%x, %b, %w) : (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  ^bb0(%a0: tensor<2x8x32xf32>, %a1: tensor<2x8x32xf32>, %a2: tensor<32xf32>):
    %0 = llm.add %a0, %a1 : tensor<2x8x32xf32>
    %1 = llm.rms_norm %0, %a2 eps 1.0e-05 : tensor<2x8x32xf32>, tensor<32xf32>
    llm.fused_yield %0, %1 : tensor<2x8x32xf32>, tensor<2x8x32xf32>
  }
  return %s, %n : tensor<2x8x32xf32>, tensor<2x8x32xf32>
}
