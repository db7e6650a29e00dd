// Bad option values: an error naming the option and the accepted range, a
// non-zero exit, and nothing on standard output.
// RUN: not llm-opt %s --llm-stats="format=xml" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not llm-opt %s --llm-stats="micro-batch=0" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MB
// RUN: not llm-opt %s --llm-stats="micro-batch=-2" 2>&1 | FileCheck %s --check-prefix=MBNEG
// RUN: not llm-opt %s --llm-stats="micro-batch=1048577" 2>&1 | FileCheck %s --check-prefix=MBBIG
// RUN: not llm-opt %s --llm-stats="seq-len=-5" 2>&1 | FileCheck %s --check-prefix=SEQNEG
// RUN: not llm-opt %s --llm-stats="seq-len=0" 2>&1 | FileCheck %s --check-prefix=SEQZERO
// RUN: not llm-opt %s --llm-stats="seq-len=9223372036854775807 micro-batch=2" 2>&1 | FileCheck %s --check-prefix=SEQBIG
// RUN: not llm-opt %s --llm-stats="seq-len=67108865" 2>&1 | FileCheck %s --check-prefix=SEQBIG2
// RUN: not llm-opt %s --llm-stats="dtype-bytes=3" 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not llm-opt %s --llm-stats="seq-len=-5" 2>/dev/null | count 0
// RUN: not llm-opt %s --llm-stats="dtype-bytes=3" 2>/dev/null | count 0

// The largest accepted values give finite, positive figures.
// RUN: llm-opt %s --llm-stats="format=json seq-len=67108864 micro-batch=1048576" | FileCheck %s --check-prefix=MAX

// FORMAT: error: llm-stats: unknown format 'xml': use format=table or format=json
// MB: error: llm-stats: micro-batch must be positive, got 0
// MBNEG: error: llm-stats: micro-batch must be positive, got -2
// MBBIG: error: llm-stats: micro-batch 1048577 is above the limit of 1048576 (2^20) sequences
// SEQNEG: error: llm-stats: seq-len must be positive, got -5
// SEQZERO: error: llm-stats: seq-len must be positive, got 0
// SEQBIG: error: llm-stats: seq-len 9223372036854775807 is above the limit of 67108864 (2^26) tokens
// SEQBIG2: error: llm-stats: seq-len 67108865 is above the limit of 67108864 (2^26) tokens
// DTYPE: error: llm-stats: dtype-bytes must be 1, 2, 4 or 8, or 0 to take element types from the IR; got 3
// MAX: "micro_batch": 1048576,
// MAX: "seq_len": 67108864,
module attributes {llm.seq_len = 4 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
