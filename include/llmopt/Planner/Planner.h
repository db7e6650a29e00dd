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

  /// Parses `key:value,key:value`. Keys are the report's `config` keys. On
  /// error returns false with `error` naming the key and the accepted values.
  static bool parse(const std::string &text, Constraints &out, std::string &error);
};

struct SearchOptions {
  int topK = 5;
  Constraints fixed;
  /// Largest micro-batch tried.
  int64_t maxMicroBatch = 64;
  /// Largest number of virtual stages per pipeline rank tried.
  int maxVirtualStages = 8;
};

struct Rejection {
  int64_t count = 0;
  /// For out-of-memory: the candidate closest to fitting; otherwise the first.
  std::string example;
  double excessBytes = 0;
};

struct SearchResult {
  std::vector<cost::PlanEval> plans; ///< best first
  std::map<std::string, Rejection> rejected;
  int64_t evaluated = 0;
  int64_t feasible = 0;
  double seconds = 0;
};

/// Runs the search. Deterministic: equal inputs give equal results.
SearchResult search(const cost::ModelDesc &model, const cost::ClusterSpec &cluster,
                    const cost::JobSpec &job, const SearchOptions &options);

/// A one-line summary of a configuration: "dp8 tp8 pp4 vpp2 sp zero1 ...".
std::string describe(const cost::ParallelConfig &c);

/// The report: model, cluster, job, search statistics, `plans` (best first)
/// and `rejected` (counts per reason) with examples.
llvm::json::Value reportJSON(const cost::ModelDesc &model,
                             const cost::ClusterSpec &cluster,
                             const cost::JobSpec &job, const SearchResult &result);

/// The human table for stdout.
void printTable(llvm::raw_ostream &os, const cost::ModelDesc &model,
                const cost::ClusterSpec &cluster, const cost::JobSpec &job,
                const SearchResult &result);

/// The chosen plan for users who keep their trainer: Megatron-LM command-line
/// arguments, a DeepSpeed JSON config, or a torchtitan TOML section.
/// Returns false for an unknown format.
bool exportPlan(llvm::raw_ostream &os, const std::string &format,
                const cost::ModelDesc &model, const cost::JobSpec &job,
                const cost::PlanEval &plan, std::string &error);

} // namespace llmopt::planner

#endif // LLMOPT_PLANNER_PLANNER_H
