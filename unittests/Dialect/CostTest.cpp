//===- CostTest.cpp - CostOpInterface arithmetic --------------------------===//
//
// Each expectation is derived by hand from the op's definition; the
// comments show the derivation.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace llmopt::llm;

namespace {

class CostTest : public ::testing::Test {
protected:
  CostTest() { ctx.loadDialect<LLMDialect, func::FuncDialect>(); }

  /// Parses `body` as the body of `func.func @forward(args)`.
  func::FuncOp parse(StringRef src) {
    module = parseSourceString<ModuleOp>(src, &ctx);
    EXPECT_TRUE(module) << src.str();
    return *module->getOps<func::FuncOp>().begin();
  }

  template <typename OpTy>
  OpTy first(func::FuncOp f) {
    OpTy found;
    f.walk([&](OpTy op) {
      if (!found)
        found = op;
    });
    EXPECT_TRUE(found);
    return found;
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
};

TEST_F(CostTest, LinearForwardBackwardAndSaved) {
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%x: tensor<?x?x64xbf16>) -> tensor<?x?x256xbf16> {
      %w = llm.param "w" normal(0.02) : tensor<256x64xbf16>
      %b = llm.param "b" zeros : tensor<256xbf16>
      %y = llm.linear %x, %w, %b : tensor<?x?x64xbf16>, tensor<256x64xbf16>, tensor<256xbf16> -> tensor<?x?x256xbf16>
      return %y : tensor<?x?x256xbf16>
    })mlir");
  CostContext c;
  c.batch = 2;
  c.seqLen = 8; // 16 tokens
  OpCost cost = first<LinearOp>(f).getCost(c);
  // 2 * T * in * out + T * out (bias) = 2*16*64*256 + 16*256
  EXPECT_DOUBLE_EQ(cost.fwdFlops, 2.0 * 16 * 64 * 256 + 16 * 256);
  // 4 * T * in * out + T * out
  EXPECT_DOUBLE_EQ(cost.bwdFlops, 4.0 * 16 * 64 * 256 + 16 * 256);
  // Reads x (16*64*2 B), W (256*64*2 B), b (256*2 B); writes y (16*256*2 B).
  EXPECT_DOUBLE_EQ(cost.fwdBytesRead, 16 * 64 * 2 + 256 * 64 * 2 + 256 * 2);
  EXPECT_DOUBLE_EQ(cost.fwdBytesWritten, 16 * 256 * 2);
  ASSERT_EQ(cost.saved.size(), 1u);
  EXPECT_EQ(cost.saved[0].value, f.getArgument(0));
  EXPECT_DOUBLE_EQ(cost.saved[0].bytes, 16 * 64 * 2);
  EXPECT_EQ(cost.params, 0);

  // The dtype override turns bf16 into fp32 sizes.
  c.dtypeBytes = 4;
  EXPECT_DOUBLE_EQ(first<LinearOp>(f).getCost(c).fwdBytesWritten, 16 * 256 * 4);
}

TEST_F(CostTest, TransposedLinearAndFp8Gemm) {
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%x: tensor<?x?x64xbf16>) -> tensor<?x?x32xbf16> {
      %w = llm.param "w" normal(0.02) : tensor<64x32xbf16>
      %y = llm.linear %x, %w transposed gemm f8E4M3FN : tensor<?x?x64xbf16>, tensor<64x32xbf16> -> tensor<?x?x32xbf16>
      return %y : tensor<?x?x32xbf16>
    })mlir");
  LinearOp lin = first<LinearOp>(f);
  EXPECT_EQ(lin.getInFeatures(), 64);
  EXPECT_EQ(lin.getOutFeatures(), 32);
  CostContext c;
  c.seqLen = 4;
  // fp8 weights: 64*32 bytes, activations bf16 4*64*2.
  EXPECT_DOUBLE_EQ(lin.getCost(c).fwdBytesRead, 4 * 64 * 2 + 64 * 32 * 1);
}

TEST_F(CostTest, CausalGQAAttention) {
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%q: tensor<?x?x512xbf16>, %k: tensor<?x?x128xbf16>, %v: tensor<?x?x128xbf16>) -> tensor<?x?x512xbf16> {
      %o = llm.attention %q, %k, %v heads 8 kv_heads 2 head_dim 64 scale 1.250000e-01 causal : tensor<?x?x512xbf16>, tensor<?x?x128xbf16>
      return %o : tensor<?x?x512xbf16>
    })mlir");
  CostContext c;
  c.batch = 3;
  c.seqLen = 10;
  OpCost cost = first<AttentionOp>(f).getCost(c);
  // Causal pairs: 10*11/2 = 55; 4 * B * heads * head_dim * pairs.
  EXPECT_DOUBLE_EQ(cost.fwdFlops, 4.0 * 3 * 8 * 64 * 55);
  EXPECT_DOUBLE_EQ(cost.bwdFlops, 2 * cost.fwdFlops);
  // Saves q, k, v and the output; the fused kernel adds fp32 log-sum-exp.
  EXPECT_EQ(cost.saved.size(), 4u);
  EXPECT_DOUBLE_EQ(cost.savedExtraBytes, 4.0 * 3 * 8 * 10);
  EXPECT_DOUBLE_EQ(cost.selectiveDropBytes, 0);
  // Non-fused: keeps the bf16 probabilities B*h*S*S, which selective
  // recomputation drops.
  c.fusedAttention = false;
  OpCost naive = first<AttentionOp>(f).getCost(c);
  EXPECT_DOUBLE_EQ(naive.savedExtraBytes, 3.0 * 8 * 10 * 10 * 2);
  EXPECT_DOUBLE_EQ(naive.selectiveDropBytes, naive.savedExtraBytes);
}

TEST_F(CostTest, SlidingWindowPairs) {
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
      %o = llm.attention %q, %k, %v heads 1 kv_heads 1 head_dim 64 scale 1.250000e-01 causal window 4 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
      return %o : tensor<?x?x64xf32>
    })mlir");
  CostContext c;
  c.seqLen = 10;
  // Positions 0..3 see 1..4 keys (10 pairs), the 6 others see 4 each (24).
  EXPECT_DOUBLE_EQ(first<AttentionOp>(f).getCost(c).fwdFlops, 4.0 * 64 * 34);
}

TEST_F(CostTest, LayerDedupsSavedTensors) {
  // Two linears read the same normalized input: it is kept once.
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%x: tensor<?x?x16xf32>) -> tensor<?x?x16xf32> {
      %y = llm.layer 0 (%x) : tensor<?x?x16xf32> {
      ^bb0(%in: tensor<?x?x16xf32>):
        %g = llm.param "g" ones : tensor<16xf32>
        %n = llm.rms_norm %in, %g eps 1.000000e-05 : tensor<?x?x16xf32>, tensor<16xf32>
        %w1 = llm.param "w1" normal(0.02) : tensor<32x16xf32>
        %w2 = llm.param "w2" normal(0.02) : tensor<32x16xf32>
        %a = llm.linear %n, %w1 : tensor<?x?x16xf32>, tensor<32x16xf32> -> tensor<?x?x32xf32>
        %b = llm.linear %n, %w2 : tensor<?x?x16xf32>, tensor<32x16xf32> -> tensor<?x?x32xf32>
        %s = llm.swiglu %a, %b : tensor<?x?x32xf32>
        %w3 = llm.param "w3" normal(0.02) : tensor<16x32xf32>
        %d = llm.linear %s, %w3 : tensor<?x?x32xf32>, tensor<16x32xf32> -> tensor<?x?x16xf32>
        %r = llm.add %in, %d : tensor<?x?x16xf32>
        llm.yield %r : tensor<?x?x16xf32>
      }
      return %y : tensor<?x?x16xf32>
    })mlir");
  CostContext c;
  c.seqLen = 5;
  OpCost cost = first<LayerOp>(f).getCost(c);
  EXPECT_EQ(cost.params, 16 + 2 * 32 * 16 + 16 * 32);
  // Unique saved tensors (fp32, 5 tokens): %in (16), %n (16), %a (32),
  // %b (32), %s (32) = 128 floats; plus rms statistics 5 * 4 bytes.
  EXPECT_DOUBLE_EQ(cost.savedBytes(), 5 * 128 * 4 + 5 * 4);
  EXPECT_EQ(cost.saved.size(), 5u);
}

TEST_F(CostTest, ExpertsUseCapacity) {
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
      %wg = llm.param "gate" normal(0.02) : tensor<4x8xf32>
      %p, %i = llm.moe_router %x, %wg top_k 2 normalize : tensor<?x?x8xf32>, tensor<4x8xf32> -> tensor<?x?x2xf32>, tensor<?x?x2xi32>
      %d = llm.moe_dispatch %x, %i capacity 1.500000e+00 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
      %w1 = llm.param "e.*.w1" normal(0.02) : tensor<4x16x8xf32>
      %w3 = llm.param "e.*.w3" normal(0.02) : tensor<4x16x8xf32>
      %w2 = llm.param "e.*.w2" normal(0.02) : tensor<4x8x16xf32>
      %e = llm.moe_experts %d, %w1, %w3, %w2 swiglu : tensor<4x?x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>
      %y = llm.moe_combine %e, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
      return %y : tensor<?x?x8xf32>
    })mlir");
  CostContext c;
  c.seqLen = 10;
  // Capacity per expert: ceil(1.5 * 10 tokens * 2 / 4) = 8 rows; 32 in all.
  double rows = 32;
  OpCost e = first<MoEExpertsOp>(f).getCost(c);
  EXPECT_DOUBLE_EQ(e.fwdFlops, 3 * 2 * rows * 8 * 16 + 5 * rows * 16);
  // Router: 2 * T * hidden * experts + 5 * T * experts.
  EXPECT_DOUBLE_EQ(first<MoERouterOp>(f).getCost(c).fwdFlops,
                   2.0 * 10 * 8 * 4 + 5.0 * 10 * 4);

  FailureOr<ModelStats> st = computeModelStats(f, c);
  ASSERT_TRUE(succeeded(st));
  // 32 gate + 3 * 512 expert weights; a token uses 2 of 4 experts.
  EXPECT_EQ(st->paramsTotal, 32 + 3 * 512);
  EXPECT_EQ(st->paramsActive, 32 + 3 * 512 / 2);
}

TEST_F(CostTest, TiedHeadCountedOnceAndInNarayananFlops) {
  func::FuncOp f = parse(R"mlir(
    func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> {
      %wte = llm.param "wte" normal(0.02) : tensor<100x8xf32>
      %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<100x8xf32> -> tensor<?x?x8xf32>
      %logits = llm.lm_head %x, %wte : tensor<?x?x8xf32>, tensor<100x8xf32> -> tensor<?x?x100xf32>
      %loss = llm.cross_entropy %logits, %l : tensor<?x?x100xf32>, tensor<?x?xi32> -> tensor<f32>
      return %loss : tensor<f32>
    })mlir");
  CostContext c;
  c.seqLen = 4;
  FailureOr<ModelStats> st = computeModelStats(f, c);
  ASSERT_TRUE(succeeded(st));
  EXPECT_EQ(st->paramsTotal, 800);
  EXPECT_EQ(st->paramsEmbedding, 800);
  EXPECT_EQ(st->paramsLMHead, 0);
  EXPECT_TRUE(st->tiedEmbeddings);
  // 6N with N = the head's 800 GEMM weights; no attention.
  EXPECT_DOUBLE_EQ(st->trainFlopsPerToken, 6.0 * 800);
}

} // namespace
