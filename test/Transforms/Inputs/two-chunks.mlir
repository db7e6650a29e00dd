// A valid model, then one that --llm-stats rejects (duplicate parameter).
module attributes {llm.name = "first", llm.seq_len = 4 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

// -----

module attributes {llm.name = "second", llm.seq_len = 4 : i64} {
  func.func @forward() -> tensor<4xf32> attributes {llm.forward} {
    %a = llm.param "w" ones : tensor<4xf32>
    %b = llm.param "w" ones : tensor<4xf32>
    return %a : tensor<4xf32>
  }
}
