//===- Compare.cpp - a user's recipe against the search's best ------------===//
//
// With `fix=`, the pass also searches freely and says where the best plan
// gains on the recipe: the step time split into the cost model's categories,
// each with how sure the model is of it, and the whole gain weighed against
// the model's error on the stack's published runs.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Planner/Planner.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace llmopt;
using namespace llmopt::cost;
using namespace llmopt::planner;

double llmopt::planner::calibratedMfuCeiling(const ModelDesc &model, const JobSpec &job) {
  const StackProfile &s = job.stack;
  bool moe = model.hasMoE();
  if (moe)
    return job.fp8 ? s.maxCalibratedMfuMoeFp8 : s.maxCalibratedMfuMoeBf16;
  return job.fp8 ? s.maxCalibratedMfuFp8 : s.maxCalibratedMfuBf16;
}

namespace {
/// The categories of a step and what each rests on. Confidence is by what
/// the figure is made of: counted FLOPs and schedule arithmetic (high),
/// efficiencies fitted on the stack's published runs (medium), bandwidth
/// models with overlap fractions that are priors or fitted on few runs
/// (low).
struct Category {
  const char *name;
  double TimeBreakdown::*field;
  const char *confidence;
  const char *basis;
};

const Category kCategories[] = {
    {"compute", &TimeBreakdown::compute, "medium",
     "GEMM and attention efficiency fitted on the stack's published runs; other "
     "GEMM shapes (tp, micro-batch) are extrapolated"},
    {"recompute", &TimeBreakdown::recompute, "high",
     "the FLOPs recomputed, at the same efficiency as the compute"},
    {"bubble", &TimeBreakdown::bubble, "high",
     "the pipeline schedule's arithmetic on the stage times"},
    {"exposed tp comm", &TimeBreakdown::tpComm, "low",
     "NVLink bandwidth model and the stack's TP overlap fraction"},
    {"exposed cp comm", &TimeBreakdown::cpComm, "low",
     "bandwidth model and ring exchange hidden behind each block's attention"},
    {"exposed ep comm", &TimeBreakdown::epComm, "low",
     "all-to-all bandwidth model and an overlap fraction fitted on 4 MoE runs"},
    {"exposed pp comm", &TimeBreakdown::ppComm, "low",
     "point-to-point latency and bandwidth model"},
    {"exposed dp comm", &TimeBreakdown::dpComm, "low",
     "network bandwidth model and bucketed overlap with the backward"},
    {"optimizer", &TimeBreakdown::optimizer, "medium",
     "memory-bound AdamW at the GPU's bandwidth (and host transfers when offloaded)"},
};

void change(std::vector<std::string> &out, const char *name, int64_t a, int64_t b) {
  if (a != b)
    out.push_back(llvm::formatv("{0} {1} -> {2}", name, a, b).str());
}
} // namespace

RecipeComparison llmopt::planner::compareWithRecipe(const PlanEval &recipe, const PlanEval &best,
                                                    const JobSpec &job) {
  RecipeComparison r;
  r.best = best;
  const double step = recipe.time.step;
  r.gain = step > 0 ? 1 - best.time.step / step : 0;
  for (const Category &c : kCategories) {
    double a = recipe.time.*c.field, b = best.time.*c.field;
    if (std::abs(a - b) > 1e-3 * step)
      r.items.push_back({c.name, a, b, c.confidence, c.basis});
  }
  std::stable_sort(r.items.begin(), r.items.end(), [](const GainItem &x, const GainItem &y) {
    return x.recipeSeconds - x.bestSeconds > y.recipeSeconds - y.bestSeconds;
  });

  const ParallelConfig &a = recipe.config, &b = best.config;
  change(r.changes, "dp", a.dp, b.dp);
  change(r.changes, "tp", a.tp, b.tp);
  change(r.changes, "pp", a.pp, b.pp);
  change(r.changes, "vpp", a.vpp, b.vpp);
  change(r.changes, "cp", a.cp, b.cp);
  change(r.changes, "ep", a.ep, b.ep);
  change(r.changes, "zero", a.zero, b.zero);
  change(r.changes, "micro_batch", a.microBatch, b.microBatch);
  if (a.sp != b.sp)
    r.changes.push_back(b.sp ? "sp on" : "sp off");
  if (a.offloadOptimizer != b.offloadOptimizer)
    r.changes.push_back(b.offloadOptimizer ? "offload on" : "offload off");
  if (a.recompute != b.recompute)
    r.changes.push_back(
        llvm::formatv("recompute {0} -> {1}", toString(a.recompute), toString(b.recompute)));
  if (a.schedule != b.schedule)
    r.changes.push_back(
        llvm::formatv("schedule {0} -> {1}", toString(a.schedule), toString(b.schedule)));
  if (a.ppInsideDp != b.ppInsideDp)
    r.changes.push_back("placement " + a.placement() + " -> " + b.placement());

  // How sure: the gain against the model's error on the stack's published
  // runs, one step less sure when most of it is exposed communication (the
  // least sure categories).
  const StackProfile &st = job.stack;
  const double g = r.gain, total = step - best.time.step;
  double lowGain = 0;
  for (const GainItem &i : r.items)
    if (i.confidence == "low")
      lowGain += i.recipeSeconds - i.bestSeconds;
  bool mostlyComm = total > 0 && lowGain > 0.5 * total;
  std::string commNote =
      mostlyComm ? llvm::formatv("; {0:p} of it is exposed communication, the least sure "
                                 "part of the model",
                                 std::min(1.0, lowGain / total))
                       .str()
                 : std::string();
  if (r.changes.empty() || g <= kEquivalentTolerance) {
    r.verdict = llvm::formatv("the search finds nothing faster than the recipe by more "
                              "than {0}%: keep it",
                              100 * kEquivalentTolerance);
    return r;
  }
  if (st.calibratedMeanError <= 0) {
    r.verdict = llvm::formatv("{0:p} faster as predicted, but stack {1} is not calibrated "
                              "on published runs: a hypothesis to measure{2}",
                              g, st.name, commNote);
    return r;
  }
  // 0: within the mean error, 1: within the largest, 2: beyond it.
  int level = g < st.calibratedMeanError ? 0 : g < st.calibratedMaxError ? 1 : 2;
  if (mostlyComm && level > 0)
    --level;
  static const char *const words[] = {"not a sure gain: measure both before switching",
                                      "a likely gain", "a sure gain"};
  r.verdict =
      llvm::formatv("{0:p} faster; the model's error on the stack's published "
                    "runs is {1:p} mean, {2:p} at most: {3}{4}",
                    g, st.calibratedMeanError, st.calibratedMaxError, words[level], commNote);
  return r;
}
