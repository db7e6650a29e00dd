//===- CostModel.cpp - analytical step time and memory per rank -----------===//
//
// See CostModel.h for what is modelled and docs/cost-model.md for the
// formulas, their sources and the calibration.
//
//===----------------------------------------------------------------------===//

#include "llmopt/CostModel/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

using namespace llmopt::cost;

static constexpr double GiB = double(1ull << 30);

const char *llmopt::cost::toString(Recompute r) {
  switch (r) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  case Recompute::PerStage:
    return "per-stage";
  }
  return "?";
}

const char *llmopt::cost::toString(Schedule s) {
  switch (s) {
  case Schedule::None:
    return "none";
  case Schedule::GPipe:
    return "gpipe";
  case Schedule::OneFOneB:
    return "1f1b";
  case Schedule::Interleaved:
    return "interleaved-1f1b";
  }
  return "?";
}

const char *llmopt::cost::toString(RejectReason r) {
  switch (r) {
  case RejectReason::None:
    return "none";
  case RejectReason::HeadsNotDivisibleByTP:
    return "heads_not_divisible_by_tp";
  case RejectReason::KVHeadsNotDivisibleByTP:
    return "kv_heads_not_divisible_by_tp";
  case RejectReason::FfnNotDivisibleByTP:
    return "ffn_not_divisible_by_tp";
  case RejectReason::BatchNotDivisible:
    return "batch_not_divisible";
  case RejectReason::TooFewLayersForPP:
    return "fewer_layers_than_stages";
  case RejectReason::LayersNotDivisibleForInterleaving:
    return "layers_not_divisible_for_interleaving";
  case RejectReason::FewerMicroBatchesThanStages:
    return "fewer_micro_batches_than_stages";
  case RejectReason::MicroBatchesNotDivisibleForInterleaving:
    return "micro_batches_not_divisible_for_interleaving";
  case RejectReason::ExpertsNotDivisibleByEP:
    return "experts_not_divisible_by_ep";
  case RejectReason::EPNotDividingDP:
    return "ep_not_dividing_dp";
  case RejectReason::NotSupportedByStack:
    return "not_supported_by_stack";
  case RejectReason::SeqNotDivisibleByCP:
    return "seq_not_divisible_by_cp";
  case RejectReason::SeqNotDivisibleForSP:
    return "seq_not_divisible_for_sp";
  case RejectReason::SPWithoutTP:
    return "sp_without_tp";
  case RejectReason::TPAcrossNodes:
    return "tp_across_nodes";
  case RejectReason::GpuCountMismatch:
    return "gpu_count_mismatch";
  case RejectReason::OutOfMemory:
    return "out_of_memory";
  case RejectReason::HostOutOfMemory:
    return "host_out_of_memory";
  case RejectReason::Invalid:
    return "invalid";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Collectives (ring algorithms, hierarchical across nodes)
//===----------------------------------------------------------------------===//

double Collectives::allReduce(double bytes, int n, int perNode) const {
  if (n <= 1 || bytes <= 0)
    return 0;
  perNode = std::max(1, std::min(perNode, n));
  int nodes = n / perNode;
  double intraBw =
      c.intraAllReduceBusBandwidth > 0 ? c.intraAllReduceBusBandwidth : c.intraBusBandwidth;
  if (nodes <= 1)
    return c.collectiveBaseLatency + 2.0 * (n - 1) * c.intraStepLatency +
           2.0 * (n - 1) / n * bytes / intraBw;
  // Reduce-scatter inside the node, all-reduce of 1/perNode across nodes
  // (every GPU of a node on its share of the NICs), all-gather inside. Across
  // nodes NCCL picks a ring (2(N-1) latency steps) or a double binary tree
  // (2 log2 N steps, the same bandwidth term): the cheaper one.
  double ringSteps = 2.0 * (nodes - 1);
  double treeSteps = 2.0 * std::ceil(std::log2(double(nodes)));
  double t = c.collectiveBaseLatency + std::min(ringSteps, treeSteps) * c.interStepLatency +
             2.0 * (nodes - 1) / nodes * (bytes / perNode) / c.nicShareBandwidth();
  if (perNode > 1)
    t += 2.0 * (perNode - 1) * c.intraStepLatency +
         2.0 * (perNode - 1) / perNode * bytes / c.intraBusBandwidth;
  return t;
}

double Collectives::allGather(double bytes, int n, int perNode) const {
  if (n <= 1 || bytes <= 0)
    return 0;
  perNode = std::max(1, std::min(perNode, n));
  int nodes = n / perNode;
  if (nodes <= 1)
    return c.collectiveBaseLatency + (n - 1) * c.intraStepLatency +
           double(n - 1) / n * bytes / c.intraBusBandwidth;
  double t = c.collectiveBaseLatency + (nodes - 1) * c.interStepLatency +
             double(nodes - 1) / nodes * (bytes / perNode) / c.nicShareBandwidth();
  if (perNode > 1)
    t += (perNode - 1) * c.intraStepLatency +
         double(perNode - 1) / perNode * bytes / c.intraBusBandwidth;
  return t;
}

double Collectives::allToAll(double bytes, int n, int perNode) const {
  if (n <= 1 || bytes <= 0)
    return 0;
  perNode = std::max(1, std::min(perNode, n));
  double intra = bytes * double(perNode - 1) / n / c.intraBusBandwidth;
  double inter = bytes * double(n - perNode) / n / c.nicShareBandwidth();
  double steps = perNode < n ? c.interStepLatency : c.intraStepLatency;
  return c.collectiveBaseLatency + steps * std::log2(double(n)) + std::max(intra, inter);
}

double Collectives::sendRecv(double bytes, bool crossNode) const {
  if (bytes <= 0)
    return 0;
  double bw = crossNode ? c.nicShareBandwidth() : c.intraBusBandwidth;
  return c.collectiveBaseLatency + bytes / bw;
}

double llmopt::cost::gemmEfficiency(const GpuSpec &gpu, double m, double n, double k) {
  auto term = [&](double d) { return d / (d + gpu.gemmHalfDim); };
  return gpu.gemmEfficiency * term(m) * term(n) * term(k);
}

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

std::vector<int> llmopt::cost::interleavedChunkLayers(int layers, int pp, int vpp, bool uneven) {
  const int chunks = pp * vpp;
  if (chunks <= 0 || layers < chunks)
    return {};
  std::vector<int> perChunk(chunks, layers / chunks);
  if (layers % chunks) {
    if (!uneven)
      return {};
    // The embedding and the loss take a layer's place in the first and the
    // last virtual stage; the slots are spread evenly, extra ones to the
    // middle chunks first.
    const int slots = layers + 2;
    std::fill(perChunk.begin(), perChunk.end(), slots / chunks);
    for (int extra = slots % chunks, i = 0; extra > 0; --extra, ++i)
      perChunk[chunks > 2 ? 1 + i % (chunks - 2) : i % chunks] += 1;
    perChunk.front() -= 1;
    perChunk.back() -= 1;
    if (*std::min_element(perChunk.begin(), perChunk.end()) < 1)
      return {};
  }
  return perChunk;
}

std::vector<int> llmopt::cost::interleavedStageLayers(int layers, int pp, int vpp, bool uneven) {
  std::vector<int> perChunk = interleavedChunkLayers(layers, pp, vpp, uneven);
  if (perChunk.empty())
    return {};
  std::vector<int> stage(pp, 0);
  for (size_t k = 0; k < perChunk.size(); ++k)
    stage[k % size_t(pp)] += perChunk[k];
  return stage;
}

int64_t llmopt::cost::vocabRowsPerRank(int64_t vocab, int64_t tp, int padding) {
  if (tp <= 1)
    return vocab;
  if (padding > 0) {
    int64_t multiple = int64_t(padding) * tp;
    return (vocab + multiple - 1) / multiple * multiple / tp;
  }
  if (padding < 0 && vocab % tp)
    return vocab;
  return (vocab + tp - 1) / tp;
}

/// "0, 1, 3", or "none".
static std::string joinStages(const std::vector<int> &stages) {
  if (stages.empty())
    return "none";
  return llvm::join(llvm::map_range(stages, [](int z) { return std::to_string(z); }), ", ");
}

// The rules build their message only when the caller wants it (`detail`
// not null): a search rejects most of its candidates and keeps one message
// per reason.
static RejectReason stackRules(const ModelDesc &model, const JobSpec &job, const ParallelConfig &c,
                               std::string *detail) {
  const StackProfile &st = job.stack;
  const StackCapabilities &k = st.caps;
  auto refuse = [&](auto msg) {
    if (detail)
      *detail = "stack " + st.name + " (" + st.title + ") " + msg();
    return RejectReason::NotSupportedByStack;
  };
  if (c.tp > 1 && !k.tensorParallel)
    return refuse([&] { return std::string("runs no tensor parallelism (tp must be 1)"); });
  if (c.tp > 1 && k.tensorParallelUnpaddedVocab && model.vocab % c.tp)
    return refuse([&] {
      return std::string(llvm::formatv("runs tensor parallelism only where tp divides the "
                                       "vocabulary ({0} rows do not split {1} ways; it pads none)",
                                       model.vocab, c.tp));
    });
  if (c.sp && !k.sequenceParallel)
    return refuse(
        [&] { return std::string("runs no Megatron-style sequence parallelism (sp must be 0)"); });
  if (c.tp > 1 && c.pp > 1 && !k.tensorParallelWithPP)
    return refuse([&] {
      return std::string("runs tensor parallelism without pipeline parallelism only (tp or "
                         "pp must be 1)");
    });
  if (c.tp > 1 && !c.sp && k.moeTensorParallelNeedsSP && model.hasMoE())
    return refuse([&] {
      return std::string("needs sequence parallelism with tensor parallelism in MoE models "
                         "(sp must be 1)");
    });
  if (!k.runsZeroWithCP(c.zero, c.cp))
    return refuse([&] {
      return std::string("shards the parameters over the context-parallel ranks with FSDP "
                         "(ZeRO-3) whenever cp > 1 (zero must be 3)");
    });
  if (c.pp > 1 && k.schedules.empty())
    return refuse([&] { return std::string("runs no pipeline parallelism (pp must be 1)"); });
  const char *sched = c.schedule == Schedule::None ? "1f1b" : toString(c.schedule);
  if (c.pp > 1 && !st.hasSchedule(sched))
    return refuse([&] {
      return std::string(std::string("has no ") + sched + " pipeline schedule (it runs " +
                         llvm::join(k.schedules, ", ") + ")");
    });
  if (c.vpp > 1 && k.maxVirtualStages > 0 && c.vpp > k.maxVirtualStages)
    return refuse([&] {
      return std::string(
          llvm::formatv("runs at most {0} virtual stages per pipeline rank", k.maxVirtualStages));
    });
  if (c.cp > 1) {
    if (k.contextParallel == CPKind::None)
      return refuse([&] { return std::string("runs no context parallelism (cp must be 1)"); });
    if (k.contextParallel == CPKind::Ulysses)
      for (const LayerDesc &l : model.layers)
        if (l.heads % c.cp || (l.kvHeads % c.cp && c.cp % l.kvHeads))
          return refuse([&] {
            return std::string(llvm::formatv(
                "splits the sequence Ulysses-style (all-to-all over heads): {0} heads / {1} kv "
                "heads must be divisible by cp {2}",
                l.heads, l.kvHeads, c.cp));
          });
  }
  if (c.ep > 1 && k.expertParallel == EPLayout::None)
    return refuse([&] { return std::string("runs no expert parallelism (ep must be 1)"); });
  if (!st.hasZero(c.zero, /*withPP=*/false))
    return refuse([&] {
      return std::string(
          llvm::formatv("has no ZeRO-{0} (it runs zero {1})", c.zero, joinStages(k.zeroStages)));
    });
  if (c.pp > 1 && !st.hasZero(c.zero, /*withPP=*/true))
    return refuse([&] {
      return std::string(llvm::formatv(
          "cannot run ZeRO-{0} with pipeline parallelism (with pp > 1 it runs zero {1})", c.zero,
          joinStages(k.zeroStagesWithPP)));
    });
  if (c.shard > 0 && !k.hasHybridSharding(c.zero))
    return refuse([&] {
      return k.hybridSharding.empty()
                 ? std::string("runs no hybrid sharding (shard must be 0: ZeRO over all of "
                               "dp x cp)")
                 : llvm::formatv("runs hybrid sharding with ZeRO {0} only, not ZeRO-{1}",
                                 joinStages(k.hybridSharding), c.zero)
                       .str();
    });
  if (k.tensorOrPipelineParallelNeedsFsdp && (c.tp > 1 || c.pp > 1) && c.zero != 3)
    return refuse([&] {
      return std::string("runs tensor or pipeline parallelism only beside FSDP (zero must be 3): "
                         "it refuses DDP beside them and trains in fp32 without FSDP");
    });
  if (k.ppInsideDpNeedsMatchingExpertGroups && c.ppInsideDp && c.pp > 1 && c.dp > 1) {
    int etp = model.hasMoE() && expertsStayWhole(job, c) ? 1 : c.tp;
    if (etp * c.ep != c.tp * c.cp)
      return refuse([&] {
        return std::string(llvm::formatv(
            "places pipeline stages inside data parallelism only where expert tp x ep ({0} x "
            "{1}) equals tp x cp ({2} x {3}) (initialize_model_parallel's tp-cp-ep-pp-dp "
            "order)",
            etp, c.ep, c.tp, c.cp));
      });
  }
  if (c.offloadOptimizer && !k.optimizerOffload)
    return refuse(
        [&] { return std::string("does not offload optimizer states (offload must be 0)"); });
  if (c.recomputeLayers > 0 && !st.hasRecompute("partial"))
    return refuse([&] {
      return "recomputes every layer or none of a chunk (it runs " + llvm::join(k.recompute, ", ") +
             "; recompute_layers must be 0)";
    });
  if (!st.hasRecompute(toString(c.recompute)))
    return refuse([&] {
      return std::string(std::string("has no ") + toString(c.recompute) +
                         " recomputation (it runs " + llvm::join(k.recompute, ", ") + ")");
    });
  if (job.fp8 && !k.fp8)
    return refuse([&] { return std::string("runs no fp8 GEMMs"); });
  if (job.fp8 && k.fp8DenseOnly && model.hasMoE())
    return refuse([&] {
      return std::string("runs fp8 GEMMs in dense layers only (its experts have no fp8 kernels): "
                         "plan this MoE model without fp8");
    });
  return RejectReason::None;
}

static RejectReason layoutRules(const ModelDesc &model, const ClusterSpec &cluster,
                                const JobSpec &job, const ParallelConfig &c, std::string *detail) {
  auto fail = [&](RejectReason r, auto msg) {
    if (detail)
      *detail = msg();
    return r;
  };
  if (c.dp < 1 || c.tp < 1 || c.pp < 1 || c.vpp < 1 || c.cp < 1 || c.ep < 1 || c.microBatch < 1 ||
      c.zero < 0 || c.zero > 3)
    return fail(RejectReason::Invalid,
                [&] { return std::string("degrees must be positive and zero in 0..3"); });
  // FSDP on at all: it shards over dp_shard x cp (dp_shard: the shard
  // group's dp part), one rank of which is no FSDP.
  if (job.stack.caps.tensorOrPipelineParallelNeedsFsdp && (c.tp > 1 || c.pp > 1) &&
      (c.shard > 0 ? c.shard / c.cp : c.dp) <= 1 && c.cp <= 1)
    return fail(RejectReason::NotSupportedByStack, [&] {
      return "stack " + job.stack.name +
             " runs tensor or pipeline parallelism only beside FSDP over more than one rank "
             "of dp x cp: without it training falls back to fp32";
    });
  if (c.gpus() != cluster.totalGpus())
    return fail(RejectReason::GpuCountMismatch, [&] {
      return std::string(llvm::formatv("dp*tp*pp*cp = {0} but the cluster has {1} GPUs", c.gpus(),
                                       cluster.totalGpus()));
    });
  if (c.tp > cluster.gpusPerNode)
    return fail(RejectReason::TPAcrossNodes, [&] {
      return std::string(
          llvm::formatv("tp {0} exceeds the {1} GPUs of a node", c.tp, cluster.gpusPerNode));
    });
  if (c.sp && c.tp == 1)
    return fail(RejectReason::SPWithoutTP,
                [&] { return std::string("sequence parallelism needs tp > 1"); });
  if (RejectReason r = stackRules(model, job, c, detail); r != RejectReason::None)
    return r;
  if (c.offloadOptimizer && c.zero == 0)
    return fail(RejectReason::Invalid,
                [&] { return std::string("optimizer offload needs zero >= 1"); });
  if (c.recomputeLayers < 0 || (c.recomputeLayers > 0 && c.recompute != Recompute::Full))
    return fail(RejectReason::Invalid, [&] {
      return llvm::formatv("recompute_layers {0} needs full recomputation (the first {0} "
                           "layers of each model chunk recomputed in full)",
                           c.recomputeLayers)
          .str();
    });
  if (c.shard < 0 ||
      (c.shard > 0 && (c.zero == 0 || c.shard >= c.dp * c.cp || (c.dp * c.cp) % c.shard)))
    return fail(RejectReason::Invalid, [&] {
      return std::string(llvm::formatv("hybrid sharding needs zero >= 1 and a shard group that "
                                       "divides dp x cp = {0} and is smaller (got shard {1}, zero "
                                       "{2})",
                                       c.dp * c.cp, c.shard, c.zero));
    });
  bool moe = false;
  for (const LayerDesc &l : model.layers) {
    if (l.heads % c.tp)
      return fail(RejectReason::HeadsNotDivisibleByTP, [&] {
        return std::string(
            llvm::formatv("{0} attention heads are not divisible by tp {1}", l.heads, c.tp));
      });
    // Fewer KV heads than tp: each rank replicates them (computes all,
    // keeps its own), which works when tp is a multiple of them.
    if (l.kvHeads % c.tp && c.tp % l.kvHeads)
      return fail(RejectReason::KVHeadsNotDivisibleByTP, [&] {
        return std::string(
            llvm::formatv("{0} kv heads and tp {1} do not divide one another", l.kvHeads, c.tp));
      });
    if (l.ffn % c.tp)
      return fail(RejectReason::FfnNotDivisibleByTP, [&] {
        return std::string(llvm::formatv("ffn {0} is not divisible by tp {1}", l.ffn, c.tp));
      });
    if (l.isMoE()) {
      moe = true;
      if (l.experts % c.ep)
        return fail(RejectReason::ExpertsNotDivisibleByEP, [&] {
          return std::string(
              llvm::formatv("{0} experts are not divisible by ep {1}", l.experts, c.ep));
        });
    }
  }
  if (!moe && c.ep > 1)
    return fail(RejectReason::ExpertsNotDivisibleByEP, [&] {
      return std::string(llvm::formatv("ep {0} but the model has no experts", c.ep));
    });
  if (c.ep > 1 && job.stack.caps.expertParallel == EPLayout::DataTensorParallel) {
    if ((c.dp * c.cp * c.tp) % c.ep)
      return fail(RejectReason::EPNotDividingDP, [&] {
        return std::string(llvm::formatv("ep {0} does not divide dp*cp*tp = {1} (the ranks an "
                                         "expert-parallel group is carved from)",
                                         c.ep, c.dp * c.cp * c.tp));
      });
  } else if (c.ep > 1 && (c.dp * c.cp) % c.ep) {
    return fail(RejectReason::EPNotDividingDP, [&] {
      return std::string(llvm::formatv("ep {0} does not divide dp*cp = {1}", c.ep, c.dp * c.cp));
    });
  }
  if (c.cp > 1 && job.seqLen % (2 * c.cp))
    return fail(RejectReason::SeqNotDivisibleByCP, [&] {
      return std::string(llvm::formatv("sequence {0} is not divisible into 2*cp = {1} chunks "
                                       "(load-balanced causal context parallelism)",
                                       job.seqLen, 2 * c.cp));
    });
  if (c.sp && c.tp > 1 && (job.seqLen / c.cp) % c.tp)
    return fail(RejectReason::SeqNotDivisibleForSP, [&] {
      return llvm::formatv("a rank's sequence of {0} tokens does not split into tp = {1} "
                           "chunks for sequence parallelism",
                           job.seqLen / c.cp, c.tp)
          .str();
    });
  if (job.globalBatch % (int64_t(c.dp) * c.microBatch))
    return fail(RejectReason::BatchNotDivisible, [&] {
      return std::string(
          llvm::formatv("global batch {0} is not divisible by dp {1} x micro-batch {2}",
                        job.globalBatch, c.dp, c.microBatch));
    });
  int64_t m = job.globalBatch / (int64_t(c.dp) * c.microBatch);
  if (c.numMicroBatches != m)
    return fail(RejectReason::Invalid, [&] {
      return std::string(
          llvm::formatv("num_micro_batches {0} != global batch / (dp x micro-batch) = {1}",
                        c.numMicroBatches, m));
    });
  int layers = static_cast<int>(model.layers.size());
  if (layers < c.pp * c.vpp)
    return fail(RejectReason::TooFewLayersForPP, [&] {
      return std::string(
          llvm::formatv("{0} layers cannot fill pp {1} x vpp {2} stages", layers, c.pp, c.vpp));
    });
  if (c.pp == 1 &&
      (c.vpp > 1 || c.schedule == Schedule::GPipe || c.schedule == Schedule::Interleaved))
    return fail(RejectReason::Invalid,
                [&] { return std::string("a pipeline schedule needs pp > 1"); });
  if (c.pp > 1) {
    if (c.vpp > 1 && c.schedule != Schedule::Interleaved)
      return fail(RejectReason::Invalid,
                  [&] { return std::string("vpp > 1 needs the interleaved schedule"); });
    if (c.schedule == Schedule::Interleaved) {
      if (c.vpp < 2)
        return fail(RejectReason::Invalid,
                    [&] { return std::string("the interleaved schedule needs vpp >= 2"); });
      if (interleavedStageLayers(layers, c.pp, c.vpp, job.stack.caps.unevenInterleaving).empty())
        return fail(RejectReason::LayersNotDivisibleForInterleaving, [&] {
          return std::string(llvm::formatv(
              "{0} layers are not divisible by pp {1} x vpp {2}{3}", layers, c.pp, c.vpp,
              job.stack.caps.unevenInterleaving
                  ? ""
                  : std::string(" and stack ") + job.stack.name + " interleaves even stages only"));
        });
      if (m % c.pp)
        return fail(RejectReason::MicroBatchesNotDivisibleForInterleaving, [&] {
          return std::string(
              llvm::formatv("{0} micro-batches are not a multiple of pp {1}", m, c.pp));
        });
    }
    if ((c.schedule == Schedule::OneFOneB || c.schedule == Schedule::Interleaved) && m < c.pp)
      return fail(RejectReason::FewerMicroBatchesThanStages, [&] {
        return std::string(
            llvm::formatv("{0} micro-batches are fewer than the {1} stages", m, c.pp));
      });
    if (!job.stack.caps.unevenStages && c.vpp == 1 && layers % c.pp)
      return fail(RejectReason::NotSupportedByStack, [&] {
        return std::string(llvm::formatv("stack {0} splits layers evenly over stages: {1} layers "
                                         "are not divisible by pp {2}",
                                         job.stack.name, layers, c.pp));
      });
    if (!c.stageLayers.empty()) {
      if (static_cast<int>(c.stageLayers.size()) != c.pp ||
          std::accumulate(c.stageLayers.begin(), c.stageLayers.end(), 0) != layers ||
          *std::min_element(c.stageLayers.begin(), c.stageLayers.end()) < 1)
        return fail(RejectReason::Invalid, [&] {
          return std::string(
              "stage layer counts must be pp positive numbers adding up to the layers");
        });
    }
  }
  return RejectReason::None;
}

RejectReason llmopt::cost::checkStackRules(const ModelDesc &model, const JobSpec &job,
                                           const ParallelConfig &c, std::string &detail) {
  return stackRules(model, job, c, &detail);
}

RejectReason llmopt::cost::checkRules(const ModelDesc &model, const ClusterSpec &cluster,
                                      const JobSpec &job, const ParallelConfig &c,
                                      std::string &detail) {
  return layoutRules(model, cluster, job, c, &detail);
}

RejectReason llmopt::cost::checkRules(const ModelDesc &model, const ClusterSpec &cluster,
                                      const JobSpec &job, const ParallelConfig &c) {
  return layoutRules(model, cluster, job, c, nullptr);
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

namespace {

/// Per-rank cost of one layer for one micro-batch.
struct LayerCost {
  double fwd = 0, bwd = 0, recompute = 0;
  double tp = 0, cp = 0, ep = 0;
  /// Communication hidden behind this layer's compute.
  double hidden = 0;
  double actBytes = 0;
  /// Full recomputation: what the layer's recomputed forward keeps while
  /// its backward runs (transient, one layer at a time).
  double recomputedBytes = 0;
  double denseParams = 0, expertParams = 0; // per rank, before ZeRO
  double fullParamsBytes = 0;               // this layer's weights, gathered
};

struct Evaluator {
  const ModelDesc &model;
  const ClusterSpec &cl;
  const JobSpec &job;
  const ParallelConfig &c;
  Collectives coll{cl};
  double peak = 0;     // 16-bit tensor-core peak: attention, LM head
  double gemmPeak = 0; // what the linear layers' GEMMs run at (fp8 or not)
  double memBw = 0;
  double actElt = 2; // bytes of an activation element
  double tokens = 0; // per rank per micro-batch (sequence split by cp)
  double gemmScale = 1, attnEff = 0;
  /// Compute slowdown per second of communication hidden behind it.
  double slowdown = 0;
  /// Experts stay whole (expert tensor parallelism 1) because the
  /// expert-parallel group takes tensor-parallel ranks (Megatron's layout).
  bool expertsWhole = false;

  // Placement: GPUs of each group on one node.
  int tpPerNode = 1, cpPerNode = 1, dpPerNode = 1, ppPerNode = 1, epPerNode = 1, dpcpPerNode = 1;

  Evaluator(const ModelDesc &m, const ClusterSpec &cl, const JobSpec &j, const ParallelConfig &c)
      : model(m), cl(cl), job(j), c(c) {
    const StackEfficiency &se = j.stack.eff;
    peak = cl.gpu.peakFlops(j.dtype == DType::FP8 ? DType::BF16 : j.dtype) * cl.gpu.throughputScale;
    double fp8Eff = se.fp8Gemm > 0 ? se.fp8Gemm : cl.gpu.fp8GemmEfficiency;
    gemmPeak = j.fp8 ? cl.gpu.peakFlops(DType::FP8) * fp8Eff * cl.gpu.throughputScale : peak;
    gemmScale = se.gemm;
    attnEff = cl.gpu.flashAttentionEfficiency * se.attention;
    memBw = cl.gpu.hbmBandwidth * std::min(1.0, cl.gpu.memEfficiency * se.memory);
    slowdown = j.stack.overlap.commSlowdown;
    actElt = bytesOf(j.dtype == DType::FP8 ? DType::BF16 : j.dtype);
    tokens = double(c.microBatch) * j.seqLen / c.cp;
    // Axes from fastest to slowest: tp, cp, then dp and pp in either order.
    auto within = [&](int stride, int size) {
      if (stride >= cl.gpusPerNode)
        return 1;
      return std::max(1, std::min(size, cl.gpusPerNode / stride));
    };
    tpPerNode = within(1, c.tp);
    cpPerNode = within(c.tp, c.cp);
    int dpStride = c.ppInsideDp ? c.tp * c.cp * c.pp : c.tp * c.cp;
    int ppStride = c.ppInsideDp ? c.tp * c.cp : c.tp * c.cp * c.dp;
    dpPerNode = within(dpStride, c.dp);
    ppPerNode = within(ppStride, c.pp);
    expertsWhole = expertsStayWhole(j, c);
    // An expert group that takes tensor-parallel ranks starts at stride 1.
    epPerNode = expertsWhole ? within(1, c.ep) : within(dpStride, c.ep);
    // The gradient group spans cp and dp; contiguous only when dp follows cp.
    dpcpPerNode =
        c.ppInsideDp ? cpPerNode * (c.cp == 1 ? dpPerNode : 1) : within(c.tp, c.cp * c.dp);
  }

  /// A GEMM of the linear layers (fp8 when the job asks for it).
  double gemm(double m, double n, double k) const {
    if (m <= 0 || n <= 0 || k <= 0)
      return 0;
    return 2.0 * m * n * k / (gemmPeak * gemmScale * gemmEfficiency(cl.gpu, m, n, k));
  }

  /// A 16-bit GEMM (the LM head stays in bf16 under fp8 recipes).
  double gemm16(double m, double n, double k) const {
    if (m <= 0 || n <= 0 || k <= 0)
      return 0;
    return 2.0 * m * n * k / (peak * gemmScale * gemmEfficiency(cl.gpu, m, n, k));
  }

  double memTime(double bytes) const { return bytes / memBw; }

  /// Time `comm` seconds of communication add to the critical path when
  /// `hidden` of them run beside compute: the rest, plus the compute slowdown
  /// of what is hidden. Adds the hidden seconds to `hiddenSum` (the report).
  double hide(double comm, double hidden, double &hiddenSum) const {
    hiddenSum += hidden;
    return comm - hidden + slowdown * hidden;
  }
  /// `hide` for communication that may overlap `window` seconds of compute in
  /// `pieces` equal parts (the first, or last, part is never hidden).
  double overlap(double comm, double window, double pieces, double &hiddenSum) const {
    if (comm <= 0)
      return 0;
    double open = std::max(comm - std::max(0.0, window), comm / std::max(1.0, pieces));
    return hide(comm, comm - open, hiddenSum);
  }

  LayerCost layer(const LayerDesc &l) const {
    LayerCost lc;
    const double t = c.tp, T = tokens, h = l.hidden;
    const double q = double(l.qDim()), kv = double(l.kvDim()), f = double(l.ffn);
    const double s = double(job.seqLen);
    const double headsLocal = double(l.heads) / t;
    // KV width per rank: its share, or with replicated KV heads (tp a
    // multiple of them) one head after computing all of them.
    const bool kvReplicated = l.kvHeads % c.tp != 0;
    const double kvLocal = kvReplicated ? kv / double(l.kvHeads) : kv / t;
    const double kvComputed = kvReplicated ? kv : kv / t;

    // GEMMs (forward; backward is dgrad + wgrad, twice the work).
    double g = gemm(T, q / t + 2 * kvComputed, h) + gemm(T, h, q / t);
    double mlpAct = 0;   // rows x ffn elements per rank through the activation
    double expertUp = 0; // the experts' up-projections, which their backward redoes
    if (l.isMoE()) {
      double cf = l.capacityFactor > 0 ? l.capacityFactor : 1.0;
      // Experts split over tp see every token of the tp group; whole experts
      // (an expert group taking tp ranks) route each rank's sequence chunk.
      const double et = expertsWhole ? 1.0 : t;
      const double routed = expertsWhole ? T / t : T;
      double rows = routed * l.topK * cf; // per rank after the all-to-all
      double perExpert = rows * c.ep / l.experts;
      double local = double(l.experts) / c.ep;
      // The router stays 16-bit under fp8 recipes; the experts' GEMMs are
      // fp8 as the linears'.
      g += gemm16(routed, double(l.experts), h);
      expertUp = local * gemm(perExpert, f * (l.gatedMlp ? 2 : 1) / et, h);
      g += expertUp + local * gemm(perExpert, h, f / et);
      mlpAct = rows * f / et;
      // Dispatch and combine all-to-alls forward, and again backward; the
      // stack hides a share of them behind compute.
      double a2a = 4 * coll.allToAll(rows * h * actElt, c.ep, epPerNode);
      lc.ep = hide(a2a, job.stack.overlap.epOverlap * a2a, lc.hidden) +
              job.stack.eff.moeExpertOverhead * local;
    } else {
      g += gemm(T, f * (l.gatedMlp ? 2 : 1) / t, h) + gemm(T, h, f / t);
      mlpAct = T * f / t;
    }

    // Attention core.
    double keys = s; // keys each query row sees (full rows without a fused kernel)
    double attnFwd = 0, attnBwd = 0, softmaxElems = 0;
    if (job.flashAttention) {
      double eff = l.causal ? 0.5 : 1.0;
      if (l.window > 0)
        keys = std::min<double>(s, l.window), eff = 1.0;
      double flops = 4.0 * c.microBatch * headsLocal * l.headDim * (s / c.cp) * keys * eff;
      attnFwd = flops / (peak * attnEff);
      attnBwd = 2.5 * attnFwd; // dQ, dK, dV, dP plus the recomputed scores
    } else {
      double flops = 4.0 * c.microBatch * headsLocal * l.headDim * (s / c.cp) * keys;
      softmaxElems = c.microBatch * headsLocal * (s / c.cp) * keys;
      // Per score element, in units of the activation size: QK^T writes it,
      // scale-mask-softmax reads and writes it, dropout reads, writes and keeps
      // a mask, PV reads it; backward mirrors that.
      double fwdBytes = softmaxElems * actElt * (job.dropout ? 6.5 : 4.0);
      double bwdBytes = softmaxElems * actElt * (job.dropout ? 7.0 : 5.0);
      attnFwd = flops / (peak * cl.gpu.bmmEfficiency) + memTime(fwdBytes);
      attnBwd = 2 * flops / (peak * cl.gpu.bmmEfficiency) + memTime(bwdBytes);
    }

    // Memory-bound kernels: norms, residual adds (+ dropout), bias + activation,
    // rotary. Sequence parallelism splits the hidden-size work by tp.
    double hWork = (20.0 + (job.dropout ? 2.0 : 0.0)) * h / (c.sp ? t : 1);
    double fWork = (l.gatedMlp ? 6.0 : 4.0) * mlpAct / T;
    double ropeWork = model.positions == 0 ? 4.0 * (q / t + kvLocal) : 0;
    // fp8: every GEMM input is scaled and cast (read 16-bit, write 8-bit).
    double castWork = job.fp8 ? 3.0 * (2 * h + q / t + f / t) : 0;
    double elem = memTime(T * (hWork + fWork + ropeWork + castWork) * actElt / 2);

    lc.fwd = g + attnFwd + elem;
    lc.bwd = 2 * g + attnBwd + 1.5 * elem;
    // A stack whose host cannot launch kernels as fast as they finish.
    if (double host = job.stack.eff.hostOverheadPerLayer; host > lc.fwd + lc.bwd) {
      lc.fwd = host / 3;
      lc.bwd = 2 * host / 3;
    }

    // Tensor / sequence parallel collectives: two per sub-block forward and
    // backward, on activations of T x h.
    if (c.tp > 1) {
      double bytes = T * h * actElt;
      double one =
          c.sp ? coll.allGather(bytes, c.tp, tpPerNode) + coll.reduceScatter(bytes, c.tp, tpPerNode)
               : coll.allReduce(bytes, c.tp, tpPerNode);
      double tpTotal = 2 * one * 2; // attention and MLP, forward and backward
      // With SP the linears keep their input sharded and all-gather it again
      // for the weight gradient (Korthikanti et al. 2022, section 4.2.2).
      if (c.sp)
        tpTotal += 2 * coll.allGather(bytes, c.tp, tpPerNode);
      if (c.recompute == Recompute::Full)
        tpTotal += 2 * one;
      // Stacks that overlap TP communication with the GEMMs (Megatron's
      // tp_comm_overlap, torchtitan's AsyncTP) do so on sequence-parallel
      // layouts, never for all of it (the first chunk, the norms between).
      lc.tp = hide(tpTotal, c.sp ? job.stack.overlap.tpOverlap * tpTotal : 0, lc.hidden);
    }
    // Context parallelism: ring exchange of K and V chunks, hidden behind the
    // attention of each chunk when it is long enough.
    if (c.cp > 1) {
      double kvBytes = 2.0 * c.microBatch * (s / c.cp) * kvLocal * actElt;
      double step = coll.sendRecv(kvBytes, c.cp > cpPerNode);
      double steps = c.cp - 1;
      // Each block's exchange hides only behind that block's attention.
      double fwdWin = job.stack.overlap.cpOverlap ? attnFwd * steps / c.cp : 0;
      double bwdWin = job.stack.overlap.cpOverlap ? attnBwd * steps / c.cp : 0;
      if (job.stack.caps.contextParallel == CPKind::Ulysses) {
        // Ulysses: all-to-alls of q, k, v and the output forward, their
        // gradients backward, none hidden.
        double a2a = coll.allToAll(T * (q + 2 * kvComputed + q) * actElt, c.cp, cpPerNode);
        lc.cp = 2 * a2a;
      } else {
        // No piece is exposed by itself: the first block is local.
        const double noFloor = std::numeric_limits<double>::infinity();
        lc.cp = overlap(steps * step, fwdWin, noFloor, lc.hidden) +
                overlap(2 * steps * step, bwdWin, noFloor, lc.hidden);
      }
    }

    switch (c.recompute) {
    case Recompute::None:
      break;
    case Recompute::Selective:
      // Without a fused kernel: the attention softmax (Korthikanti et al.
      // 2022). With one: the memory-bound ops, norms and the MLP activation
      // (torchtitan's op-level selective checkpointing).
      lc.recompute = job.flashAttention ? elem : attnFwd;
      break;
    case Recompute::Full:
    case Recompute::PerStage:
      lc.recompute = lc.fwd;
      break;
    }
    lc.recompute += expertUp;

    // Activations kept per micro-batch (Korthikanti et al. 2022, generalized to
    // GQA, gated MLPs, MoE and fused attention).
    double perToken = 0;
    double repl = 8 * h + (job.dropout ? 2 * h : 0);
    perToken += repl / (c.sp ? t : 1);
    perToken += (2 * q + 2 * q) / t + 2 * kvLocal + 2 * kvLocal;
    double attnSaved = 0;
    if (job.flashAttention)
      attnSaved = 4.0 * headsLocal; // fp32 log-sum-exp
    else
      attnSaved = (job.dropout ? 5.0 : 2.0) * headsLocal * keys;
    double mlpSaved = (l.gatedMlp ? 6.0 : 4.0) * mlpAct / T;
    // fp8 recipes (Transformer Engine, torchao float8) keep the fp8 copy of
    // each linear's input for the weight gradient: the qkv and fc1 inputs (h
    // each), the projection's (q) and fc2's (f) at one byte, not two.
    // Of these, selective recomputation redoes the norm and activation
    // outputs (the qkv, fc1 and fc2 inputs).
    const double fp8Recomputed =
        job.fp8 ? 2 * h / (c.sp ? t : 1) + (l.isMoE() ? 0.0 : mlpAct / T) : 0.0;
    const double fp8Saving = job.fp8 ? fp8Recomputed + q / t : 0.0;
    if (l.isMoE()) {
      // As lowered: the experts keep their dispatched rows and their output
      // rows (the combine's backward reads them); their hidden activations
      // are recomputed by the experts' backward (lc.recompute below).
      // A dropless dispatch: llm-run sizes it for the worst case, every token
      // at every expert (E / top_k times the routed rows); Megatron's and
      // torchtitan's dispatchers for the routed rows (plus a margin).
      double cf = l.capacityFactor > 0 ? l.capacityFactor
                  : job.stack.moeDispatch == MoEDispatch::Routed
                      ? 1.0 + job.stack.moeDispatchMargin
                      : double(l.experts) / double(l.topK);
      mlpSaved = 2 * (2.0 * h * l.topK * cf);
      // With both ep and tp the experts stay whole; under SP each tp rank
      // routes its own sequence chunk.
      if ((c.ep > 1 && c.sp) || expertsWhole)
        mlpSaved /= t;
    }
    switch (c.recompute) {
    case Recompute::None:
      lc.actBytes = T * (perToken + attnSaved + mlpSaved - fp8Saving) * actElt / 2;
      break;
    case Recompute::Selective:
      if (job.flashAttention) {
        // Norm outputs (the inputs of the qkv and fc1 GEMMs) and the
        // activation output (the input of fc2) are recomputed.
        double normOut = 4 * h / (c.sp ? t : 1);
        double actOut = l.isMoE() ? 0.0 : 2.0 * mlpAct / T; // experts keep none
        lc.actBytes =
            T * (perToken - normOut + attnSaved + mlpSaved - actOut - (fp8Saving - fp8Recomputed)) *
            actElt / 2;
      } else {
        lc.actBytes = T * (perToken + mlpSaved) * actElt / 2;
      }
      break;
    case Recompute::Full:
    case Recompute::PerStage:
      lc.actBytes = T * 2 * h / (c.sp ? t : 1) * actElt / 2;
      lc.recomputedBytes = T * (perToken + attnSaved + mlpSaved) * actElt / 2;
      break;
    }

    lc.denseParams = l.denseParams / t;
    lc.expertParams = l.expertParams / ((expertsWhole ? 1.0 : t) * c.ep);
    lc.fullParamsBytes = (l.denseParams + l.expertParams / c.ep) * bytesOf(job.dtype);
    return lc;
  }

  LayerTable table() const {
    const size_t L = model.layers.size();
    LayerTable t;
    for (std::vector<double> *v : {&t.time, &t.fwdWindow, &t.bwdWindow, &t.compute, &t.recompute,
                                   &t.tp, &t.cp, &t.ep, &t.hidden, &t.act, &t.dense, &t.expert})
      v->assign(L + 1, 0.0);
    LayerCost lc;
    for (size_t i = 0; i < L; ++i) {
      const LayerDesc &l = model.layers[i];
      // Consecutive layers of one kind cost the same.
      if (i == 0 || l.hidden != model.layers[i - 1].hidden ||
          l.experts != model.layers[i - 1].experts || l.ffn != model.layers[i - 1].ffn ||
          l.heads != model.layers[i - 1].heads || l.window != model.layers[i - 1].window ||
          l.denseParams != model.layers[i - 1].denseParams)
        lc = layer(l);
      t.time[i + 1] = t.time[i] + lc.fwd + lc.bwd + lc.recompute + lc.tp + lc.cp + lc.ep;
      t.fwdWindow[i + 1] = t.fwdWindow[i] + lc.fwd;
      t.bwdWindow[i + 1] = t.bwdWindow[i] + lc.bwd + lc.recompute;
      t.compute[i + 1] = t.compute[i] + lc.fwd + lc.bwd;
      t.recompute[i + 1] = t.recompute[i] + lc.recompute;
      t.tp[i + 1] = t.tp[i] + lc.tp;
      t.cp[i + 1] = t.cp[i] + lc.cp;
      t.ep[i + 1] = t.ep[i] + lc.ep;
      t.hidden[i + 1] = t.hidden[i] + lc.hidden;
      t.act[i + 1] = t.act[i] + lc.actBytes;
      t.dense[i + 1] = t.dense[i] + lc.denseParams;
      t.expert[i + 1] = t.expert[i] + lc.expertParams;
      t.maxLayerBytes = std::max(t.maxLayerBytes, lc.fullParamsBytes);
      t.maxRecomputedBytes = std::max(t.maxRecomputedBytes, lc.recomputedBytes);
    }
    return t;
  }

  /// `given`: tables for none, selective and full recomputation (entries may
  /// be null; missing ones are built).
  PlanEval run(const LayerTable *const *given) {
    PlanEval ev;
    ev.config = c;
    RejectReason r = checkRules(model, cl, job, c, ev.detail);
    ev.modelFlopsPerStep =
        model.trainFlopsPerToken(job.seqLen) * double(job.globalBatch) * job.seqLen;
    if (r != RejectReason::None) {
      ev.reason = r;
      return ev;
    }
    const int L = static_cast<int>(model.layers.size());
    const int64_t m = c.numMicroBatches;
    // Layer tables per recomputation level; per-stage recomputation uses all
    // three, a uniform choice one.
    std::array<LayerTable, 3> own;
    std::array<const LayerTable *, 3> tables = {nullptr, nullptr, nullptr};
    bool perStage = c.recompute == Recompute::PerStage;
    // Partial (block) recomputation mixes full recomputation and none.
    bool partial = c.recompute == Recompute::Full && c.recomputeLayers > 0;
    for (int lvl = 0; lvl < 3; ++lvl) {
      if (!perStage && lvl != int(c.recompute) && !(partial && lvl == 0))
        continue;
      if (given && given[lvl]) {
        tables[lvl] = given[lvl];
        continue;
      }
      ParallelConfig level = c;
      level.recompute = Recompute(lvl);
      Evaluator e(model, cl, job, level);
      own[lvl] = e.table();
      tables[lvl] = &own[lvl];
    }
    // Balance with no recomputation when each stage picks its own.
    const LayerTable &tab = *tables[perStage || partial ? 0 : int(c.recompute)];
    std::vector<const LayerTable *> stageTab(c.pp, &tab);
    auto range = [&](const std::vector<double> &v, int first, int count) {
      return v[first + count] - v[first];
    };

    // First and last stage extras.
    const double h = double(model.hidden), t = c.tp;
    // The vocabulary rows each tp rank holds, as the stack splits them;
    // below, V / t is that.
    const double V = double(vocabRowsPerRank(model.vocab, c.tp, job.stack.caps.vocabPadding)) * t;
    double embedParams = V * h / t + double(model.positions) * h;
    double headParams = model.tiedEmbeddings ? (c.pp > 1 ? V * h / t : 0) : V * h / t;
    // The loss as a fused softmax cross-entropy (one pass computing each
    // row's log-sum-exp, kept for the backward): the logits are written by
    // the GEMM and read once forward; read and their gradient written once
    // backward, all in the activation type. (fp32 logits read three times
    // forward and twice backward over-predicted GPT-2 124M's step on an H100
    // by a fifth after calibration: 10 of its 42 ms.)
    double headFwd = gemm16(tokens, V / t, h) + memTime(tokens * V / t * actElt * 2);
    double headBwd = 2 * gemm16(tokens, V / t, h) + memTime(tokens * V / t * actElt * 2);
    double embedTime = memTime(tokens * h * actElt * 3);
    double logitsBytes = tokens * V / t * (2 * actElt);
    double headAct = tokens * h * actElt / (c.sp ? t : 1);

    // Stage layout.
    std::vector<int> stageLayers = c.stageLayers;
    auto perMbTime = [&](int stage, int first, int count) {
      double sum = range(stageTab[stage]->time, first, count);
      if (stage == 0)
        sum += 2 * embedTime;
      if (stage == c.pp - 1)
        sum += headFwd + headBwd;
      return sum;
    };
    if (stageLayers.empty() && c.vpp > 1) {
      stageLayers = interleavedStageLayers(L, c.pp, c.vpp, job.stack.caps.unevenInterleaving);
    } else if (stageLayers.empty()) {
      stageLayers.assign(c.pp, L / c.pp);
      // Extra layers go to the middle stages, which carry no embedding or head.
      for (int extra = L % c.pp, i = 0; extra > 0; --extra, ++i)
        stageLayers[c.pp > 2 ? 1 + i % (c.pp - 2) : i % c.pp] += 1;
      // Uneven split when it helps (non-interleaved): move layers off the
      // heavier end stages while that lowers the bottleneck.
      if (c.pp > 1 && c.vpp == 1 && job.stack.caps.unevenStages) {
        for (int iter = 0; iter < 2 * c.pp; ++iter) {
          std::vector<double> times(c.pp);
          for (int sIdx = 0, first = 0; sIdx < c.pp; first += stageLayers[sIdx++])
            times[sIdx] = perMbTime(sIdx, first, stageLayers[sIdx]);
          int worst = int(std::max_element(times.begin(), times.end()) - times.begin());
          if ((worst != 0 && worst != c.pp - 1) || stageLayers[worst] <= 1)
            break;
          int to = worst == 0 ? 1 : c.pp - 2;
          std::vector<int> trial = stageLayers;
          trial[worst] -= 1;
          trial[to] += 1;
          double newWorst = 0;
          for (int sIdx = 0, first = 0; sIdx < c.pp; first += trial[sIdx++])
            newWorst = std::max(newWorst, perMbTime(sIdx, first, trial[sIdx]));
          if (newWorst >= times[worst])
            break;
          stageLayers = trial;
        }
      }
    }
    ev.config.stageLayers = stageLayers;

    // Partial recomputation: the first recomputeLayers layers of each model
    // chunk (vpp chunks of a stage's layers) from the full-recomputation
    // table, the rest from the table without.
    LayerTable blended;
    if (partial) {
      const LayerTable &full = *tables[2], &none = *tables[0];
      std::vector<bool> recomputed(L, false);
      for (int sIdx = 0, first = 0; sIdx < c.pp; first += stageLayers[sIdx++]) {
        int n = stageLayers[sIdx], chunks = std::max(1, std::min(c.vpp, n));
        for (int k = 0, at = first; k < chunks; ++k) {
          int len = n / chunks + (k < n % chunks ? 1 : 0);
          for (int i = 0; i < std::min(len, c.recomputeLayers); ++i)
            recomputed[at + i] = true;
          at += len;
        }
      }
      auto mix = [&](std::vector<double> LayerTable::*v) {
        std::vector<double> out(L + 1, 0.0);
        for (int i = 0; i < L; ++i) {
          const std::vector<double> &src = recomputed[i] ? full.*v : none.*v;
          out[i + 1] = out[i] + (src[i + 1] - src[i]);
        }
        blended.*v = std::move(out);
      };
      for (auto v :
           {&LayerTable::time, &LayerTable::fwdWindow, &LayerTable::bwdWindow, &LayerTable::compute,
            &LayerTable::recompute, &LayerTable::tp, &LayerTable::cp, &LayerTable::ep,
            &LayerTable::hidden, &LayerTable::act, &LayerTable::dense, &LayerTable::expert})
        mix(v);
      blended.maxLayerBytes = full.maxLayerBytes;
      blended.maxRecomputedBytes = full.maxRecomputedBytes;
      std::fill(stageTab.begin(), stageTab.end(), &blended);
    }

    // Activation bytes per micro-batch crossing a stage boundary.
    double boundaryBytes = tokens * h * actElt / (c.sp ? t : 1);
    double p2p = c.pp > 1 ? 2 * c.vpp * coll.sendRecv(boundaryBytes, c.pp > ppPerNode) : 0;
    // Asynchronous sends leave their latency on the path and slow the
    // compute they run beside.
    double p2pHidden = 0;
    if (job.stack.overlap.ppOverlap && p2p > 0)
      p2p = hide(p2p, std::max(0.0, p2p - 2 * c.vpp * cl.collectiveBaseLatency), p2pHidden);

    // Data-parallel groups: dense parameters over dp*cp, experts over dp*cp/ep.
    const int nDense = c.dp * c.cp;
    // Whole experts (an expert group taking tp ranks) are replicated over
    // the rest of dp x cp x tp; experts split over tp over dp x cp / ep.
    const int nExpert = std::max(1, expertsWhole ? nDense * c.tp / c.ep : nDense / c.ep);
    // ZeRO's groups: all of them, or with hybrid sharding the innermost
    // `shard` ranks (replicas across the rest); experts shard over their
    // share of those where the replicas divide their group.
    const int shardDense = c.shard > 0 ? c.shard : nDense;
    const int replicas = nDense / shardDense;
    const int shardExpert = nExpert % replicas == 0 ? nExpert / replicas : nExpert;
    const int expertReplicas = nExpert / shardExpert;
    const double gradB = job.gradBytes;
    const double wB = bytesOf(job.dtype == DType::FP8 ? DType::BF16 : job.dtype);

    std::vector<double> stageTimes(c.pp);
    double worstDp = 0, worstOpt = 0, worstDpHidden = 0;
    double peakTotal = -1;
    for (int sIdx = 0, first = 0; sIdx < c.pp; first += stageLayers[sIdx++]) {
      StageMemory sm;
      sm.stage = sIdx;
      sm.layers = stageLayers[sIdx];

      // In-flight micro-batches at the stage's peak.
      double inFlight = 1;
      if (c.pp > 1) {
        switch (c.schedule) {
        case Schedule::GPipe:
          inFlight = double(m);
          break;
        case Schedule::Interleaved:
          inFlight = (2.0 * (c.pp - sIdx - 1) + double(c.vpp - 1) * c.pp + 1) / c.vpp;
          break;
        default:
          inFlight = double(c.pp - sIdx);
          break;
        }
        inFlight = std::min(inFlight, double(m));
      }
      sm.inFlight = inFlight;

      double dense = range(tab.dense, first, sm.layers);
      double expert = range(tab.expert, first, sm.layers);
      double maxLayerBytes = tab.maxLayerBytes;
      if (sIdx == 0)
        dense += embedParams;
      if (sIdx == c.pp - 1)
        dense += headParams + double(model.finalNormParams);
      // A recomputed layer's activations live while its backward runs, after
      // the loss's backward has freed the logits: the larger of the two counts.
      double stageLogits = sIdx == c.pp - 1 ? logitsBytes : 0;
      auto activations = [&](const LayerTable &lt) {
        return (range(lt.act, first, sm.layers) + (sIdx == c.pp - 1 ? headAct : 0)) * inFlight +
               std::max(0.0, lt.maxRecomputedBytes - stageLogits);
      };

      MemoryBreakdown &mem = sm.memory;
      double params = dense + expert;
      double shardW = c.zero >= 3 ? 1.0 : 0.0;
      double shardG = c.zero >= 2 ? 1.0 : 0.0;
      auto sharded = [&](double bytesPerParam, double on) {
        return on > 0 ? bytesPerParam * (dense / shardDense + expert / shardExpert)
                      : bytesPerParam * params;
      };
      mem.weights = sharded(wB, shardW);
      if (c.zero >= 3) // the gathered layer and those prefetched
        mem.weights += (1 + std::max(1, job.stack.overlap.zero3Prefetch)) * maxLayerBytes / t;
      mem.gradients = sharded(gradB, shardG);
      mem.optimizer = c.offloadOptimizer ? 0 : sharded(12, c.zero >= 1 ? 1 : 0);
      if (sIdx == c.pp - 1)
        mem.logits = logitsBytes;
      double bucket = 25e6 * gradB;
      mem.commBuffers = (c.tp > 1 ? 2 * tokens * h * actElt : 0) +
                        (nDense > 1 ? std::min(params * gradB, 2 * bucket) : 0);
      auto setActivations = [&](const LayerTable &lt) {
        mem.activations = activations(lt);
        mem.reserved = cl.gpu.reservedBytes + 0.05 * (mem.activations + mem.logits);
      };
      if (perStage) {
        // The least recomputation that fits; full when nothing does.
        int lvl = 0;
        for (; lvl < 2; ++lvl) {
          setActivations(*tables[lvl]);
          if (mem.total() <= cl.gpu.hbmBytes)
            break;
        }
        stageTab[sIdx] = tables[lvl];
        ev.config.stageRecompute.push_back(Recompute(lvl));
      }
      setActivations(*stageTab[sIdx]);
      const LayerTable &st = *stageTab[sIdx];
      double fwd = range(st.fwdWindow, first, sm.layers);
      double bwd = range(st.bwdWindow, first, sm.layers);
      stageTimes[sIdx] = perMbTime(sIdx, first, sm.layers) + p2p;
      {
        double fwdWork = fwd + (sIdx == 0 ? embedTime : 0) + (sIdx == c.pp - 1 ? headFwd : 0);
        double bwdWork = bwd + (sIdx == 0 ? embedTime : 0) + (sIdx == c.pp - 1 ? headBwd : 0);
        double comm = stageTimes[sIdx] - fwdWork - bwdWork;
        double share = fwdWork + bwdWork > 0 ? fwdWork / (fwdWork + bwdWork) : 0.5;
        sm.forwardSeconds = fwdWork + comm * share;
        sm.backwardSeconds = stageTimes[sIdx] - sm.forwardSeconds;
      }
      double total = mem.total();
      if (total > peakTotal) {
        peakTotal = total;
        ev.peakStage = sIdx;
        ev.peak = mem;
      }
      ev.stages.push_back(sm);

      // Gradient reduction and parameter gathers (per stage), and the
      // optimizer step on the parameters whose states this rank keeps.
      double gDense = dense * gradB, gExpert = expert * gradB;
      double wDense = dense * wB, wExpert = expert * wB;
      // Hybrid sharding: reduce-scatter within the shard group, then
      // all-reduce the shard across the replicas (ranks `shard` apart).
      auto across = [&](double bytes, int shard, int reps) {
        return reps > 1 ? coll.allReduce(bytes / shard, reps, std::max(1, dpcpPerNode / shard))
                        : 0.0;
      };
      double rs = coll.reduceScatter(gDense, shardDense, std::min(shardDense, dpcpPerNode)) +
                  across(gDense, shardDense, replicas) +
                  coll.reduceScatter(gExpert, shardExpert, std::min(shardExpert, dpcpPerNode)) +
                  across(gExpert, shardExpert, expertReplicas);
      double ar = coll.allReduce(gDense, nDense, dpcpPerNode) +
                  coll.allReduce(gExpert, nExpert, std::min(nExpert, dpcpPerNode));
      double ag = coll.allGather(wDense, shardDense, std::min(shardDense, dpcpPerNode)) +
                  coll.allGather(wExpert, shardExpert, std::min(shardExpert, dpcpPerNode));
      double buckets = std::max(1.0, (gDense + gExpert) / bucket);
      // Gradient buckets overlap the backward, the last one never; without
      // the stack's overlap the whole reduction follows the backward.
      // ZeRO-3 gathers each layer's parameters while the previous ones
      // compute (prefetch), so the first gather of each pass is exposed.
      const bool dpOverlap = job.stack.overlap.dpOverlap;
      const double pieces = std::max(1, sm.layers);
      double dpExposed = 0, dpHidden = 0;
      auto add = [&](double comm, double window, double n, double times = 1) {
        double hid = 0;
        dpExposed += times * overlap(comm, dpOverlap ? window : 0, n, hid);
        dpHidden += times * hid;
      };
      switch (c.zero) {
      case 0:
        add(ar, bwd, buckets);
        break;
      case 1:
        add(rs, bwd, buckets);
        add(ag, fwd, buckets);
        break;
      case 2:
        add(rs, bwd, buckets, double(m));
        add(ag, fwd, buckets);
        break;
      case 3:
        add(ag, fwd, pieces, double(m));
        add(ag + rs, bwd, pieces, double(m));
        break;
      }
      if (nDense == 1)
        dpExposed = dpHidden = 0;
      double optParams = c.zero >= 1 ? dense / shardDense + expert / shardExpert : params;
      double opt = memTime(optParams * (2 * wB + 2 * gradB + 24));
      if (job.gradClipping)
        opt += memTime(params * gradB) + cl.collectiveBaseLatency;
      if (c.offloadOptimizer)
        opt = optParams * (gradB + wB) / cl.pcieBandwidth + optParams / cl.cpuAdamParamsPerS;
      if (dpExposed > worstDp)
        worstDpHidden = dpHidden;
      worstDp = std::max(worstDp, dpExposed);
      worstOpt = std::max(worstOpt, opt);
      if (c.offloadOptimizer && 12.0 * optParams * cl.gpusPerNode > cl.hostMemoryBytes) {
        ev.reason = RejectReason::HostOutOfMemory;
        ev.detail =
            llvm::formatv("offloaded optimizer states need {0:f1} GiB of host "
                          "memory per node, the node has {1:f1} GiB",
                          12.0 * optParams * cl.gpusPerNode / GiB, cl.hostMemoryBytes / GiB);
      }
    }

    // Pipeline: m micro-batches through the bottleneck stage, plus fill and
    // drain (shortened by interleaving).
    int worst = int(std::max_element(stageTimes.begin(), stageTimes.end()) - stageTimes.begin());
    double tMax = stageTimes[worst];
    double sumOthers = std::accumulate(stageTimes.begin(), stageTimes.end(), 0.0) - tMax;
    TimeBreakdown &tb = ev.time;
    int wFirst = std::accumulate(stageLayers.begin(), stageLayers.begin() + worst, 0);
    int wCount = stageLayers[worst];
    const LayerTable &wt = *stageTab[worst];
    tb.compute = range(wt.compute, wFirst, wCount);
    tb.recompute = range(wt.recompute, wFirst, wCount);
    tb.tpComm = range(wt.tp, wFirst, wCount);
    tb.cpComm = range(wt.cp, wFirst, wCount);
    tb.epComm = range(wt.ep, wFirst, wCount);
    tb.hiddenComm = (range(wt.hidden, wFirst, wCount) + p2pHidden) * double(m) + worstDpHidden;
    if (worst == 0)
      tb.compute += 2 * embedTime;
    if (worst == c.pp - 1)
      tb.compute += headFwd + headBwd;
    tb.ppComm = p2p;
    for (double *x : {&tb.compute, &tb.recompute, &tb.tpComm, &tb.cpComm, &tb.epComm, &tb.ppComm})
      *x *= double(m);
    tb.bubble = c.pp > 1 ? sumOthers / c.vpp : 0;
    tb.dpComm = worstDp;
    tb.optimizer = worstOpt;
    tb.step = tb.compute + tb.recompute + tb.tpComm + tb.cpComm + tb.epComm + tb.ppComm +
              tb.bubble + tb.dpComm + tb.optimizer;

    double tokensPerStep = double(job.globalBatch) * job.seqLen;
    ev.tokensPerS = tokensPerStep / tb.step;
    ev.tflopsPerGpu = ev.modelFlopsPerStep / tb.step / c.gpus() / 1e12;
    ev.mfu = ev.modelFlopsPerStep / tb.step / c.gpus() /
             cl.gpu.peakFlops(job.dtype == DType::FP8 ? DType::BF16 : job.dtype);

    if (ev.reason == RejectReason::None && peakTotal > cl.gpu.hbmBytes) {
      ev.reason = RejectReason::OutOfMemory;
      double excess = peakTotal - cl.gpu.hbmBytes;
      std::string by = excess < 0.01 * GiB ? llvm::formatv("{0:f1} MiB", excess / (1 << 20)).str()
                                           : llvm::formatv("{0:f2} GiB", excess / GiB).str();
      ev.detail = llvm::formatv("OOM by {0} on stage {1} ({2:f2} of {3:f2} GiB)", by, ev.peakStage,
                                peakTotal / GiB, cl.gpu.hbmBytes / GiB);
    }
    return ev;
  }
};

} // namespace

PlanEval llmopt::cost::evaluate(const ModelDesc &model, const ClusterSpec &cluster,
                                const JobSpec &job, const ParallelConfig &cfg,
                                const LayerTable *table) {
  Evaluator e(model, cluster, job, cfg);
  std::array<const LayerTable *, 3> tables = {nullptr, nullptr, nullptr};
  if (table && cfg.recompute != Recompute::PerStage)
    tables[int(cfg.recompute)] = table;
  return e.run(tables.data());
}

PlanEval llmopt::cost::evaluate(const ModelDesc &model, const ClusterSpec &cluster,
                                const JobSpec &job, const ParallelConfig &cfg,
                                const std::array<const LayerTable *, 3> &tables) {
  Evaluator e(model, cluster, job, cfg);
  return e.run(tables.data());
}

LayerTable llmopt::cost::buildLayerTable(const ModelDesc &model, const ClusterSpec &cluster,
                                         const JobSpec &job, const ParallelConfig &cfg) {
  Evaluator e(model, cluster, job, cfg);
  return e.table();
}

bool llmopt::cost::expertsStayWhole(const JobSpec &job, const ParallelConfig &cfg) {
  return cfg.ep > 1 && cfg.tp > 1 && (cfg.dp * cfg.cp) % cfg.ep != 0 &&
         job.stack.caps.expertParallel == EPLayout::DataTensorParallel;
}

int llmopt::cost::expertGroupPerNode(const ClusterSpec &cluster, const JobSpec &job,
                                     const ParallelConfig &cfg) {
  ModelDesc model;
  Evaluator e(model, cluster, job, cfg);
  return e.epPerNode;
}
