//===- ImportTest.cpp - config.json importer ------------------------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Import/HFConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

/// Imports `json`; returns the statistics at `seq` or the first error.
struct Imported {
  std::optional<ModelStats> stats;
  std::string error;
};

Imported import(StringRef json, int64_t seq = 128) {
  MLIRContext ctx;
  Imported out;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    if (out.error.empty())
      out.error = d.str();
    return success();
  });
  OwningOpRef<ModuleOp> m = importHFConfig(json, "cfg.json", &ctx);
  if (!m)
    return out;
  CostContext c;
  c.seqLen = seq;
  FailureOr<ModelStats> st = computeModelStats(*findModelFunc(*m), c);
  if (succeeded(st))
    out.stats = *st;
  return out;
}

TEST(ImportTest, TinyLlamaCountsByHand) {
  Imported r = import(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256})");
  ASSERT_TRUE(r.stats) << r.error;
  // Per layer: 2 norms (128) + q (64*64) + k, v (2 * 32*64) + o (64*64)
  //          + gate, up, down (3 * 64*128) = 36992.
  int64_t layer = 128 + 4096 + 4096 + 4096 + 24576;
  EXPECT_EQ(r.stats->layers.front().params, layer);
  // Untied embedding and head (2 * 6400) and the final norm (64).
  EXPECT_EQ(r.stats->paramsTotal, 2 * layer + 2 * 6400 + 64);
  EXPECT_EQ(r.stats->paramsLMHead, 6400);
  EXPECT_EQ(r.stats->numLayers, 2);
}

TEST(ImportTest, Qwen2HasQkvBias) {
  Imported r = import(R"({"model_type": "qwen2", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256,
      "tie_word_embeddings": true})");
  ASSERT_TRUE(r.stats) << r.error;
  // Llama layer above plus q, k, v biases 64 + 32 + 32; tied head.
  EXPECT_EQ(r.stats->paramsTotal, 36992 + 128 + 6400 + 64);
  EXPECT_TRUE(r.stats->tiedEmbeddings);
}

TEST(ImportTest, ErrorsNameTheField) {
  EXPECT_NE(
      import(R"({"model_type": "llama", "hidden_size": 64})").error.find("'num_hidden_layers'"),
      std::string::npos);
  Imported r = import(R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
      "num_key_value_heads": 3, "vocab_size": 100, "max_position_embeddings": 256})");
  EXPECT_FALSE(r.stats);
  EXPECT_NE(r.error.find("'num_key_value_heads' (3) does not divide"), std::string::npos)
      << r.error;
}

} // namespace
