// weight_bytes sums each parameter's own element size: 16 bf16 (32 B) and
// 8 f32 (32 B) make 64 B. dtype-bytes replaces every element size.
// RUN: llm-opt %s --llm-stats="format=json" | FileCheck %s --check-prefix=MIXED
// RUN: llm-opt %s --llm-stats="format=json dtype-bytes=2" | FileCheck %s --check-prefix=TWO
// RUN: llm-opt %s --llm-stats="format=json dtype-bytes=8" | FileCheck %s --check-prefix=EIGHT
// RUN: llm-opt %s --llm-stats | FileCheck %s --check-prefix=TABLE
// MIXED: "weight_bytes": 64{{$}}
// TWO: "weight_bytes": 48{{$}}
// EIGHT: "weight_bytes": 192{{$}}
// TABLE: weights {{ *}}64 B
module attributes {llm.seq_len = 4 : i64} {
  func.func @forward() -> (tensor<16xbf16>, tensor<8xf32>) attributes {llm.forward} {
    %a = llm.param "a" ones : tensor<16xbf16>
    %b = llm.param "b" ones : tensor<8xf32>
    return %a, %b : tensor<16xbf16>, tensor<8xf32>
  }
}

// Activation bytes of one tiny GPT-2 layer (h = 64, 4 heads, s = 128, b = 1,
// bf16): 32 s b h = 262,144 bytes of tensors, plus fp32 norm statistics
// 2 norms * 2 * 4 B * 128 = 2,048 and, with a fused kernel, the fp32
// log-sum-exp 4 heads * 128 * 4 B = 2,048: 266,240, which selective
// recomputation cannot reduce. A non-fused kernel keeps the bf16
// probabilities 4 * 128 * 128 * 2 B = 131,072 instead of the log-sum-exp
// (395,264), and selective recomputation drops them (264,192). dtype-bytes=4
// doubles the tensors but not the fp32 statistics.
// RUN: llm-opt %S/../Import/Inputs/tiny-gpt2.json --llm-stats="format=json" | FileCheck %s --check-prefix=FUSED
// RUN: llm-opt %S/../Import/Inputs/tiny-gpt2.json --llm-stats="format=json fused-attention=false" | FileCheck %s --check-prefix=NAIVE
// RUN: llm-opt %S/../Import/Inputs/tiny-gpt2.json --llm-stats="format=json fused-attention=false dtype-bytes=4" | FileCheck %s --check-prefix=NAIVE4
// FUSED: "none": 266240,
// FUSED-NEXT: "selective": 266240
// NAIVE: "none": 395264,
// NAIVE-NEXT: "selective": 264192
// NAIVE4: "none": 788480,
// NAIVE4-NEXT: "selective": 526336
// NAIVE4: "weight_bytes": 457728{{$}}

// --hf-dtype applies to a JSON model given to llm-opt: the same 114,432
// parameters take 4 bytes each.
// RUN: llm-opt %S/../Import/Inputs/tiny-gpt2.json --hf-dtype=f32 --llm-stats="format=json" | FileCheck %s --check-prefix=F32
// RUN: llm-opt %S/../Import/Inputs/tiny-gpt2.json --hf-dtype=f32 | FileCheck %s --check-prefix=F32IR
// F32: "weight_bytes": 457728{{$}}
// F32IR: llm.param "transformer.wte.weight" normal(2.000000e-02) : tensor<96x64xf32>
// RUN: not llm-opt %S/../Import/Inputs/tiny-gpt2.json --hf-dtype=f64 2>&1 | FileCheck %s --check-prefix=BADDTYPE
// BADDTYPE: tiny-gpt2.json:1:1: error: unknown dtype 'f64' (--hf-dtype): use bf16, f16 or f32
