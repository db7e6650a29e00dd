//===- FuseElementwise.cpp - row-wise op chains into llm.fused ------------===//
//
// See Passes.td. Consecutive ops only (parameters aside): a group is a run
// of adjacent ops of the step, so moving them into one region placed after
// the last keeps every def before its uses.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace llmopt::llm {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {
bool fusable(Operation *op) {
  return isa<AddOp, GeluOp, SwiGLUOp, GeluGradOp, SwiGLUGradOp, RMSNormOp, LayerNormOp>(op);
}

/// The activation shape every member reads and writes (rank >= 2); other
/// operands must be vectors (norm weights and biases).
Type rowType(Operation *op) {
  Type row;
  for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults())) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() == 1 && llvm::is_contained(op->getOperands(), v))
      continue;
    if (t.getRank() < 2 || !t.hasStaticShape() || (row && row != t))
      return {};
    row = t;
  }
  return row;
}

bool sameAttr(Operation *a, Operation *b, StringRef name) {
  return a->getAttr(name) == b->getAttr(name);
}

struct FuseElementwisePass : public llmopt::llm::impl::FuseElementwiseBase<FuseElementwisePass> {
  void fuse(ArrayRef<Operation *> group) {
    llvm::SmallPtrSet<Operation *, 8> members(group.begin(), group.end());
    llvm::SetVector<Value> inputs;
    SmallVector<Value> outputs;
    for (Operation *op : group) {
      for (Value v : op->getOperands())
        if (!members.contains(v.getDefiningOp()))
          inputs.insert(v);
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !members.contains(u); }))
          outputs.push_back(r);
    }
    OpBuilder b(group.back());
    b.setInsertionPointAfter(group.back());
    SmallVector<Type> types;
    for (Value r : outputs)
      types.push_back(r.getType());
    auto fused = FusedOp::create(b, group.front()->getLoc(), types, inputs.getArrayRef());
    for (StringRef name : {"llm.stage", "llm.chunk", "llm.layer"})
      if (Attribute a = group.front()->getAttr(name))
        fused->setAttr(name, a);
    Block *block = new Block();
    fused.getBody().push_back(block);
    IRMapping map;
    for (Value v : inputs)
      map.map(v, block->addArgument(v.getType(), v.getLoc()));
    OpBuilder inner = OpBuilder::atBlockEnd(block);
    for (Operation *op : group)
      inner.clone(*op, map);
    SmallVector<Value> yielded;
    for (Value r : outputs)
      yielded.push_back(map.lookup(r));
    FusedYieldOp::create(inner, fused.getLoc(), yielded);
    for (auto [r, f] : llvm::zip(outputs, fused.getResults()))
      r.replaceAllUsesWith(f);
    for (Operation *op : llvm::reverse(group))
      op->erase();
  }

  void runOnOperation() override {
    auto func = dyn_cast_or_null<func::FuncOp>(
        findEntryFunction(getOperation(), LLMDialect::kTrainStepAttrName).getOperation());
    if (!func)
      return;
    Block &body = func.getBody().front();
    // GEMM epilogues: a linear and the tanh GeLU of its result run as one
    // GEMM (cuBLASLt's GELU_AUX epilogue keeps the pre-activation for the
    // backward).
    SmallVector<SmallVector<Operation *>> pairs;
    Operation *prev = nullptr;
    for (Operation &op : body) {
      if (isa<ParamOp>(op))
        continue;
      auto l = dyn_cast_or_null<LinearOp>(prev);
      auto g = dyn_cast<GeluOp>(op);
      if (l && g && !l.getGemm() && g.getInput() == l.getResult() &&
          g.getApproximate() == GeluApprox::tanh && sameAttr(l, g, "llm.stage") &&
          sameAttr(l, g, "llm.chunk") &&
          llvm::any_of(l->getUsers(), [&](Operation *u) { return u != g.getOperation(); }))
        pairs.push_back({l, g});
      prev = &op;
    }
    for (ArrayRef<Operation *> p : pairs)
      fuse(p);
    SmallVector<SmallVector<Operation *>> groups;
    SmallVector<Operation *> group;
    Type row;
    auto flush = [&] {
      if (group.size() >= 2)
        groups.push_back(group);
      group.clear();
    };
    for (Operation &op : body) {
      // Parameters run nothing: a norm's weight declared between the add and
      // the norm does not break the run (it is defined before the region).
      if (isa<ParamOp>(op))
        continue;
      Type t = fusable(&op) ? rowType(&op) : Type();
      bool joins = t && !group.empty() && t == row && sameAttr(&op, group.front(), "llm.stage") &&
                   sameAttr(&op, group.front(), "llm.chunk") &&
                   llvm::any_of(op.getOperands(), [&](Value v) {
                     return llvm::is_contained(group, v.getDefiningOp());
                   });
      if (!joins)
        flush();
      if (t) {
        group.push_back(&op);
        row = t;
      }
    }
    flush();
    for (ArrayRef<Operation *> g : groups)
      fuse(g);
  }
};
} // namespace
