//===- AutoParallel.cpp - --llm-auto-parallel -----------------------------===//
//
// Bridges the IR and the MLIR-free planner: extracts the model summary,
// reads the cluster and job, runs the search, attaches the chosen plan and
// writes the reports (table, JSON, exports, the HTML page). All outputs are
// written only after the search succeeded; files are replaced atomically.
// Long searches show a progress line on standard error.
//
//===----------------------------------------------------------------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelDesc.h"
#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Dialect/LLM/Transforms/Passes.h"
#include "llmopt/Planner/Planner.h"
#include "llmopt/Support/Output.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

namespace llmopt::llm {
#define GEN_PASS_DEF_LLMAUTOPARALLEL
#include "llmopt/Dialect/LLM/Transforms/Passes.h.inc"
} // namespace llmopt::llm

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;

namespace {

/// The search's progress as one line on standard error, rewritten in place
/// (`\r`). Shown only once the search has run for a second and only when
/// standard error is a terminal, so quick searches, pipes and logs stay
/// clean; LLMOPT_PROGRESS=1 shows it from the start whatever standard error
/// is (tests), LLMOPT_PROGRESS=0 never.
class ProgressLine {
public:
  ProgressLine() {
    std::optional<std::string> env = llvm::sys::Process::GetEnv("LLMOPT_PROGRESS");
    if (env && *env == "1")
      forced = true;
    else if (env && *env == "0")
      enabled = false;
    else
      enabled = llvm::errs().is_displayed();
  }

  bool wanted() const { return forced || enabled; }

  void operator()(const planner::SearchProgress &p) {
    if (!forced && (!enabled || (!shown && p.seconds < 1.0)))
      return;
    if (!shown && p.done && !forced)
      return; // finished before the first update was due
    std::string line =
        llvm::formatv("llm-auto-parallel: searching {0,3}% | {1} "
                      "configurations, {2} fit | {3:f1} s",
                      int(std::floor(100 * p.fraction)), p.evaluated, p.feasible, p.seconds)
            .str();
    size_t width = line.size();
    if (line.size() < lastWidth)
      line.append(lastWidth - line.size(), ' ');
    lastWidth = width;
    llvm::errs() << '\r' << line;
    if (p.done)
      llvm::errs() << '\n';
    llvm::errs().flush();
    shown = true;
  }

private:
  bool forced = false;
  bool enabled = true;
  bool shown = false;
  size_t lastWidth = 0;
};

PlanAttr planAttr(Builder &b, const cost::PlanEval &p, int64_t seqLen) {
  const cost::ParallelConfig &c = p.config;
  SmallVector<Attribute> levels;
  for (cost::Recompute r : c.stageRecompute)
    levels.push_back(b.getStringAttr(cost::toString(r)));
  return PlanAttr::get(
      b.getContext(), c.dp, c.tp, c.pp, c.vpp, c.cp, c.ep, b.getBoolAttr(c.sp), c.zero,
      b.getBoolAttr(c.offloadOptimizer),
      symbolizeRecomputeLevel(cost::toString(c.recompute)).value_or(RecomputeLevel::none),
      b.getArrayAttr(levels), c.microBatch, c.numMicroBatches, seqLen,
      symbolizePipelineSchedule(cost::toString(c.schedule)).value_or(PipelineSchedule::none),
      symbolizePlacement(c.placement()).value_or(Placement::tp_cp_dp_pp),
      b.getDenseI64ArrayAttr(SmallVector<int64_t>(c.stageLayers.begin(), c.stageLayers.end())),
      b.getF64FloatAttr(p.time.step), static_cast<int64_t>(std::llround(p.peak.total())), c.shard,
      c.recomputeLayers);
}

struct LLMAutoParallelPass : public llmopt::llm::impl::LLMAutoParallelBase<LLMAutoParallelPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &msg) {
      module.emitError() << "llm-auto-parallel: " << msg;
      signalPassFailure();
    };

    // Job.
    cost::JobSpec job;
    if (globalBatch <= 0)
      return fail("global-batch must be a positive number of sequences, e.g. "
                  "global-batch=512");
    job.globalBatch = globalBatch;
    if (globalBatch > (int64_t(1) << 30))
      return fail("global-batch must be at most 2^30 sequences");
    // Not given: the model's length. Given, it is checked whatever it is: the
    // default's -1 is a placeholder, not a value meaning "the model's".
    if (seqLen.hasValue() && (seqLen < 1 || seqLen > (int64_t(1) << 26)))
      return fail("seq-len must be between 1 and 2^26, got " + Twine(int64_t(seqLen)) +
                  " (leave it out for the model's llm.seq_len)");
    job.seqLen = seqLen.hasValue() ? int64_t(seqLen) : getDefaultSeqLen(module);
    if (job.seqLen <= 0 || job.seqLen > (int64_t(1) << 26))
      return fail("no sequence length: the module has no valid llm.seq_len; pass "
                  "seq-len=N");
    if (dtype == "bf16")
      job.dtype = cost::DType::BF16;
    else if (dtype == "fp16")
      job.dtype = cost::DType::FP16;
    else
      return fail("dtype must be bf16 or fp16, got '" + dtype + "' (fp8 GEMMs: fp8=true)");
    job.fp8 = fp8;
    if (gradDtype == "bf16" || gradDtype == "fp16")
      job.gradBytes = 2;
    else if (gradDtype == "fp32")
      job.gradBytes = 4;
    else
      return fail("grad-dtype must be bf16 or fp32, got '" + gradDtype + "'");
    job.flashAttention = flashAttention;
    job.dropout = dropout;

    // Training stack.
    if (!stack.empty() && !stackProfile.empty())
      return fail("give stack= or stack-profile=, not both");
    if (!stackProfile.empty()) {
      auto buf = llvm::MemoryBuffer::getFile(stackProfile);
      if (!buf)
        return fail("cannot read stack profile '" + stackProfile +
                    "': " + buf.getError().message());
      std::string err;
      if (!cost::parseStackProfile((*buf)->getBuffer().str(), stackProfile, "", job.stack, err))
        return fail(err);
    } else {
      std::string err;
      if (!cost::getStackProfile(stack.empty() ? cost::defaultStackName() : stack.getValue(),
                                 job.stack, err))
        return fail("stack: " + err);
    }

    // Cluster.
    if (cluster.empty())
      return fail("no cluster: pass cluster=dgx-h100 (or another preset, or a "
                  "cluster JSON file)");
    std::string contents;
    if (StringRef(cluster).ends_with(".json") || llvm::sys::fs::exists(cluster)) {
      llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf = llvm::MemoryBuffer::getFile(cluster);
      if (!buf)
        return fail("cannot read cluster file '" + cluster + "': " + buf.getError().message());
      contents = (*buf)->getBuffer().str();
      if (contents.empty())
        return fail("cluster file '" + cluster + "' is empty");
    }
    std::vector<std::pair<std::string, std::string>> overrides;
    for (const std::string &kv : clusterSet) {
      auto [k, v] = StringRef(kv).split('=');
      if (v.empty())
        return fail("cluster override '" + kv + "' must be path=value");
      overrides.push_back({k.str(), v.str()});
    }
    // As seq-len: -1 is the default's placeholder, refused when given.
    if (gpus.hasValue() && (gpus < 1 || gpus > (1 << 24)))
      return fail("gpus must be between 1 and 16777216, got " + Twine(int64_t(gpus)) +
                  " (leave it out for one node of the preset)");
    cost::ClusterSpec cl;
    std::string error;
    if (!cost::parseCluster(cluster, contents, overrides, gpus.hasValue() ? int(gpus) : 0, cl,
                            error))
      return fail(error);
    std::string calibration;
    if (!calibrate.empty()) {
      auto profile = llvm::MemoryBuffer::getFile(calibrate);
      if (!profile)
        return fail("cannot read profile '" + calibrate + "': " + profile.getError().message());
      if (!cost::calibrate(cl.gpu, (*profile)->getBuffer(), job.dtype, calibration, error))
        return fail("profile '" + calibrate + "': " + error);
    }

    // Search options.
    planner::SearchOptions opts;
    if (topK <= 0 || topK > 1000)
      return fail("top-k must be between 1 and 1000");
    opts.topK = int(topK);
    if (!planner::Constraints::parse(fix, opts.fixed, error))
      return fail(error);
    if (reportHtml == "-")
      return fail("report-html needs a file path, e.g. report-html=plan.html");
    ProgressLine progress;
    if (progress.wanted())
      opts.progress = [&](const planner::SearchProgress &p) { progress(p); };

    FailureOr<func::FuncOp> func = findModelFunc(module);
    if (failed(func))
      return signalPassFailure();
    FailureOr<cost::ModelDesc> model = extractModelDesc(*func);
    if (failed(model))
      return signalPassFailure();

    if (!planner::checkConstraints(opts.fixed, *model, job, error))
      return fail(error);

    if (model->positions > 0 && job.seqLen > model->positions)
      return fail("seq-len " + Twine(job.seqLen) + " exceeds the " + Twine(model->positions) +
                  " positions of the model's learned position table; use seq-len <= " +
                  Twine(model->positions));

    planner::SearchResult result = planner::search(*model, cl, job, opts);
    // A recipe (fix=) against the best plan of a free search.
    if (compare && !result.plans.empty() && !opts.fixed.empty()) {
      planner::SearchOptions free;
      free.topK = 1;
      free.progress = opts.progress;
      planner::SearchResult all = planner::search(*model, cl, job, free);
      if (!all.plans.empty())
        result.versusFree =
            planner::compareWithRecipe(result.plans.front(), all.plans.front(), job);
    }
    if (result.plans.empty()) {
      InFlightDiagnostic d = module.emitError()
                             << "llm-auto-parallel: no valid configuration of " << model->name
                             << " fits " << cl.totalGpus() << " x " << cl.gpu.name
                             << " for global batch " << job.globalBatch << " x " << job.seqLen
                             << " tokens (" << result.evaluated << " tried)";
      auto oom = result.rejected.find("out_of_memory");
      if (oom != result.rejected.end())
        d.attachNote() << "closest: " << oom->second.example
                       << "; add GPUs, lower the micro-batch or sequence length, or "
                          "allow recompute/ZeRO (check fix=)";
      for (const auto &[reason, rej] : result.rejected)
        if (reason != "out_of_memory")
          d.attachNote() << reason << " (" << rej.count << "): " << rej.example;
      return signalPassFailure();
    }

    // Outputs, all prepared before anything is written.
    std::string table;
    llvm::raw_string_ostream tableOs(table);
    planner::printTable(tableOs, *model, cl, job, result);
    std::string reportText;
    if (!report.empty())
      reportText =
          llvm::formatv("{0:2}", planner::reportJSON(*model, cl, job, result)).str() + "\n";
    std::string exported;
    if (!exportFormat.empty()) {
      llvm::raw_string_ostream os(exported);
      if (!planner::exportPlan(os, exportFormat, *model, job, result.plans.front(), error))
        return fail(error);
    }
    std::string html;
    if (!reportHtml.empty()) {
      llvm::raw_string_ostream os(html);
      planner::printHTMLReport(os, *model, cl, job, result);
    }

    // The output files together, all or none.
    std::vector<std::pair<std::string, std::string>> files;
    if (!html.empty())
      files.push_back({reportHtml, html});
    if (!report.empty() && report != "-")
      files.push_back({report, reportText});
    if (!exported.empty() && exportFile != "-")
      files.push_back({exportFile, exported});
    if (!writeFilesAtomically(files, error))
      return fail(error);

    std::string out =
        report == "-" ? reportText : (calibration.empty() ? "" : calibration + "\n") + table;
    if (!exported.empty() && exportFile == "-")
      out += (report == "-" ? "" : "\n") + exported;
    writeReportToStdout(out);

    Builder b(module.getContext());
    module->setAttr("llm.plan", planAttr(b, result.plans.front(), job.seqLen));
    // What the cost model expects each stage to hold for its activations
    // (and logits) at its peak, and for how many micro-batches: set beside
    // the lowered memory plan by llm-plan-memory's report.
    SmallVector<int64_t> activation, inFlight;
    for (const cost::StageMemory &s : result.plans.front().stages) {
      activation.push_back(
          static_cast<int64_t>(std::llround(s.memory.activations + s.memory.logits)));
      inFlight.push_back(static_cast<int64_t>(std::llround(s.inFlight)));
    }
    module->setAttr("llm.plan_activation_bytes", b.getDenseI64ArrayAttr(activation));
    module->setAttr("llm.plan_in_flight", b.getDenseI64ArrayAttr(inFlight));
    // fp8 jobs: the layers' linear and expert GEMMs read fp8 (E4M3
    // forward); the LM head and the MoE router stay in 16 bits, as the cost
    // model and Transformer Engine recipes have it.
    if (job.fp8)
      module.walk([&](LayerOp layer) {
        TypeAttr f8 = TypeAttr::get(b.getType<Float8E4M3FNType>());
        layer.walk([&](LinearOp l) {
          if (!l.getGemm())
            l.setGemmAttr(f8);
        });
        layer.walk([&](MoEExpertsOp e) {
          if (!e.getGemm())
            e.setGemmAttr(f8);
        });
      });
  }
};
} // namespace
