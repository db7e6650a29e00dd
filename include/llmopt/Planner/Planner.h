//===- Planner.h - search over parallel training plans ----------*- C++ -*-===//
//
// Enumerates DP x TP x PP (x virtual stages) x CP x EP, sequence parallelism,
// ZeRO stage, optimizer offload, recomputation, micro-batch size and count,
// pipeline schedule and the placement of the mesh axes, scores every
// candidate with the cost model and keeps the best. Rejected candidates are
// counted by reason, with an example of each. Plain C++: no MLIR types.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_PLANNER_PLANNER_H
#define LLMOPT_PLANNER_PLANNER_H

#include "llmopt/CostModel/CostModel.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
namespace json {
class Value;
}
} // namespace llvm

namespace llmopt::planner {

/// Dimensions a user fixes (`fix=tp:8,pp:8,recompute:full,sp:1`); unset
/// ones are searched.
struct Constraints {
  std::map<std::string, int64_t> ints; // dp tp pp vpp cp ep zero micro_batch ...
  std::optional<bool> sp;
  std::optional<bool> offload;
  std::optional<cost::Recompute> recompute;
  std::optional<cost::Schedule> schedule;
  std::optional<bool> ppInsideDp;

  /// Nothing fixed: every dimension is searched.
  bool empty() const {
    return ints.empty() && !sp && !offload && !recompute && !schedule && !ppInsideDp;
  }

  /// Parses `key:value,key:value`. Keys are the report's `config` keys. On
  /// error returns false with `error` naming the key and the accepted values.
  static bool parse(const std::string &text, Constraints &out, std::string &error);
};

/// Refuses fixed dimensions (`fix=`) the job's stack cannot run, before any
/// search: false with `error` naming the option, the stack's rule and a fix.
bool checkConstraints(const Constraints &fixed, const cost::ModelDesc &model,
                      const cost::JobSpec &job, std::string &error);

/// Where a running search stands, for a progress display.
struct SearchProgress {
  /// Fraction of the search space done, 0 to 1 (by outer TP x CP x PP
  /// choices, so it advances in steps); exactly 1 on the last call.
  double fraction = 0;
  int64_t evaluated = 0;
  int64_t feasible = 0;
  double seconds = 0;
  /// True on the last call, made once the search is over.
  bool done = false;
};

struct SearchOptions {
  int topK = 5;
  Constraints fixed;
  /// Largest micro-batch tried.
  int64_t maxMicroBatch = 64;
  /// Largest number of virtual stages per pipeline rank tried (0: any that
  /// lays the layers out; the stack may limit it further).
  int maxVirtualStages = 0;
  /// Called from the searching thread when the search starts, about every
  /// `progressInterval` seconds while it runs, and once more with `done` set
  /// at the end. The callee decides whether to show anything (the pass shows a
  /// line only after a second, and only on a terminal).
  std::function<void(const SearchProgress &)> progress;
  double progressInterval = 0.1;
};

struct Rejection {
  int64_t count = 0;
  /// For out-of-memory: the candidate closest to fitting; otherwise the first.
  std::string example;
  double excessBytes = 0;
};

/// A plan the search ranks as one with the row it is listed under: the same
/// mesh, sharding, recomputation and micro-batching, laid out differently
/// along the pipeline (virtual stages, schedule, where the pp axis sits in
/// the mesh), predicted within `kEquivalentTolerance` of that row.
struct Equivalent {
  cost::ParallelConfig config;
  double stepSeconds = 0;
  double peakBytes = 0;
};

/// Step times closer than this (relative) are ties: the simpler plan ranks
/// first (no offload, then less CP, fewer pipeline chunks, smaller TP, EP,
/// ZeRO stage, less recomputation, larger micro-batch).
inline constexpr double kTieTolerance = 1e-4;
/// Pipeline-layout variants of one plan within this (relative) of its
/// fastest are one row: far below what the model resolves (its mean error
/// on every calibrated stack is above 3%).
inline constexpr double kEquivalentTolerance = 0.005;

/// The key that tells plans apart for the top-k list: everything but the
/// pipeline layout (vpp, schedule, placement).
std::string familyKey(const cost::ParallelConfig &c);

/// One category of the step time in which two plans differ, with how sure
/// the cost model is of that part of the difference.
struct GainItem {
  std::string category; ///< "compute", "bubble", "exposed tp comm", ...
  double recipeSeconds = 0, bestSeconds = 0;
  std::string confidence; ///< "high", "medium" or "low"
  std::string basis;      ///< what the figure rests on
};

/// The best plan of a free search against the best plan with the user's
/// fixed dimensions (`fix=`): where it gains, by category, and whether the
/// gain is larger than the model's error on the stack's published runs.
struct RecipeComparison {
  cost::PlanEval best;
  /// Categories whose time differs by more than 0.1% of the recipe's step,
  /// largest gain first (a negative gain: the best plan spends more there).
  std::vector<GainItem> items;
  /// The dimensions that differ, "tp 8 -> 4".
  std::vector<std::string> changes;
  /// 1 - best step / recipe step.
  double gain = 0;
  /// One sentence: how sure the gain is.
  std::string verdict;
};

/// Compares `best` (a free search's) with `recipe` (the fixed search's).
RecipeComparison compareWithRecipe(const cost::PlanEval &recipe, const cost::PlanEval &best,
                                   const cost::JobSpec &job);

/// The stack's highest calibrated MFU for the job's precision and the
/// model's kind (dense or MoE); 0: no published run calibrates it. A plan
/// predicted above it is flagged.
double calibratedMfuCeiling(const cost::ModelDesc &model, const cost::JobSpec &job);

struct SearchResult {
  /// Best first, one per family (`familyKey`): `equivalents[i]` lists the
  /// other layouts of `plans[i]` within `kEquivalentTolerance`, fastest
  /// first.
  std::vector<cost::PlanEval> plans;
  std::vector<std::vector<Equivalent>> equivalents;
  std::map<std::string, Rejection> rejected;
  int64_t evaluated = 0;
  int64_t feasible = 0;
  double seconds = 0;
  /// With fixed dimensions: how the free search's best compares with
  /// `plans.front()` (set by the caller that ran both searches).
  std::optional<RecipeComparison> versusFree;
};

/// Runs the search. Deterministic: equal inputs give equal results.
SearchResult search(const cost::ModelDesc &model, const cost::ClusterSpec &cluster,
                    const cost::JobSpec &job, const SearchOptions &options);

/// A one-line summary of a configuration: "dp8 tp8 pp4 vpp2 sp zero1 ...".
std::string describe(const cost::ParallelConfig &c);

/// The report: model, cluster, job, search statistics, `plans` (best first)
/// and `rejected` (counts per reason) with examples.
llvm::json::Value reportJSON(const cost::ModelDesc &model, const cost::ClusterSpec &cluster,
                             const cost::JobSpec &job, const SearchResult &result);

/// The human table for stdout.
void printTable(llvm::raw_ostream &os, const cost::ModelDesc &model,
                const cost::ClusterSpec &cluster, const cost::JobSpec &job,
                const SearchResult &result);

/// One forward or backward pass of one micro-batch through one model chunk
/// of a pipeline stage.
struct PipelineBlock {
  int stage = 0;
  /// Model chunk of the stage (virtual stage `chunk * pp + stage`); 0
  /// without interleaving.
  int chunk = 0;
  int64_t microBatch = 0;
  bool backward = false;
  double start = 0, end = 0;
};

/// The pipeline schedule of one step laid out in time: what each stage
/// computes when, with idle gaps where it waits for its neighbours.
struct PipelineTimeline {
  cost::Schedule schedule = cost::Schedule::None;
  int stages = 1;
  int chunks = 1;
  /// Micro-batches laid out, and the step's total; fewer are laid out when
  /// the step has many (the steady state repeats).
  int64_t microBatches = 0;
  int64_t totalMicroBatches = 0;
  std::vector<PipelineBlock> blocks; ///< per stage in execution order
  /// End of the last block.
  double makespan = 0;
};

/// Lays out `microBatches` micro-batches on `fwd.size()` stages that take
/// `fwd[s]` and `bwd[s]` seconds per micro-batch (all chunks together), in
/// the order `schedule` runs them on each stage: GPipe (all forwards, then
/// all backwards), 1F1B (pp - s - 1 warm-up forwards, then alternating) or
/// Megatron's interleaved 1F1B over `chunks` model chunks per stage (which
/// needs a micro-batch count that is a multiple of the stage count). A pass
/// starts when its stage is free and its input is ready (forward: the
/// previous virtual stage's forward; backward: the next one's backward, or
/// the last forward). Point-to-point time is part of the stage times. Fails
/// with `error` on inputs no schedule can run.
bool simulatePipeline(cost::Schedule schedule, int chunks, int64_t microBatches,
                      const std::vector<double> &fwd, const std::vector<double> &bwd,
                      PipelineTimeline &out, std::string &error);

/// The timeline of a scored plan from its per-stage forward and backward
/// times, with at most about `maxMicroBatches` micro-batches (0: all).
PipelineTimeline pipelineTimeline(const cost::PlanEval &plan, int64_t maxMicroBatches = 0);

/// A self-contained HTML page for the search (no network needed to view):
/// the report JSON and each top plan's pipeline timeline embedded as data,
/// with an inline script that draws the top plans side by side, memory per
/// rank by category and stage against the GPU's capacity, the step time
/// split, the pipeline schedule and the rejection reasons as SVG.
void printHTMLReport(llvm::raw_ostream &os, const cost::ModelDesc &model,
                     const cost::ClusterSpec &cluster, const cost::JobSpec &job,
                     const SearchResult &result);

/// The chosen plan for users who keep their trainer: Megatron-LM command-line
/// arguments, a DeepSpeed JSON config, or a torchtitan TOML section.
/// Returns false for an unknown format.
bool exportPlan(llvm::raw_ostream &os, const std::string &format, const cost::ModelDesc &model,
                const cost::JobSpec &job, const cost::PlanEval &plan, std::string &error);

} // namespace llmopt::planner

#endif // LLMOPT_PLANNER_PLANNER_H
