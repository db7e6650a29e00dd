//===- Planner.cpp - search over parallel training plans ------------------===//

#include "llmopt/Planner/Planner.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

using namespace llmopt;
using namespace llmopt::cost;
using namespace llmopt::planner;

static constexpr double GiB = double(1ull << 30);

bool Constraints::parse(const std::string &text, Constraints &out, std::string &error) {
  out = Constraints();
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(text).split(items, ',', -1, /*KeepEmpty=*/false);
  static const char *intKeys[] = {"dp",
                                  "tp",
                                  "pp",
                                  "vpp",
                                  "cp",
                                  "ep",
                                  "zero",
                                  "shard",
                                  "recompute_layers",
                                  "micro_batch",
                                  "num_micro_batches"};
  for (llvm::StringRef item : items) {
    auto [key, value] = item.trim().split(':');
    key = key.trim();
    value = value.trim();
    if (value.empty()) {
      error = ("fix: '" + item.trim() + "' has no value: write key:value").str();
      return false;
    }
    if (llvm::is_contained(intKeys, key)) {
      int64_t v = 0;
      if (value.getAsInteger(10, v) || v < 0 || v > (int64_t(1) << 30) ||
          (v == 0 && key != "zero" && key != "shard" && key != "recompute_layers")) {
        error = ("fix: " + key + " must be a positive integer, got '" + value + "'").str();
        return false;
      }
      if (key == "zero" && v > 3) {
        error = ("fix: zero must be 0, 1, 2 or 3, got " + value).str();
        return false;
      }
      out.ints[key.str()] = v;
    } else if (key == "sp" || key == "offload") {
      std::optional<bool> b;
      if (value == "1" || value == "true" || value == "on")
        b = true;
      else if (value == "0" || value == "false" || value == "off")
        b = false;
      if (!b) {
        error = ("fix: " + key + " must be 0 or 1, got '" + value + "'").str();
        return false;
      }
      (key == "sp" ? out.sp : out.offload) = b;
    } else if (key == "recompute") {
      if (value == "none")
        out.recompute = Recompute::None;
      else if (value == "selective")
        out.recompute = Recompute::Selective;
      else if (value == "full")
        out.recompute = Recompute::Full;
      else if (value == "per-stage")
        out.recompute = Recompute::PerStage;
      else {
        error = ("fix: recompute must be none, selective, full or per-stage, got '" + value + "'")
                    .str();
        return false;
      }
    } else if (key == "schedule") {
      if (value == "gpipe")
        out.schedule = Schedule::GPipe;
      else if (value == "1f1b")
        out.schedule = Schedule::OneFOneB;
      else if (value == "interleaved" || value == "interleaved-1f1b")
        out.schedule = Schedule::Interleaved;
      else if (value == "none")
        out.schedule = Schedule::None;
      else {
        error = ("fix: schedule must be none, gpipe, 1f1b or interleaved-1f1b, got '" + value + "'")
                    .str();
        return false;
      }
    } else if (key == "placement") {
      if (value == "tp-cp-dp-pp")
        out.ppInsideDp = false;
      else if (value == "tp-cp-pp-dp")
        out.ppInsideDp = true;
      else {
        error = ("fix: placement must be tp-cp-dp-pp or tp-cp-pp-dp, got '" + value + "'").str();
        return false;
      }
    } else {
      error = ("fix: unknown key '" + key +
               "': use dp, tp, pp, vpp, cp, ep, sp, zero, shard, offload, recompute, "
               "recompute_layers, "
               "micro_batch, num_micro_batches, schedule or placement")
                  .str();
      return false;
    }
  }
  if (auto it = out.ints.find("recompute_layers"); it != out.ints.end() && it->second > 0 &&
                                                   out.recompute &&
                                                   *out.recompute != Recompute::Full) {
    error = std::string("fix: recompute_layers needs full recomputation (the first layers of "
                        "each chunk recomputed in full), got recompute:") +
            toString(*out.recompute);
    return false;
  }
  return true;
}

bool llmopt::planner::checkConstraints(const Constraints &fx, const ModelDesc &model,
                                       const JobSpec &job, std::string &error) {
  // The fixed values on an otherwise plain configuration (tp 1, pp 1, the
  // stack's first ZeRO stage, no recomputation): a refusal names a fixed
  // one, unless the plain configuration itself is refused (the job: fp8 on
  // a stack without it).
  const Constraints none;
  auto configFor = [&](const StackProfile &st, const Constraints &fx) {
    auto get = [&](const char *key, int dflt) {
      auto it = fx.ints.find(key);
      return it == fx.ints.end() ? dflt : int(it->second);
    };
    // ZeRO left open takes the stack's first stage (its first with hybrid
    // sharding when shard is fixed).
    ParallelConfig c;
    c.tp = get("tp", 1);
    c.pp = get("pp", 1);
    c.vpp = get("vpp", 1);
    c.cp = get("cp", 1);
    c.ep = get("ep", 1);
    c.shard = get("shard", 0);
    c.recomputeLayers = get("recompute_layers", 0);
    c.zero =
        get("zero", c.shard > 0 && !st.caps.hybridSharding.empty() ? st.caps.hybridSharding.front()
                    : (c.cp > 1 && st.caps.contextParallelShardsParameters) ||
                            (st.caps.tensorOrPipelineParallelNeedsFsdp && (c.tp > 1 || c.pp > 1))
                        ? 3
                        : st.caps.zeroStages.front());
    // Left open, sequence parallelism is on where tp > 1 and the stack has
    // it (some stacks need it, e.g. Megatron's MoE layers with tp).
    c.sp = fx.sp.value_or(c.tp > 1 && st.caps.sequenceParallel);
    c.offloadOptimizer = fx.offload.value_or(false);
    c.recompute = fx.recompute.value_or(Recompute::None);
    // Left open on a stack that always recomputes: full where it has it,
    // else selective (a profile's own list may hold either).
    if (!fx.recompute && !st.hasRecompute("none"))
      c.recompute = st.hasRecompute("full") || !st.hasRecompute("selective") ? Recompute::Full
                                                                             : Recompute::Selective;
    if (c.recomputeLayers > 0)
      c.recompute = Recompute::Full;
    c.schedule = fx.schedule.value_or(c.vpp > 1  ? Schedule::Interleaved
                                      : c.pp > 1 ? Schedule::OneFOneB
                                                 : Schedule::None);
    if (c.pp > 1 && !fx.schedule && c.vpp == 1 && !st.caps.schedules.empty() &&
        !st.hasSchedule("1f1b"))
      c.schedule = st.hasSchedule("gpipe") ? Schedule::GPipe : Schedule::Interleaved;
    return c;
  };
  const StackProfile &st = job.stack;
  std::string detail;
  if (checkStackRules(model, job, configFor(st, fx), detail) == RejectReason::None)
    return true;
  // Refused: the job's rule where the plain configuration is refused too
  // (fp8 on a stack without it), else a fixed value's.
  std::string jobDetail;
  bool jobRefused =
      checkStackRules(model, job, configFor(st, none), jobDetail) != RejectReason::None;
  if (jobRefused)
    detail = jobDetail;
  // The stacks that run it with the fixed values (else, for the job's rule,
  // plainly).
  auto runners = [&](const Constraints &asked) {
    std::vector<std::string> names;
    for (const std::string &n : stackNames()) {
      if (n == st.name)
        continue;
      JobSpec other = job;
      std::string e;
      if (getStackProfile(n, other.stack, e) &&
          checkStackRules(model, other, configFor(other.stack, asked), e) == RejectReason::None)
        names.push_back(n);
    }
    return names;
  };
  std::vector<std::string> others = runners(fx);
  if (others.empty() && jobRefused)
    others = runners(none);
  std::string change = jobRefused ? "change the job" : "change fix=";
  error = std::string(jobRefused ? "" : "fix: ") + detail +
          (others.empty() ? "; " + change
                          : "; " + change + ", or plan for a stack that runs it: stack=" +
                                llvm::join(others, " or stack="));
  return false;
}

std::string llmopt::planner::describe(const ParallelConfig &c) {
  std::string s = llvm::formatv("dp{0} tp{1} pp{2}", c.dp, c.tp, c.pp);
  if (c.vpp > 1)
    s += llvm::formatv(" vpp{0}", c.vpp).str();
  if (c.cp > 1)
    s += llvm::formatv(" cp{0}", c.cp).str();
  if (c.ep > 1)
    s += llvm::formatv(" ep{0}", c.ep).str();
  if (c.sp)
    s += " sp";
  s += llvm::formatv(" zero{0}", c.zero).str();
  if (c.shard > 0)
    s += llvm::formatv(" shard{0}", c.shard).str();
  if (c.offloadOptimizer)
    s += " offload";
  s += std::string(" rc:") + toString(c.recompute);
  if (c.recomputeLayers > 0)
    s += llvm::formatv("({0}/chunk)", c.recomputeLayers).str();
  if (!c.stageRecompute.empty()) {
    s += "(";
    for (size_t i = 0; i < c.stageRecompute.size(); ++i)
      s += (i ? "," : "") + std::string(toString(c.stageRecompute[i])).substr(0, 4);
    s += ")";
  }
  if (c.numMicroBatches > 0)
    s += llvm::formatv(" mb{0}x{1}", c.microBatch, c.numMicroBatches).str();
  else
    s += llvm::formatv(" mb{0}", c.microBatch).str();
  if (c.pp > 1)
    s += std::string(" ") + toString(c.schedule);
  if (c.ppInsideDp)
    s += " pp-inside-dp";
  return s;
}

static std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i)
        d.push_back(n / i);
    }
  std::sort(d.begin(), d.end());
  return d;
}

std::string llmopt::planner::familyKey(const ParallelConfig &c) {
  ParallelConfig k = c;
  k.vpp = 1;
  k.schedule = Schedule::None;
  k.ppInsideDp = false;
  k.stageLayers.clear();
  return describe(k);
}

namespace {
/// How much machinery a plan needs; among equally fast plans the simpler one
/// is easier to run and to debug.
std::tuple<int, int, int, int, int, int, int, int64_t> complexity(const ParallelConfig &c) {
  return {c.offloadOptimizer, c.cp,         c.pp * c.vpp, c.tp, c.ep, c.zero,
          int(c.recompute),   -c.microBatch};
}

bool simplerFirst(const PlanEval &a, const PlanEval &b) {
  auto ca = complexity(a.config), cb = complexity(b.config);
  if (ca != cb)
    return ca < cb;
  return describe(a.config) < describe(b.config);
}

/// Orders plans best first: by step time, where runs of plans within
/// kTieTolerance of the run's fastest are ties ordered simpler first. (A
/// comparator that calls near times equal is not a strict weak order;
/// ordering by time first and then each run of ties is.)
void rank(std::vector<PlanEval> &plans) {
  std::sort(plans.begin(), plans.end(), [](const PlanEval &a, const PlanEval &b) {
    if (a.time.step != b.time.step)
      return a.time.step < b.time.step;
    return simplerFirst(a, b);
  });
  for (size_t i = 0; i < plans.size();) {
    size_t j = i + 1;
    while (j < plans.size() && plans[j].time.step <= plans[i].time.step * (1 + kTieTolerance))
      ++j;
    std::sort(plans.begin() + i, plans.begin() + j, simplerFirst);
    i = j;
  }
}

/// Ranks `plans` and drops what cannot be among the first `k` families or
/// their equivalents: plans slower than the k-th family's fastest by more
/// than kEquivalentTolerance.
void trim(std::vector<PlanEval> &plans, int k) {
  rank(plans);
  std::map<std::string, bool> seen;
  size_t cut = plans.size();
  for (size_t i = 0; i < plans.size(); ++i) {
    if (!seen.emplace(familyKey(plans[i].config), true).second)
      continue;
    if (int(seen.size()) == k) {
      double limit = plans[i].time.step * (1 + kEquivalentTolerance);
      cut = i + 1;
      while (cut < plans.size() && plans[cut].time.step <= limit)
        ++cut;
      break;
    }
  }
  plans.resize(cut);
}
} // namespace

SearchResult llmopt::planner::search(const ModelDesc &model, const ClusterSpec &cluster,
                                     const JobSpec &job, const SearchOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result;
  const Constraints &fx = opts.fixed;
  auto fixedInt = [&](const char *key) -> std::optional<int64_t> {
    auto it = fx.ints.find(key);
    if (it == fx.ints.end())
      return std::nullopt;
    return it->second;
  };
  auto choices = [&](const char *key, std::vector<int64_t> all) {
    if (std::optional<int64_t> v = fixedInt(key))
      return std::vector<int64_t>{*v};
    return all;
  };

  const int64_t gpus = cluster.totalGpus();
  const int layers = static_cast<int>(model.layers.size());
  bool moe = false;
  int64_t maxExperts = 0;
  for (const LayerDesc &l : model.layers)
    if (l.isMoE()) {
      moe = true;
      maxExperts = std::max(maxExperts, l.experts);
    }

  // Progress: the share of outer TP x CP x PP choices done, reported about
  // every `progressInterval` seconds (the clock is read every 256
  // candidates).
  double fraction = 0;
  double lastProgress = 0;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto progress = [&](bool done) {
    SearchProgress p;
    p.fraction = done ? 1.0 : fraction;
    p.evaluated = result.evaluated;
    p.feasible = result.feasible;
    p.seconds = elapsed();
    p.done = done;
    lastProgress = p.seconds;
    opts.progress(p);
  };
  auto tick = [&] {
    if (opts.progress && (result.evaluated & 255) == 0 &&
        elapsed() - lastProgress >= opts.progressInterval)
      progress(false);
  };

  if (opts.progress)
    progress(/*done=*/false); // the start, so that a display can open at once

  std::vector<PlanEval> kept;
  size_t trimAt = size_t(8 * std::max(1, opts.topK) + 64);
  // Rejections by reason, counted in an array: most candidates of a big
  // search are rejected, so the example (a formatted description) is built
  // only when it is kept: the first of its reason, or for out-of-memory the
  // candidate closest to fitting.
  std::array<Rejection, size_t(RejectReason::Invalid) + 1> rejections;
  auto reject = [&](const PlanEval &e, int64_t n = 1) {
    Rejection &r = rejections[size_t(e.reason)];
    r.count += n;
    if (e.reason == RejectReason::OutOfMemory) {
      double excess = e.peak.total() - cluster.gpu.hbmBytes;
      if (r.count == n || excess < r.excessBytes) {
        r.excessBytes = excess;
        r.example = e.detail + " (" + describe(e.config) + ")";
      }
    } else if (r.count == n) {
      r.example = e.detail + " (" + describe(e.config) + ")";
    }
  };
  auto consider = [&](PlanEval &&e) {
    ++result.evaluated;
    tick();
    if (!e.feasible()) {
      reject(e);
      return;
    }
    ++result.feasible;
    kept.push_back(std::move(e));
    // Keep the list short: rank and trim now and then (what is kept may
    // grow when many plans tie with the k-th family).
    if (kept.size() >= trimAt) {
      trim(kept, std::max(1, opts.topK));
      trimAt = std::max(trimAt, 2 * kept.size());
    }
  };

  // Layer tables depend only on these; many pipeline, ZeRO and schedule
  // choices share one.
  using TableKey = std::tuple<int, int, int, int, int64_t, int, int, bool>;
  std::map<TableKey, LayerTable> tableCache;
  auto tableFor = [&](ParallelConfig cfg, Recompute rc) -> const LayerTable * {
    cfg.recompute = rc;
    TableKey key{cfg.tp,
                 cfg.cp,
                 int(cfg.sp),
                 cfg.ep,
                 cfg.microBatch,
                 int(rc),
                 expertGroupPerNode(cluster, job, cfg),
                 expertsStayWhole(job, cfg)};
    auto it = tableCache.find(key);
    if (it == tableCache.end())
      it = tableCache.emplace(key, buildLayerTable(model, cluster, job, cfg)).first;
    return &it->second;
  };

  std::vector<int> shards;
  using FitKey = std::tuple<int64_t, int, int, bool, int, int, bool>;
  std::set<FitKey> noneFits;
  std::vector<int64_t> mbChoices;
  for (int64_t mb = 1; mb <= opts.maxMicroBatch; mb *= 2)
    mbChoices.push_back(mb);

  std::vector<int64_t> tps;
  for (int64_t d : divisors(gpus))
    if (d <= cluster.gpusPerNode || fixedInt("tp"))
      tps.push_back(d);

  const std::vector<int64_t> tpChoices = choices("tp", tps);
  for (size_t iTp = 0; iTp < tpChoices.size(); ++iTp) {
    const int64_t tp = tpChoices[iTp];
    // A fixed degree that cannot lay out is a rejection with its reason,
    // never a silent "0 tried".
    auto indivisible = [&](const char *what, int64_t degree, int64_t of, int64_t cp = 1,
                           int64_t pp = 1) {
      PlanEval e;
      e.config.tp = int(tp);
      e.config.cp = int(cp);
      e.config.pp = int(pp);
      e.reason = RejectReason::GpuCountMismatch;
      e.detail =
          llvm::formatv("{0} {1} does not divide the {2} GPUs left for it", what, degree, of);
      ++result.evaluated;
      reject(e);
    };
    if (gpus % tp) {
      indivisible("tp", tp, gpus);
      continue;
    }
    std::vector<int64_t> cps;
    for (int64_t d : divisors(gpus / tp))
      if (d == 1 || job.seqLen / d >= 256) // chunks of at least 256 tokens
        cps.push_back(d);
    const std::vector<int64_t> cpChoices = choices("cp", cps);
    for (size_t iCp = 0; iCp < cpChoices.size(); ++iCp) {
      const int64_t cp = cpChoices[iCp];
      if ((gpus / tp) % cp) {
        indivisible("cp", cp, gpus / tp, cp);
        continue;
      }
      std::vector<int64_t> pps;
      for (int64_t d : divisors(gpus / (tp * cp)))
        if (d <= layers)
          pps.push_back(d);
      const std::vector<int64_t> ppChoices = choices("pp", pps);
      for (size_t iPp = 0; iPp < ppChoices.size(); ++iPp) {
        const int64_t pp = ppChoices[iPp];
        fraction = (double(iTp) + (double(iCp) + double(iPp) / double(ppChoices.size())) /
                                      double(cpChoices.size())) /
                   double(tpChoices.size());
        if ((gpus / (tp * cp)) % pp) {
          indivisible("pp", pp, gpus / (tp * cp), cp, pp);
          continue;
        }
        int64_t dp = gpus / (tp * cp * pp);
        if (std::optional<int64_t> fdp = fixedInt("dp"); fdp && *fdp != dp) {
          ParallelConfig c;
          c.dp = int(*fdp), c.tp = int(tp), c.cp = int(cp), c.pp = int(pp);
          PlanEval e;
          e.config = c;
          e.reason = RejectReason::GpuCountMismatch;
          e.detail = llvm::formatv("dp {0} x tp {1} x pp {2} x cp {3} = {4} but the "
                                   "cluster has {5} GPUs",
                                   *fdp, tp, pp, cp, *fdp * tp * pp * cp, gpus);
          ++result.evaluated;
          reject(e);
          continue;
        }
        std::vector<int64_t> eps{1};
        if (moe) {
          eps.clear();
          for (int64_t d : divisors(dp * cp))
            if (d <= maxExperts)
              eps.push_back(d);
        }
        for (int64_t ep : choices("ep", eps)) {
          for (int spi = 0; spi < 2; ++spi) {
            bool sp = spi == 1;
            if (fx.sp ? *fx.sp != sp : (sp && tp == 1))
              continue;
            // Configurations that fit without recomputation: partial
            // recomputation cannot beat them (rc none comes first).
            noneFits.clear();
            for (Recompute rc :
                 {Recompute::None, Recompute::Selective, Recompute::Full, Recompute::PerStage}) {
              if (fx.recompute && *fx.recompute != rc)
                continue;
              if (rc == Recompute::PerStage && pp == 1 && !fx.recompute)
                continue; // one stage: the uniform choices cover it
              if (fixedInt("recompute_layers").value_or(0) > 0 && rc != Recompute::Full)
                continue; // partial recomputation is full recomputation of some
              for (int64_t mb : choices("micro_batch", mbChoices)) {
                ParallelConfig base;
                base.dp = int(dp), base.tp = int(tp), base.pp = int(pp), base.cp = int(cp);
                base.ep = int(ep), base.sp = sp, base.recompute = rc, base.microBatch = mb;
                if (rc == Recompute::Full)
                  base.recomputeLayers = int(fixedInt("recompute_layers").value_or(0));
                base.numMicroBatches =
                    job.globalBatch % (dp * mb) ? 0 : job.globalBatch / (dp * mb);
                if (std::optional<int64_t> fm = fixedInt("num_micro_batches"))
                  if (base.numMicroBatches != *fm) {
                    if (base.numMicroBatches == 0)
                      base.numMicroBatches = *fm;
                    else
                      continue;
                  }
                // Schedules and virtual stages.
                std::vector<std::pair<Schedule, int>> scheds;
                if (pp == 1) {
                  scheds.push_back({Schedule::None, 1});
                } else {
                  scheds.push_back({Schedule::OneFOneB, 1});
                  scheds.push_back({Schedule::GPipe, 1});
                  // Any vpp that lays the layers out (evenly, or as the
                  // stack lays uneven interleaved stages), up to the
                  // stack's limit and the search's.
                  int maxV = layers / int(pp);
                  if (opts.maxVirtualStages > 0)
                    maxV = std::min(maxV, opts.maxVirtualStages);
                  if (job.stack.caps.maxVirtualStages > 0)
                    maxV = std::min(maxV, job.stack.caps.maxVirtualStages);
                  if (std::optional<int64_t> fv = fixedInt("vpp"); fv && *fv > 1) {
                    scheds.push_back({Schedule::Interleaved, int(*fv)});
                  } else {
                    for (int v = 2; v <= maxV; ++v)
                      if (layers % (pp * v) == 0 ||
                          (job.stack.caps.unevenInterleaving && (layers + 2) % (pp * v) == 0))
                        scheds.push_back({Schedule::Interleaved, v});
                  }
                }
                bool anyPlacement = pp > 1 && dp > 1;
                for (auto [sched, vpp] : scheds) {
                  if (fx.schedule && *fx.schedule != sched)
                    continue;
                  if (std::optional<int64_t> fv = fixedInt("vpp"); fv && *fv != vpp)
                    continue;
                  for (int placement = 0; placement < (anyPlacement ? 2 : 1); ++placement) {
                    bool ppInside = placement == 1;
                    if (fx.ppInsideDp && *fx.ppInsideDp != ppInside)
                      continue;
                    ParallelConfig cfg = base;
                    cfg.schedule = sched;
                    cfg.vpp = vpp;
                    cfg.ppInsideDp = ppInside;
                    // Rules that do not depend on ZeRO are checked once (with
                    // a ZeRO stage the stack runs with this cp).
                    cfg.zero = (cp > 1 && job.stack.caps.contextParallelShardsParameters) ||
                                       (job.stack.caps.tensorOrPipelineParallelNeedsFsdp &&
                                        (tp > 1 || pp > 1))
                                   ? 3
                                   : 0;
                    RejectReason r = checkRules(model, cluster, job, cfg);
                    if (r != RejectReason::None) {
                      std::string detail;
                      if (rejections[size_t(r)].count == 0)
                        checkRules(model, cluster, job, cfg, detail);
                      // One rejection for each ZeRO stage it would have
                      // tried, the first as the example.
                      PlanEval e;
                      e.config = cfg;
                      e.config.zero = fixedInt("zero") ? int(*fixedInt("zero")) : cfg.zero;
                      e.reason = r;
                      e.detail = std::move(detail);
                      int64_t n = fixedInt("zero") ? 1 : 4;
                      result.evaluated += n;
                      tick();
                      reject(e, n);
                      continue;
                    }
                    std::array<const LayerTable *, 3> tables = {nullptr, nullptr, nullptr};
                    // Partial recomputation (the first N layers of each
                    // chunk) is tried beside full recomputation that fits,
                    // where the stack runs it and recompute is not fixed: a
                    // quarter, half and three quarters of a chunk's layers.
                    const bool partialToo = rc == Recompute::Full && !fx.recompute &&
                                            !fixedInt("recompute_layers") &&
                                            job.stack.hasRecompute("partial");
                    std::vector<int> partials;
                    if (partialToo) {
                      int chunk = layers / int(pp * vpp);
                      for (int q = 1; q <= 3; ++q)
                        if (int n = chunk * q / 4;
                            n >= 1 && n < chunk && (partials.empty() || partials.back() != n))
                          partials.push_back(n);
                    }
                    if (rc == Recompute::PerStage) {
                      for (int lvl = 0; lvl < 3; ++lvl)
                        tables[lvl] = tableFor(cfg, Recompute(lvl));
                    } else {
                      tables[int(rc)] = tableFor(cfg, rc);
                      if (cfg.recomputeLayers > 0 || !partials.empty())
                        tables[0] = tableFor(cfg, Recompute::None);
                    }
                    for (int z = 0; z <= 3; ++z) {
                      if (std::optional<int64_t> fz = fixedInt("zero"); fz && *fz != z)
                        continue;
                      if (z > 0 && dp * cp == 1 && !fixedInt("zero"))
                        continue; // nothing to shard
                      cfg.zero = z;
                      // Hybrid sharding: ZeRO over all of dp x cp (0), or
                      // over groups of the dp x cp ranks one node holds
                      // times 1, 2 and 4, replicated across the groups.
                      shards.assign(1, 0);
                      if (std::optional<int64_t> fs = fixedInt("shard")) {
                        shards.assign(1, *fs == dp * cp ? 0 : int(*fs));
                      } else if (job.stack.caps.hasHybridSharding(z)) {
                        int64_t base = std::max<int64_t>(
                            2, std::min<int64_t>(dp * cp, cluster.gpusPerNode / tp));
                        for (int64_t s = base; s < dp * cp && s <= base; s *= 2)
                          if ((dp * cp) % s == 0)
                            shards.push_back(int(s));
                      }
                      // Hybrid sharding trades memory for data-parallel
                      // communication: it is tried only where the plan
                      // sharded over all ranks fits and exposes some.
                      bool tryHybrid = fixedInt("shard").has_value();
                      for (int shard : shards) {
                        if (shard > 0 && !tryHybrid)
                          continue;
                        cfg.shard = shard;
                        for (int off = 0; off < 2; ++off) {
                          if (fx.offload ? *fx.offload != (off == 1) : false)
                            continue;
                          if (off && z == 0)
                            continue;
                          cfg.offloadOptimizer = off == 1;
                          // The stack's ZeRO and offload rules, checked here
                          // without building a rejection message per
                          // candidate (most of a big search's rejections).
                          if (!job.stack.hasZero(z, /*withPP=*/pp > 1) ||
                              !job.stack.caps.runsZeroWithCP(z, int(cp)) ||
                              (cfg.offloadOptimizer && !job.stack.caps.optimizerOffload) ||
                              (shard > 0 && !job.stack.caps.hasHybridSharding(z))) {
                            ++result.evaluated;
                            tick();
                            Rejection &rj = rejections[size_t(RejectReason::NotSupportedByStack)];
                            if (rj.count == 0) {
                              PlanEval e;
                              e.config = cfg;
                              e.reason = checkStackRules(model, job, cfg, e.detail);
                              reject(e);
                            } else {
                              ++rj.count;
                            }
                            if (!off && !fx.offload)
                              break; // as a rejected candidate ends the offload loop
                            continue;
                          }
                          PlanEval e = evaluate(model, cluster, job, cfg, tables);
                          bool oom = e.reason == RejectReason::OutOfMemory;
                          if (shard == 0 && !off && e.feasible() &&
                              e.time.dpComm > 1e-3 * e.time.step)
                            tryHybrid = true;
                          // Per-stage recomputation that chose one level for
                          // every stage is the uniform plan, searched already.
                          if (rc == Recompute::PerStage && !fx.recompute &&
                              !e.config.stageRecompute.empty() &&
                              std::all_of(e.config.stageRecompute.begin(),
                                          e.config.stageRecompute.end(), [&](Recompute r) {
                                            return r == e.config.stageRecompute.front();
                                          })) {
                            if (!off && !oom)
                              break;
                            continue;
                          }
                          FitKey fit{mb, int(sched), vpp, ppInside, z, shard, off == 1};
                          if (rc == Recompute::None && e.feasible())
                            noneFits.insert(fit);
                          bool fullFits = !partials.empty() && e.feasible() && !noneFits.count(fit);
                          consider(std::move(e));
                          // Recomputing fewer layers is faster and needs more
                          // memory: tried where recomputing all of them fits
                          // and none does not, fewest first, up to the first
                          // that fits (more would be slower).
                          if (fullFits)
                            for (int n : partials) {
                              ParallelConfig part = cfg;
                              part.recomputeLayers = n;
                              PlanEval pe = evaluate(model, cluster, job, part, tables);
                              bool fits = pe.feasible();
                              consider(std::move(pe));
                              if (fits)
                                break;
                            }
                          // Offload only helps what does not fit otherwise.
                          if (!off && !oom && !fx.offload)
                            break;
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }

  for (size_t i = 0; i < rejections.size(); ++i)
    if (rejections[i].count > 0)
      result.rejected[toString(RejectReason(i))] = std::move(rejections[i]);

  // One row per family, the fastest layout first, the others within
  // kEquivalentTolerance listed under it; slower layouts of a family that is
  // already listed are dropped.
  trim(kept, std::max(1, opts.topK));
  std::map<std::string, size_t> row;
  for (PlanEval &e : kept) {
    auto [it, fresh] = row.emplace(familyKey(e.config), result.plans.size());
    if (fresh) {
      if (int(result.plans.size()) == std::max(1, opts.topK))
        continue;
      result.plans.push_back(std::move(e));
      result.equivalents.emplace_back();
      continue;
    }
    if (it->second >= result.plans.size())
      continue;
    const PlanEval &first = result.plans[it->second];
    if (e.time.step <= first.time.step * (1 + kEquivalentTolerance))
      result.equivalents[it->second].push_back({e.config, e.time.step, e.peak.total()});
  }
  result.seconds = elapsed();
  if (opts.progress)
    progress(/*done=*/true);
  return result;
}
