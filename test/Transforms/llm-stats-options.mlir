// RUN: not llm-opt %s --llm-stats="format=xml" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: not llm-opt %s --llm-stats="micro-batch=0" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MB

// FORMAT: error: llm-stats: unknown format 'xml': use format=table or format=json
// MB: error: llm-stats: micro-batch must be positive, got 0
module attributes {llm.seq_len = 4 : i64} {
  func.func @forward() -> tensor<4xf32> {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
