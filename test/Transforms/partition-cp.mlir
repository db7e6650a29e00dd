// RUN: llm-opt %s --llm-partition-cp="cp=2" | FileCheck %s --check-prefix=RING
// RUN: llm-opt %s --llm-partition-cp="cp=2 comm=all-gather" | FileCheck %s --check-prefix=GATHER

// llm-partition-cp on a hand-written attention, cp 2; the module records the
// degree (llm.cp).
// Ring attention (the default) marks the attention with its axis and keeps
// its operands.
// RING: module attributes {llm.cp = 2 : i64}
// RING-NOT: llm.cp_gather
// RING: llm.attention %arg0, %arg1, %arg2 heads 2 kv_heads 1 head_dim 4 {{.*}}causal {llm.cp_ring = @mesh::@cp} : tensor<?x?x8xf32>, tensor<?x?x4xf32>
// comm=all-gather: the keys and values are gathered whole over the ranks
// (type encoding {cp_parts = 2}) before the attention reads them.
// GATHER: module attributes {llm.cp = 2 : i64}
// GATHER: func.func @forward(%[[Q:.*]]: tensor<?x?x8xf32>, %[[K:.*]]: tensor<?x?x4xf32>, %[[V:.*]]: tensor<?x?x4xf32>)
// GATHER-NEXT: %[[GK:.*]] = llm.cp_gather %[[K]] axis @mesh::@cp : tensor<?x?x4xf32> -> tensor<?x?x4xf32, {cp_parts = 2 : i64}>
// GATHER-NEXT: %[[GV:.*]] = llm.cp_gather %[[V]] axis @mesh::@cp : tensor<?x?x4xf32> -> tensor<?x?x4xf32, {cp_parts = 2 : i64}>
// GATHER-NEXT: llm.attention %[[Q]], %[[GK]], %[[GV]] heads 2 kv_heads 1 head_dim 4 {{.*}}: tensor<?x?x8xf32>, tensor<?x?x4xf32, {cp_parts = 2 : i64}>
// GATHER-NOT: llm.cp_ring
module {
  func.func @forward(%q: tensor<?x?x8xf32>, %k: tensor<?x?x4xf32>, %v: tensor<?x?x4xf32>) -> tensor<?x?x8xf32> attributes {llm.forward} {
    %a = llm.attention %q, %k, %v heads 2 kv_heads 1 head_dim 4 scale 0.5 causal : tensor<?x?x8xf32>, tensor<?x?x4xf32>
    return %a : tensor<?x?x8xf32>
  }
}
