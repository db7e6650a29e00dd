// RUN: llm-opt %s | llm-opt | FileCheck %s

// CHECK-LABEL: func.func @tp
// CHECK: %[[C:.*]] = llm.tp_copy %arg0 axis "tp" : tensor<?x?x8xf32>
// CHECK: llm.tp_reduce %[[C]] bias %arg1 : tensor<8xf32> axis "tp" : tensor<?x?x8xf32>
// CHECK: llm.tp_reduce %[[C]] axis "tp" : tensor<?x?x8xf32>
// CHECK: llm.all_reduce %[[C]] axis "tp" : tensor<?x?x8xf32>
// CHECK: llm.bias_grad %[[C]] : tensor<?x?x8xf32> -> tensor<8xf32>
func.func @tp(%x: tensor<?x?x8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %c = llm.tp_copy %x axis "tp" : tensor<?x?x8xf32>
  %r = llm.tp_reduce %c bias %b : tensor<8xf32> axis "tp" : tensor<?x?x8xf32>
  %r2 = llm.tp_reduce %c axis "tp" : tensor<?x?x8xf32>
  %a = llm.all_reduce %c axis "tp" : tensor<?x?x8xf32>
  %g = llm.bias_grad %c : tensor<?x?x8xf32> -> tensor<8xf32>
  return %g : tensor<8xf32>
}

// CHECK-LABEL: func.func @ep
// CHECK: %[[S:.*]] = llm.ep_dispatch %{{.*}} axis "ep" : tensor<8x?x64xf32> -> tensor<4x?x64xf32, {ep_parts = 2 : i64}>
// CHECK: llm.ep_combine %[[S]] axis "ep" : tensor<4x?x64xf32, {ep_parts = 2 : i64}> -> tensor<8x?x64xf32>
func.func @ep(%d: tensor<8x?x64xf32>) -> tensor<8x?x64xf32> {
  %s = llm.ep_dispatch %d axis "ep" : tensor<8x?x64xf32> -> tensor<4x?x64xf32, {ep_parts = 2 : i64}>
  %c = llm.ep_combine %s axis "ep" : tensor<4x?x64xf32, {ep_parts = 2 : i64}> -> tensor<8x?x64xf32>
  return %c : tensor<8x?x64xf32>
}

// CHECK-LABEL: func.func @cp
// CHECK: %[[W:.*]] = llm.cp_gather %{{.*}} axis "cp" : tensor<2x8x32xf32> -> tensor<2x16x32xf32, {cp_parts = 2 : i64}>
// CHECK: llm.cp_scatter %[[W]] axis "cp" : tensor<2x16x32xf32, {cp_parts = 2 : i64}> -> tensor<2x8x32xf32>
func.func @cp(%k: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %w = llm.cp_gather %k axis "cp" : tensor<2x8x32xf32> -> tensor<2x16x32xf32, {cp_parts = 2 : i64}>
  %l = llm.cp_scatter %w axis "cp" : tensor<2x16x32xf32, {cp_parts = 2 : i64}> -> tensor<2x8x32xf32>
  return %l : tensor<2x8x32xf32>
}
