//===- Timeline.cpp - the pipeline schedule laid out in time --------------===//
//
// Each stage runs its forward and backward passes in the order its schedule
// prescribes; a pass starts when the stage is free and its input has arrived.
// Laying the passes out this way shows the fill and drain bubbles and the
// stalls an unbalanced stage causes, which the step time only sums up.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Planner/Planner.h"

#include "llmopt-runtime/schedule.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace llmopt;
using namespace llmopt::cost;
using namespace llmopt::planner;

namespace {
using schedule::Pass;

/// The order in which stage `s` of `pp` runs its passes: the schedule the
/// plan emitter writes into the plan and the runtime follows.
std::vector<Pass> stageOrder(Schedule kind, int s, int pp, int vpp, int64_t m) {
  schedule::Kind k = kind == Schedule::Interleaved ? schedule::Kind::Interleaved
                     : kind == Schedule::GPipe     ? schedule::Kind::GPipe
                                                   : schedule::Kind::OneFOneB;
  return schedule::stageOrder(k, m, pp, s, kind == Schedule::Interleaved ? vpp : 1);
}
} // namespace

bool llmopt::planner::simulatePipeline(Schedule schedule, int chunks, int64_t microBatches,
                                       const std::vector<double> &fwd,
                                       const std::vector<double> &bwd, PipelineTimeline &out,
                                       std::string &error) {
  out = PipelineTimeline();
  const int pp = int(fwd.size());
  if (pp == 0 || bwd.size() != fwd.size()) {
    error = "a pipeline needs forward and backward times for each of its stages";
    return false;
  }
  if (microBatches <= 0) {
    error = "a pipeline needs at least one micro-batch";
    return false;
  }
  const int vpp = schedule == Schedule::Interleaved ? chunks : 1;
  if (vpp < 1) {
    error = "the interleaved schedule needs at least one chunk per stage";
    return false;
  }
  if (schedule == Schedule::Interleaved && microBatches % pp) {
    error = llvm::formatv("the interleaved schedule needs a multiple of the {0} "
                          "stages as micro-batch count, got {1}",
                          pp, microBatches);
    return false;
  }
  if (int64_t(pp) * vpp * microBatches * 2 > (int64_t(1) << 24)) {
    error = "the pipeline has too many passes to lay out";
    return false;
  }
  for (size_t s = 0; s < fwd.size(); ++s)
    if (!(fwd[s] >= 0) || !(bwd[s] >= 0) || !std::isfinite(fwd[s] + bwd[s])) {
      error = llvm::formatv("stage {0} has no valid forward and backward time", s);
      return false;
    }

  out.schedule = schedule;
  out.stages = pp;
  out.chunks = vpp;
  out.microBatches = out.totalMicroBatches = microBatches;

  const int V = pp * vpp; // virtual stages
  const int64_t m = microBatches;
  // End times of each pass, indexed [virtual stage][micro-batch]; < 0 while
  // not run.
  std::vector<double> fwdEnd(size_t(V) * m, -1), bwdEnd(size_t(V) * m, -1);
  auto at = [&](int v, int64_t mb) { return size_t(v) * m + mb; };

  std::vector<std::vector<Pass>> orders(pp);
  for (int s = 0; s < pp; ++s)
    orders[s] = stageOrder(schedule, s, pp, vpp, m);
  std::vector<size_t> next(pp, 0);
  std::vector<double> free(pp, 0);
  size_t remaining = 0;
  for (const std::vector<Pass> &o : orders)
    remaining += o.size();

  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < pp; ++s) {
      while (next[s] < orders[s].size()) {
        const Pass &p = orders[s][next[s]];
        const int v = int(p.chunk) * pp + s;
        double ready = 0;
        if (!p.backward) {
          if (v > 0) {
            ready = fwdEnd[at(v - 1, p.microBatch)];
            if (ready < 0)
              break;
          }
        } else {
          ready = v < V - 1 ? bwdEnd[at(v + 1, p.microBatch)] : fwdEnd[at(v, p.microBatch)];
          if (ready < 0)
            break;
        }
        PipelineBlock b;
        b.stage = s;
        b.chunk = int(p.chunk);
        b.microBatch = p.microBatch;
        b.backward = p.backward;
        b.start = std::max(free[s], ready);
        b.end = b.start + (p.backward ? bwd[s] : fwd[s]) / vpp;
        free[s] = b.end;
        (p.backward ? bwdEnd : fwdEnd)[at(v, p.microBatch)] = b.end;
        out.makespan = std::max(out.makespan, b.end);
        out.blocks.push_back(b);
        ++next[s];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      error = "the schedule deadlocks"; // not reachable for the orders above
      return false;
    }
  }
  // Per stage, in execution order.
  std::stable_sort(
      out.blocks.begin(), out.blocks.end(),
      [](const PipelineBlock &a, const PipelineBlock &b) { return a.stage < b.stage; });
  return true;
}

PipelineTimeline llmopt::planner::pipelineTimeline(const PlanEval &plan, int64_t maxMicroBatches) {
  const ParallelConfig &c = plan.config;
  std::vector<double> fwd, bwd;
  for (const StageMemory &s : plan.stages) {
    fwd.push_back(s.forwardSeconds);
    bwd.push_back(s.backwardSeconds);
  }
  int64_t m = c.numMicroBatches;
  if (maxMicroBatches > 0 && m > maxMicroBatches) {
    m = maxMicroBatches;
    // The steady state must be reached: at least two rounds of the pipeline,
    // and whole rounds when interleaving.
    m = std::max<int64_t>(m, 2 * int64_t(c.pp));
    if (c.schedule == Schedule::Interleaved)
      m = (m + c.pp - 1) / c.pp * c.pp;
    m = std::min(m, c.numMicroBatches);
  }
  PipelineTimeline t;
  std::string error;
  if (!simulatePipeline(c.pp > 1 ? c.schedule : Schedule::None, c.vpp, m, fwd, bwd, t, error))
    return PipelineTimeline();
  t.totalMicroBatches = c.numMicroBatches;
  return t;
}
