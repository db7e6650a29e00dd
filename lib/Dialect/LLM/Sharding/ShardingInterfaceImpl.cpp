//===- ShardingInterfaceImpl.cpp - upstream shard dialect models ----------===//

#include "llmopt/Dialect/LLM/Sharding/ShardingInterfaceImpl.h"
#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"

#include <map>
#include <optional>
#include <utility>

using namespace mlir;
using namespace llmopt::llm;

namespace {

/// The first sharding of `op`'s results, else of its operands, that names
/// a grid (null when every value is whole).
shard::Sharding anySharding(ArrayRef<shard::Sharding> resultShardings,
                            ArrayRef<shard::Sharding> operandShardings) {
  for (ArrayRef<shard::Sharding> list : {resultShardings, operandShardings})
    for (shard::Sharding sh : list)
      if (sh)
        return sh;
  return shard::Sharding();
}

/// Clones `op` on its partitioned operands with result types from the
/// result shardings. A result without one (sharding-propagation leaves
/// unused results unannotated) takes the sharding its indexing map gives
/// under the op's loop split.
Operation *cloneLocal(Operation *op, ArrayRef<Value> operands,
                      ArrayRef<shard::Sharding> operandShardings,
                      ArrayRef<shard::Sharding> resultShardings,
                      SymbolTableCollection &symbolTable, OpBuilder &builder) {
  std::vector<shard::Sharding> results(resultShardings.begin(), resultShardings.end());
  results.resize(op->getNumResults());
  shard::Sharding any = anySharding(resultShardings, operandShardings);
  if (any && llvm::is_contained(results, shard::Sharding())) {
    auto model = cast<shard::ShardingInterface>(op);
    shard::ShardingArray axes = shard::getGridAxisAssignmentForLoopIterators(
        operandShardings, resultShardings, model.getLoopIteratorTypes(),
        model.getIndexingMaps());
    FailureOr<std::vector<shard::Sharding>> all = shard::detail::defaultGetShardingAnnotations(
        op, shard::ShardingOption(axes, any.getGridAttr()));
    if (succeeded(all))
      for (auto [i, sh] : llvm::enumerate(results))
        if (!sh)
          sh = (*all)[op->getNumOperands() + i];
  }
  OperationState state(op->getLoc(), op->getName());
  state.addOperands(operands);
  state.addAttributes(op->getAttrs());
  for (auto [r, sh] : llvm::zip(op->getResults(), results)) {
    if (!sh) { // nothing split
      state.addTypes(r.getType());
      continue;
    }
    shard::GridOp grid = shard::getGrid(op, sh.getGridAttr(), symbolTable);
    state.addTypes(shard::shardType(r.getType(), grid, sh));
  }
  return builder.create(state);
}

/// `local` stands for `op` and its results for op's (no reduction).
void mapLocal(Operation *op, Operation *local, IRMapping &map) {
  for (auto [r, l] : llvm::zip(op->getResults(), local->getResults()))
    map.map(r, l);
  map.map(op, local);
}

/// Grid axes the loop `loop` is split over, and the product of their sizes.
int64_t splitOver(Operation *op, ArrayRef<shard::Sharding> operandShardings,
                  ArrayRef<shard::Sharding> resultShardings,
                  ArrayRef<utils::IteratorType> iterators, ArrayRef<AffineMap> maps,
                  SymbolTableCollection &symbolTable, unsigned loop) {
  shard::ShardingArray axes =
      shard::getGridAxisAssignmentForLoopIterators(operandShardings, resultShardings, iterators, maps);
  if (loop >= axes.size() || axes[loop].empty())
    return 1;
  shard::Sharding any = anySharding(resultShardings, operandShardings);
  shard::GridOp grid = shard::getGrid(op, any.getGridAttr(), symbolTable);
  int64_t n = 1;
  for (shard::GridAxis a : axes[loop])
    n *= grid.getShape()[size_t(a)];
  return n;
}

/// `v` summed over the grid axes `over` (of the grid of `sharding`), or `v`
/// when there are none.
Value allReduceOver(Operation *op, Value v, ArrayRef<shard::GridAxis> over,
                    shard::Sharding sharding, SymbolTableCollection &symbolTable,
                    OpBuilder &builder) {
  if (over.empty())
    return v;
  shard::GridOp grid = shard::getGrid(op, sharding.getGridAttr(), symbolTable);
  return shard::AllReduceOp::create(builder, op->getLoc(), v, grid.getSymName(), over,
                                    shard::ReductionKind::Sum)
      .getResult();
}

/// The grid axes of loops [first, last) of `op` (concatenated).
SmallVector<shard::GridAxis> axesOfLoops(const shard::ShardingArray &axes, size_t first,
                                         size_t last) {
  SmallVector<shard::GridAxis> out;
  for (size_t i = first; i < last && i < axes.size(); ++i)
    out.append(axes[i].begin(), axes[i].end());
  return out;
}

/// Loops [first, last) whose grid axes a result is summed over ({0, 0}:
/// none).
using LoopRange = std::pair<size_t, size_t>;

/// The partition most models share: a split of any of the loops `whole` is
/// refused with `why`; otherwise `op` is cloned on its local operands and
/// each result summed over the grid axes of its loops `reduceOf(result)`
/// (the partial sums a split reduction leaves).
template <typename Model>
LogicalResult partitionLocal(const Model &model, Operation *op, ArrayRef<Value> operands,
                             ArrayRef<shard::Sharding> operandShardings,
                             ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                             SymbolTableCollection &symbolTable, OpBuilder &builder,
                             ArrayRef<size_t> whole, StringRef why,
                             function_ref<LoopRange(unsigned)> reduceOf) {
  shard::Sharding any = anySharding(resultShardings, operandShardings);
  if (!any) { // nothing split
    mapLocal(op, cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder),
             map);
    return success();
  }
  shard::ShardingArray axes = shard::getGridAxisAssignmentForLoopIterators(
      operandShardings, resultShardings, model.getLoopIteratorTypes(op),
      model.getIndexingMaps(op));
  for (size_t loop : whole)
    if (loop < axes.size() && !axes[loop].empty())
      return op->emitOpError() << why;
  Operation *local = cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder);
  for (unsigned i = 0; i < op->getNumResults(); ++i) {
    auto [first, last] = reduceOf(i);
    map.map(op->getResult(i), allReduceOver(op, local->getResult(i),
                                            axesOfLoops(axes, first, last), any, symbolTable,
                                            builder));
  }
  map.map(op, local);
  return success();
}

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
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    size_t n = size_t(leading(op));
    if (cast<LinearOp>(op).getBias() &&
        splitOver(op, operandShardings, resultShardings, getLoopIteratorTypes(op),
                  getIndexingMaps(op), symbolTable, unsigned(n + 1)) > 1)
      return op->emitOpError() << "a row-parallel linear with a bias is not partitioned by "
                                  "shard-partition (the bias would be added on every rank)";
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {}, "",
                          [&](unsigned) { return LoopRange{n + 1, n + 2}; });
  }
};

/// Attention (forward or backward) over loops (batch, query, heads, key) on
/// this rank's heads; a sequence split is refused (context parallelism).
template <typename AttnOp>
LogicalResult partitionByHeads(Operation *op, ArrayRef<Value> operands,
                               ArrayRef<shard::Sharding> operandShardings,
                               ArrayRef<shard::Sharding> resultShardings,
                               ArrayRef<utils::IteratorType> iters, ArrayRef<AffineMap> maps,
                               IRMapping &map, SymbolTableCollection &symbolTable,
                               OpBuilder &builder) {
  auto a = cast<AttnOp>(op);
  if (splitOver(op, operandShardings, resultShardings, iters, maps, symbolTable, 1) > 1 ||
      splitOver(op, operandShardings, resultShardings, iters, maps, symbolTable, 3) > 1)
    return op->emitOpError() << "a sequence split is context parallelism: use llm-partition-cp";
  int64_t n = splitOver(op, operandShardings, resultShardings, iters, maps, symbolTable, 2);
  if (a.getNumHeads() % n || a.getNumKvHeads() % n)
    return op->emitOpError() << a.getNumHeads() << " heads and " << a.getNumKvHeads()
                             << " KV heads do not split into " << n << " parts";
  Operation *local = cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder);
  auto l = cast<AttnOp>(local);
  l.setNumHeadsAttr(builder.getI64IntegerAttr(a.getNumHeads() / n));
  l.setNumKvHeadsAttr(builder.getI64IntegerAttr(a.getNumKvHeads() / n));
  mapLocal(op, local, map);
  return success();
}

/// The experts' weights over loops (expert, slot, hidden, ffn): the
/// up-projections (expert, ffn, hidden), the last (down) (expert, hidden,
/// ffn).
SmallVector<AffineMap> expertWeightMaps(MLIRContext *ctx, unsigned weights) {
  AffineExpr e = getAffineDimExpr(0, ctx), h = getAffineDimExpr(2, ctx),
             f = getAffineDimExpr(3, ctx);
  SmallVector<AffineMap> maps;
  for (unsigned i = 0; i < weights; ++i)
    maps.push_back(i + 1 < weights ? AffineMap::get(4, 0, {e, f, h}, ctx)
                                   : AffineMap::get(4, 0, {e, h, f}, ctx));
  return maps;
}

/// llm.attention over loops (batch, query, heads, key): the features of q,
/// k, v and the output are heads (of their sizes); keys are a reduction.
/// Splitting heads is Megatron's attention split; splitting the sequence is
/// context parallelism, which llm-partition-cp does (refused here).
struct AttentionShardingModel
    : public shard::ShardingInterface::ExternalModel<AttentionShardingModel, AttentionOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {I::parallel, I::parallel, I::parallel, I::reduction};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr b = getAffineDimExpr(0, ctx), q = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx), k = getAffineDimExpr(3, ctx);
    AffineMap queries = AffineMap::get(4, 0, {b, q, h}, ctx),
              keys = AffineMap::get(4, 0, {b, k, h}, ctx);
    return {queries, keys, keys, queries};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    return partitionByHeads<AttentionOp>(op, operands, operandShardings, resultShardings,
                                         getLoopIteratorTypes(op), getIndexingMaps(op), map,
                                         symbolTable, builder);
  }
};

/// Ops that work on each row's features as a whole (norms reduce over them,
/// rotary pairs them within heads): loops (leading..., features), features
/// a reduction for norms and parallel for rotary (split by whole heads).
template <typename Op, bool FeaturesParallel>
struct RowShardingModel
    : public shard::ShardingInterface::ExternalModel<RowShardingModel<Op, FeaturesParallel>,
                                                      Op> {
  static int64_t rank(Operation *op) {
    return cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
  }
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<utils::IteratorType> t(size_t(rank(op) - 1), utils::IteratorType::parallel);
    t.push_back(FeaturesParallel ? utils::IteratorType::parallel
                                 : utils::IteratorType::reduction);
    return t;
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    unsigned n = unsigned(rank(op));
    AffineMap rows = AffineMap::getMultiDimIdentityMap(n, ctx);
    AffineMap features = AffineMap::get(n, 0, {getAffineDimExpr(n - 1, ctx)}, ctx);
    SmallVector<AffineMap> maps;
    for (Value v : op->getOperands())
      maps.push_back(cast<RankedTensorType>(v.getType()).getRank() == 1 ? features : rows);
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      maps.push_back(rows);
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    auto iters = getLoopIteratorTypes(op);
    if (!FeaturesParallel &&
        splitOver(op, operandShardings, resultShardings, iters, getIndexingMaps(op), symbolTable,
                  unsigned(rank(op) - 1)) > 1)
      return op->emitOpError() << "normalizes over its features, which must not be split "
                                  "(sequence parallelism splits the rows instead)";
    mapLocal(op, cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder),
             map);
    return success();
  }
};

/// llm.embedding over loops (batch, seq, hidden, vocab): the tokens index
/// (batch, seq), the table (vocab, hidden), the result (batch, seq, hidden);
/// the vocabulary is a reduction (a lookup is a one-hot contraction).
/// Splitting the hidden size (the table's columns) or the tokens needs no
/// communication; a vocabulary split (Megatron's vocabulary-parallel
/// embedding: a masked lookup and an all-reduce) is refused by name.
struct EmbeddingShardingModel
    : public shard::ShardingInterface::ExternalModel<EmbeddingShardingModel, EmbeddingOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {I::parallel, I::parallel, I::parallel, I::reduction};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr b = getAffineDimExpr(0, ctx), t = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx), v = getAffineDimExpr(3, ctx);
    return {AffineMap::get(4, 0, {b, t}, ctx), AffineMap::get(4, 0, {v, h}, ctx),
            AffineMap::get(4, 0, {b, t, h}, ctx)};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    if (splitOver(op, operandShardings, resultShardings, getLoopIteratorTypes(op),
                  getIndexingMaps(op), symbolTable, 3) > 1)
      return op->emitOpError() << "splits its vocabulary: a vocabulary-parallel embedding "
                                  "(masked lookup and all-reduce) is not partitioned by "
                                  "shard-partition; split the table's columns or keep it whole";
    Operation *local = cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder);
    mapLocal(op, local, map);
    return success();
  }
};

/// llm.cross_entropy and its gradient over loops (leading..., vocab): the
/// logits (and the gradient) index every loop, the labels the leading ones,
/// the loss (and its incoming gradient) none. The vocabulary is
/// parallel to upstream `shard`: the op spans a split vocabulary itself
/// (Megatron's vocabulary-parallel cross-entropy, through `vocab_axis`),
/// so its loss stays whole on every rank. A vocabulary split over a
/// one-axis grid becomes `vocab_axis` = the grid's name; a split of the
/// tokens is refused (their mean would need the counts of every rank).
template <typename Op>
struct CrossEntropyShardingModel
    : public shard::ShardingInterface::ExternalModel<CrossEntropyShardingModel<Op>, Op> {
  static int64_t rank(Operation *op) {
    return cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
  }
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(size_t(rank(op)), utils::IteratorType::parallel);
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    unsigned n = unsigned(rank(op));
    SmallVector<AffineExpr> lead;
    for (unsigned i = 0; i + 1 < n; ++i)
      lead.push_back(getAffineDimExpr(i, ctx));
    SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(n, ctx),
                                   AffineMap::get(n, 0, lead, ctx)};
    for (Value v : llvm::concat<Value>(op->getOperands().drop_front(2), op->getResults()))
      maps.push_back(cast<RankedTensorType>(v.getType()).getRank() == 0
                         ? AffineMap::get(n, 0, {}, ctx)
                         : AffineMap::getMultiDimIdentityMap(n, ctx));
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    auto ce = cast<Op>(op);
    auto iters = getLoopIteratorTypes(op);
    auto maps = getIndexingMaps(op);
    unsigned vocab = unsigned(rank(op) - 1);
    for (unsigned i = 0; i < vocab; ++i)
      if (splitOver(op, operandShardings, resultShardings, iters, maps, symbolTable, i) > 1)
        return op->emitOpError() << "splits its tokens: the mean loss would need every "
                                    "rank's count of counted labels (split the vocabulary)";
    int64_t parts = splitOver(op, operandShardings, resultShardings, iters, maps, symbolTable,
                              vocab);
    shard::GridOp grid;
    if (parts > 1) {
      grid = shard::getGrid(op, anySharding(resultShardings, operandShardings).getGridAttr(),
                            symbolTable);
      if (grid.getShape().size() != 1 || ce.getVocabAxis())
        return op->emitOpError() << "splits its vocabulary over a grid of "
                                 << grid.getShape().size()
                                 << " axes or again: vocab_axis names one mesh axis";
    }
    Operation *local = cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder);
    if (grid)
      cast<Op>(local).setVocabAxisAttr(builder.getStringAttr(grid.getSymName()));
    mapLocal(op, local, map);
    return success();
  }
};

/// llm.linear_grad over the forward's loops (leading..., out, in): the
/// output gradient indexes (leading, out), the input (leading, in), the
/// weight and its gradient (out, in) (or (in, out)), dx (leading, in), the
/// bias gradient (out). Its two products reduce over different loops: dx
/// over `out` (all-reduced over the axes splitting it: Megatron's
/// column-parallel backward), dW and db over the leading loops (all-reduced
/// over the axes splitting the tokens: data parallelism's gradient
/// all-reduce).
struct LinearGradShardingModel
    : public shard::ShardingInterface::ExternalModel<LinearGradShardingModel, LinearGradOp> {
  static int64_t leading(Operation *op) {
    return cast<RankedTensorType>(op->getOperand(1).getType()).getRank() - 1;
  }
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<utils::IteratorType> types(size_t(leading(op)), utils::IteratorType::parallel);
    types.push_back(utils::IteratorType::reduction); // out, for dx
    types.push_back(utils::IteratorType::parallel);  // in
    return types;
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    auto g = cast<LinearGradOp>(op);
    MLIRContext *ctx = op->getContext();
    int64_t n = leading(op);
    unsigned dims = unsigned(n + 2);
    SmallVector<AffineExpr> lead;
    for (int64_t i = 0; i < n; ++i)
      lead.push_back(getAffineDimExpr(unsigned(i), ctx));
    AffineExpr out = getAffineDimExpr(unsigned(n), ctx);
    AffineExpr in = getAffineDimExpr(unsigned(n + 1), ctx);
    SmallVector<AffineExpr> dy(lead), x(lead);
    dy.push_back(out);
    x.push_back(in);
    AffineMap weight = g.getTransposed() ? AffineMap::get(dims, 0, {in, out}, ctx)
                                         : AffineMap::get(dims, 0, {out, in}, ctx);
    SmallVector<AffineMap> maps = {AffineMap::get(dims, 0, dy, ctx),
                                   AffineMap::get(dims, 0, x, ctx), weight,
                                   AffineMap::get(dims, 0, x, ctx), weight};
    if (g.getBiasGrad())
      maps.push_back(AffineMap::get(dims, 0, {out}, ctx));
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    // dx sums over `out`, dW and db over the leading loops. (A split of
    // `in` splits dx and dW alike: nothing to reduce.)
    size_t n = size_t(leading(op));
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {}, "", [&](unsigned r) {
                            return r == 0 ? LoopRange{n, n + 1} : LoopRange{0, n};
                          });
  }
};

/// The norms' backward over loops (leading..., features): the output
/// gradient, input and input gradient index every loop, the weight and its
/// (and the bias's) gradient the features. The features must stay whole
/// (the forward normalizes over them); a split of the tokens (data or
/// sequence parallelism) all-reduces the weight and bias gradients.
template <typename Op>
struct NormGradShardingModel
    : public shard::ShardingInterface::ExternalModel<NormGradShardingModel<Op>, Op> {
  static int64_t rank(Operation *op) {
    return cast<RankedTensorType>(op->getOperand(1).getType()).getRank();
  }
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<utils::IteratorType> t(size_t(rank(op) - 1), utils::IteratorType::parallel);
    t.push_back(utils::IteratorType::reduction);
    return t;
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    unsigned n = unsigned(rank(op));
    AffineMap rows = AffineMap::getMultiDimIdentityMap(n, ctx);
    AffineMap features = AffineMap::get(n, 0, {getAffineDimExpr(n - 1, ctx)}, ctx);
    SmallVector<AffineMap> maps = {rows, rows, features, rows};
    for (unsigned i = 1; i < op->getNumResults(); ++i)
      maps.push_back(features);
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    size_t n = size_t(rank(op));
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {n - 1},
                          "normalizes over its features, which must not be split (sequence "
                          "parallelism splits the rows instead)",
                          [&](unsigned r) {
                            return r == 0 ? LoopRange{0, 0} : LoopRange{0, n - 1};
                          });
  }
};

/// llm.embedding_grad over the forward's loops (batch, seq, hidden,
/// vocab): the table's gradient (vocab, hidden) sums over the tokens, so a
/// split of the tokens all-reduces it; a split of the hidden size needs
/// nothing; a vocabulary split is refused, as in the forward.
struct EmbeddingGradShardingModel
    : public shard::ShardingInterface::ExternalModel<EmbeddingGradShardingModel,
                                                      EmbeddingGradOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {I::reduction, I::reduction, I::parallel, I::parallel};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr b = getAffineDimExpr(0, ctx), t = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx), v = getAffineDimExpr(3, ctx);
    return {AffineMap::get(4, 0, {b, t}, ctx), AffineMap::get(4, 0, {b, t, h}, ctx),
            AffineMap::get(4, 0, {v, h}, ctx)};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {3},
                          "splits its vocabulary: a vocabulary-parallel embedding is not "
                          "partitioned by shard-partition",
                          [](unsigned) { return LoopRange{0, 2}; });
  }
};

/// llm.attention_grad over the forward's loops (batch, query, heads, key):
/// split by heads (Megatron's attention split) it runs on this rank's
/// heads; a sequence split is context parallelism (llm-partition-cp).
struct AttentionGradShardingModel
    : public shard::ShardingInterface::ExternalModel<AttentionGradShardingModel,
                                                      AttentionGradOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {I::parallel, I::parallel, I::parallel, I::reduction};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr b = getAffineDimExpr(0, ctx), q = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx), k = getAffineDimExpr(3, ctx);
    AffineMap queries = AffineMap::get(4, 0, {b, q, h}, ctx),
              keys = AffineMap::get(4, 0, {b, k, h}, ctx);
    // grad, q, k, v, out; dq, dk, dv.
    return {queries, queries, keys, keys, queries, queries, keys, keys};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    return partitionByHeads<AttentionGradOp>(op, operands, operandShardings, resultShardings,
                                             getLoopIteratorTypes(op), getIndexingMaps(op),
                                             map, symbolTable, builder);
  }
};

constexpr const char *kExpertsHidden =
    "splits its hidden size, which the experts' up-projections contract: split the experts, "
    "their slots or the ffn";

/// llm.moe_experts over loops (expert, slot, hidden, ffn): the dispatched
/// rows and the result index (expert, slot, hidden), the up-projections
/// (gate, up, fc1) (expert, ffn, hidden), the down-projection (expert,
/// hidden, ffn); the ffn is a reduction of the down-projection. A split of
/// the experts (expert parallelism) or the slots runs this rank's experts or
/// slots; a split of the ffn (tensor parallelism inside the experts)
/// all-reduces the partial outputs; the hidden size is contracted by the
/// up-projections and must stay whole.
struct MoEExpertsShardingModel
    : public shard::ShardingInterface::ExternalModel<MoEExpertsShardingModel, MoEExpertsOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {I::parallel, I::parallel, I::parallel, I::reduction};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr e = getAffineDimExpr(0, ctx), c = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx);
    AffineMap rows = AffineMap::get(4, 0, {e, c, h}, ctx);
    SmallVector<AffineMap> maps = {rows};
    maps.append(expertWeightMaps(ctx, op->getNumOperands() - 1));
    maps.push_back(rows);
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {2}, kExpertsHidden,
                          [](unsigned) { return LoopRange{3, 4}; });
  }
};

/// llm.moe_experts_grad over the forward's loops (expert, slot, hidden,
/// ffn): the output gradient, the rows and their gradient index (expert,
/// slot, hidden), the weights and their gradients as in the forward. The
/// rows' gradient sums over the ffn (all-reduced over a split of it), the
/// weights' gradients over the slots (all-reduced over a split of them); the
/// hidden size stays whole.
struct MoEExpertsGradShardingModel
    : public shard::ShardingInterface::ExternalModel<MoEExpertsGradShardingModel,
                                                      MoEExpertsGradOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {I::parallel, I::parallel, I::parallel, I::reduction};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr e = getAffineDimExpr(0, ctx), c = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx);
    AffineMap rows = AffineMap::get(4, 0, {e, c, h}, ctx);
    SmallVector<AffineMap> w = expertWeightMaps(ctx, op->getNumOperands() - 2);
    SmallVector<AffineMap> maps = {rows, rows};
    maps.append(w);
    maps.push_back(rows);
    maps.append(w);
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    // The rows' gradient sums over the ffn, the weights' over the slots.
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {2}, kExpertsHidden, [](unsigned r) {
                            return r == 0 ? LoopRange{3, 4} : LoopRange{1, 2};
                          });
  }
};

/// GPT-2's learned positions, forward (input + table[position]) and
/// backward (the table's gradient summed over the batch), over loops
/// (batch, seq, hidden): the table (and its gradient) indexes (seq, hidden)
/// although it holds every position, so a sequence split is refused (a
/// rank's positions are not a part of the table's rows); a hidden split
/// runs on the table's columns; a batch split all-reduces the backward's
/// table gradient.
template <typename Op, bool Backward>
struct PositionShardingModel
    : public shard::ShardingInterface::ExternalModel<PositionShardingModel<Op, Backward>, Op> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *) const {
    using I = utils::IteratorType;
    return {Backward ? I::reduction : I::parallel, I::parallel, I::parallel};
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    AffineExpr b = getAffineDimExpr(0, ctx), t = getAffineDimExpr(1, ctx),
               h = getAffineDimExpr(2, ctx);
    AffineMap rows = AffineMap::get(3, 0, {b, t, h}, ctx);
    AffineMap table = AffineMap::get(3, 0, {t, h}, ctx);
    if (Backward)
      return {rows, table};
    return {rows, table, rows};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, {1},
                          "splits its sequence: a rank's positions are not a part of the "
                          "position table's rows (split the batch or the hidden size)",
                          [](unsigned) { return Backward ? LoopRange{0, 1} : LoopRange{0, 0}; });
  }
};

/// MoE's routing ops over loops (tokens..., k, hidden, expert, slot): the
/// tokens' leading dimensions, their top-k choices, the hidden size, the
/// experts and the dispatched rows' slots. Each operand or result is one of
/// four index kinds.
enum class MoEIndex { Tokens, Choices, Gate, Rows };
enum MoELoop : unsigned { Lead, K, H, E, C };

/// Per-op layout: the index kinds of operands then results, each loop's
/// iterator (Lead, K, H, E, C), the loops that must stay whole and why, and
/// the loops each result sums over.
template <typename Op> struct MoELayout;

using I = utils::IteratorType;
constexpr const char *kRoutingWhole =
    "places each token in its expert's next free slot, counting the tokens before it, so only "
    "the hidden size splits here; a token split is expert parallelism's all-to-all "
    "(llm-partition-ep: llm.ep_dispatch and llm.ep_combine)";

template <> struct MoELayout<MoERouterOp> {
  static constexpr MoEIndex kinds[] = {MoEIndex::Tokens, MoEIndex::Gate, MoEIndex::Choices,
                                       MoEIndex::Choices};
  static constexpr I iters[] = {I::parallel, I::parallel, I::reduction, I::reduction,
                                I::parallel};
  static constexpr MoELoop whole[] = {K, H, E, C};
  static constexpr const char *why =
      "chooses each token's top-k of a softmax over every expert's score of its whole hidden "
      "vector: split the tokens";
  static SmallVector<MoELoop> reduces(unsigned) { return {}; }
};
template <> struct MoELayout<MoERouterGradOp> {
  static constexpr MoEIndex kinds[] = {MoEIndex::Choices, MoEIndex::Tokens, MoEIndex::Gate,
                                       MoEIndex::Choices, MoEIndex::Choices, MoEIndex::Tokens,
                                       MoEIndex::Gate};
  static constexpr I iters[] = {I::parallel, I::parallel, I::parallel, I::reduction,
                                I::parallel};
  static constexpr MoELoop whole[] = {K, H, E, C};
  static constexpr const char *why =
      "recomputes each token's softmax over every expert's score of its whole hidden vector: "
      "split the tokens";
  /// dx sums over the experts (whole here); the gate's gradient over the
  /// tokens: all-reduced over a token split (data parallelism).
  static SmallVector<MoELoop> reduces(unsigned r) {
    return r == 0 ? SmallVector<MoELoop>{} : SmallVector<MoELoop>{Lead};
  }
};
template <> struct MoELayout<MoEDispatchOp> {
  static constexpr MoEIndex kinds[] = {MoEIndex::Tokens, MoEIndex::Choices, MoEIndex::Rows};
  static constexpr I iters[] = {I::reduction, I::reduction, I::parallel, I::parallel,
                                I::parallel};
  static constexpr MoELoop whole[] = {Lead, K, E, C};
  static constexpr const char *why = kRoutingWhole;
  static SmallVector<MoELoop> reduces(unsigned) { return {}; }
};
template <> struct MoELayout<MoEDispatchGradOp> {
  static constexpr MoEIndex kinds[] = {MoEIndex::Rows, MoEIndex::Choices, MoEIndex::Tokens};
  static constexpr I iters[] = {I::parallel, I::reduction, I::parallel, I::reduction,
                                I::reduction};
  static constexpr MoELoop whole[] = {Lead, K, E, C};
  static constexpr const char *why = kRoutingWhole;
  static SmallVector<MoELoop> reduces(unsigned) { return {}; }
};
template <> struct MoELayout<MoECombineOp> {
  static constexpr MoEIndex kinds[] = {MoEIndex::Rows, MoEIndex::Choices, MoEIndex::Choices,
                                       MoEIndex::Tokens};
  static constexpr I iters[] = {I::parallel, I::reduction, I::parallel, I::reduction,
                                I::reduction};
  static constexpr MoELoop whole[] = {Lead, K, E, C};
  static constexpr const char *why = kRoutingWhole;
  static SmallVector<MoELoop> reduces(unsigned) { return {}; }
};
template <> struct MoELayout<MoECombineGradOp> {
  static constexpr MoEIndex kinds[] = {MoEIndex::Tokens, MoEIndex::Rows, MoEIndex::Choices,
                                       MoEIndex::Choices, MoEIndex::Rows, MoEIndex::Choices};
  static constexpr I iters[] = {I::parallel, I::parallel, I::parallel, I::parallel,
                                I::parallel};
  static constexpr MoELoop whole[] = {Lead, K, E, C};
  static constexpr const char *why = kRoutingWhole;
  /// The routing weights' gradient is a dot product over the hidden size:
  /// all-reduced over a hidden split.
  static SmallVector<MoELoop> reduces(unsigned r) {
    return r == 0 ? SmallVector<MoELoop>{} : SmallVector<MoELoop>{H};
  }
};

/// MoE's router, dispatch and combine (and their backward) as
/// `MoELayout<Op>` describes them. The router splits by tokens only (the
/// gate's gradient all-reduced over them), the dispatch and combine by the
/// hidden size only (the routing weights' gradient all-reduced over it).
template <typename Op>
struct MoERoutingModel
    : public shard::ShardingInterface::ExternalModel<MoERoutingModel<Op>, Op> {
  using Layout = MoELayout<Op>;
  /// The tokens' leading dimensions (batch, seq).
  static unsigned leading(Operation *op) {
    for (auto [i, kind] : llvm::enumerate(Layout::kinds))
      if (kind == MoEIndex::Tokens || kind == MoEIndex::Choices) {
        Value v = i < op->getNumOperands() ? op->getOperand(unsigned(i))
                                           : op->getResult(unsigned(i - op->getNumOperands()));
        return unsigned(cast<RankedTensorType>(v.getType()).getRank() - 1);
      }
    return 0;
  }
  /// The first loop of `l` (Lead: the first of the leading ones).
  static unsigned loop(Operation *op, MoELoop l) {
    return l == Lead ? 0 : leading(op) + unsigned(l) - 1;
  }
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    SmallVector<utils::IteratorType> t(leading(op), Layout::iters[Lead]);
    t.append(std::begin(Layout::iters) + 1, std::end(Layout::iters));
    return t;
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    unsigned n = leading(op), dims = n + 4;
    auto d = [&](MoELoop l) { return getAffineDimExpr(loop(op, l), ctx); };
    SmallVector<AffineExpr> lead;
    for (unsigned i = 0; i < n; ++i)
      lead.push_back(getAffineDimExpr(i, ctx));
    SmallVector<AffineMap> maps;
    for (MoEIndex kind : Layout::kinds) {
      SmallVector<AffineExpr> e;
      switch (kind) {
      case MoEIndex::Tokens:
        e = lead;
        e.push_back(d(H));
        break;
      case MoEIndex::Choices:
        e = lead;
        e.push_back(d(K));
        break;
      case MoEIndex::Gate:
        e = {d(E), d(H)};
        break;
      case MoEIndex::Rows:
        e = {d(E), d(C), d(H)};
        break;
      }
      maps.push_back(AffineMap::get(dims, 0, e, ctx));
    }
    return maps;
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    unsigned n = leading(op);
    SmallVector<size_t> whole;
    for (MoELoop l : Layout::whole) {
      if (l == Lead)
        for (unsigned i = 0; i < n; ++i)
          whole.push_back(i);
      else
        whole.push_back(loop(op, l));
    }
    if constexpr (std::is_same<Op, MoERouterGradOp>::value) {
      // The load-balancing loss's gradient counts every token's choices.
      shard::ShardingArray axes = shard::getGridAxisAssignmentForLoopIterators(
          operandShardings, resultShardings, getLoopIteratorTypes(op), getIndexingMaps(op));
      if (cast<Op>(op).getAuxLoss() && !axesOfLoops(axes, 0, n).empty())
        return op->emitOpError()
               << "splits its tokens with aux_loss: the load-balancing loss's gradient needs "
                  "every token's expert counts (llm-build-training-step sums "
                  "llm.moe_expert_counts over the chunks instead)";
    }
    return partitionLocal(*this, op, operands, operandShardings, resultShardings, map,
                          symbolTable, builder, whole, Layout::why, [&](unsigned r) {
                            SmallVector<MoELoop> over = Layout::reduces(r);
                            if (over.empty())
                              return LoopRange{0, 0};
                            return over.front() == Lead
                                       ? LoopRange{0, n}
                                       : LoopRange{loop(op, over.front()),
                                                   loop(op, over.front()) + 1};
                          });
  }
};

/// llm.param over its dimensions (all parallel): a split parameter is this
/// rank's part, recorded as `llm.shard` (the grid as `axis`, with
/// `grid_axes` on a grid of several axes; `dim`, `parts`), the form the
/// runtime reads: it initializes the whole tensor and keeps the part.
struct ParamShardingModel
    : public shard::ShardingInterface::ExternalModel<ParamShardingModel, ParamOp> {
  static unsigned rank(Operation *op) {
    return unsigned(cast<RankedTensorType>(op->getResult(0).getType()).getRank());
  }
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return SmallVector<utils::IteratorType>(rank(op), utils::IteratorType::parallel);
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    return {AffineMap::getMultiDimIdentityMap(rank(op), op->getContext())};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    shard::Sharding sh = resultShardings.front();
    if (!sh) { // unused: whole
      mapLocal(op, cloneLocal(op, operands, operandShardings, {}, symbolTable, builder), map);
      return success();
    }
    shard::GridOp grid = shard::getGrid(op, sh.getGridAttr(), symbolTable);
    SmallVector<std::pair<int64_t, shard::GridAxesAttr>> split;
    for (auto [dim, axes] : llvm::enumerate(sh.getSplitAxes()))
      if (!axes.empty())
        split.push_back({int64_t(dim), axes});
    if (split.size() > 1)
      return op->emitOpError() << "'" << cast<ParamOp>(op).getName()
                               << "' is split along " << split.size()
                               << " dimensions; a parameter's part (llm.shard) splits one";
    Operation *local = cloneLocal(op, operands, operandShardings, resultShardings, symbolTable, builder);
    if (!split.empty()) {
      Builder b(op->getContext());
      int64_t parts = 1;
      SmallVector<int64_t> axes;
      for (shard::GridAxis a : split.front().second.asArrayRef()) {
        parts *= grid.getShape()[size_t(a)];
        axes.push_back(a);
      }
      SmallVector<NamedAttribute> attrs = {
          b.getNamedAttr("axis", b.getStringAttr(grid.getSymName())),
          b.getNamedAttr("dim", b.getI64IntegerAttr(split.front().first)),
          b.getNamedAttr("blocks", b.getI64IntegerAttr(1)),
          b.getNamedAttr("parts", b.getI64IntegerAttr(parts))};
      if (grid.getShape().size() > 1)
        attrs.push_back(b.getNamedAttr("grid_axes", b.getDenseI64ArrayAttr(axes)));
      local->setAttr("llm.shard", b.getDictionaryAttr(attrs));
    }
    mapLocal(op, local, map);
    return success();
  }
};

/// The loops of the optimizer ops: each gradient's dimensions (parallel),
/// one block per gradient operand.
SmallVector<AffineMap> gradientBlocks(Operation *op, unsigned &dims) {
  MLIRContext *ctx = op->getContext();
  dims = 0;
  for (Value v : op->getOperands())
    dims += unsigned(cast<RankedTensorType>(v.getType()).getRank());
  SmallVector<AffineMap> maps;
  unsigned next = 0;
  for (Value v : op->getOperands()) {
    SmallVector<AffineExpr> e;
    for (int64_t i = 0; i < cast<RankedTensorType>(v.getType()).getRank(); ++i)
      e.push_back(getAffineDimExpr(next++, ctx));
    maps.push_back(AffineMap::get(dims, 0, e, ctx));
  }
  return maps;
}

/// llm.global_norm over its gradients' dimensions: the gradients may stay
/// split (as tensor parallelism or ZeRO leave them); the ranks' squared
/// norms are summed over the grid axes splitting them, once per set of
/// axes (a gradient split over fewer axes is counted once), then the root.
struct GlobalNormShardingModel
    : public shard::ShardingInterface::ExternalModel<GlobalNormShardingModel, GlobalNormOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    unsigned dims;
    gradientBlocks(op, dims);
    return SmallVector<utils::IteratorType>(dims, utils::IteratorType::parallel);
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    unsigned dims;
    SmallVector<AffineMap> maps = gradientBlocks(op, dims);
    maps.push_back(AffineMap::get(dims, 0, {}, op->getContext()));
    return maps;
  }
  /// Each gradient keeps its sharding: its block of loops takes its split
  /// axes (the default would give a grid axis to one loop of the op only,
  /// gathering every other gradient split over it).
  FailureOr<shard::ShardingOption>
  getShardingOption(Operation *op, ArrayRef<shard::Sharding> operandShardings,
                    ArrayRef<shard::Sharding>) const {
    shard::ShardingArray array;
    FlatSymbolRefAttr grid;
    for (auto [v, sh] : llvm::zip(op->getOperands(), operandShardings)) {
      int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
      for (int64_t d = 0; d < rank; ++d) {
        array.emplace_back();
        if (!sh || size_t(d) >= sh.getSplitAxes().size())
          continue;
        if (grid && grid != sh.getGridAttr())
          return op->emitOpError() << "sums gradients split over two grids";
        grid = sh.getGridAttr();
        ArrayRef<shard::GridAxis> axes = sh.getSplitAxes()[size_t(d)].asArrayRef();
        array.back().append(axes.begin(), axes.end());
      }
    }
    if (!grid)
      return shard::ShardingOption::makeEmpty();
    return shard::ShardingOption(std::move(array), grid);
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    // Group the gradients by the (sorted) grid axes splitting them.
    std::map<SmallVector<shard::GridAxis>, SmallVector<Value>> groups;
    shard::Sharding grid;
    for (auto [v, sh] : llvm::zip(operands, operandShardings)) {
      SmallVector<shard::GridAxis> axes;
      if (sh) {
        for (shard::GridAxesAttr a : sh.getSplitAxes())
          axes.append(a.asArrayRef().begin(), a.asArrayRef().end());
        if (!axes.empty()) {
          if (grid && grid.getGridAttr() != sh.getGridAttr())
            return op->emitOpError() << "sums gradients split over two grids";
          grid = sh;
        }
      }
      llvm::sort(axes);
      groups[axes].push_back(v);
    }
    Location loc = op->getLoc();
    Type scalar = op->getResult(0).getType();
    if (groups.size() == 1 && groups.begin()->first.empty()) {
      mapLocal(op, cloneLocal(op, operands, operandShardings, {}, symbolTable, builder), map);
      return success();
    }
    Value total;
    for (auto &[axes, grads] : groups) {
      Value norm = GlobalNormOp::create(builder, loc, scalar, grads).getResult();
      Value sq = arith::MulFOp::create(builder, loc, norm, norm).getResult();
      sq = allReduceOver(op, sq, axes, grid, symbolTable, builder);
      total = total ? arith::AddFOp::create(builder, loc, total, sq).getResult() : sq;
    }
    Value result = math::SqrtOp::create(builder, loc, total).getResult();
    map.map(op->getResult(0), result);
    map.map(op, result.getDefiningOp());
    return success();
  }
};

/// llm.adamw over its gradient's dimensions (the norm is a scalar): a split
/// gradient updates the matching part of its (equally split) parameter.
struct AdamWShardingModel
    : public shard::ShardingInterface::ExternalModel<AdamWShardingModel, AdamWOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    unsigned rank = unsigned(cast<RankedTensorType>(op->getOperand(0).getType()).getRank());
    return SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel);
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    unsigned rank = unsigned(cast<RankedTensorType>(op->getOperand(0).getType()).getRank());
    return {AffineMap::getMultiDimIdentityMap(rank, op->getContext()),
            AffineMap::get(rank, 0, {}, op->getContext())};
  }
  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings, IRMapping &map,
                          SymbolTableCollection &symbolTable, OpBuilder &builder) const {
    mapLocal(op, cloneLocal(op, operands, operandShardings, {}, symbolTable, builder), map);
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
    AttentionOp::attachInterface<AttentionShardingModel>(*ctx);
    RMSNormOp::attachInterface<RowShardingModel<RMSNormOp, false>>(*ctx);
    LayerNormOp::attachInterface<RowShardingModel<LayerNormOp, false>>(*ctx);
    RotaryOp::attachInterface<RowShardingModel<RotaryOp, true>>(*ctx);
    EmbeddingOp::attachInterface<EmbeddingShardingModel>(*ctx);
    CrossEntropyOp::attachInterface<CrossEntropyShardingModel<CrossEntropyOp>>(*ctx);
    CrossEntropyGradOp::attachInterface<CrossEntropyShardingModel<CrossEntropyGradOp>>(*ctx);
    LinearGradOp::attachInterface<LinearGradShardingModel>(*ctx);
    EmbeddingGradOp::attachInterface<EmbeddingGradShardingModel>(*ctx);
    MoEExpertsOp::attachInterface<MoEExpertsShardingModel>(*ctx);
    PositionEmbeddingOp::attachInterface<PositionShardingModel<PositionEmbeddingOp, false>>(*ctx);
    PositionEmbeddingGradOp::attachInterface<
        PositionShardingModel<PositionEmbeddingGradOp, true>>(*ctx);
    MoEExpertsGradOp::attachInterface<MoEExpertsGradShardingModel>(*ctx);
    AttentionGradOp::attachInterface<AttentionGradShardingModel>(*ctx);
    RMSNormGradOp::attachInterface<NormGradShardingModel<RMSNormGradOp>>(*ctx);
    LayerNormGradOp::attachInterface<NormGradShardingModel<LayerNormGradOp>>(*ctx);
    GeluGradOp::attachInterface<shard::ElementwiseShardingInterface<GeluGradOp>>(*ctx);
    SwiGLUGradOp::attachInterface<shard::ElementwiseShardingInterface<SwiGLUGradOp>>(*ctx);
    MoERouterOp::attachInterface<MoERoutingModel<MoERouterOp>>(*ctx);
    MoERouterGradOp::attachInterface<MoERoutingModel<MoERouterGradOp>>(*ctx);
    MoEDispatchOp::attachInterface<MoERoutingModel<MoEDispatchOp>>(*ctx);
    MoEDispatchGradOp::attachInterface<MoERoutingModel<MoEDispatchGradOp>>(*ctx);
    MoECombineOp::attachInterface<MoERoutingModel<MoECombineOp>>(*ctx);
    MoECombineGradOp::attachInterface<MoERoutingModel<MoECombineGradOp>>(*ctx);
    ParamOp::attachInterface<ParamShardingModel>(*ctx);
    GlobalNormOp::attachInterface<GlobalNormShardingModel>(*ctx);
    AdamWOp::attachInterface<AdamWShardingModel>(*ctx);
    // The global norm's partition sums squared norms (arith) and takes
    // their root (math).
    ctx->getOrLoadDialect<arith::ArithDialect>();
    ctx->getOrLoadDialect<math::MathDialect>();
  });
}
