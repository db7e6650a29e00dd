//===- ShardingInterfaceImpl.cpp - upstream shard dialect models ----------===//

#include "llmopt/Dialect/LLM/Sharding/ShardingInterfaceImpl.h"
#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace llmopt::llm;

namespace {

/// llm.linear as a matmul over loops (leading dims..., out, in).
struct LinearShardingModel
    : public shard::ShardingInterface::ExternalModel<LinearShardingModel, LinearOp> {
  static int64_t leading(Operation *op) {
    return cast<RankedTensorType>(op->getOperand(0).getType()).getRank() - 1;
  }

  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<utils::IteratorType> types(size_t(leading(op) + 1),
                                           utils::IteratorType::parallel);
    types.push_back(utils::IteratorType::reduction);
    return types;
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto l = cast<LinearOp>(op);
    MLIRContext *ctx = op->getContext();
    int64_t n = leading(op);
    SmallVector<AffineExpr> lead;
    for (int64_t i = 0; i < n; ++i)
      lead.push_back(getAffineDimExpr(unsigned(i), ctx));
    AffineExpr out = getAffineDimExpr(unsigned(n), ctx), in = getAffineDimExpr(unsigned(n + 1), ctx);
    unsigned dims = unsigned(n + 2);
    SmallVector<AffineExpr> x(lead), y(lead);
    x.push_back(in);
    y.push_back(out);
    SmallVector<AffineMap> maps = {AffineMap::get(dims, 0, x, ctx)};
    maps.push_back(l.getTransposed() ? AffineMap::get(dims, 0, {in, out}, ctx)
                                     : AffineMap::get(dims, 0, {out, in}, ctx));
    if (l.getBias())
      maps.push_back(AffineMap::get(dims, 0, {out}, ctx));
    maps.push_back(AffineMap::get(dims, 0, y, ctx));
    return maps;
  }

  /// The local linear on the partitioned operands; when the input features
  /// are split, its outputs are partial sums, all-reduced over those axes
  /// (Megatron's row-parallel linear).
  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    auto l = cast<LinearOp>(op);
    shard::Sharding resultSharding = resultShardings.front();
    if (!resultSharding)
      return op->emitOpError() << "has no result sharding to partition with";
    shard::GridOp grid = shard::getGrid(op, resultSharding.getGridAttr(), symbolTable);
    SmallVector<utils::IteratorType> iterators = getLoopIteratorTypes(op);
    SmallVector<AffineMap> maps = getIndexingMaps(op);
    shard::ShardingArray axes = shard::getGridAxisAssignmentForLoopIterators(
        operandShardings, resultShardings, iterators, maps);
    SmallVector<shard::GridAxis> reduced = shard::getReductionGridAxes(iterators, axes);
    if (!reduced.empty() && l.getBias())
      return op->emitOpError() << "a row-parallel linear with a bias is not partitioned by "
                                  "shard-partition (the bias would be added on every rank)";
    OperationState state(op->getLoc(), op->getName());
    state.addOperands(partitionedOperands);
    state.addAttributes(op->getAttrs());
    state.addTypes(shard::shardType(l.getType(), grid, resultSharding));
    Value result = builder.create(state)->getResult(0);
    if (!reduced.empty())
      result = shard::AllReduceOp::create(builder, op->getLoc(), result, grid.getSymName(),
                                          reduced, shard::ReductionKind::Sum)
                   .getResult();
    partitionMap.map(op->getResult(0), result);
    partitionMap.map(op, result.getDefiningOp());
    return success();
  }
};

} // namespace

void llmopt::llm::registerShardingInterfaceExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, LLMDialect *) {
    LinearOp::attachInterface<LinearShardingModel>(*ctx);
    AddOp::attachInterface<shard::ElementwiseShardingInterface<AddOp>>(*ctx);
    GeluOp::attachInterface<shard::ElementwiseShardingInterface<GeluOp>>(*ctx);
    SwiGLUOp::attachInterface<shard::ElementwiseShardingInterface<SwiGLUOp>>(*ctx);
  });
}
