//===- plan_limits.h - bounds of the plan format ------------------*- C++ -*-===//
//
// Limits a plan.json must respect, defined once: the plan emitter refuses to
// write a plan past them and the runtime refuses to load one. Plain C++17 (the
// runtime builds without LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_PLAN_LIMITS_H
#define LLMOPT_RUNTIME_PLAN_LIMITS_H

#include <cstdint>

namespace llmopt::plan_limits {

/// The largest arena (or pipeline stash) one rank's program may ask for:
/// 1 TiB. A fixed bound rather than the cluster's GPU memory, because a
/// lowered plan does not name its cluster and the CPU backend runs it in host
/// memory; 1 TiB is over 5x the memory of the largest GPU today (192 GB),
/// so no plan that fits a device is refused, while a batch or sequence
/// length off by orders of magnitude is, before anything is allocated.
inline constexpr int64_t kMaxArenaBytes = int64_t(1) << 40;

} // namespace llmopt::plan_limits

#endif // LLMOPT_RUNTIME_PLAN_LIMITS_H
