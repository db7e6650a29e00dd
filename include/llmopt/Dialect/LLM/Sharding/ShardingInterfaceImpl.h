//===- ShardingInterfaceImpl.h - upstream shard dialect models --*- C++ -*-===//
//
// Our ops as upstream `shard` sees them (ShardingInterface external models):
// `sharding-propagation` and `shard-partition` run on llm IR annotated with
// `shard.shard`, so a user (or another compiler) can state shardings the
// upstream way and get Megatron's column / row splits from them.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_DIALECT_LLM_SHARDING_SHARDINGINTERFACEIMPL_H
#define LLMOPT_DIALECT_LLM_SHARDING_SHARDINGINTERFACEIMPL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace llmopt::llm {
/// Attaches ShardingInterface to llm.linear (a matmul: leading and output
/// dimensions parallel, input features a reduction, partial sums all-reduced
/// when it is split), the elementwise ops (add, gelu, swiglu), attention
/// (split by heads), the norms (rows only), rotary (by whole heads), the
/// embedding (tokens or the table's columns; a vocabulary split is refused)
/// and the cross-entropy (a vocabulary split over a one-axis grid becomes its
/// `vocab_axis`, Megatron's vocabulary-parallel loss; a token split is
/// refused); of the backward ops, llm.linear_grad (dx all-reduced over the
/// axes splitting the output features, the weight and bias gradients over
/// those splitting the tokens), the norms' gradients (features whole, the
/// weight and bias gradients all-reduced over a split of the tokens), the
/// activations' gradients (elementwise), the attention's (by heads), the
/// embedding's (the table gradient all-reduced over a split of the tokens)
/// and the loss's (vocab_axis, as the forward); MoE's experts and their
/// backward (by expert, slot, or ffn, partial sums all-reduced); the
/// learned positions and their gradient (a sequence split refused). Not
/// modelled: MoE's router, dispatch and combine.
void registerShardingInterfaceExternalModels(mlir::DialectRegistry &registry);
} // namespace llmopt::llm

#endif // LLMOPT_DIALECT_LLM_SHARDING_SHARDINGINTERFACEIMPL_H
