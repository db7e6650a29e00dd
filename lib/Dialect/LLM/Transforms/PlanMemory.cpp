//===- PlanMemory.cpp - static memory planning by liveness ----------------===//
//
// Greedy by size (largest first), each buffer at the lowest aligned offset
// free over its whole lifetime: the strategy TFLite's and XLA's static
// planners use, near-optimal on the long-lived activation / short-lived
// temporary mix of a training step.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Support/Output.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace llmopt::llm {
#define GEN_PASS_DEF_PLANMEMORY
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

struct Buffer {
  Value value;
  int64_t bytes = 0;
  int64_t first = 0, last = 0; // op positions, inclusive
  int64_t offset = -1;
  /// Pipeline stage (llm.stage) owning the buffer; each stage has its own
  /// arena. -1: the per-step tail every stage runs; -2: no stages.
  int64_t stage = -2;
  /// Pipeline stages: read in another part of the schedule (another model
  /// chunk, or the backward of the forward that made it), so kept in the
  /// stash of its micro-batch rather than in the arena its stage's parts
  /// share.
  bool stash = false;
};

/// Whether two buffers live in the same arena.
bool sameArena(const Buffer &a, const Buffer &b) {
  return a.stash == b.stash && (a.stage == b.stage || a.stage == -1 || b.stage == -1);
}

/// Arena offsets in use, as disjoint [lo, hi) ranges that do not touch.
/// Offsets are aligned, so a buffer that holds [offset, offset + bytes)
/// keeps any other from starting before alignTo(offset + bytes): it is
/// recorded as [offset, alignTo(offset + bytes)), and a stack of buffers
/// placed end to end becomes one range.
class OffsetRanges {
public:
  void insert(int64_t lo, int64_t hi) {
    auto it = ranges.upper_bound(lo);
    if (it != ranges.begin() && std::prev(it)->second >= lo) {
      --it;
      lo = it->first;
      hi = std::max(hi, it->second);
      it = ranges.erase(it);
    }
    for (; it != ranges.end() && it->first <= hi; it = ranges.erase(it))
      hi = std::max(hi, it->second);
    ranges.emplace_hint(it, lo, hi);
  }

  /// The end of the range that [offset, offset + bytes) overlaps (bytes >
  /// 0), or -1 when it overlaps none.
  int64_t blockedUntil(int64_t offset, int64_t bytes) const {
    auto it = ranges.lower_bound(offset + bytes);
    if (it == ranges.begin())
      return -1;
    --it;
    return it->second > offset ? it->second : -1;
  }

private:
  std::map<int64_t, int64_t> ranges;
};

/// The placed buffers of one arena by lifetime: a segment tree over op
/// positions. A buffer alive over [first, last] is recorded in the nodes
/// that tile that range (`cover`) and in those nodes and all their ancestors
/// (`within`). The buffers alive at some position of [first, last] are then
/// exactly those in the `within` ranges of the nodes tiling it and the
/// `cover` ranges of their ancestors: O(log n) sets, each a few merged
/// ranges, where the placed buffers that live at the same time as a
/// training step's middle number O(layers).
class Occupancy {
public:
  Occupancy(const Buffer &arena, int64_t positions) : arena(arena) {
    while (leaves < positions)
      leaves *= 2;
  }

  const Buffer &getArena() const { return arena; }

  void insert(const Buffer &b, int64_t lo, int64_t hi) {
    SmallVector<unsigned, 64> seen;
    tile(b.first, b.last, [&](unsigned node) {
      cover[node].insert(lo, hi);
      for (unsigned x = node; x && !llvm::is_contained(seen, x); x /= 2) {
        seen.push_back(x);
        within[x].insert(lo, hi);
      }
    });
  }

  /// Appends the sets holding the buffers alive at some position of
  /// [first, last] (each set may come more than once).
  void collect(int64_t first, int64_t last, SmallVectorImpl<const OffsetRanges *> &sets) const {
    SmallVector<unsigned, 64> seen;
    tile(first, last, [&](unsigned node) {
      if (auto it = within.find(node); it != within.end())
        sets.push_back(&it->second);
      for (unsigned x = node / 2; x && !llvm::is_contained(seen, x); x /= 2) {
        seen.push_back(x);
        if (auto it = cover.find(x); it != cover.end())
          sets.push_back(&it->second);
      }
    });
  }

private:
  /// Calls `fn` on the nodes that tile [first, last] (the bottom-up walk of
  /// an iterative segment tree; node 1 is the root, leaf p is leaves + p).
  template <typename Fn> void tile(int64_t first, int64_t last, Fn fn) const {
    for (auto lo = unsigned(leaves + first), hi = unsigned(leaves + last + 1); lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        fn(lo++);
      if (hi & 1)
        fn(--hi);
    }
  }

  Buffer arena; // the stage and stash flag of its buffers
  int64_t leaves = 1;
  llvm::DenseMap<unsigned, OffsetRanges> cover, within;
};

struct PlanMemoryPass : public llmopt::llm::impl::PlanMemoryBase<PlanMemoryPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = dyn_cast_or_null<func::FuncOp>(
        findEntryFunction(module, LLMDialect::kTrainStepAttrName).getOperation());
    if (!func) {
      auto funcs = module.getOps<func::FuncOp>();
      if (std::distance(funcs.begin(), funcs.end()) == 1)
        func = *funcs.begin();
    }
    if (!func || func.isExternal()) {
      module.emitError() << "llm-plan-memory: no function marked 'llm.train_step' (or single "
                            "function) to plan";
      return signalPassFailure();
    }
    if (alignment <= 0 || !llvm::isPowerOf2_64(alignment)) {
      module.emitError() << "llm-plan-memory: alignment must be a power of two, got "
                         << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    if (!body.getOps<LayerOp>().empty()) {
      func.emitError() << "llm-plan-memory: inline the llm.layer regions first "
                          "(llm-build-training-step does)";
      return signalPassFailure();
    }

    // Positions and lifetimes.
    llvm::DenseMap<Operation *, int64_t> pos;
    int64_t n = 0;
    for (Operation &op : body)
      pos[&op] = n++;
    std::vector<Buffer> buffers;
    llvm::DenseMap<Value, size_t> index;
    double stateBytes = 0;
    // Weight gradients that their linear's backward adds straight into the
    // accumulators (convert-llm-to-exec's `accumulate`) need no buffer.
    int64_t zero = 0;
    if (auto plan = module->getAttrOfType<PlanAttr>("llm.plan"))
      zero = plan.getDp() > 1 ? plan.getZero() : 0;
    llvm::DenseSet<Value> inPlace;
    for (Operation &op : body)
      if (accumulatesWeightGradients(&op, zero))
        for (Value r : op.getResults().drop_front())
          inPlace.insert(r);
    for (Operation &op : body) {
      if (auto p = dyn_cast<ParamOp>(op)) {
        double count = double(p.getNumElements());
        // 16-bit weight + fp32 master, gradient accumulator, two moments.
        stateBytes += count * (elementBytes(p.getType(), CostContext()) + 16);
        continue;
      }
      for (Value r : op.getResults()) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        if (!t || inPlace.contains(r))
          continue;
        if (!t.hasStaticShape()) {
          op.emitOpError() << "llm-plan-memory: " << t
                           << " has no static size; run llm-specialize-shapes first";
          return signalPassFailure();
        }
        Buffer b;
        b.value = r;
        if (auto st = op.getAttrOfType<IntegerAttr>("llm.stage"))
          b.stage = st.getInt();
        b.bytes = int64_t(tensorBytes(t, CostContext()));
        b.first = b.last = pos[&op];
        for (Operation *user : r.getUsers()) {
          Operation *top = body.findAncestorOpInBlock(*user);
          // The update reads gradients from their accumulators, into which
          // each is added as soon as it is made (convert-llm-to-exec): these
          // uses do not keep the micro-batch's buffer alive.
          if (isa<AdamWOp, GlobalNormOp>(top) || top->hasAttr("llm.pp_tied_sum"))
            continue;
          b.last = std::max(b.last, isa<func::ReturnOp>(top) ? n : pos[top]);
        }
        index[r] = buffers.size();
        buffers.push_back(b);
      }
    }

    // Pipeline stages run their parts (forward or backward of one model
    // chunk of one micro-batch) in a schedule's order: a value read only in
    // the part that made it lives in the stage's shared arena, any other in
    // its micro-batch's stash.
    if (module->hasAttr("llm.pp")) {
      Operation *lossOp = body.getTerminator()->getNumOperands()
                              ? body.getTerminator()->getOperand(0).getDefiningOp()
                              : nullptr;
      int64_t lossPos = lossOp ? pos[lossOp] : n;
      auto stageOf = [](Operation *op) {
        auto a = op->getAttrOfType<IntegerAttr>("llm.stage");
        return a ? a.getInt() : int64_t(-2);
      };
      auto intAttr = [](Operation *op, StringRef name) {
        auto a = op->getAttrOfType<IntegerAttr>(name);
        return a ? a.getInt() : int64_t(0);
      };
      llvm::DenseMap<int64_t, int64_t> backwardStart; // stage -> first backward position
      for (Operation &op : body)
        if (pos[&op] > lossPos && stageOf(&op) >= 0 && !backwardStart.count(stageOf(&op)))
          backwardStart[stageOf(&op)] = pos[&op];
      // The part an op runs in on `stage`: (chunk, backward).
      auto part = [&](Operation *op, int64_t stage) {
        int64_t chunk = intAttr(op, "llm.chunk");
        if (auto t = dyn_cast<PPTransferOp>(op))
          chunk = int64_t(t.getFrom()) == stage ? intAttr(op, "llm.from_chunk")
                                                : intAttr(op, "llm.to_chunk");
        auto bs = backwardStart.find(stage);
        bool backward = bs != backwardStart.end() && pos[op] >= bs->second;
        return std::make_pair(chunk, backward);
      };
      for (Buffer &b : buffers) {
        if (b.stage < 0)
          continue;
        Operation *def = b.value.getDefiningOp();
        auto home = part(def, b.stage);
        for (Operation *user : b.value.getUsers()) {
          Operation *top = body.findAncestorOpInBlock(*user);
          if (isa<AdamWOp, GlobalNormOp>(top) || top->hasAttr("llm.pp_tied_sum"))
            continue;
          if (isa<func::ReturnOp>(top) || part(top, b.stage) != home)
            b.stash = true;
        }
      }
    }

    // Greedy by size.
    std::vector<size_t> order(buffers.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
    // First fit: each buffer at the lowest aligned offset where no placed
    // buffer that is alive at the same time (in the same arena) overlaps
    // it. The placed buffers alive at some time of a lifetime come from
    // each arena's segment tree as a few sets of merged ranges; the offset
    // moves to the end of any range it overlaps until none does. Walking
    // all placed buffers in offset order instead made this pass quadratic
    // in the model's depth (2000 layers with ZeRO-3: 21 s of the 40).
    int64_t peak = 0, stashPeak = 0;
    std::vector<Occupancy> arenas;
    SmallVector<const OffsetRanges *> sets;
    for (size_t i : order) {
      Buffer &b = buffers[i];
      // An empty buffer overlaps nothing, and nothing overlaps it.
      int64_t offset = 0;
      if (b.bytes > 0) {
        sets.clear();
        for (const Occupancy &arena : arenas)
          if (sameArena(arena.getArena(), b))
            arena.collect(b.first, b.last, sets);
        for (bool moved = true; moved;) {
          moved = false;
          for (const OffsetRanges *set : sets)
            if (int64_t end = set->blockedUntil(offset, b.bytes); end >= 0) {
              offset = end;
              moved = true;
            }
        }
        auto arena = llvm::find_if(arenas, [&](const Occupancy &o) {
          return o.getArena().stage == b.stage && o.getArena().stash == b.stash;
        });
        if (arena == arenas.end())
          arena = arenas.insert(arenas.end(), Occupancy(b, n + 1));
        arena->insert(b, offset, int64_t(llvm::alignTo(offset + b.bytes, alignment)));
      }
      b.offset = offset;
      (b.stash ? stashPeak : peak) = std::max(b.stash ? stashPeak : peak, offset + b.bytes);
    }

    Builder builder(&getContext());
    for (Operation &op : body) {
      if (op.getNumResults() == 0)
        continue;
      SmallVector<int64_t> offsets;
      SmallVector<bool> stashed;
      for (Value r : op.getResults()) {
        auto it = index.find(r);
        offsets.push_back(it == index.end() ? -1 : buffers[it->second].offset);
        stashed.push_back(it != index.end() && buffers[it->second].stash);
      }
      op.setAttr("llm.offsets", builder.getDenseI64ArrayAttr(offsets));
      if (llvm::is_contained(stashed, true))
        op.setAttr("llm.stashed", builder.getDenseBoolArrayAttr(stashed));
    }
    func->setAttr("llm.arena_bytes", builder.getI64IntegerAttr(peak));
    // Pipeline stages: each stage's arena holds its buffers and the tail's.
    if (auto pp = module->getAttrOfType<IntegerAttr>("llm.pp")) {
      SmallVector<int64_t> stagePeak(size_t(pp.getInt()), 0), stageStash(size_t(pp.getInt()), 0);
      for (const Buffer &b : buffers)
        for (int64_t s = 0; s < pp.getInt(); ++s)
          if (b.stage == s || b.stage < 0) {
            int64_t &top = (b.stash ? stageStash : stagePeak)[size_t(s)];
            top = std::max(top, b.offset + b.bytes);
          }
      func->setAttr("llm.stage_arena_bytes", builder.getDenseI64ArrayAttr(stagePeak));
      func->setAttr("llm.stage_stash_bytes", builder.getDenseI64ArrayAttr(stageStash));
    }
    func->setAttr("llm.state_bytes", builder.getI64IntegerAttr(int64_t(stateBytes)));

    if (!report.empty()) {
      double total = 0;
      for (const Buffer &b : buffers)
        total += b.bytes;
      // Without pipeline stages: the most bytes live at one position, the
      // least any placement's arena can be (the rest is fragmentation).
      int64_t livePeak = 0;
      if (!module->hasAttr("llm.pp")) {
        std::vector<int64_t> delta(size_t(n) + 2, 0);
        for (const Buffer &b : buffers) {
          delta[size_t(b.first)] += b.bytes;
          delta[size_t(b.last) + 1] -= b.bytes;
        }
        int64_t live = 0;
        for (int64_t d : delta)
          livePeak = std::max(livePeak, live += d);
      }
      std::string text = llvm::formatv(
          "memory plan of @{0}: {1} buffers, {2:f1} MiB if never reused, arena {3:f1} MiB "
          "(peak), parameter and optimizer state {4:f1} MiB\n",
          func.getSymName(), buffers.size(), total / (1 << 20), double(peak) / (1 << 20),
          stateBytes / (1 << 20));
      if (livePeak > 0)
        text += llvm::formatv("  most bytes live at once: {0:f1} MiB (the arena is {1:f1}% "
                              "above it)\n",
                              double(livePeak) / (1 << 20),
                              100.0 * double(peak - livePeak) / double(livePeak));
      if (auto stages = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_arena_bytes")) {
        auto stash = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_stash_bytes");
        for (auto [s, bytes] : llvm::enumerate(stages.asArrayRef()))
          text += llvm::formatv("  pipeline stage {0}: arena {1:f1} MiB, stash {2:f1} MiB per "
                                "micro-batch in flight\n",
                                s, double(bytes) / (1 << 20), double(stash[s]) / (1 << 20));
      }
      // Activations per stage: the lowering's arena plus, on pipeline stages,
      // a stash per micro-batch in flight, against the cost model's.
      auto predicted = module->getAttrOfType<DenseI64ArrayAttr>("llm.plan_activation_bytes");
      auto inFlight = module->getAttrOfType<DenseI64ArrayAttr>("llm.plan_in_flight");
      if (predicted && inFlight && predicted.size() == inFlight.size()) {
        auto arenas = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_arena_bytes");
        auto stashes = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_stash_bytes");
        for (int64_t s = 0; s < int64_t(predicted.size()); ++s) {
          double lowered = double(peak);
          if (arenas && stashes && s < int64_t(arenas.size()))
            lowered = double(arenas[s]) + double(inFlight[s]) * double(stashes[s]);
          double want = double(predicted[s]);
          text += llvm::formatv("activations, stage {0}: lowered {1:f1} MiB, predicted {2:f1} "
                                "MiB ({3:+f1}%)\n",
                                s, lowered / (1 << 20), want / (1 << 20),
                                want > 0 ? 100.0 * (lowered - want) / want : 0.0);
        }
      }
      if (auto plan = module->getAttrOfType<PlanAttr>("llm.plan"))
        text += llvm::formatv("planner's prediction for the peak rank: {0:f1} MiB (state "
                              "sharded by the plan's TP/PP/ZeRO, activations for its "
                              "micro-batches in flight); arena + parameter state before ZeRO: "
                              "{1:f1} MiB\n",
                              double(plan.getPeakMemoryBytes()) / (1 << 20),
                              (double(peak) + stateBytes) / (1 << 20));
      if (report == "-")
        writeReportToStdout(text);
    }
  }
};
} // namespace
