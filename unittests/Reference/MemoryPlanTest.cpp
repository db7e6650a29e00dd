//===- MemoryPlanTest.cpp - llm-plan-memory's invariants on real models ---===//
//
// After llm-build-training-step, llm-specialize-shapes and llm-plan-memory:
// buffers alive at the same time never share bytes, every offset is aligned,
// and the arena is at least the largest set of simultaneously live buffers
// (and, for the greedy planner, not much more).
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Import/HFConfig.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

struct Buf {
  int64_t first, last, offset, bytes;
};

class MemoryPlan : public ::testing::TestWithParam<const char *> {};

TEST_P(MemoryPlan, LiveBuffersNeverOverlap) {
  MLIRContext ctx;
  ctx.loadDialect<llm::LLMDialect, func::FuncDialect, arith::ArithDialect>();
  OwningOpRef<ModuleOp> module = importHFConfig(GetParam(), "m.json", &ctx);
  ASSERT_TRUE(module);
  PassManager pm(&ctx);
  pm.addPass(createBuildTrainingStep());
  SpecializeShapesOptions shapes;
  shapes.batch = 2;
  shapes.seq = 16;
  pm.addPass(createSpecializeShapes(shapes));
  pm.addPass(createPlanMemory());
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  Block &body = step.getBody().front();

  llvm::DenseMap<Operation *, int64_t> pos;
  int64_t n = 0;
  for (Operation &op : body)
    pos[&op] = n++;
  std::vector<Buf> bufs;
  for (Operation &op : body) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>("llm.offsets");
    if (!offsets)
      continue;
    for (auto [r, off] : llvm::zip(op.getResults(), offsets.asArrayRef())) {
      if (off < 0)
        continue;
      EXPECT_EQ(off % 256, 0);
      Buf b{pos[&op], pos[&op], off, int64_t(llm::tensorBytes(r.getType(), llm::CostContext()))};
      // The norm and the update read gradients from their accumulators
      // (each gradient is added there as soon as it is made), not from the
      // arena: those uses end no lifetime.
      for (Operation *u : r.getUsers())
        if (!isa<llm::GlobalNormOp, llm::AdamWOp>(u))
          b.last = std::max(b.last, isa<func::ReturnOp>(u) ? n : pos[u]);
      bufs.push_back(b);
    }
  }
  ASSERT_GT(bufs.size(), 50u);
  int64_t arena = step->getAttrOfType<IntegerAttr>("llm.arena_bytes").getInt();
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_LE(bufs[i].offset + bufs[i].bytes, arena);
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const Buf &a = bufs[i], &b = bufs[j];
      bool liveTogether = a.first <= b.last && b.first <= a.last;
      bool shareBytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(liveTogether && shareBytes) << "buffers " << i << " and " << j;
    }
  }
  int64_t maxLive = 0;
  for (int64_t t = 0; t <= n; ++t) {
    int64_t live = 0;
    for (const Buf &b : bufs)
      if (b.first <= t && t <= b.last)
        live += b.bytes;
    maxLive = std::max(maxLive, live);
  }
  EXPECT_GE(arena, maxLive);
  EXPECT_LE(arena, maxLive * 3 / 2) << "the greedy planner wastes more than half";
}

INSTANTIATE_TEST_SUITE_P(
    Models, MemoryPlan,
    ::testing::Values(
        R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32, "vocab_size": 100})",
        R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 64})"));

} // namespace
