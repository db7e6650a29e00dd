//===- Pipelines.cpp - pass pipelines -------------------------------------===//

#include "llmopt/Pipelines/Pipelines.h"
#include "llmopt/Conversion/Passes.h"
#include "llmopt/Dialect/Exec/Transforms/Passes.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Target/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace llmopt::llm;

void llmopt::buildLowerToPlanPipeline(OpPassManager &pm, const LowerToPlanOptions &o) {
  BuildTrainingStepOptions step;
  step.lr = o.lr;
  step.maxGradNorm = o.maxGradNorm;
  step.lossScale = o.lossScale;
  step.moeAuxLoss = o.moeAuxLoss;
  pm.addPass(createPartitionTP());
  pm.addPass(createPartitionEP());
  PartitionCPOptions cpOptions;
  cpOptions.comm = o.cpComm;
  pm.addPass(createPartitionCP(cpOptions));
  pm.addPass(createBuildTrainingStep(step));
  SpecializeShapesOptions shapes;
  shapes.batch = o.batch;
  shapes.seq = o.seq;
  pm.addPass(createSpecializeShapes(shapes));
  pm.addPass(createPartitionPP());
  ShardParamsOptions shard;
  shard.prefetch = o.prefetch;
  pm.addPass(createShardParams(shard));
  if (o.fuse)
    pm.addPass(createFuseElementwise());
  pm.addPass(createPlanMemory());
  pm.addPass(createConvertLLMToExec());
  pm.addPass(exec::createExecShardOptimizer());
  exec::ExecBucketGradientsOptions buckets;
  buckets.bucketBytes = o.bucketBytes;
  pm.addPass(exec::createExecBucketGradients(buckets));
  EmitPlanOptions emit;
  emit.dir = o.dir;
  pm.addPass(createEmitPlan(emit));
}

void llmopt::registerPipelines() {
  PassPipelineRegistration<LowerToPlanOptions>(
      "llm-lower-to-plan",
      "Lower a model (and its #llm.plan) to a plan directory the runtime executes",
      buildLowerToPlanPipeline);
}
