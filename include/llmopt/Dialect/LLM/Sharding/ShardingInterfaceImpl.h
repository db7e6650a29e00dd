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
/// (split by heads), the norms (rows only) and rotary (by whole heads).
void registerShardingInterfaceExternalModels(mlir::DialectRegistry &registry);
} // namespace llmopt::llm

#endif // LLMOPT_DIALECT_LLM_SHARDING_SHARDINGINTERFACEIMPL_H
