// RUN: llm-opt %s --llm-partition-ep="ep=2" | FileCheck %s

// llm-partition-ep on a hand-written MoE layer, ep 2: each expert weight
// keeps 4 / 2 experts (llm.shard over "ep", dim 0); the dispatched rows go to
// their experts' ranks by llm.ep_dispatch and come back by llm.ep_combine;
// the experts see this rank's share (type encoding {ep_parts = 2}). The
// router and its gate stay whole.
// CHECK: llm.param "moe.gate.weight" normal(2.000000e-02) : tensor<4x8xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = llm.moe_router
// CHECK-NEXT: %[[D:.*]] = llm.moe_dispatch {{.*}} -> tensor<4x?x8xf32>
// CHECK-NEXT: %[[W1:.*]] = llm.param "moe.experts.*.fc1.weight" {{.*}}{llm.shard = #llm.shard<axis = "ep", dim = 0, blocks = 1, parts = 2>} : tensor<2x16x8xf32>
// CHECK-NEXT: %[[W2:.*]] = llm.param "moe.experts.*.fc2.weight" {{.*}}{llm.shard = #llm.shard<axis = "ep", dim = 0, blocks = 1, parts = 2>} : tensor<2x8x16xf32>
// CHECK-NEXT: %[[S:.*]] = llm.ep_dispatch %[[D]] axis @mesh::@ep : tensor<4x?x8xf32> -> tensor<2x?x8xf32, {ep_parts = 2 : i64}>
// CHECK-NEXT: %[[E:.*]] = llm.moe_experts %[[S]], %[[W1]], %[[W2]] gelu : tensor<2x?x8xf32, {ep_parts = 2 : i64}>, tensor<2x16x8xf32>, tensor<2x8x16xf32>
// CHECK-NEXT: %[[C:.*]] = llm.ep_combine %[[E]] axis @mesh::@ep : tensor<2x?x8xf32, {ep_parts = 2 : i64}> -> tensor<4x?x8xf32>
// CHECK-NEXT: llm.moe_combine %[[C]], %[[W]], %[[I]]
module {
  func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %wg = llm.param "moe.gate.weight" normal(0.02) : tensor<4x8xf32>
    %p, %i = llm.moe_router %x, %wg top_k 2 : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
    %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
    %w1 = llm.param "moe.experts.*.fc1.weight" normal(0.02) : tensor<4x16x8xf32>
    %w2 = llm.param "moe.experts.*.fc2.weight" normal(0.02) : tensor<4x8x16xf32>
    %e = llm.moe_experts %d, %w1, %w2 gelu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
    %c = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
    return %c : tensor<?x?x8xf32>
  }
}
