// RUN: llm-opt %s -split-input-file --llm-plan-memory -verify-diagnostics | FileCheck %s

// Four f32 buffers of 4 KiB (1x32x32), placed at the lowest free offset:
// %a and %b are live together (0, 4096); %c is live with both (8192); %d is
// live with %b and %c but %a is dead by then, so it reuses 0. Peak: three
// buffers. State: 32 fp32 parameters x (4 + 16 bytes of master weight,
// gradient and moments) = 640.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: llm.arena_bytes = 12288 : i64
// CHECK-SAME: llm.state_bytes = 640 : i64
// CHECK: llm.param "g" {{.*}}llm.offsets = array<i64: -1>
// CHECK: llm.rms_norm {{.*}}llm.offsets = array<i64: 0>
// CHECK: llm.rms_norm {{.*}}llm.offsets = array<i64: 4096>
// CHECK: llm.add {{.*}}llm.offsets = array<i64: 8192>
// CHECK: llm.add {{.*}}llm.offsets = array<i64: 0>
module {
  func.func @train_step(%x: tensor<1x32x32xf32>) -> tensor<1x32x32xf32> {
    %g = llm.param "g" ones : tensor<32xf32>
    %a = llm.rms_norm %x, %g eps 1.0e-05 : tensor<1x32x32xf32>, tensor<32xf32>
    %b = llm.rms_norm %x, %g eps 1.0e-05 : tensor<1x32x32xf32>, tensor<32xf32>
    %c = llm.add %a, %b : tensor<1x32x32xf32>
    %d = llm.add %b, %c : tensor<1x32x32xf32>
    return %d : tensor<1x32x32xf32>
  }
}

// -----

// First fit over lifetimes (positions 0-5, the return 6): 8 KiB %a (0-4),
// %b (1-2), %c (2-4), %d (4-6), then 4 KiB %s (3-5), %t (5-6). %c goes
// above %a and %b; %d takes %b's place between %a and %c, %b being dead by
// then; %s is alive with all three, which lie end to end, and goes above
// them; %t is alive with neither %a nor %c and takes 0.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: llm.arena_bytes = 28672 : i64
// CHECK: %[[A:.*]] = llm.add {{.*}}llm.offsets = array<i64: 0>
// CHECK-NEXT: %[[B:.*]] = llm.add {{.*}}llm.offsets = array<i64: 8192>
// CHECK-NEXT: %[[C:.*]] = llm.add %[[B]], %[[B]] {llm.offsets = array<i64: 16384>}
// CHECK-NEXT: %[[S:.*]] = llm.add {{.*}}llm.offsets = array<i64: 24576>}
// CHECK-NEXT: llm.add %[[A]], %[[C]] {llm.offsets = array<i64: 8192>}
// CHECK-NEXT: llm.add %[[S]], %[[S]] {llm.offsets = array<i64: 0>}
module {
  func.func @train_step(%x: tensor<1x32x64xf32>, %y: tensor<1x32x32xf32>) -> (tensor<1x32x64xf32>, tensor<1x32x32xf32>) {
    %a = llm.add %x, %x : tensor<1x32x64xf32>
    %b = llm.add %x, %x : tensor<1x32x64xf32>
    %c = llm.add %b, %b : tensor<1x32x64xf32>
    %s = llm.add %y, %y : tensor<1x32x32xf32>
    %d = llm.add %a, %c : tensor<1x32x64xf32>
    %t = llm.add %s, %s : tensor<1x32x32xf32>
    return %d, %t : tensor<1x32x64xf32>, tensor<1x32x32xf32>
  }
}

// -----

module {
  func.func @train_step(%x: tensor<?x?x32xf32>) -> tensor<?x?x32xf32> {
    %g = llm.param "g" ones : tensor<32xf32>
    // expected-error @+1 {{llm-plan-memory: 'tensor<?x?x32xf32>' has no static size; run llm-specialize-shapes first}}
    %a = llm.rms_norm %x, %g eps 1.0e-05 : tensor<?x?x32xf32>, tensor<32xf32>
    return %a : tensor<?x?x32xf32>
  }
}

// -----

module {
  // expected-error @+1 {{llm-plan-memory: inline the llm.layer regions first}}
  func.func @train_step(%x: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    %y = llm.layer 0 (%x) : tensor<1x2x4xf32> {
    ^bb0(%in: tensor<1x2x4xf32>):
      llm.yield %in : tensor<1x2x4xf32>
    }
    return %y : tensor<1x2x4xf32>
  }
}

// -----

// expected-error @+1 {{llm-plan-memory: no function marked 'llm.train_step' (or single function) to plan}}
module {
  func.func @a() { return }
  func.func @b() { return }
}

// -----

// Pipeline stages: a value read in another part of the schedule than the
// one that made it (here the backward, after the loss %l) goes to the stash,
// of which each micro-batch in flight has its own; values made and read
// within one part share the stage's arena. %a (read by the backward) and
// the returned %l and %d are stashed (%d reusing %a's place); %b and %c
// are not.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: llm.stage_arena_bytes = array<i64: 4096>
// CHECK-SAME: llm.stage_stash_bytes = array<i64: 8192>
// CHECK: llm.rms_norm {{.*}}llm.offsets = array<i64: {{[0-9]+}}>, llm.stage = 0 : i64, llm.stashed = array<i1: true>
// CHECK: %[[B:.*]] = llm.add {{.*}}llm.offsets = array<i64: 0>, llm.stage = 0 : i64}
// CHECK: llm.add %[[B]], %[[B]] {{.*}}llm.stashed = array<i1: true>
// CHECK: %[[C:.*]] = llm.add {{.*}}llm.offsets = array<i64: 0>, llm.stage = 0 : i64}
// CHECK: llm.add %[[C]], %[[C]] {{.*}}llm.stashed = array<i1: true>
module attributes {llm.pp = 1 : i64} {
  func.func @train_step(%x: tensor<1x32x32xf32>) -> (tensor<1x32x32xf32>, tensor<1x32x32xf32>) {
    %g = llm.param "g" ones {llm.stage = 0 : i64} : tensor<32xf32>
    %a = llm.rms_norm %x, %g eps 1.0e-05 {llm.stage = 0 : i64} : tensor<1x32x32xf32>, tensor<32xf32>
    %b = llm.add %a, %a {llm.stage = 0 : i64} : tensor<1x32x32xf32>
    %l = llm.add %b, %b {llm.stage = 0 : i64} : tensor<1x32x32xf32>
    %c = llm.add %a, %a {llm.stage = 0 : i64} : tensor<1x32x32xf32>
    %d = llm.add %c, %c {llm.stage = 0 : i64} : tensor<1x32x32xf32>
    return %l, %d : tensor<1x32x32xf32>, tensor<1x32x32xf32>
  }
}
