// RUN: llm-opt %s | llm-opt | FileCheck %s

// The axes the ops name: the module's grid.
// CHECK: llm.grid @mesh {
// CHECK-NEXT: llm.grid_axis @tp size 2
llm.grid @mesh {
  llm.grid_axis @tp size 2
  llm.grid_axis @ep size 2
  llm.grid_axis @cp size 2
  llm.grid_axis @dp size 2
}

// CHECK-LABEL: func.func @tp
// CHECK: %[[C:.*]] = llm.tp_copy %arg0 axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK: llm.tp_reduce %[[C]] bias %arg1 : tensor<8xf32> axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK: llm.tp_reduce %[[C]] axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK: llm.all_reduce %[[C]] axis @mesh::@tp : tensor<?x?x8xf32>
// CHECK: llm.bias_grad %[[C]] : tensor<?x?x8xf32> -> tensor<8xf32>
func.func @tp(%x: tensor<?x?x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %c = llm.tp_copy %x axis @mesh::@tp : tensor<?x?x8xf32>
  %r = llm.tp_reduce %c bias %b : tensor<8xf32> axis @mesh::@tp : tensor<?x?x8xf32>
  %r2 = llm.tp_reduce %c axis @mesh::@tp : tensor<?x?x8xf32>
  %a = llm.all_reduce %c axis @mesh::@tp : tensor<?x?x8xf32>
  %g = llm.bias_grad %c : tensor<?x?x8xf32> -> tensor<8xf32>
  return %g : tensor<8xf32>
}

// CHECK-LABEL: func.func @ep
// CHECK: %[[S:.*]] = llm.ep_dispatch %{{.*}} axis @mesh::@ep : tensor<8x?x64xf32> -> tensor<4x?x64xf32, {ep_parts = 2 : i64}>
// CHECK: llm.ep_combine %[[S]] axis @mesh::@ep : tensor<4x?x64xf32, {ep_parts = 2 : i64}> -> tensor<8x?x64xf32>
func.func @ep(%d: tensor<8x?x64xf32>) -> tensor<8x?x64xf32> {
  %s = llm.ep_dispatch %d axis @mesh::@ep : tensor<8x?x64xf32> -> tensor<4x?x64xf32, {ep_parts = 2 : i64}>
  %c = llm.ep_combine %s axis @mesh::@ep : tensor<4x?x64xf32, {ep_parts = 2 : i64}> -> tensor<8x?x64xf32>
  return %c : tensor<8x?x64xf32>
}

// CHECK-LABEL: func.func @cp
// CHECK: %[[W:.*]] = llm.cp_gather %{{.*}} axis @mesh::@cp : tensor<2x8x32xf32> -> tensor<2x16x32xf32, {cp_parts = 2 : i64}>
// CHECK: llm.cp_scatter %[[W]] axis @mesh::@cp : tensor<2x16x32xf32, {cp_parts = 2 : i64}> -> tensor<2x8x32xf32>
func.func @cp(%k: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %w = llm.cp_gather %k axis @mesh::@cp : tensor<2x8x32xf32> -> tensor<2x16x32xf32, {cp_parts = 2 : i64}>
  %l = llm.cp_scatter %w axis @mesh::@cp : tensor<2x16x32xf32, {cp_parts = 2 : i64}> -> tensor<2x8x32xf32>
  return %l : tensor<2x8x32xf32>
}
