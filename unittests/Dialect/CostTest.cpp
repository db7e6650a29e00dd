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
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace llmopt::llm;

namespace {

class CostTest : public ::testing::Test {
protected:
  CostTest() { ctx.loadDialect<LLMDialect, func::FuncDialect>(); }

  /// Parses `src`, a module holding one func.func, into `f`. Fails the test
  /// fatally when it does not parse; call it in ASSERT_NO_FATAL_FAILURE.
  void parse(StringRef src, func::FuncOp &f) {
    module = parseSourceString<ModuleOp>(src, &ctx);
    ASSERT_TRUE(module) << "does not parse:\n" << src.str();
    auto funcs = module->getOps<func::FuncOp>();
    ASSERT_FALSE(funcs.empty()) << "no func.func in:\n" << src.str();
    f = *funcs.begin();
  }

  /// The first op of type OpTy in `f`; null (and a failed test) when none.
  template <typename OpTy> OpTy first(func::FuncOp f) {
    OpTy found;
    f.walk([&](OpTy op) {
      if (!found)
        found = op;
    });
    EXPECT_TRUE(found) << "no " << OpTy::getOperationName().str();
    return found;
  }

  /// The cost of the first OpTy in `f`; zero (and a failed test) when none.
  template <typename OpTy> OpCost costOf(func::FuncOp f, const CostContext &c) {
    OpTy op = first<OpTy>(f);
    return op ? op.getCost(c) : OpCost();
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
};

TEST_F(CostTest, LinearForwardBackwardAndSaved) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x64xbf16>) -> tensor<?x?x256xbf16> {
      %w = llm.param "w" normal(0.02) : tensor<256x64xbf16>
      %b = llm.param "b" zeros : tensor<256xbf16>
      %y = llm.linear %x, %w, %b : tensor<?x?x64xbf16>, tensor<256x64xbf16>, tensor<256xbf16> -> tensor<?x?x256xbf16>
      return %y : tensor<?x?x256xbf16>
    })mlir",
                                f));
  CostContext c;
  c.batch = 2;
  c.seqLen = 8; // 16 tokens
  OpCost cost = costOf<LinearOp>(f, c);
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
  EXPECT_DOUBLE_EQ(costOf<LinearOp>(f, c).fwdBytesWritten, 16 * 256 * 4);
}

TEST_F(CostTest, TransposedLinearAndFp8Gemm) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x64xbf16>) -> tensor<?x?x32xbf16> {
      %w = llm.param "w" normal(0.02) : tensor<64x32xbf16>
      %y = llm.linear %x, %w transposed gemm f8E4M3FN : tensor<?x?x64xbf16>, tensor<64x32xbf16> -> tensor<?x?x32xbf16>
      return %y : tensor<?x?x32xbf16>
    })mlir",
                                f));
  LinearOp lin = first<LinearOp>(f);
  ASSERT_TRUE(lin);
  EXPECT_EQ(lin.getInFeatures(), 64);
  EXPECT_EQ(lin.getOutFeatures(), 32);
  CostContext c;
  c.seqLen = 4;
  // fp8 weights: 64*32 bytes, activations bf16 4*64*2.
  EXPECT_DOUBLE_EQ(lin.getCost(c).fwdBytesRead, 4 * 64 * 2 + 64 * 32 * 1);
}

TEST_F(CostTest, CausalGQAAttention) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%q: tensor<?x?x512xbf16>, %k: tensor<?x?x128xbf16>, %v: tensor<?x?x128xbf16>) -> tensor<?x?x512xbf16> {
      %o = llm.attention %q, %k, %v heads 8 kv_heads 2 head_dim 64 scale 1.250000e-01 causal : tensor<?x?x512xbf16>, tensor<?x?x128xbf16>
      return %o : tensor<?x?x512xbf16>
    })mlir",
                                f));
  CostContext c;
  c.batch = 3;
  c.seqLen = 10;
  OpCost cost = costOf<AttentionOp>(f, c);
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
  OpCost naive = costOf<AttentionOp>(f, c);
  EXPECT_DOUBLE_EQ(naive.savedExtraBytes, 3.0 * 8 * 10 * 10 * 2);
  EXPECT_DOUBLE_EQ(naive.selectiveDropBytes, naive.savedExtraBytes);
}

TEST_F(CostTest, SlidingWindowPairs) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
      %o = llm.attention %q, %k, %v heads 1 kv_heads 1 head_dim 64 scale 1.250000e-01 causal window 4 : tensor<?x?x64xf32>, tensor<?x?x64xf32>
      return %o : tensor<?x?x64xf32>
    })mlir",
                                f));
  CostContext c;
  c.seqLen = 10;
  // Positions 0..3 see 1..4 keys (10 pairs), the 6 others see 4 each (24).
  EXPECT_DOUBLE_EQ(costOf<AttentionOp>(f, c).fwdFlops, 4.0 * 64 * 34);
}

TEST_F(CostTest, LayerDedupsSavedTensors) {
  // Two linears read the same normalized input: it is kept once.
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
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
    })mlir",
                                f));
  CostContext c;
  c.seqLen = 5;
  OpCost cost = costOf<LayerOp>(f, c);
  EXPECT_EQ(cost.params, 16 + 2 * 32 * 16 + 16 * 32);
  // Unique saved tensors (fp32, 5 tokens): %in (16), %n (16), %a (32),
  // %b (32), %s (32) = 128 floats; plus rms statistics 5 * 4 bytes.
  EXPECT_DOUBLE_EQ(cost.savedBytes(), 5 * 128 * 4 + 5 * 4);
  EXPECT_EQ(cost.saved.size(), 5u);
}

TEST_F(CostTest, ExpertsUseCapacity) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
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
    })mlir",
                                f));
  CostContext c;
  c.seqLen = 10;
  // Capacity per expert: ceil(1.5 * 10 tokens * 2 / 4) = 8 rows; 32 in all.
  double rows = 32;
  OpCost e = costOf<MoEExpertsOp>(f, c);
  EXPECT_DOUBLE_EQ(e.fwdFlops, 3 * 2 * rows * 8 * 16 + 5 * rows * 16);
  // Router: 2 * T * hidden * experts + 5 * T * experts.
  EXPECT_DOUBLE_EQ(costOf<MoERouterOp>(f, c).fwdFlops, 2.0 * 10 * 8 * 4 + 5.0 * 10 * 4);

  FailureOr<ModelStats> st = computeModelStats(f, c);
  ASSERT_TRUE(succeeded(st));
  // 32 gate + 3 * 512 expert weights; a token uses 2 of 4 experts.
  EXPECT_EQ(st->paramsTotal, 32 + 3 * 512);
  EXPECT_EQ(st->paramsActive, 32 + 3 * 512 / 2);
}

TEST_F(CostTest, TiedHeadCountedOnceAndInNarayananFlops) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%t: tensor<?x?xi32>, %l: tensor<?x?xi32>) -> tensor<f32> {
      %wte = llm.param "wte" normal(0.02) : tensor<100x8xf32>
      %x = llm.embedding %t, %wte : tensor<?x?xi32>, tensor<100x8xf32> -> tensor<?x?x8xf32>
      %logits = llm.lm_head %x, %wte : tensor<?x?x8xf32>, tensor<100x8xf32> -> tensor<?x?x100xf32>
      %loss = llm.cross_entropy %logits, %l : tensor<?x?x100xf32>, tensor<?x?xi32> -> tensor<f32>
      return %loss : tensor<f32>
    })mlir",
                                f));
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

//===----------------------------------------------------------------------===//
// One test per op: forward FLOPs, saved bytes and traffic, derived from the
// formulas in LLMCost.cpp. Unless a test says otherwise, the micro-batch is
// 2 sequences of 8 tokens: T = 16 tokens.
//===----------------------------------------------------------------------===//

/// Two sequences of eight tokens.
static CostContext twoByEight() {
  CostContext c;
  c.batch = 2;
  c.seqLen = 8;
  return c;
}

TEST_F(CostTest, EmbeddingIsAGather) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%t: tensor<?x?xi32>, %w: tensor<100x8xbf16>) -> tensor<?x?x8xbf16> {
      %x = llm.embedding %t, %w : tensor<?x?xi32>, tensor<100x8xbf16> -> tensor<?x?x8xbf16>
      return %x : tensor<?x?x8xbf16>
    })mlir",
                                f));
  OpCost c = costOf<EmbeddingOp>(f, twoByEight());
  // No arithmetic forward; reads the i32 tokens (16 * 4 = 64 B) and the
  // gathered rows (16 * 8 * 2 = 256 B), writes the rows.
  EXPECT_DOUBLE_EQ(c.fwdFlops, 0);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 64 + 256);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 256);
  // Backward scatter-adds one value per output element: 16 * 8.
  EXPECT_DOUBLE_EQ(c.bwdFlops, 128);
  EXPECT_DOUBLE_EQ(c.bwdBytesRead, 256 + 64);
  EXPECT_DOUBLE_EQ(c.bwdBytesWritten, 256);
  // Keeps only the token ids.
  EXPECT_DOUBLE_EQ(c.savedBytes(), 64);
}

TEST_F(CostTest, PositionEmbeddingAddsTableRows) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xbf16>, %w: tensor<32x8xbf16>) -> tensor<?x?x8xbf16> {
      %y = llm.position_embedding %x, %w : tensor<?x?x8xbf16>, tensor<32x8xbf16>
      return %y : tensor<?x?x8xbf16>
    })mlir",
                                f));
  OpCost c = costOf<PositionEmbeddingOp>(f, twoByEight());
  // One add per element (16 * 8); reads x (256 B) and the first 8 table rows
  // (8 * 8 * 2 = 128 B).
  EXPECT_DOUBLE_EQ(c.fwdFlops, 128);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 256 + 128);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 256);
  // The table gradient sums over the batch into 8 rows.
  EXPECT_DOUBLE_EQ(c.bwdBytesWritten, 128);
  // Nothing is kept: the gradient of an add needs no input.
  EXPECT_DOUBLE_EQ(c.savedBytes(), 0);
}

TEST_F(CostTest, RotaryCountsQAndK) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%q: tensor<?x?x16xbf16>, %k: tensor<?x?x8xbf16>) -> (tensor<?x?x16xbf16>, tensor<?x?x8xbf16>) {
      %qr, %kr = llm.rotary %q, %k head_dim 4 theta 1.0e+04 : tensor<?x?x16xbf16>, tensor<?x?x8xbf16>
      return %qr, %kr : tensor<?x?x16xbf16>, tensor<?x?x8xbf16>
    })mlir",
                                f));
  OpCost c = costOf<RotaryOp>(f, twoByEight());
  // 3 FLOPs per element of q (16 * 16) and k (16 * 8): 3 * 384.
  EXPECT_DOUBLE_EQ(c.fwdFlops, 3.0 * 384);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 3.0 * 384);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 384 * 2);
  EXPECT_DOUBLE_EQ(c.savedBytes(), 0);
}

TEST_F(CostTest, LayerNormKeepsInputAndTwoStatistics) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<?x?x8xf32> {
      %y = llm.layer_norm %x, %g, %b eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>, tensor<8xf32>
      return %y : tensor<?x?x8xf32>
    })mlir",
                                f));
  OpCost c = costOf<LayerNormOp>(f, twoByEight());
  // 7 FLOPs per element forward, 14 backward, over 16 * 8 = 128 elements.
  EXPECT_DOUBLE_EQ(c.fwdFlops, 7.0 * 128);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 14.0 * 128);
  // Reads x (512 B) and weight and bias (2 * 32 B); writes y (512 B).
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 512 + 64);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 512);
  // Backward reads dy, x and the parameters; writes dx and their gradients.
  EXPECT_DOUBLE_EQ(c.bwdBytesRead, 512 + 512 + 64);
  EXPECT_DOUBLE_EQ(c.bwdBytesWritten, 512 + 64);
  // Keeps x (512 B) and fp32 mean and rstd per token (16 * 2 * 4 = 128 B).
  EXPECT_DOUBLE_EQ(c.savedBytes(), 512 + 128);
}

TEST_F(CostTest, RMSNormKeepsInputAndOneStatistic) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xf32>, %g: tensor<8xf32>) -> tensor<?x?x8xf32> {
      %y = llm.rms_norm %x, %g eps 1.0e-05 : tensor<?x?x8xf32>, tensor<8xf32>
      return %y : tensor<?x?x8xf32>
    })mlir",
                                f));
  OpCost c = costOf<RMSNormOp>(f, twoByEight());
  EXPECT_DOUBLE_EQ(c.fwdFlops, 5.0 * 128);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 10.0 * 128);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 512 + 32);
  // x (512 B) and fp32 rstd per token (16 * 4 = 64 B).
  EXPECT_DOUBLE_EQ(c.savedBytes(), 512 + 64);
}

TEST_F(CostTest, GeluTanhAndExact) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xbf16>) -> (tensor<?x?x8xbf16>, tensor<?x?x8xbf16>) {
      %a = llm.gelu %x tanh : tensor<?x?x8xbf16>
      %b = llm.gelu %x none : tensor<?x?x8xbf16>
      return %a, %b : tensor<?x?x8xbf16>, tensor<?x?x8xbf16>
    })mlir",
                                f));
  CostContext ctx = twoByEight();
  OpCost tanh = costOf<GeluOp>(f, ctx);
  // tanh: 8 FLOPs per element forward, 16 backward, over 128 elements.
  EXPECT_DOUBLE_EQ(tanh.fwdFlops, 8.0 * 128);
  EXPECT_DOUBLE_EQ(tanh.bwdFlops, 16.0 * 128);
  // Keeps its bf16 input: 128 * 2 B.
  EXPECT_DOUBLE_EQ(tanh.savedBytes(), 256);
  // Backward reads dy and x, writes dx.
  EXPECT_DOUBLE_EQ(tanh.bwdBytesRead, 256 + 256);
  EXPECT_DOUBLE_EQ(tanh.bwdBytesWritten, 256);
  GeluOp exact;
  f.walk([&](GeluOp op) {
    if (op.getApproximate() == GeluApprox::none)
      exact = op;
  });
  ASSERT_TRUE(exact);
  EXPECT_DOUBLE_EQ(exact.getCost(ctx).fwdFlops, 10.0 * 128);
}

TEST_F(CostTest, SwiGLUKeepsBothInputs) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%g: tensor<?x?x8xbf16>, %u: tensor<?x?x8xbf16>) -> tensor<?x?x8xbf16> {
      %y = llm.swiglu %g, %u : tensor<?x?x8xbf16>
      return %y : tensor<?x?x8xbf16>
    })mlir",
                                f));
  OpCost c = costOf<SwiGLUOp>(f, twoByEight());
  EXPECT_DOUBLE_EQ(c.fwdFlops, 5.0 * 128);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 10.0 * 128);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 2 * 256);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 256);
  // Backward reads dy, gate and up; writes both input gradients.
  EXPECT_DOUBLE_EQ(c.bwdBytesRead, 256 + 512);
  EXPECT_DOUBLE_EQ(c.bwdBytesWritten, 512);
  EXPECT_DOUBLE_EQ(c.savedBytes(), 512);
  EXPECT_EQ(c.saved.size(), 2u);
}

TEST_F(CostTest, AddKeepsNothing) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%a: tensor<?x?x8xbf16>, %b: tensor<?x?x8xbf16>) -> tensor<?x?x8xbf16> {
      %y = llm.add %a, %b : tensor<?x?x8xbf16>
      return %y : tensor<?x?x8xbf16>
    })mlir",
                                f));
  OpCost c = costOf<AddOp>(f, twoByEight());
  EXPECT_DOUBLE_EQ(c.fwdFlops, 128);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 0);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 512);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 256);
  // dy flows to both inputs unchanged: no backward traffic of its own.
  EXPECT_DOUBLE_EQ(c.bwdBytesRead, 0);
  EXPECT_DOUBLE_EQ(c.savedBytes(), 0);
}

TEST_F(CostTest, SplitIsAView) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x12xbf16>) -> tensor<?x?x4xbf16> {
      %a, %b, %c = llm.split %x [4, 4, 4] : tensor<?x?x12xbf16> -> tensor<?x?x4xbf16>, tensor<?x?x4xbf16>, tensor<?x?x4xbf16>
      return %a : tensor<?x?x4xbf16>
    })mlir",
                                f));
  OpCost c = costOf<SplitOp>(f, twoByEight());
  EXPECT_DOUBLE_EQ(c.fwdFlops + c.bwdFlops, 0);
  EXPECT_DOUBLE_EQ(c.fwdBytesRead + c.fwdBytesWritten, 0);
  EXPECT_DOUBLE_EQ(c.savedBytes(), 0);
}

TEST_F(CostTest, DroplessDispatchAndCombine) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xf32>, %p: tensor<?x?x2xf32>, %i: tensor<?x?x2xi32>) -> tensor<?x?x8xf32> {
      %d = llm.moe_dispatch %x, %i capacity 0.0 : tensor<?x?x8xf32>, tensor<?x?x2xi32> -> tensor<4x?x8xf32>
      %y = llm.moe_combine %d, %p, %i : tensor<4x?x8xf32>, tensor<?x?x2xf32>, tensor<?x?x2xi32> -> tensor<?x?x8xf32>
      return %y : tensor<?x?x8xf32>
    })mlir",
                                f));
  CostContext ctx = twoByEight();
  // Dropless top-2: 16 tokens * 2 = 32 routed rows of 8 fp32 (1024 B); the
  // indices are 16 * 2 * 4 = 128 B.
  OpCost d = costOf<MoEDispatchOp>(f, ctx);
  EXPECT_DOUBLE_EQ(d.fwdFlops, 0);
  EXPECT_DOUBLE_EQ(d.fwdBytesRead, 128 + 1024);
  EXPECT_DOUBLE_EQ(d.fwdBytesWritten, 1024);
  // Backward sums each token's copies (32 * 8 adds) into dx (16 * 8 * 4 B).
  EXPECT_DOUBLE_EQ(d.bwdFlops, 32 * 8);
  EXPECT_DOUBLE_EQ(d.bwdBytesWritten, 512);
  EXPECT_DOUBLE_EQ(d.savedBytes(), 128);

  OpCost c = costOf<MoECombineOp>(f, ctx);
  // A multiply and an add per routed element: 2 * 32 * 8.
  EXPECT_DOUBLE_EQ(c.fwdFlops, 2.0 * 32 * 8);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 3.0 * 32 * 8);
  // Reads the rows (1024 B), the routing weights (128 B) and indices (128 B).
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 1024 + 128 + 128);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 512);
  // Keeps the expert rows and the routing weights.
  EXPECT_DOUBLE_EQ(c.savedBytes(), 1024 + 128);
}

TEST_F(CostTest, LMHeadIsAGemm) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xbf16>, %w: tensor<100x8xbf16>) -> tensor<?x?x100xbf16> {
      %y = llm.lm_head %x, %w : tensor<?x?x8xbf16>, tensor<100x8xbf16> -> tensor<?x?x100xbf16>
      return %y : tensor<?x?x100xbf16>
    })mlir",
                                f));
  OpCost c = costOf<LMHeadOp>(f, twoByEight());
  // 2 * T * hidden * vocab = 2 * 16 * 8 * 100.
  EXPECT_DOUBLE_EQ(c.fwdFlops, 25600);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 2 * 25600);
  // x 256 B, W 1600 B, logits 16 * 100 * 2 = 3200 B.
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 256 + 1600);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 3200);
  EXPECT_DOUBLE_EQ(c.bwdBytesRead, 2 * 3200 + 1600 + 256);
  EXPECT_DOUBLE_EQ(c.savedBytes(), 256);
}

TEST_F(CostTest, CrossEntropyKeepsLogitsAndLabels) {
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%l: tensor<?x?x100xf32>, %t: tensor<?x?xi32>) -> tensor<f32> {
      %loss = llm.cross_entropy %l, %t : tensor<?x?x100xf32>, tensor<?x?xi32> -> tensor<f32>
      return %loss : tensor<f32>
    })mlir",
                                f));
  OpCost c = costOf<CrossEntropyOp>(f, twoByEight());
  // 16 * 100 = 1600 logits: 4 FLOPs each forward, 3 backward.
  EXPECT_DOUBLE_EQ(c.fwdFlops, 4.0 * 1600);
  EXPECT_DOUBLE_EQ(c.bwdFlops, 3.0 * 1600);
  // Reads fp32 logits (6400 B) and i32 labels (64 B); writes a loss per
  // token (64 B); backward writes the logits' gradient.
  EXPECT_DOUBLE_EQ(c.fwdBytesRead, 6400 + 64);
  EXPECT_DOUBLE_EQ(c.fwdBytesWritten, 64);
  EXPECT_DOUBLE_EQ(c.bwdBytesWritten, 6400);
  EXPECT_DOUBLE_EQ(c.savedBytes(), 6400 + 64);
}

TEST_F(CostTest, GPT2LayerKeeps32sbhBytes) {
  // A GPT-2 block in bf16, h = 64, 4 heads of 16, with a fused attention
  // kernel. Korthikanti et al. 2022 count 34 s b h bytes per layer (16-bit,
  // before the 5 a s^2 b attention term); two of those are the 1-byte
  // dropout masks after the attention and MLP projections, which this IR has
  // not, leaving 32 s b h:
  //   ln_1 input                      2 sbh
  //   c_attn input (ln_1 output)      2 sbh
  //   q, k, v and attention output    8 sbh (c_proj reads the output: shared)
  //   ln_2 input                      2 sbh
  //   c_fc input (ln_2 output)        2 sbh
  //   gelu input (4h)                 8 sbh
  //   c_proj input (gelu output, 4h)  8 sbh
  // plus buffers that are not SSA values: fp32 mean and rstd of both norms,
  // 2 * 2 * 4 B per token, and the fp32 log-sum-exp, 4 B per head and token.
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x64xbf16>) -> tensor<?x?x64xbf16> {
      %y = llm.layer 0 (%x) : tensor<?x?x64xbf16> {
      ^bb0(%in: tensor<?x?x64xbf16>):
        %g1 = llm.param "ln_1.weight" ones : tensor<64xbf16>
        %b1 = llm.param "ln_1.bias" zeros : tensor<64xbf16>
        %h1 = llm.layer_norm %in, %g1, %b1 eps 1.0e-05 : tensor<?x?x64xbf16>, tensor<64xbf16>, tensor<64xbf16>
        %wqkv = llm.param "c_attn.weight" normal(0.02) : tensor<64x192xbf16>
        %bqkv = llm.param "c_attn.bias" zeros : tensor<192xbf16>
        %qkv = llm.linear %h1, %wqkv, %bqkv transposed : tensor<?x?x64xbf16>, tensor<64x192xbf16>, tensor<192xbf16> -> tensor<?x?x192xbf16>
        %q, %k, %v = llm.split %qkv [64, 64, 64] : tensor<?x?x192xbf16> -> tensor<?x?x64xbf16>, tensor<?x?x64xbf16>, tensor<?x?x64xbf16>
        %a = llm.attention %q, %k, %v heads 4 kv_heads 4 head_dim 16 scale 0.25 causal : tensor<?x?x64xbf16>, tensor<?x?x64xbf16>
        %wo = llm.param "attn.c_proj.weight" normal(0.02) : tensor<64x64xbf16>
        %bo = llm.param "attn.c_proj.bias" zeros : tensor<64xbf16>
        %o = llm.linear %a, %wo, %bo transposed : tensor<?x?x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16> -> tensor<?x?x64xbf16>
        %r1 = llm.add %in, %o : tensor<?x?x64xbf16>
        %g2 = llm.param "ln_2.weight" ones : tensor<64xbf16>
        %b2 = llm.param "ln_2.bias" zeros : tensor<64xbf16>
        %h2 = llm.layer_norm %r1, %g2, %b2 eps 1.0e-05 : tensor<?x?x64xbf16>, tensor<64xbf16>, tensor<64xbf16>
        %wfc = llm.param "c_fc.weight" normal(0.02) : tensor<64x256xbf16>
        %bfc = llm.param "c_fc.bias" zeros : tensor<256xbf16>
        %fc = llm.linear %h2, %wfc, %bfc transposed : tensor<?x?x64xbf16>, tensor<64x256xbf16>, tensor<256xbf16> -> tensor<?x?x256xbf16>
        %ge = llm.gelu %fc tanh : tensor<?x?x256xbf16>
        %wp = llm.param "mlp.c_proj.weight" normal(0.02) : tensor<256x64xbf16>
        %bp = llm.param "mlp.c_proj.bias" zeros : tensor<64xbf16>
        %m = llm.linear %ge, %wp, %bp transposed : tensor<?x?x256xbf16>, tensor<256x64xbf16>, tensor<64xbf16> -> tensor<?x?x64xbf16>
        %r2 = llm.add %r1, %m : tensor<?x?x64xbf16>
        llm.yield %r2 : tensor<?x?x64xbf16>
      }
      return %y : tensor<?x?x64xbf16>
    })mlir",
                                f));
  CostContext c = twoByEight();
  double s = 8, b = 2, h = 64, heads = 4, tokens = s * b;
  OpCost cost = costOf<LayerOp>(f, c);
  double tensors = 32 * s * b * h;       // 32,768 B
  double normStats = 2 * 2 * 4 * tokens; // 256 B
  double logSumExp = 4 * heads * tokens; // 256 B
  EXPECT_DOUBLE_EQ(cost.savedBytes(), tensors + normStats + logSumExp);
  // Ten distinct tensors: %in, %h1, %q, %k, %v, %a, %r1, %h2, %fc, %ge.
  EXPECT_EQ(cost.saved.size(), 10u);
  // Parameters: 2 norms (2 * 128) + c_attn (64*192 + 192) + c_proj
  // (64*64 + 64) + c_fc (64*256 + 256) + c_proj (256*64 + 64).
  EXPECT_EQ(cost.params, 256 + 12480 + 4160 + 16640 + 16448);
}

TEST_F(CostTest, TokensDoNotOverflow) {
  // batch * seqLen is 2^64 here: as an int64_t product it wrapped to 0 or a
  // negative count; as a double it is exact.
  CostContext c;
  c.batch = 4;
  c.seqLen = int64_t(1) << 62;
  EXPECT_DOUBLE_EQ(c.tokens(), 18446744073709551616.0);
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward(%x: tensor<?x?x8xf32>, %w: tensor<8x8xf32>) -> tensor<?x?x8xf32> {
      %y = llm.linear %x, %w : tensor<?x?x8xf32>, tensor<8x8xf32> -> tensor<?x?x8xf32>
      return %y : tensor<?x?x8xf32>
    })mlir",
                                f));
  EXPECT_DOUBLE_EQ(costOf<LinearOp>(f, c).fwdFlops, 2.0 * c.tokens() * 8 * 8);
}

TEST_F(CostTest, WeightBytesSumEachParameter) {
  // 16 bf16 (32 B) and 8 f32 (32 B): 64 B, not 24 times the element size of
  // whichever parameter comes last.
  func::FuncOp f;
  ASSERT_NO_FATAL_FAILURE(parse(R"mlir(
    func.func @forward() -> (tensor<16xbf16>, tensor<8xf32>) {
      %a = llm.param "a" ones : tensor<16xbf16>
      %b = llm.param "b" ones : tensor<8xf32>
      return %a, %b : tensor<16xbf16>, tensor<8xf32>
    })mlir",
                                f));
  CostContext c;
  c.seqLen = 4;
  FailureOr<ModelStats> st = computeModelStats(f, c);
  ASSERT_TRUE(succeeded(st));
  EXPECT_DOUBLE_EQ(st->weightBytes, 64);
  // The dtype override applies to every parameter: 24 * 4.
  c.dtypeBytes = 4;
  st = computeModelStats(f, c);
  ASSERT_TRUE(succeeded(st));
  EXPECT_DOUBLE_EQ(st->weightBytes, 96);
}

TEST(ModelStatsTable, UnitsAndExtremeCounts) {
  ModelStats st;
  st.name = "t";
  st.paramsTotal = 124439808;
  st.paramsOther = INT64_MIN; // not a real count; must print, not overflow
  st.trainFlopsPerToken = 45.028e9;
  st.attentionFlopsPerToken = 576;
  st.weightBytes = 512;
  st.modelStateBytes = 3.5 * 1024 * 1024;
  std::string text;
  llvm::raw_string_ostream os(text);
  st.printTable(os);
  EXPECT_NE(text.find("124.440 M  124,439,808"), std::string::npos) << text;
  EXPECT_NE(text.find("-9,223,372,036,854,775,808"), std::string::npos) << text;
  EXPECT_NE(text.find(" 45.028 GFLOP\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" 576 FLOP  per token"), std::string::npos) << text;
  EXPECT_NE(text.find(" 512 B\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" 3.50 MiB\n"), std::string::npos) << text;
  // Every value ends in the same column.
  size_t column = std::string::npos;
  for (StringRef line : llvm::split(text, '\n')) {
    size_t unit = line.find(" FLOP");
    if (unit == StringRef::npos || !line.starts_with("  "))
      continue;
    size_t end = unit + 5;
    if (column == std::string::npos)
      column = end;
    EXPECT_EQ(end, column) << line.str();
  }
}

} // namespace
