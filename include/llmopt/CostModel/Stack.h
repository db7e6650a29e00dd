//===- Stack.h - training stacks: what they run and how fast ----*- C++ -*-===//
//
// A plan is always "this layout on this stack". A training stack (llm-run,
// Megatron-Core, torchtitan, DeepSpeed, llm-foundry) has capabilities (the
// parallelism, sharding, schedules and recomputation it can run, and how it
// lays the mesh out) and an efficiency profile (how close its GEMMs,
// attention and memory-bound kernels come to what the GPU can do, and which
// communication it overlaps with compute at what cost). Profiles are data:
// JSON files under data/stacks/ (compiled in) or given by the user
// (`stack-profile=FILE`), each with its provenance and the rows it was fitted
// on. Formulas and the fit: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_COSTMODEL_STACK_H
#define LLMOPT_COSTMODEL_STACK_H

#include <string>
#include <vector>

namespace llvm::json {
class Value;
}

namespace llmopt::cost {

/// How context parallelism exchanges keys and values.
enum class CPKind { None, Ring, Ulysses };
/// Which ranks an expert-parallel group may span: none, the data-parallel
/// ranks (dp x cp), or Megatron's layout (ep x etp divides dp x cp x tp, so
/// with experts whole (etp 1) EP may take tensor-parallel ranks too).
enum class EPLayout { None, DataParallel, DataTensorParallel };
/// How a dropless MoE dispatch is sized: for the worst case (every token at
/// every expert, as llm-run lowers it) or for the routed tokens plus a
/// margin (Megatron's and torchtitan's dropless token dispatchers).
enum class MoEDispatch { WorstCase, Routed };

const char *toString(CPKind k);
const char *toString(EPLayout l);

/// The parallel features a stack can run. Unset lists mean "none".
struct StackCapabilities {
  bool tensorParallel = true;
  bool sequenceParallel = true;
  /// Tensor parallelism together with pipeline parallelism (DeepSpeed's
  /// AutoTP runs without its pipeline engine).
  bool tensorParallelWithPP = true;
  /// MoE layers with tensor parallelism need sequence parallelism
  /// (Megatron's arguments check).
  bool moeTensorParallelNeedsSP = false;
  /// Context parallelism shards the parameters with FSDP over the cp ranks
  /// (torchtitan: FSDP is on whenever dp_shard or cp is above 1), so it runs
  /// with ZeRO-3 only.
  bool contextParallelShardsParameters = false;
  /// Whether ZeRO stage `zero` runs with context-parallel degree `cp`.
  bool runsZeroWithCP(int zero, int cp) const {
    return cp <= 1 || zero == 3 || !contextParallelShardsParameters;
  }
  /// How the vocabulary (embedding rows, LM head rows, logits) splits over
  /// tp: N > 0 pads it to a multiple of N x tp first (Megatron's
  /// make_vocab_size_divisible_by, 128); 0 splits it into ceil(V / tp) rows
  /// (DTensor's uneven shards); -1 keeps it whole on every rank unless tp
  /// divides it. llm-run's lowering pads to a multiple of tp (1).
  int vocabPadding = 0;
  /// Tensor parallelism only where tp divides the vocabulary: the stack
  /// runs no padded vocabulary (llm-run's CUDA backend, whose
  /// vocabulary-parallel loss has no padding rows yet).
  bool tensorParallelUnpaddedVocab = false;
  /// fp8 GEMMs in dense layers only: an MoE model's job cannot be fp8
  /// (llm-run's CUDA backend has no fp8 expert kernels).
  bool fp8DenseOnly = false;
  /// Tensor or pipeline parallelism needs FSDP on (ZeRO-3 over more than one
  /// rank of dp_shard x cp): torchtitan 0.2 refuses DDP beside them ("DDP
  /// has not supported > 1D parallelism") and trains in fp32 without FSDP
  /// (its autocast is off with TP or PP).
  bool tensorOrPipelineParallelNeedsFsdp = false;
  /// Pipeline stages inside data parallelism only where the expert groups'
  /// data parallelism is the dense one (expert tp x ep = tp x cp):
  /// Megatron's initialize_model_parallel for the tp-cp-ep-pp-dp order.
  bool ppInsideDpNeedsMatchingExpertGroups = false;
  /// Pipeline schedules by name ("1f1b", "interleaved-1f1b", "gpipe"); empty:
  /// no pipeline parallelism.
  std::vector<std::string> schedules = {"1f1b", "interleaved-1f1b", "gpipe"};
  /// Stages may hold different layer counts (the balancer moves layers off
  /// the first and last stages); without it layers must divide evenly.
  bool unevenStages = true;
  /// Interleaved stages may be uneven: the embedding and the loss count as a
  /// layer each in the split (Megatron's account_for_embedding/loss_in_
  /// pipeline_split), or any layout (pipeline_model_parallel_layout).
  bool unevenInterleaving = true;
  /// Largest number of virtual stages per pipeline rank; 0: no limit.
  int maxVirtualStages = 0;
  CPKind contextParallel = CPKind::Ring;
  EPLayout expertParallel = EPLayout::DataParallel;
  /// ZeRO stages it runs (0 = plain data parallelism), and those it runs
  /// together with pipeline parallelism.
  std::vector<int> zeroStages = {0, 1, 2, 3};
  std::vector<int> zeroStagesWithPP = {0, 1, 2, 3};
  bool optimizerOffload = true;
  /// ZeRO stages it runs with hybrid sharding (HSDP: ZeRO within groups of
  /// the data-parallel ranks, replicas across them): torchtitan's
  /// dp_replicate x dp_shard (FSDP, 3), FSDP's HYBRID_SHARD and
  /// _HYBRID_SHARD_ZERO2 (3, 2), Megatron's distributed-optimizer instances
  /// (1), DeepSpeed's MiCS (3); empty for none.
  std::vector<int> hybridSharding = {1, 2, 3};
  bool hasHybridSharding(int zero) const;
  /// Recomputation modes by name ("none", "selective", "full", "per-stage",
  /// and "partial": full recomputation of the first N layers of each model
  /// chunk).
  std::vector<std::string> recompute = {"none", "selective", "full", "per-stage", "partial"};
  bool fp8 = true;
};

/// How fast a stack runs on a GPU, relative to what the GPU's kernels reach
/// (GpuSpec's efficiencies), and what it overlaps.
struct StackEfficiency {
  /// Multiplies the GPU's GEMM efficiency (1: the best measured cuBLAS GEMM
  /// of that shape).
  double gemm = 1.0;
  /// fp8 GEMMs reach this fraction of the fp8 peak, relative to what a
  /// bf16 GEMM of the same shape reaches of the bf16 peak; 0 keeps the GPU's.
  double fp8Gemm = 0;
  /// Multiplies the GPU's fused-attention efficiency.
  double attention = 1.0;
  /// Multiplies the GPU's memory-bound kernel efficiency (eager PyTorch
  /// launches more, smaller kernels than a fused or compiled stack).
  double memory = 1.0;
  /// Fixed CPU-side cost per layer and micro-batch, forward + backward
  /// (kernel launches, Python), seconds; hidden when kernels are long.
  double hostOverheadPerLayer = 0;
  /// Time added per local expert of an MoE layer and micro-batch, forward +
  /// backward, that no kernel covers: each expert's small GEMMs, casts and
  /// amax reductions are a few microsecond-long kernels, and a dropless
  /// dispatcher reads the routed counts back to the host each layer, so
  /// their launches are not hidden behind earlier work.
  double moeExpertOverhead = 0;
};

struct StackOverlap {
  /// Compute runs this much slower while a collective runs beside it (NCCL
  /// takes SMs and HBM bandwidth): hiding c seconds of communication costs
  /// slowdown x c seconds of compute.
  double commSlowdown = 0;
  /// Fraction of tensor-parallel communication hidden behind the GEMMs when
  /// the plan uses sequence parallelism (Megatron's tp_comm_overlap,
  /// torchtitan's AsyncTP); 0: none.
  double tpOverlap = 0;
  /// Data-parallel gradient reduction overlaps the backward.
  bool dpOverlap = true;
  /// ZeRO-3: layers whose parameters are gathered ahead of the one
  /// computing (1: the next layer while this one runs).
  int zero3Prefetch = 1;
  /// Ring context parallelism hides each block's exchange behind that
  /// block's attention.
  bool cpOverlap = true;
  /// Pipeline sends and receives run asynchronously beside compute
  /// (Megatron's overlap_p2p_comm, torch.distributed.pipelining's isend /
  /// irecv): only their latency stays on the critical path.
  bool ppOverlap = false;
  /// Fraction of the MoE all-to-all hidden behind compute.
  double epOverlap = 0;
};

struct StackTolerance {
  double meanError = 0.08;
  double maxError = 0.20;
  /// Calibration rows held to no bound, each with the reason (a published
  /// figure its own source contradicts); they stay in the table.
  std::vector<std::pair<std::string, std::string>> outliers;
};

/// A training stack's profile.
struct StackProfile {
  /// Short name (`stack=`), title and the versions modelled.
  std::string name = "neutral";
  std::string title = "no stack (hardware efficiencies as given)";
  std::string versions;
  /// Where the numbers come from, and what they were fitted on.
  std::string provenance;
  /// The variant applied (`stack=torchtitan:eager`), empty for none.
  std::string variant;
  StackCapabilities caps;
  StackEfficiency eff;
  StackOverlap overlap;
  MoEDispatch moeDispatch = MoEDispatch::WorstCase;
  /// Routed dispatch: rows sized for the routed tokens times (1 + margin).
  double moeDispatchMargin = 0;
  StackTolerance tolerance;
  /// Highest MFU any calibration row of this stack reaches (bf16 and fp8
  /// jobs; against the bf16 peak); 0 when it has none. A prediction above it
  /// is flagged in the report.
  double maxCalibratedMfuBf16 = 0;
  double maxCalibratedMfuFp8 = 0;
  /// The same over the MoE rows only: an MoE layer's MFU is far below a
  /// dense one's (routing, all-to-all, small expert GEMMs), so MoE plans
  /// are held to these; 0 when no MoE row calibrates the stack.
  double maxCalibratedMfuMoeBf16 = 0;
  double maxCalibratedMfuMoeFp8 = 0;
  /// The mean and largest |relative error| of this profile's predictions on
  /// the published runs it was calibrated on (llm-calibrate --check holds
  /// them to what the rows give); 0 when it was fitted on none. The report
  /// weighs a predicted gain against them.
  double calibratedMeanError = 0;
  double calibratedMaxError = 0;

  bool hasSchedule(const char *name) const;
  bool hasRecompute(const char *name) const;
  bool hasZero(int stage, bool withPP) const;
};

/// Names of the built-in stacks (data/stacks/*.json), default first.
std::vector<std::string> stackNames();
/// The default stack: what a new user most likely runs on a GPU cluster.
const char *defaultStackName();

/// Reads a profile from JSON text. `variant` (may be empty) selects one of
/// the file's `variants`, whose fields override the profile's. Every field
/// is checked; on error returns false with `error` naming the file, the
/// field and what it must be.
bool parseStackProfile(const std::string &text, const std::string &filename,
                       const std::string &variant, StackProfile &out, std::string &error);

/// Looks up a built-in stack, `name` or `name:variant`. On error (unknown
/// stack or variant) returns false with `error` listing the known ones.
bool getStackProfile(const std::string &spec, StackProfile &out, std::string &error);

/// The profile as JSON (report).
llvm::json::Value toJSON(const StackProfile &s);

} // namespace llmopt::cost

#endif // LLMOPT_COSTMODEL_STACK_H
