//===- CostModel.h - analytical step time and memory per rank ---*- C++ -*-===//
//
// Scores one parallel configuration of a model on a cluster for a job:
// memory per rank and pipeline stage (weights, gradients, optimizer states
// under ZeRO 0-3, activations under TP/SP/CP and recomputation, in-flight
// micro-batches per schedule, logits, communication buffers, reserve), and
// step time (GEMMs by shape-dependent efficiency, attention, memory-bound
// kernels, recomputation, collectives over the NVLink / network hierarchy with
// the overlap each framework achieves, pipeline bubble, optimizer step).
// Formulas and sources: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_COSTMODEL_COSTMODEL_H
#define LLMOPT_COSTMODEL_COSTMODEL_H

#include "llmopt/CostModel/Hardware.h"
#include "llmopt/CostModel/Model.h"

#include "llvm/ADT/StringRef.h"

#include <array>
#include <string>
#include <vector>

namespace llmopt::cost {

/// Activation recomputation. `PerStage` lets each pipeline stage take the
/// least recomputation that fits its memory (early stages hold more
/// micro-batches in flight); the choice is reported in `stageRecompute`.
enum class Recompute { None, Selective, Full, PerStage };
enum class Schedule { None, GPipe, OneFOneB, Interleaved };

const char *toString(Recompute r);
const char *toString(Schedule s);

/// One point of the search space.
struct ParallelConfig {
  int dp = 1, tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1;
  bool sp = false;
  int zero = 0;
  /// Hybrid sharding (HSDP): ZeRO shards over groups of this many of the
  /// dp x cp ranks (the innermost ones) and replicates across the groups;
  /// 0: over all of them.
  int shard = 0;
  bool offloadOptimizer = false;
  Recompute recompute = Recompute::None;
  /// With Recompute::Full: recompute only the first this many layers of
  /// each model chunk (Megatron's --recompute-method block
  /// --recompute-num-layers N), keeping the others' activations; 0: every
  /// layer.
  int recomputeLayers = 0;
  int64_t microBatch = 1;
  int64_t numMicroBatches = 1;
  Schedule schedule = Schedule::None;
  /// Layers per pipeline stage (pp entries); empty for an even split.
  std::vector<int> stageLayers;
  /// With Recompute::PerStage, the level each stage got (filled in by
  /// evaluate).
  std::vector<Recompute> stageRecompute;
  /// Mesh axes from the fastest-varying (inside a node) to the slowest.
  /// "tp-cp-ep-dp-pp" (Megatron's order) or "tp-cp-pp-ep-dp".
  bool ppInsideDp = false;

  int gpus() const { return dp * tp * pp * cp; }
  std::string placement() const { return ppInsideDp ? "tp-cp-pp-dp" : "tp-cp-dp-pp"; }
};

/// Layers per pipeline rank when each of `pp x vpp` virtual stages takes an
/// equal share of the layers, or, where they do not divide and the stack
/// allows it, of the layers plus the embedding and the loss counted as a
/// layer each (Megatron's account_for_embedding/loss_in_pipeline_split: 126
/// layers on pp 8 x vpp 8 are 128 slots of 2). Empty when no layout exists.
std::vector<int> interleavedStageLayers(int layers, int pp, int vpp, bool uneven);
/// Vocabulary rows (embedding, LM head, logits) on each of `tp` ranks, as a
/// stack with StackCapabilities::vocabPadding `padding` splits them.
int64_t vocabRowsPerRank(int64_t vocab, int64_t tp, int padding);

/// The layers of each of the pp x vpp model chunks (virtual stage k on
/// pipeline rank k mod pp, in model order) that interleavedStageLayers sums;
/// empty where it is.
std::vector<int> interleavedChunkLayers(int layers, int pp, int vpp, bool uneven);

/// Bytes per rank by category.
struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  double logits = 0;
  double commBuffers = 0;
  double reserved = 0;
  double total() const {
    return weights + gradients + optimizer + activations + logits + commBuffers + reserved;
  }
};

struct StageMemory {
  int stage = 0;
  int layers = 0;
  /// Micro-batches whose activations the stage holds at its peak.
  double inFlight = 0;
  MemoryBreakdown memory;
  /// Seconds one micro-batch spends in the stage (all its layers, every
  /// virtual chunk together), forward and backward. Backward includes
  /// recomputation; the stage's exposed TP/CP/EP collectives and pipeline
  /// sends are shared in proportion. They add up to the stage's time per
  /// micro-batch, whose maximum times the micro-batch count is the compute
  /// part of the step.
  double forwardSeconds = 0;
  double backwardSeconds = 0;
};

/// Seconds per step by cause; they add up to `step`.
struct TimeBreakdown {
  double compute = 0;   ///< forward + backward of the bottleneck stage, x m
  double recompute = 0; ///< recomputation in backward, x m
  double tpComm = 0;    ///< TP / SP collectives (not overlapped)
  double cpComm = 0;    ///< context-parallel KV exchange not hidden by attention
  double epComm = 0;    ///< MoE all-to-all
  double ppComm = 0;    ///< pipeline send/recv
  double dpComm = 0;    ///< gradient reduction and parameter gathers not hidden
  double bubble = 0;    ///< pipeline fill and drain
  double optimizer = 0; ///< optimizer step (and offload transfers)
  double step = 0;
  /// Communication hidden behind compute (not part of `step`; the compute
  /// slowdown hiding it costs is part of the exposed figures above).
  double hiddenComm = 0;
};

enum class RejectReason {
  None,
  HeadsNotDivisibleByTP,
  KVHeadsNotDivisibleByTP,
  FfnNotDivisibleByTP,
  BatchNotDivisible,
  TooFewLayersForPP,
  LayersNotDivisibleForInterleaving,
  FewerMicroBatchesThanStages,
  MicroBatchesNotDivisibleForInterleaving,
  ExpertsNotDivisibleByEP,
  EPNotDividingDP,
  NotSupportedByStack,
  SeqNotDivisibleByCP,
  SeqNotDivisibleForSP,
  SPWithoutTP,
  TPAcrossNodes,
  GpuCountMismatch,
  OutOfMemory,
  HostOutOfMemory,
  Invalid,
};

/// Stable key of a reason (JSON `rejected` keys).
const char *toString(RejectReason r);

struct PlanEval {
  ParallelConfig config;
  RejectReason reason = RejectReason::None;
  /// Why, with the numbers: "OOM by 3.20 GiB on stage 0 (84.1 of 80.0 GiB)".
  std::string detail;
  TimeBreakdown time;
  std::vector<StageMemory> stages;
  /// The stage with the most memory and its breakdown.
  int peakStage = 0;
  MemoryBreakdown peak;
  double modelFlopsPerStep = 0;
  double tokensPerS = 0;
  double tflopsPerGpu = 0;
  double mfu = 0;

  bool feasible() const { return reason == RejectReason::None; }
};

/// The rules a configuration must satisfy before it is scored. Returns
/// RejectReason::None or the first rule broken, with `detail` set.
RejectReason checkRules(const ModelDesc &model, const ClusterSpec &cluster, const JobSpec &job,
                        const ParallelConfig &cfg, std::string &detail);
/// The same without the message (a search builds one per reason only).
RejectReason checkRules(const ModelDesc &model, const ClusterSpec &cluster, const JobSpec &job,
                        const ParallelConfig &c);

/// What the job's training stack (`job.stack`) cannot run of `cfg`:
/// NotSupportedByStack with `detail` naming the stack and the rule, or None.
/// Part of checkRules.
RejectReason checkStackRules(const ModelDesc &model, const JobSpec &job, const ParallelConfig &cfg,
                             std::string &detail);

/// Per-layer costs of one micro-batch as prefix sums over the layers (entry
/// i sums layers [0, i)). They depend only on tp, sp, cp, ep, the
/// micro-batch, recomputation and where the ep group sits, so a search builds
/// one table and scores every pipeline, ZeRO and schedule choice against it.
struct LayerTable {
  std::vector<double> time;      ///< everything on the critical path
  std::vector<double> fwdWindow; ///< forward compute (overlap window)
  std::vector<double> bwdWindow; ///< backward compute (overlap window)
  std::vector<double> compute, recompute, tp, cp, ep;
  std::vector<double> hidden; ///< communication hidden behind compute
  std::vector<double> act;    ///< activation bytes kept
  std::vector<double> dense;  ///< non-expert parameters per rank
  std::vector<double> expert; ///< expert parameters per rank
  double maxLayerBytes = 0;   ///< largest layer's weights, gathered (ZeRO-3)
  /// Full recomputation: the largest layer's activations while its
  /// recomputed forward serves its backward (once, not per micro-batch).
  double maxRecomputedBytes = 0;
};

/// Builds the layer table of `cfg` (its tp, sp, cp, ep, micro-batch,
/// recomputation and placement).
LayerTable buildLayerTable(const ModelDesc &model, const ClusterSpec &cluster, const JobSpec &job,
                           const ParallelConfig &cfg);

/// The GPUs of the expert-parallel group of `cfg` that share a node; the
/// layer table depends on it.
int expertGroupPerNode(const ClusterSpec &cluster, const JobSpec &job, const ParallelConfig &cfg);

/// Whether the experts stay whole (expert tensor parallelism 1) because the
/// expert-parallel group takes tensor-parallel ranks (the stack's EP layout
/// allows it and ep does not divide dp x cp); the layer table depends on it.
bool expertsStayWhole(const JobSpec &job, const ParallelConfig &cfg);

/// Scores `cfg`. The result is infeasible (with reason and detail) when a
/// rule is broken or a stage does not fit in memory; memory and time are
/// still filled in for memory rejections. `table`, when given, must come from
/// buildLayerTable with the same layer-level choices.
PlanEval evaluate(const ModelDesc &model, const ClusterSpec &cluster, const JobSpec &job,
                  const ParallelConfig &cfg, const LayerTable *table = nullptr);

/// Scores `cfg` with prebuilt tables for no, selective and full
/// recomputation (needed by Recompute::PerStage; null entries are built).
PlanEval evaluate(const ModelDesc &model, const ClusterSpec &cluster, const JobSpec &job,
                  const ParallelConfig &cfg, const std::array<const LayerTable *, 3> &tables);

/// Collective times in seconds for `bytes` over a group of `n` ranks of
/// which `perNode` share a node (ring algorithms; hierarchical across nodes).
struct Collectives {
  const ClusterSpec &c;
  double allReduce(double bytes, int n, int perNode) const;
  double allGather(double bytes, int n, int perNode) const;
  double reduceScatter(double bytes, int n, int perNode) const {
    return allGather(bytes, n, perNode);
  }
  double allToAll(double bytes, int n, int perNode) const;
  double sendRecv(double bytes, bool crossNode) const;
};

/// Efficiency (fraction of peak) of an m x n x k GEMM on `gpu`.
double gemmEfficiency(const GpuSpec &gpu, double m, double n, double k);

/// Sets `gpu`'s GEMM, attention and memory efficiencies from a kernel
/// profile (`llm-run --profile` JSON) measured with `dtype` GEMMs; each
/// efficiency is left as it is when the profile has no kernel of its kind.
/// `summary` says what changed.
bool calibrate(GpuSpec &gpu, llvm::StringRef profileJson, DType dtype, std::string &summary,
               std::string &error);

} // namespace llmopt::cost

#endif // LLMOPT_COSTMODEL_COSTMODEL_H
