//===- Report.cpp - plan reports, tables and exports ----------------------===//

#include "llmopt/Planner/Planner.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>

using namespace llmopt;
using namespace llmopt::cost;
using namespace llmopt::planner;
namespace json = llvm::json;

static constexpr double GiB = double(1ull << 30);

static json::Object memoryJSON(const MemoryBreakdown &m) {
  return json::Object{
      {"weights", m.weights},         {"gradients", m.gradients}, {"optimizer", m.optimizer},
      {"activations", m.activations}, {"logits", m.logits},       {"comm_buffers", m.commBuffers},
      {"reserved", m.reserved},       {"total", m.total()},
  };
}

static json::Array stageRecompute(const ParallelConfig &c) {
  json::Array a;
  for (Recompute r : c.stageRecompute)
    a.push_back(toString(r));
  return a;
}

/// The model as the planner read it: what an export must make the trainer
/// build (the ecosystem tier compares the trainer's model with it).
static json::Object modelJSON(const ModelDesc &model, const JobSpec &job) {
  json::Object o{{"name", model.name},
                 {"params", model.totalParams()},
                 {"layers", int64_t(model.layers.size())},
                 {"train_flops_per_token", model.trainFlopsPerToken(job.seqLen)},
                 {"vocab", model.vocab},
                 {"positions", model.positions},
                 {"rope_theta", model.ropeTheta},
                 {"rope_scaling", model.ropeScaling},
                 {"rope_factor", model.ropeFactor},
                 {"rope_low_freq_factor", model.ropeLowFreqFactor},
                 {"rope_high_freq_factor", model.ropeHighFreqFactor},
                 {"rope_original_positions", model.ropeOriginalPositions},
                 {"tied_embeddings", model.tiedEmbeddings}};
  if (model.layers.empty())
    return o;
  const LayerDesc &l = model.layers.front();
  o["layer"] = json::Object{{"hidden", l.hidden},    {"heads", l.heads},
                            {"kv_heads", l.kvHeads}, {"head_dim", l.headDim},
                            {"ffn", l.ffn},          {"activation", l.activation},
                            {"window", l.window},    {"norm", l.norm},
                            {"norm_eps", l.normEps}, {"qkv_bias", l.qkvBias},
                            {"out_bias", l.outBias}, {"mlp_bias", l.mlpBias},
                            {"experts", l.experts},  {"top_k", l.topK},
                            {"aux_loss", l.auxLoss}, {"router_normalize", l.routerNormalize}};
  return o;
}

static json::Object configJSON(const ParallelConfig &c) {
  json::Array stages;
  for (int n : c.stageLayers)
    stages.push_back(n);
  return json::Object{
      {"dp", c.dp},
      {"tp", c.tp},
      {"pp", c.pp},
      {"vpp", c.vpp},
      {"cp", c.cp},
      {"ep", c.ep},
      {"sp", c.sp},
      {"zero", c.zero},
      {"shard", c.shard},
      {"offload_optimizer", c.offloadOptimizer},
      {"recompute", toString(c.recompute)},
      {"recompute_layers", c.recomputeLayers},
      {"stage_recompute", stageRecompute(c)},
      {"micro_batch", c.microBatch},
      {"num_micro_batches", c.numMicroBatches},
      {"schedule", toString(c.schedule)},
      {"placement", c.placement()},
      {"stage_layers", std::move(stages)},
  };
}

static json::Object planJSON(const PlanEval &p) {
  json::Array byStage, timeByStage;
  for (const StageMemory &s : p.stages) {
    json::Object o = memoryJSON(s.memory);
    o["stage"] = s.stage;
    o["layers"] = s.layers;
    o["in_flight_micro_batches"] = s.inFlight;
    byStage.push_back(std::move(o));
    timeByStage.push_back(json::Object{
        {"stage", s.stage}, {"forward_s", s.forwardSeconds}, {"backward_s", s.backwardSeconds}});
  }
  const TimeBreakdown &t = p.time;
  return json::Object{
      {"config", configJSON(p.config)},
      {"step_time_s", t.step},
      {"tokens_per_s", p.tokensPerS},
      {"tflops_per_gpu", p.tflopsPerGpu},
      {"mfu", p.mfu},
      {"peak_memory_bytes", p.peak.total()},
      {"peak_memory_stage", p.peakStage},
      {"memory_breakdown", memoryJSON(p.peak)},
      {"memory_by_stage", std::move(byStage)},
      {"time_breakdown",
       json::Object{
           {"compute", t.compute},
           {"recompute", t.recompute},
           {"exposed_communication", json::Object{{"tp", t.tpComm},
                                                  {"cp", t.cpComm},
                                                  {"ep", t.epComm},
                                                  {"pp", t.ppComm},
                                                  {"dp", t.dpComm}}},
           {"bubble", t.bubble},
           {"optimizer", t.optimizer},
           {"hidden_comm_s", t.hiddenComm},
       }},
      {"time_by_stage", std::move(timeByStage)},
  };
}

/// How `c` differs from `ref`, a plan of the same family: its pipeline
/// layout in the table's words ("vpp5", "1f1b", "pp-inside-dp").
/// The pipeline layout of `c` without its placement: "vpp5", "1f1b".
static std::string layoutName(const ParallelConfig &c) {
  return c.vpp > 1 ? llvm::formatv("vpp{0}", c.vpp).str() : std::string(toString(c.schedule));
}

static std::string layoutDifference(const ParallelConfig &c, const ParallelConfig &ref) {
  std::string s;
  if (c.vpp != ref.vpp || c.schedule != ref.schedule)
    s = layoutName(c);
  if (c.ppInsideDp != ref.ppInsideDp)
    s += std::string(s.empty() ? "" : " ") + (c.ppInsideDp ? "pp-inside-dp" : "pp-outside-dp");
  return s;
}

/// One line for the table: the other layouts of `p` and the spread of their
/// times and memory, with twins that differ only in placement said once.
static std::string equivalentsLine(const PlanEval &p, const std::vector<Equivalent> &eq) {
  std::vector<std::string> layouts;
  std::map<std::string, int> placements; // layout -> bit 1 outside, bit 2 inside
  placements[layoutName(p.config)] |= p.config.ppInsideDp ? 2 : 1;
  double lo = 0, hi = 0, memLo = p.peak.total(), memHi = memLo;
  for (const Equivalent &e : eq) {
    std::string l = layoutName(e.config);
    if (l != layoutName(p.config) && !placements.count(l))
      layouts.push_back(l);
    placements[l] |= e.config.ppInsideDp ? 2 : 1;
    double d = 100.0 * (e.stepSeconds / p.time.step - 1);
    lo = std::min(lo, d), hi = std::max(hi, d);
    memLo = std::min(memLo, e.peakBytes), memHi = std::max(memHi, e.peakBytes);
  }
  bool everyPlacement = llvm::all_of(placements, [](auto &kv) { return kv.second == 3; });
  std::string s;
  if (everyPlacement) {
    s = layouts.empty() ? "the other pp placement" : llvm::join(layouts, ", ");
    if (!layouts.empty())
      s += ", each in either pp placement";
  } else {
    std::vector<std::string> each;
    for (const Equivalent &e : eq)
      each.push_back(layoutDifference(e.config, p.config));
    s = llvm::join(each, ", ");
  }
  std::string time = hi - lo < 0.005 ? llvm::formatv("{0:f2}%", hi).str()
                                     : llvm::formatv("{0:f2}% to {1:f2}%", lo, hi).str();
  std::string mem = memHi - memLo < 0.05 * GiB
                        ? llvm::formatv("{0:f1} GiB", memHi / GiB).str()
                        : llvm::formatv("{0:f1} to {1:f1} GiB", memLo / GiB, memHi / GiB).str();
  return s + " (" + time + ", " + mem + ")";
}

static json::Value comparisonJSON(const RecipeComparison &c) {
  json::Array items, changes;
  for (const GainItem &i : c.items)
    items.push_back(json::Object{{"category", i.category},
                                 {"recipe_s", i.recipeSeconds},
                                 {"best_s", i.bestSeconds},
                                 {"confidence", i.confidence},
                                 {"basis", i.basis}});
  for (const std::string &s : c.changes)
    changes.push_back(s);
  return json::Object{{"best", planJSON(c.best)},
                      {"gain", c.gain},
                      {"changes", std::move(changes)},
                      {"by_category", std::move(items)},
                      {"verdict", c.verdict}};
}

static json::Value rankingJSON() {
  return json::Object{
      {"tie_tolerance", kTieTolerance},
      {"equivalent_tolerance", kEquivalentTolerance},
      {"rule", "best first by step time; step times within tie_tolerance are ties, the "
               "simpler plan first (no offload, then less cp, fewer pipeline chunks, smaller "
               "tp, ep, ZeRO stage, less recomputation, larger micro-batch); one row per "
               "plan, its other pipeline layouts (vpp, schedule, placement) within "
               "equivalent_tolerance listed as its equivalents"}};
}

json::Value llmopt::planner::reportJSON(const ModelDesc &model, const ClusterSpec &cluster,
                                        const JobSpec &job, const SearchResult &r) {
  json::Array plans;
  for (size_t i = 0; i < r.plans.size(); ++i) {
    json::Object p = planJSON(r.plans[i]);
    // Expert tensor parallelism: experts split over tp, or kept whole where
    // the expert-parallel group takes tensor-parallel ranks.
    if (json::Object *config = p.getObject("config"))
      (*config)["expert_tensor_parallel"] =
          expertsStayWhole(job, r.plans[i].config) ? 1 : r.plans[i].config.tp;
    json::Array eq;
    if (i < r.equivalents.size())
      for (const Equivalent &e : r.equivalents[i])
        eq.push_back(json::Object{{"config", configJSON(e.config)},
                                  {"step_time_s", e.stepSeconds},
                                  {"peak_memory_bytes", e.peakBytes}});
    p["equivalents"] = std::move(eq);
    double ceiling = calibratedMfuCeiling(model, job);
    p["above_calibrated_mfu"] = ceiling > 0 && r.plans[i].mfu > ceiling;
    plans.push_back(std::move(p));
  }
  json::Object rejected, examples;
  for (const auto &[reason, rej] : r.rejected) {
    rejected[reason] = rej.count;
    examples[reason] = rej.example;
  }
  return json::Object{
      {"model", modelJSON(model, job)},
      {"cluster", toJSON(cluster)},
      {"stack", toJSON(job.stack)},
      {"job", json::Object{{"global_batch", job.globalBatch},
                           {"seq_len", job.seqLen},
                           {"dtype", toString(job.dtype)},
                           {"fp8", job.fp8},
                           {"grad_bytes", job.gradBytes},
                           {"flash_attention", job.flashAttention},
                           {"dropout", job.dropout}}},
      {"search",
       json::Object{{"evaluated", r.evaluated}, {"feasible", r.feasible}, {"seconds", r.seconds}}},
      {"ranking", rankingJSON()},
      {"calibrated_mfu_ceiling", calibratedMfuCeiling(model, job)},
      {"versus_free_search", r.versusFree ? comparisonJSON(*r.versusFree) : json::Value(nullptr)},
      {"plans", std::move(plans)},
      {"rejected", std::move(rejected)},
      {"rejected_examples", std::move(examples)},
  };
}

static void printComparison(llvm::raw_ostream &os, const RecipeComparison &c) {
  os << "\nyour recipe (fix=) is plan 1; the best plan of a free search:\n";
  os << llvm::formatv("  {0}  {1:f3} s, {2:p} MFU, {3:f1} GiB ({4:p} faster)\n",
                      describe(c.best.config), c.best.time.step, c.best.mfu,
                      c.best.peak.total() / GiB, c.gain);
  if (!c.changes.empty())
    os << "  changes: " << llvm::join(c.changes, ", ") << "\n";
  if (!c.items.empty()) {
    os << llvm::formatv("  {0,-18} {1,10} {2,10} {3,9}  {4}\n", "s per step", "recipe", "best",
                        "gain", "confidence");
    for (const GainItem &i : c.items)
      os << llvm::formatv("  {0,-18} {1,10:f3} {2,10:f3} {3,9:f3}  {4}: {5}\n", i.category,
                          i.recipeSeconds, i.bestSeconds, i.recipeSeconds - i.bestSeconds,
                          i.confidence, i.basis);
  }
  os << "  " << c.verdict << "\n";
}

void llmopt::planner::printTable(llvm::raw_ostream &os, const ModelDesc &model,
                                 const ClusterSpec &cluster, const JobSpec &job,
                                 const SearchResult &r) {
  // Parameters in the unit that keeps two decimals meaningful (B, M or K).
  double params = model.totalParams();
  std::string count = params >= 1e9   ? llvm::formatv("{0:f2} B", params / 1e9).str()
                      : params >= 1e6 ? llvm::formatv("{0:f2} M", params / 1e6).str()
                                      : llvm::formatv("{0:f2} K", params / 1e3).str();
  os << llvm::formatv("{0}: {1} parameters, {2} layers | {3} x {4} ({5} {6} of {7}) "
                      "| global batch {8} x {9} tokens, {10}\n",
                      model.name, count, model.layers.size(), cluster.totalGpus(), cluster.gpu.name,
                      cluster.numNodes, cluster.numNodes == 1 ? "node" : "nodes",
                      cluster.gpusPerNode, job.globalBatch, job.seqLen,
                      job.fp8 ? "fp8 GEMMs" : toString(job.dtype));
  const StackProfile &st = job.stack;
  os << "stack " << st.name << (st.variant.empty() ? "" : ":" + st.variant) << ": " << st.title
     << " (" << st.versions << "); profile "
     << (st.maxCalibratedMfuBf16 > 0
             // A fit with no error on published rows is of the stack's own
             // measured runs (llm-run's kernel profile).
             ? llvm::formatv("fitted on {0} runs reaching {1:p} MFU at most",
                             st.calibratedMaxError > 0 ? "published" : "its own measured",
                             st.maxCalibratedMfuBf16)
                   .str()
             : std::string("not fitted on published runs"))
     << "\n";
  os << llvm::formatv("searched {0} configurations in {1:f3} s, {2} fit\n\n", r.evaluated,
                      r.seconds, r.feasible);
  if (!r.plans.empty()) {
    size_t width = 4;
    for (const PlanEval &p : r.plans)
      width = std::max(width, describe(p.config).size());
    os << "#    " << llvm::left_justify("plan", width)
       << llvm::formatv(" {0,10} {1,12} {2,8} {3,7} {4,8}\n", "step s", "tokens/s", "TFLOP/s",
                        "MFU", "mem GiB");
    bool anyEquivalent = false, anyAbove = false;
    const double ceiling = calibratedMfuCeiling(model, job);
    for (size_t i = 0; i < r.plans.size(); ++i) {
      const PlanEval &p = r.plans[i];
      bool above = ceiling > 0 && p.mfu > ceiling;
      anyAbove |= above;
      os << llvm::formatv("{0,-4} ", i + 1) << llvm::left_justify(describe(p.config), width)
         << llvm::formatv(" {0,10:f3} {1,12:f0} {2,8:f1} {3,7:p}{5} {4,8:f1}\n", p.time.step,
                          p.tokensPerS, p.tflopsPerGpu, p.mfu, p.peak.total() / GiB,
                          above ? "!" : " ");
      if (i >= r.equivalents.size() || r.equivalents[i].empty())
        continue;
      anyEquivalent = true;
      os << "       = " << equivalentsLine(p, r.equivalents[i]) << "\n";
    }
    if (anyEquivalent)
      os << llvm::formatv("  (= the same plan with another pipeline layout, within {0}%: one "
                          "row each; times within {1}% rank the simpler plan first)\n",
                          100 * kEquivalentTolerance, 100 * kTieTolerance);
    if (anyAbove)
      os << llvm::formatv("  (! MFU above the {0:p} that the stack's best published {1}run "
                          "reaches{2}: no published run confirms it)\n",
                          ceiling, model.hasMoE() ? "MoE " : "", job.fp8 ? " with fp8" : "");
    if (r.versusFree)
      printComparison(os, *r.versusFree);
    const PlanEval &b = r.plans.front();
    const TimeBreakdown &t = b.time;
    auto pct = [&](double x) { return t.step > 0 ? 100.0 * x / t.step : 0.0; };
    os << "\nbest plan, step time:";
    os << llvm::formatv(" compute {0:f1}%, recompute {1:f1}%, bubble {2:f1}%, "
                        "exposed comm tp {3:f1}% cp {4:f1}% ep {5:f1}% pp {6:f1}% "
                        "dp {7:f1}%, optimizer {8:f1}%; hidden behind compute {9:f3} s\n",
                        pct(t.compute), pct(t.recompute), pct(t.bubble), pct(t.tpComm),
                        pct(t.cpComm), pct(t.epComm), pct(t.ppComm), pct(t.dpComm),
                        pct(t.optimizer), t.hiddenComm);
    const MemoryBreakdown &m = b.peak;
    os << llvm::formatv("best plan, memory on stage {0} of {1:f1} GiB: weights {2:f1}, "
                        "gradients {3:f1}, optimizer {4:f1}, activations {5:f1}, logits "
                        "{6:f1}, buffers {7:f1}, reserved {8:f1}\n",
                        b.peakStage, cluster.gpu.hbmBytes / GiB, m.weights / GiB, m.gradients / GiB,
                        m.optimizer / GiB, m.activations / GiB, m.logits / GiB, m.commBuffers / GiB,
                        m.reserved / GiB);
  }
  if (!r.rejected.empty()) {
    os << "\nrejected:\n";
    for (const auto &[reason, rej] : r.rejected)
      os << llvm::formatv("  {0,-44} {1,9}  e.g. {2}\n", reason, rej.count, rej.example);
  }
}

//===----------------------------------------------------------------------===//
// Exports
//===----------------------------------------------------------------------===//

static const LayerDesc *firstLayer(const ModelDesc &m) {
  return m.layers.empty() ? nullptr : &m.layers.front();
}

/// The shortest decimal that reads back as `v`.
static std::string exactNumber(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

/// The first field in which a layer differs from the first (the exports
/// describe one layer for all), or "" when every layer is alike.
static std::string unlikeLayers(const ModelDesc &m) {
  const LayerDesc &a = m.layers.front();
  for (size_t i = 1; i < m.layers.size(); ++i) {
    const LayerDesc &b = m.layers[i];
    std::string what =
        a.heads != b.heads || a.kvHeads != b.kvHeads || a.headDim != b.headDim ? "attention heads"
        : a.ffn != b.ffn || a.activation != b.activation                       ? "MLP"
        : a.window != b.window                                                 ? "attention window"
        : a.norm != b.norm || a.normEps != b.normEps                           ? "norm"
        : a.qkvBias != b.qkvBias || a.outBias != b.outBias || a.mlpBias != b.mlpBias ? "biases"
        : a.experts != b.experts || a.topK != b.topK || a.auxLoss != b.auxLoss ||
                a.routerNormalize != b.routerNormalize
            ? "experts"
            : "";
    if (!what.empty())
      return "layer " + std::to_string(i) + "'s " + what + " differ from layer 0's";
  }
  return "";
}

namespace {
/// The trainers the exports target, the stack each is searched for, and the
/// versions whose arguments / keys the export uses (docs/planner.md).
struct ExportTarget {
  const char *format;
  const char *stack;
  const char *trainer;
};
const ExportTarget kTargets[] = {
    {"megatron", "megatron",
     "Megatron-LM (main 2026-08 with Megatron-Core 0.16, pretrain_gpt.py arguments)"},
    {"deepspeed", "deepspeed", "DeepSpeed 0.19 (ds_config JSON)"},
    {"torchtitan", "torchtitan",
     "torchtitan 0.3.x (python -m torchtitan.train arguments, --module llama3 --config)"},
    {"torchtitan-0.2", "torchtitan", "torchtitan 0.2.x (job config TOML)"},
};

/// Refuses with `error` naming the setting and the trainer.
bool refuse(std::string &error, const ExportTarget &t, const std::string &what) {
  error =
      std::string(t.format) + " export: " + what + "; " + t.trainer + " cannot run it as planned";
  return false;
}

bool exportMegatron(llvm::raw_ostream &os, const ExportTarget &t, const ModelDesc &model,
                    const JobSpec &job, const PlanEval &plan, std::string &error) {
  const ParallelConfig &c = plan.config;
  const LayerDesc &l = *firstLayer(model);
  const int64_t L = int64_t(model.layers.size());
  if (c.recompute == Recompute::PerStage)
    return refuse(error, t, "per-stage recomputation (Megatron recomputes alike on every stage)");
  if (std::string unlike = unlikeLayers(model); !unlike.empty())
    return refuse(error, t, unlike + " (pretrain_gpt.py builds every layer alike)");
  if (l.outBias != l.mlpBias || (l.outBias && !l.qkvBias))
    return refuse(error, t,
                  "biases on some linears only (Megatron has them on every linear, on none, "
                  "or on q/k/v alone)");
  // Megatron-Core's MLP runs F.gelu (exact) or, with --swiglu, SwiGLU;
  // --openai-gelu (tanh) reaches only megatron/legacy's model.
  if (l.activation == "gelu_tanh")
    return refuse(error, t,
                  "GeLU's tanh approximation (gelu_new: Megatron-Core's MLP has the exact "
                  "GeLU, and --openai-gelu reaches only the legacy model; plan the model with "
                  "activation_function gelu to train it with Megatron)");
  if (l.activation != "swiglu" && l.activation != "gelu")
    return refuse(error, t, "the activation '" + l.activation + "'");
  if (model.ropeTheta > 0 && model.ropeTheta != std::round(model.ropeTheta))
    return refuse(error, t,
                  "a rotary base of " + exactNumber(model.ropeTheta) +
                      " (--rotary-base takes an integer)");
  // Pipeline stages inside data parallelism (--use-tp-pp-dp-mapping, order
  // tp-cp-ep-pp-dp): initialize_model_parallel then needs the expert
  // groups' data parallelism to be the dense one (etp x ep = tp x cp).
  const int64_t etp = l.isMoE() && expertsStayWhole(job, c) ? 1 : c.tp;
  if (c.ppInsideDp && c.pp > 1 && c.dp > 1 && etp * c.ep != int64_t(c.tp) * c.cp)
    return refuse(error, t,
                  llvm::formatv("pipeline stages inside data parallelism with expert tensor x "
                                "expert parallelism {0} x {1} unlike tp x cp {2} x {3} "
                                "(initialize_model_parallel refuses the tp-cp-ep-pp-dp order "
                                "then; the closest plan places pp outside dp)",
                                etp, c.ep, c.tp, c.cp)
                      .str());
  if (!model.ropeScaling.empty() && model.ropeScaling != "default" && model.ropeScaling != "llama3")
    return refuse(error, t, "rope scaling '" + model.ropeScaling + "'");
  // pretrain_gpt's model builder passes no rope scaling factor to GPTModel,
  // whose own is Llama 3.1's 8 (gpt_builders.py, read 2026-11).
  if (model.ropeScaling == "llama3" && model.ropeFactor != 8)
    return refuse(error, t,
                  llvm::formatv("Llama 3 rope scaling with factor {0} (pretrain_gpt.py builds "
                                "GPTModel with its default factor 8 whatever "
                                "--rope-scaling-factor says)",
                                model.ropeFactor)
                      .str());
  // Stage layers: even, Megatron's uneven first / last stages, or
  // interleaved with the embedding and loss counted as layers.
  std::string stages;
  if (c.pp > 1 && c.vpp == 1) {
    std::vector<int> s = plan.config.stageLayers;
    bool even = llvm::all_equal(s);
    if (!even) {
      int middle = c.pp > 2 ? int(L) - s.front() - s.back() : 0;
      bool midEqual =
          c.pp <= 2 || std::all_of(s.begin() + 1, s.end() - 1, [&](int n) { return n == s[1]; });
      if (!midEqual || (c.pp > 2 && middle % (c.pp - 2)))
        return refuse(error, t,
                      "stage layers with unequal middle stages (Megatron sets the first and "
                      "last stages' layers, the rest equal)");
      stages = llvm::formatv(" --decoder-first-pipeline-num-layers {0} "
                             "--decoder-last-pipeline-num-layers {1}",
                             s.front(), s.back())
                   .str();
    }
  }
  if (c.vpp > 1 && L % (c.pp * c.vpp))
    stages = " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split";
  const bool fsdp = c.zero >= 2;
  os << "# " << t.trainer << " for " << model.name << ": " << describe(c) << "\n";
  // The launch environment: TP and CP overlap their collectives only with
  // one connection (validate_args asserts it before Blackwell); Megatron
  // FSDP asserts the opposite.
  if ((c.tp > 1 || c.cp > 1) && !fsdp)
    os << "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  os << llvm::formatv("--num-layers {0} --hidden-size {1} --num-attention-heads {2} "
                      "--kv-channels {3} --ffn-hidden-size {4} --seq-length {5} "
                      "--max-position-embeddings {6}",
                      L, l.hidden, l.heads, l.headDim, l.ffn, job.seqLen,
                      model.positions > 0 ? model.positions : job.seqLen);
  if (l.kvHeads != l.heads)
    os << llvm::formatv(" --group-query-attention --num-query-groups {0}", l.kvHeads);
  os << (l.norm == "rms" ? " --normalization RMSNorm" : " --normalization LayerNorm");
  os << " --norm-epsilon " << exactNumber(l.normEps);
  if (l.activation == "swiglu")
    os << " --swiglu";
  // Biases: Megatron has them on every linear (add_bias_linear) or on
  // none, plus q/k/v alone (add_qkv_bias).
  if (!l.outBias && !l.mlpBias)
    os << (l.qkvBias ? " --disable-bias-linear --add-qkv-bias" : " --disable-bias-linear");
  if (model.positions == 0) {
    os << " --position-embedding-type rope";
    if (model.ropeTheta > 0)
      os << " --rotary-base " << int64_t(std::llround(model.ropeTheta));
    if (model.ropeScaling == "llama3")
      os << " --use-rope-scaling";
  } else {
    os << " --position-embedding-type learned_absolute";
  }
  // The model's window of W keys (the query's own and W - 1 before it) is
  // Megatron's (left, right) window (W - 1, 0).
  if (l.window > 0)
    os << llvm::formatv(" --window-size {0},0", l.window - 1);
  if (!model.tiedEmbeddings)
    os << " --untie-embeddings-and-output-weights";
  // The vocabulary: Megatron takes it from the tokenizer; its NullTokenizer
  // (pre-tokenized data) takes the size, padded as the megatron stack costs
  // it (a multiple of 128 x tp).
  os << llvm::formatv(" --tokenizer-type NullTokenizer --vocab-size {0}", model.vocab);
  if (!job.dropout)
    os << " --attention-dropout 0.0 --hidden-dropout 0.0";
  if (l.isMoE()) {
    os << llvm::formatv(" --num-experts {0} --moe-router-topk {1} --moe-ffn-hidden-size {2} "
                        "--moe-token-dispatcher-type alltoall --moe-grouped-gemm",
                        l.experts, l.topK, l.ffn);
    // Megatron's router takes the top k of the logits, then a softmax over
    // them (renormalized); pre-softmax is a softmax over all experts first.
    if (!l.routerNormalize)
      os << " --moe-router-pre-softmax";
    if (l.auxLoss > 0)
      os << " --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff "
         << exactNumber(l.auxLoss);
    else
      os << " --moe-router-load-balancing-type none --moe-aux-loss-coeff 0";
  }
  os << "\n";
  os << llvm::formatv("--tensor-model-parallel-size {0} --pipeline-model-parallel-size {1} "
                      "--context-parallel-size {2}",
                      c.tp, c.pp, c.cp);
  if (c.ep > 1)
    os << llvm::formatv(" --expert-model-parallel-size {0}", c.ep);
  // Experts split over the tensor-parallel ranks (Megatron's default), or
  // kept whole where the expert-parallel group takes those ranks.
  if (l.isMoE())
    os << llvm::formatv(" --expert-tensor-parallel-size {0}", etp);
  if (c.ppInsideDp && c.pp > 1 && c.dp > 1)
    os << " --use-tp-pp-dp-mapping";
  if (c.vpp > 1)
    os << llvm::formatv(" --num-virtual-stages-per-pipeline-rank {0}", c.vpp);
  os << stages;
  if (c.sp)
    os << " --sequence-parallel";
  os << "\n";
  os << llvm::formatv("--micro-batch-size {0} --global-batch-size {1}", c.microBatch,
                      job.globalBatch);
  if (c.recompute == Recompute::Selective)
    os << " --recompute-granularity selective";
  else if (c.recompute == Recompute::Full && c.recomputeLayers > 0)
    os << llvm::formatv(" --recompute-granularity full --recompute-method block "
                        "--recompute-num-layers {0}",
                        c.recomputeLayers);
  else if (c.recompute == Recompute::Full)
    os << " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (fsdp)
    os << llvm::formatv(" --use-megatron-fsdp --data-parallel-sharding-strategy {0} "
                        "--ckpt-format fsdp_dtensor --overlap-grad-reduce "
                        "--overlap-param-gather",
                        c.zero == 2 ? "optim_grads" : "optim_grads_params");
  else if (c.zero == 1)
    os << " --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather";
  else
    os << " --overlap-grad-reduce";
  if (c.shard > 0)
    os << llvm::formatv(" --num-distributed-optimizer-instances {0}", c.dp * c.cp / c.shard);
  if (c.offloadOptimizer)
    os << " --optimizer-cpu-offload --use-precision-aware-optimizer";
  os << "\n--bf16";
  if (job.fp8)
    os << " --fp8-format hybrid --fp8-recipe tensorwise";
  // With --bf16 Megatron reduces gradients in fp32 unless told otherwise:
  // the plan's 16-bit gradients need --grad-reduce-in-bf16.
  if (job.gradBytes == 4)
    os << " --accumulate-allreduce-grads-in-fp32";
  else
    os << " --grad-reduce-in-bf16";
  if (job.flashAttention)
    os << " --attention-backend flash";
  os << " --clip-grad 1.0 --optimizer adam\n";
  return true;
}

bool exportDeepSpeed(llvm::raw_ostream &os, const ExportTarget &t, const ModelDesc &model,
                     const JobSpec &job, const PlanEval &plan, std::string &error) {
  const ParallelConfig &c = plan.config;
  const int64_t numLayers = int64_t(model.layers.size());
  // What ds_config cannot carry: the pipeline degree (PipelineModule's
  // num_stages) and the expert-parallel degree (deepspeed.moe.layer.MoE's
  // ep_size) are set in the model code.
  if (c.pp > 1)
    return refuse(error, t,
                  llvm::formatv("pipeline parallelism (pp {0}: ds_config has no pipeline "
                                "degree; PipelineModule(num_stages={0}) sets it in the model "
                                "code)",
                                c.pp)
                      .str());
  if (c.ep > 1)
    return refuse(error, t,
                  llvm::formatv("expert parallelism (ep {0}: ds_config has no expert degree; "
                                "deepspeed.moe.layer.MoE(ep_size={0}) sets it in the model "
                                "code)",
                                c.ep)
                      .str());
  if (c.recompute == Recompute::PerStage || c.recompute == Recompute::Selective ||
      c.recomputeLayers > 0)
    return refuse(error, t,
                  c.recomputeLayers > 0
                      ? std::string("recomputation of the first layers of each chunk only")
                      : std::string(toString(c.recompute)) + " recomputation");
  // MiCS (mics_shard_size), DeepSpeed's hybrid sharding, was removed in 0.19
  // (its config refuses the key).
  if (c.shard > 0)
    return refuse(error, t,
                  "hybrid sharding (shard " + std::to_string(c.shard) +
                      ": DeepSpeed 0.19 removed MiCS, and ds_config has no other replica x "
                      "shard layout)");
  json::Object zero{{"stage", c.zero}, {"overlap_comm", true}, {"contiguous_gradients", true}};
  if (c.offloadOptimizer)
    zero["offload_optimizer"] = json::Object{{"device", "cpu"}, {"pin_memory", true}};
  // The batch as DeepSpeed counts it: micro-batch x accumulation x its
  // data-parallel ranks, which it derives itself. With AutoTP two of its
  // configs count them differently (the engine's every rank, ZeRO-3's
  // parameter partitioning only the data-parallel ones), so no single
  // train_batch_size satisfies both: it is left for each to derive.
  json::Object cfg{
      {"train_micro_batch_size_per_gpu", c.microBatch},
      {"gradient_accumulation_steps", c.numMicroBatches},
      {"gradient_clipping", 1.0},
      {"bf16", json::Object{{"enabled", job.dtype == DType::BF16 || job.fp8}}},
      {"fp16", json::Object{{"enabled", job.dtype == DType::FP16}}},
      {"zero_optimization", std::move(zero)},
  };
  // Full recomputation: deepspeed.initialize never reads this section;
  // the training script passes the config to deepspeed.checkpointing.
  // configure and runs each layer through deepspeed.checkpointing.checkpoint
  // (docs/planner.md). Contiguous buffers need partitioned activations
  // (configure refuses them alone), which need a model-parallel unit.
  if (c.recompute == Recompute::Full)
    cfg["activation_checkpointing"] = json::Object{{"partition_activations", false},
                                                   {"contiguous_memory_optimization", false},
                                                   {"number_checkpoints", numLayers},
                                                   {"cpu_checkpointing", false}};
  if (c.tp > 1)
    cfg["tensor_parallel"] = json::Object{{"autotp_size", c.tp}};
  else
    cfg["train_batch_size"] = job.globalBatch;
  if (c.cp > 1)
    cfg["sequence_parallel_size"] = c.cp; // Ulysses, as the deepspeed stack costs it
  os << llvm::formatv("{0:2}", json::Value(std::move(cfg))) << "\n";
  return true;
}

bool exportTorchtitan(llvm::raw_ostream &os, const ExportTarget &t, const ModelDesc &model,
                      const JobSpec &job, const PlanEval &plan, std::string &error) {
  const ParallelConfig &c = plan.config;
  const LayerDesc &l = *firstLayer(model);
  const int64_t L = int64_t(model.layers.size());
  // torchtitan builds the model from a named flavor of its own.
  const char *flavor = nullptr;
  if (l.hidden == 4096 && L == 32 && l.ffn == 14336 && model.vocab == 128256)
    flavor = "8B";
  else if (l.hidden == 8192 && L == 80 && l.ffn == 28672 && model.vocab == 128256)
    flavor = "70B";
  else if (l.hidden == 16384 && L == 126 && l.ffn == 53248 && model.vocab == 128256)
    flavor = "405B";
  if (!flavor || l.isMoE() ||
      l.heads != (L == 32   ? 32
                  : L == 80 ? 64
                            : 128) ||
      l.kvHeads != 8 || l.window || l.qkvBias || l.outBias || l.mlpBias || l.norm != "rms" ||
      model.tiedEmbeddings)
    return refuse(error, t,
                  "the model " + model.name +
                      " (torchtitan trains the Llama 3.1 flavors 8B, 70B and 405B by name; add "
                      "this one to its model registry first)");
  // Its flavors build Llama 3.1's rope scaling (factor 8, frequency factors
  // 1 and 4, 8192 positions) whatever the job says; a model without it is
  // another model.
  if (model.ropeTheta != 500000 || model.ropeScaling != "llama3" || model.ropeFactor != 8 ||
      model.ropeLowFreqFactor != 1 || model.ropeHighFreqFactor != 4 ||
      model.ropeOriginalPositions != 8192)
    return refuse(error, t,
                  "the model " + model.name +
                      "'s rotary embedding (torchtitan's llama3 flavors apply Llama 3.1's rope "
                      "scaling, factor 8, frequency factors 1 and 4 over 8192 positions, at base "
                      "500000; plan the Llama 3.1 config to train with torchtitan)");
  if (l.normEps != 1e-5)
    return refuse(error, t,
                  "the norm epsilon " + exactNumber(l.normEps) +
                      " (torchtitan's llama3 flavors use 1e-5)");
  if (c.recomputeLayers > 0)
    return refuse(error, t, "recomputation of the first layers of each chunk only");
  if (job.fp8)
    return refuse(error, t,
                  "fp8 GEMMs (the float8 converter's keys differ across 0.2.x "
                  "releases; plan with fp8=false)");
  if (c.recompute == Recompute::PerStage)
    return refuse(error, t, "per-stage recomputation");
  if (c.shard > 0 && c.shard % c.cp)
    return refuse(error, t,
                  "a shard group of " + std::to_string(c.shard) +
                      " ranks (torchtitan shards over dp_shard x cp: a multiple of cp " +
                      std::to_string(c.cp) + ")");
  const char *sched = c.schedule == Schedule::Interleaved ? "Interleaved1F1B"
                      : c.schedule == Schedule::GPipe     ? "GPipe"
                                                          : "1F1B";
  // FSDP shards over dp_shard x cp; hybrid sharding's groups of c.shard
  // ranks (cp innermost) are dp_shard = shard / cp of them.
  int64_t shard = c.zero == 0 ? 1 : c.shard > 0 ? c.shard / c.cp : c.dp;
  int64_t replicate = c.dp / shard;
  // Without a pipeline torchtitan accumulates global / (local x dp) micro-
  // batches of local_batch_size; with one, local_batch_size is the rank's
  // whole step, split into micro-batches of the pipeline's size.
  int64_t local = c.pp > 1 ? c.microBatch * c.numMicroBatches : c.microBatch;
  // The stages as planned, module by module: torchtitan's own split
  // (pipeline_parallel_layers_per_stage) counts the embedding and the
  // output as a layer each and would cut other stages than the plan's.
  // Virtual stage k runs on pipeline rank k mod pp.
  std::vector<std::vector<std::string>> parts;
  const bool v03 = llvm::StringRef(t.format) == "torchtitan";
  if (c.pp > 1) {
    std::vector<int> chunks =
        c.vpp > 1
            ? cost::interleavedChunkLayers(int(L), c.pp, c.vpp, job.stack.caps.unevenInterleaving)
            : c.stageLayers;
    if (chunks.empty() && c.vpp == 1)
      chunks.assign(size_t(c.pp), int(L / c.pp));
    if (int64_t(std::accumulate(chunks.begin(), chunks.end(), 0)) != L)
      return refuse(error, t, "a pipeline split that does not cover the model's layers");
    for (size_t k = 0, first = 0; k < chunks.size(); first += size_t(chunks[k++])) {
      std::vector<std::string> names;
      if (k == 0)
        names.push_back("tok_embeddings");
      for (size_t i = first; i < first + size_t(chunks[k]); ++i)
        names.push_back("layers." + std::to_string(i));
      if (k + 1 == chunks.size()) {
        names.push_back("norm");
        names.push_back(v03 ? "lm_head" : "output");
      }
      parts.push_back(std::move(names));
    }
  }
  os << "# " << t.trainer << " for " << model.name << ": " << describe(c) << "\n";
  if (v03) {
    // 0.3's llama3_405b converts its linears to float8 in the model spec,
    // which the command line cannot change.
    // Not verified: 0.3.0's pipeline_llm with FSDP stops in fully_shard
    // ("Expected param's DTensor mesh to be the same mesh passed to
    // fully_shard") when the ecosystem tier runs it on the meta device over
    // a fake world, and what it sets up could not be read back.
    if (c.pp > 1)
      return refuse(error, t,
                    "pipeline parallelism (pp " + std::to_string(c.pp) +
                        ": torchtitan 0.3.0's pipeline with FSDP could not be set up and read "
                        "back by this project's checker; use export=torchtitan-0.2)");
    if (llvm::StringRef(flavor) == "405B")
      return refuse(error, t,
                    "Llama 3.1 405B (torchtitan 0.3's llama3_405b config converts its linears "
                    "to float8, which its command line cannot undo; use export=torchtitan-0.2)");
    // Booleans are flag pairs: --section.name and --section.no-name.
    auto flag = [&](llvm::StringRef section, llvm::StringRef name, bool on) {
      os << " --" << section << (on ? "." : ".no-") << name;
    };
    os << "--module llama3 --config llama3_" << llvm::StringRef(flavor).lower() << "\n";
    os << llvm::formatv("--training.local_batch_size {0} --training.global_batch_size {1} "
                        "--training.seq_len {2} --training.max_norm 1.0 "
                        "--training.mixed_precision_param bfloat16 "
                        "--training.mixed_precision_reduce float32",
                        local, job.globalBatch, job.seqLen);
    if (c.pp > 1)
      os << " --training.disable_cuda_graphs"; // pipelines run without CUDA graphs
    os << "\n";
    os << llvm::formatv("--parallelism.data_parallel_replicate_degree {0} "
                        "--parallelism.data_parallel_shard_degree {1} "
                        "--parallelism.tensor_parallel_degree {2} "
                        "--parallelism.pipeline_parallel_degree {3} "
                        "--parallelism.context_parallel_degree {4} "
                        "--parallelism.expert_parallel_degree {5}",
                        replicate, shard, c.tp, c.pp, c.cp, c.ep);
    if (c.tp > 1)
      flag("parallelism", "enable_sequence_parallel", c.sp);
    if (c.pp > 1) {
      os << llvm::formatv(" --parallelism.pipeline_parallel_schedule {0} "
                          "--parallelism.pipeline_parallel_microbatch_size {1} "
                          "--parallelism.module_fqns_per_model_part",
                          sched, c.microBatch);
      for (const std::vector<std::string> &names : parts)
        os << " " << llvm::join(names, ",");
    }
    os << "\n";
    // The stack's efficiency was fitted on compiled runs (model and loss:
    // 0.3's default components); async TP runs only compiled.
    os << "--compile.enable";
    flag("compile", "enable_async_tensor_parallel", job.stack.variant == "asynctp" && c.tp > 1);
    // The activation checkpointing subcommand comes last: options after it
    // are its own.
    os << "\nactivation-checkpoint:" << toString(c.recompute) << "\n";
    return true;
  }
  os << "[model]\nname = \"llama3\"\nflavor = \"" << flavor << "\"\n\n";
  os << "[training]\n";
  os << llvm::formatv("local_batch_size = {0}\nglobal_batch_size = {1}\nseq_len = {2}\n"
                      "max_norm = 1.0\nmixed_precision_param = \"bfloat16\"\n"
                      "mixed_precision_reduce = \"float32\"\n",
                      local, job.globalBatch, job.seqLen);
  os << "\n[parallelism]\n";
  os << llvm::formatv("data_parallel_replicate_degree = {0}\n"
                      "data_parallel_shard_degree = {1}\n"
                      "tensor_parallel_degree = {2}\n"
                      "pipeline_parallel_degree = {3}\n"
                      "context_parallel_degree = {4}\n"
                      "expert_parallel_degree = {5}\n",
                      replicate, shard, c.tp, c.pp, c.cp, c.ep);
  if (c.tp > 1)
    os << llvm::formatv("disable_loss_parallel = false\nenable_async_tensor_parallel = {0}\n",
                        job.stack.variant == "asynctp" ? "true" : "false");
  if (c.pp > 1) {
    os << llvm::formatv("pipeline_parallel_schedule = \"{0}\"\n"
                        "pipeline_parallel_microbatch_size = {1}\n",
                        sched, c.microBatch);
    os << "module_fqns_per_model_part = [";
    for (size_t k = 0; k < parts.size(); ++k) {
      os << (k ? ",\n  [" : "\n  [");
      for (size_t i = 0; i < parts[k].size(); ++i)
        os << (i ? ", \"" : "\"") << parts[k][i] << "\"";
      os << "]";
    }
    os << "\n]\n";
  }
  // The stack's efficiency was fitted on compiled runs (and async TP runs
  // only compiled).
  os << "\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
  os << "\n[activation_checkpoint]\n";
  os << llvm::formatv("mode = \"{0}\"\n", toString(c.recompute));
  if (c.recompute == Recompute::Selective)
    os << "selective_ac_option = \"op\"\n";
  return true;
}
} // namespace

bool llmopt::planner::exportPlan(llvm::raw_ostream &os, const std::string &format,
                                 const ModelDesc &model, const JobSpec &job, const PlanEval &plan,
                                 std::string &error) {
  const ExportTarget *target = nullptr;
  for (const ExportTarget &t : kTargets)
    if (format == t.format)
      target = &t;
  if (!target) {
    error = "unknown export format '" + format +
            "': use megatron, deepspeed, torchtitan (0.3.x) or torchtitan-0.2";
    return false;
  }
  if (!firstLayer(model)) {
    error = "the model has no layers to export";
    return false;
  }
  // A plan is this layout on this stack: what it costed and allowed is what
  // the stack runs, so it exports to that stack's trainer only.
  if (job.stack.name != target->stack) {
    error = std::string(target->format) + " export: the plan was searched for stack " +
            job.stack.name + ", whose rules and efficiency are not " + target->trainer +
            "'s; plan with stack=" + target->stack + " to export for it";
    return false;
  }
  // Everything goes to a string first: nothing is written on a refusal.
  std::string text;
  llvm::raw_string_ostream out(text);
  bool ok = format == "megatron"    ? exportMegatron(out, *target, model, job, plan, error)
            : format == "deepspeed" ? exportDeepSpeed(out, *target, model, job, plan, error)
                                    : exportTorchtitan(out, *target, model, job, plan, error);
  if (!ok)
    return false;
  os << text;
  return true;
}
