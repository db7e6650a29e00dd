//===- llm-calibrate.cpp - the cost model against published runs ---------===//
//
//   llm-calibrate data/calibration/h100/published.json            # the table
//   llm-calibrate ROWS.json --check                               # tolerances
//   llm-calibrate ROWS.json --fit=megatron \
//       --params=efficiency.gemm,efficiency.fp8_gemm,overlap.tp_overlap
//
// Scores every published row's own configuration (its tp, pp, vp, cp, ep,
// sp, ZeRO, recomputation, micro-batch; the `fix=` of llm-auto-parallel)
// under the row's training stack and compares the predicted tokens/s per GPU
// with the published figure. `--check` fails (exit 1) when a stack's mean or
// largest error exceeds the tolerance its profile states. `--fit` searches
// the named profile parameters (Nelder-Mead on the mean squared log error of
// that stack's rows) and prints them; the profile files are edited by hand
// with what it finds, and say what they were fitted on.
//
//===----------------------------------------------------------------------===//

#include "llmopt/CostModel/CostModel.h"
#include "llmopt/Dialect/LLM/Analysis/ModelDesc.h"
#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMDialect.h"
#include "llmopt/Import/HFConfig.h"
#include "llmopt/Planner/Planner.h"
#include "llmopt/Support/JSONDepth.h"

// The cost model's checked field reader (lib/CostModel), for the rows.
#include "JSONFields.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

using namespace llmopt;
using namespace llmopt::cost;
namespace json = llvm::json;
namespace cl = llvm::cl;

static cl::opt<std::string> rowsPath(cl::Positional, cl::desc("<published rows JSON>"),
                                     cl::Required);
static cl::opt<std::string> modelsDir("models", cl::desc("directory of the rows' config.json files "
                                                         "(default: models/ beside the rows)"));
static cl::opt<bool> check("check", cl::desc("exit 1 when a stack exceeds its tolerance"));
static cl::opt<std::string> fitStack("fit", cl::desc("fit this stack's profile parameters"));
static cl::list<std::string> fitParams("params", cl::CommaSeparated,
                                       cl::desc("parameters to fit (efficiency.gemm, ...)"));
static cl::list<std::string> sets("set", cl::CommaSeparated,
                                  cl::desc("STACK.PARAM=VALUE: override a profile parameter "
                                           "for the table (megatron.efficiency.gemm=0.9)"));
static cl::opt<std::string> exclude("exclude", cl::desc("leave out rows whose id contains this"));
static cl::opt<bool> verbose("v", cl::desc("print each row's time breakdown"));
static cl::opt<std::string> only("only", cl::desc("rows whose id contains this text"));
static cl::opt<bool>
    searchJobs("search",
               cl::desc("search each published job freely under its stack and compare the "
                        "pick's prediction with the best published run of that job"));
static cl::opt<std::string>
    profileDir("profiles",
               cl::desc("read stack profiles from DIR/NAME.json instead of the built-in ones"));

namespace {

struct Row {
  std::string id, model, stack, variant, cluster, precision;
  int gpus = 0, tp = 1, pp = 1, cp = 1, vp = 1, ep = 1, zero = 0;
  bool sp = false;
  int64_t seq = 0, globalBatch = 0, microBatch = 1;
  std::string recompute;
  double published = 0; // tokens/s per GPU
  double publishedMemGiB = 0;
};

bool fail(const llvm::Twine &msg) {
  llvm::errs() << "llm-calibrate: " << msg << "\n";
  return false;
}

/// The stack name llm-opt uses for a row's `stack` text.
bool stackOf(llvm::StringRef text, llvm::StringRef id, std::string &name, std::string &variant) {
  variant.clear();
  if (text.starts_with("Megatron") || text.starts_with("NeMo"))
    name = "megatron";
  else if (text.starts_with("torchtitan")) {
    name = "torchtitan";
    if (id.contains("-eager"))
      variant = "eager";
  } else if (text.starts_with("Composer"))
    name = "llm-foundry";
  else
    return false;
  return true;
}

/// One row, read strictly: every key known (a misspelt one would silently
/// keep its default), each of its type and in its range. `error` names the
/// row and the field.
bool readRow(const json::Object &o, size_t index, Row &r, std::string &error) {
  std::optional<llvm::StringRef> id = o.getString("id");
  Fields f(o, "", error,
           "row " + (id ? "'" + id->str() + "'" : "#" + std::to_string(index)) + ": ");
  // Present and not null: optional fields take their default otherwise.
  auto given = [&](llvm::StringRef key) {
    f.allow(key);
    const json::Value *v = o.get(key);
    return v && v->kind() != json::Value::Null;
  };
  // Given fields that may also be null (the published table leaves them
  // blank).
  auto nullable = [&](llvm::StringRef key) {
    const json::Value *v = o.get(key);
    return v && v->kind() == json::Value::Null;
  };
  std::string stackText, precision;
  int seq = 0, globalBatch = 0;
  if (!f.string("id", r.id) || !f.string("model", r.model) || !f.string("cluster", r.cluster) ||
      !f.string("stack", stackText) || !f.string("precision", precision) ||
      !f.integer("gpus", r.gpus, 1, 1 << 20) || !f.integer("seq_len", seq, 1, 1 << 26) ||
      !f.integer("global_batch", globalBatch, 1, 1 << 30) ||
      !f.positive("tokens_per_s_per_gpu", r.published))
    return false;
  r.seq = seq;
  r.globalBatch = globalBatch;
  if (precision != "BF16" && precision != "FP8")
    return f.fail("precision", "is '" + precision + "': must be BF16 or FP8");
  r.precision = precision;
  if (!stackOf(stackText, r.id, r.stack, r.variant))
    return f.fail("stack",
                  "is '" + stackText + "': must start with Megatron, NeMo, torchtitan or Composer");
  // The parallel configuration: positive degrees, 1 when not given.
  for (auto [key, out] :
       {std::pair<const char *, int *>{"tp", &r.tp}, {"pp", &r.pp}, {"cp", &r.cp}, {"ep", &r.ep}})
    if (given(key) && !f.integer(key, *out, 1, 1 << 20))
      return false;
  if (nullable("vp"))
    f.allow("vp"); // no interleaving
  else if (given("vp") && !f.integer("vp", r.vp, 1, 1024))
    return false;
  int microBatch = 1;
  if (given("micro_batch") && !f.integer("micro_batch", microBatch, 1, 1 << 30))
    return false;
  r.microBatch = microBatch;
  if (given("zero") && !f.integer("zero", r.zero, 0, 3))
    return false;
  if (given("sp")) {
    // 0 or 1, as the published tables write it, or true / false.
    const json::Value *v = o.get("sp");
    if (std::optional<bool> b = v->getAsBoolean()) {
      r.sp = *b;
    } else {
      int sp = 0;
      if (!f.integer("sp", sp, 0, 1))
        return false;
      r.sp = sp != 0;
    }
  }
  if (given("recompute")) {
    if (!f.string("recompute", r.recompute))
      return false;
    if (r.recompute != "none" && r.recompute != "selective" && r.recompute != "full")
      return f.fail("recompute", "is '" + r.recompute + "': must be none, selective or full");
  }
  // A row may name the profile variant that ran it (rows beside the
  // published file, e.g. torchtitan's async TP figures).
  if (given("variant")) {
    std::string variant;
    if (!f.string("variant", variant))
      return false;
    if (variant.empty())
      return f.fail("variant", "must not be empty (leave it out for the stack's base profile)");
    r.variant = variant;
  }
  if (nullable("published_peak_mem_gib"))
    f.allow("published_peak_mem_gib");
  else if (given("published_peak_mem_gib") &&
           !f.positive("published_peak_mem_gib", r.publishedMemGiB))
    return false;
  // What documents the row: checked for its type, not read.
  std::string text;
  for (const char *key : {"source", "system", "gpu", "notes"})
    if (given(key) && !f.string(key, text))
      return false;
  bool flag = false;
  if (given("config_complete") && !f.boolean("config_complete", flag))
    return false;
  int fsdp = 0;
  if (given("fsdp") && !f.integer("fsdp", fsdp, 0, 1 << 20))
    return false;
  double figure = 0;
  for (const char *key :
       {"model_tflops_per_gpu", "published_mfu", "published_num_params", "published_step_time_s"})
    if (nullable(key))
      f.allow(key);
    else if (given(key) && !f.positive(key, figure))
      return false;
  if (nullable("schedule"))
    f.allow("schedule");
  else if (given("schedule") && !f.string("schedule", text))
    return false;
  if (!f.noOthers("a published row"))
    return false;
  // The data-parallel degree and the micro-batches it implies are whole.
  int64_t model = int64_t(r.tp) * r.pp * r.cp;
  if (r.gpus % model != 0)
    return f.fail("gpus", llvm::formatv("({0}) is not a multiple of tp x pp x cp ({1} x {2} x {3})",
                                        r.gpus, r.tp, r.pp, r.cp));
  int64_t perStep = (r.gpus / model) * r.microBatch;
  if (r.globalBatch % perStep != 0)
    return f.fail("global_batch",
                  llvm::formatv("({0}) is not a multiple of data parallel {1} x micro_batch {2}",
                                r.globalBatch, r.gpus / model, r.microBatch));
  return true;
}

bool readRows(llvm::StringRef text, std::vector<Row> &rows) {
  if (std::string deep = llmopt::jsonDepthError(text, "rows"); !deep.empty())
    return fail(deep);
  llvm::Expected<json::Value> v = json::parse(text);
  if (!v)
    return fail("rows: " + llvm::toString(v.takeError()));
  const json::Object *root = v->getAsObject();
  const json::Array *arr = root ? root->getArray("rows") : nullptr;
  if (!arr)
    return fail("rows: no 'rows' array");
  for (const auto &kv : *root)
    if (kv.first != "rows" && kv.first != "source_notes")
      return fail("rows: unknown key '" + kv.first.str() +
                  "' beside 'rows' (only 'source_notes' may be; misspelt?)");
  std::set<std::string> ids;
  for (auto [index, e] : llvm::enumerate(*arr)) {
    const json::Object *o = e.getAsObject();
    if (!o)
      return fail("rows: row #" + llvm::Twine(index) + " is not an object");
    Row r;
    std::string error;
    if (!readRow(*o, index, r, error))
      return fail(error);
    if (!ids.insert(r.id).second)
      return fail("row '" + r.id + "': a second row with this id");
    if ((only.empty() || llvm::StringRef(r.id).contains(only)) &&
        (exclude.empty() || !llvm::StringRef(r.id).contains(exclude)))
      rows.push_back(r);
  }
  return true;
}

/// The cluster a row ran on: a preset, or a file beside the rows.
bool clusterOf(const Row &r, llvm::StringRef dir, ClusterSpec &out) {
  std::string error;
  std::string contents;
  std::string spec = r.cluster;
  if (!getClusterPreset(spec, out)) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, r.cluster + ".json");
    auto buf = llvm::MemoryBuffer::getFile(path);
    if (!buf)
      return fail("row " + r.id + ": no cluster preset or file '" + path + "'");
    contents = (*buf)->getBuffer().str();
    spec = std::string(path);
  }
  if (!parseCluster(spec, contents, {}, r.gpus, out, error))
    return fail("row " + r.id + ": " + error);
  return true;
}

struct Scored {
  double predicted = 0; // tokens/s per GPU
  double memGiB = 0;
  double flopsPerToken = 0, peak = 0; // the model's, the GPU's bf16
  bool moe = false;
  std::string detail;
  bool ok = false;
};

/// Parameters given in microseconds are fitted in those units.
double micro(llvm::StringRef name) { return name.ends_with("_us") ? 1e-6 : 1; }

double *paramRef(StackProfile &p, llvm::StringRef name) {
  if (name == "efficiency.gemm")
    return &p.eff.gemm;
  if (name == "efficiency.fp8_gemm")
    return &p.eff.fp8Gemm;
  if (name == "efficiency.attention")
    return &p.eff.attention;
  if (name == "efficiency.memory")
    return &p.eff.memory;
  if (name == "efficiency.host_overhead_per_layer_us")
    return &p.eff.hostOverheadPerLayer;
  if (name == "efficiency.moe_expert_overhead_us")
    return &p.eff.moeExpertOverhead;
  if (name == "overlap.comm_slowdown")
    return &p.overlap.commSlowdown;
  if (name == "overlap.tp_overlap")
    return &p.overlap.tpOverlap;
  if (name == "overlap.ep_overlap")
    return &p.overlap.epOverlap;
  return nullptr;
}

struct Calibrator {
  mlir::MLIRContext ctx;
  std::map<std::string, ModelDesc> models;
  std::map<std::string, ClusterSpec> clusters;
  std::map<std::string, StackProfile> profiles;
  std::string dir, modelDir;

  Calibrator() { ctx.loadDialect<llm::LLMDialect, mlir::func::FuncDialect>(); }

  const ModelDesc *model(const std::string &name) {
    auto it = models.find(name);
    if (it != models.end())
      return &it->second;
    llvm::SmallString<256> path(modelDir);
    llvm::sys::path::append(path, name + ".json");
    auto buf = llvm::MemoryBuffer::getFile(path);
    if (!buf) {
      fail("cannot read model '" + path + "'");
      return nullptr;
    }
    HFImportOptions opts;
    opts.name = name;
    mlir::OwningOpRef<mlir::ModuleOp> m = importHFConfig((*buf)->getBuffer(), path, &ctx, opts);
    if (!m)
      return nullptr;
    mlir::FailureOr<mlir::func::FuncOp> f = llm::findModelFunc(*m);
    if (mlir::failed(f))
      return nullptr;
    mlir::FailureOr<ModelDesc> d = llm::extractModelDesc(*f);
    if (mlir::failed(d))
      return nullptr;
    return &models.emplace(name, *d).first->second;
  }

  StackProfile *profile(const std::string &name, const std::string &variant) {
    std::string key = variant.empty() ? name : name + ":" + variant;
    auto it = profiles.find(key);
    if (it != profiles.end())
      return &it->second;
    StackProfile p;
    std::string error;
    bool ok;
    if (!profileDir.empty()) {
      llvm::SmallString<256> path(profileDir);
      llvm::sys::path::append(path, name + ".json");
      auto buf = llvm::MemoryBuffer::getFile(path);
      if (!buf) {
        fail("cannot read '" + path + "'");
        return nullptr;
      }
      ok = parseStackProfile((*buf)->getBuffer().str(), std::string(path), variant, p, error);
    } else {
      ok = getStackProfile(key, p, error);
    }
    if (!ok) {
      fail(error);
      return nullptr;
    }
    for (llvm::StringRef set : sets) {
      auto [lhs, value] = set.split('=');
      auto [stack, param] = lhs.split('.');
      double v = 0;
      if (stack != name)
        continue;
      double *ref = paramRef(p, param);
      if (!ref || value.getAsDouble(v)) {
        fail("--set " + set + ": no such parameter or not a number");
        return nullptr;
      }
      *ref = v * micro(param);
    }
    return &profiles.emplace(key, p).first->second;
  }

  /// The model, cluster and job of a row under `stack`; false (with a
  /// message) when the model or cluster cannot be read.
  bool setup(const Row &r, const StackProfile &stack, const ModelDesc *&m,
             const ClusterSpec *&cluster, JobSpec &job) {
    m = model(r.model);
    if (!m)
      return false;
    auto cit = clusters.find(r.cluster + "/" + std::to_string(r.gpus));
    if (cit == clusters.end()) {
      ClusterSpec c;
      if (!clusterOf(r, dir, c))
        return false;
      cit = clusters.emplace(r.cluster + "/" + std::to_string(r.gpus), c).first;
    }
    cluster = &cit->second;
    job.globalBatch = r.globalBatch;
    job.seqLen = r.seq;
    job.fp8 = r.precision == "FP8";
    // Megatron keeps fp32 main gradients; the FSDP stacks reduce in fp32
    // into fp32 sharded gradients as well.
    job.gradBytes = 4;
    job.stack = stack;
    return true;
  }

  Scored score(const Row &r, const StackProfile &stack) {
    Scored s;
    const ModelDesc *m = nullptr;
    const ClusterSpec *cluster = nullptr;
    JobSpec job;
    if (!setup(r, stack, m, cluster, job)) {
      s.detail = "model or cluster not read";
      return s;
    }
    ParallelConfig c;
    c.tp = r.tp, c.pp = r.pp, c.cp = r.cp, c.ep = r.ep, c.vpp = std::max(1, r.vp);
    c.dp = r.gpus / (r.tp * r.pp * r.cp);
    c.sp = r.sp && r.tp > 1;
    c.zero = r.zero;
    c.recompute = r.recompute == "full"        ? Recompute::Full
                  : r.recompute == "selective" ? Recompute::Selective
                                               : Recompute::None;
    c.microBatch = r.microBatch;
    c.numMicroBatches = c.dp > 0 ? r.globalBatch / (int64_t(c.dp) * r.microBatch) : 0;
    c.schedule = r.pp == 1   ? Schedule::None
                 : c.vpp > 1 ? Schedule::Interleaved
                             : Schedule::OneFOneB;
    PlanEval e = evaluate(*m, *cluster, job, c);
    s.flopsPerToken = m->trainFlopsPerToken(r.seq);
    s.peak = cluster->gpu.bf16Flops;
    s.moe = m->hasMoE();
    s.memGiB = e.peak.total() / double(1ull << 30);
    if (e.reason != RejectReason::None && e.reason != RejectReason::OutOfMemory) {
      s.detail = std::string(toString(e.reason)) + ": " + e.detail;
      return s;
    }
    if (e.reason == RejectReason::OutOfMemory)
      s.detail = e.detail;
    s.predicted = e.tokensPerS / r.gpus;
    if (verbose) {
      const TimeBreakdown &t = e.time;
      s.detail += llvm::formatv("step {0:f3}s: compute {1:f3} recompute {2:f3} tp {3:f3} cp "
                                "{4:f3} ep {5:f3} pp {6:f3} dp {7:f3} bubble {8:f3} opt {9:f3} "
                                "hidden {10:f3}",
                                t.step, t.compute, t.recompute, t.tpComm, t.cpComm, t.epComm,
                                t.ppComm, t.dpComm, t.bubble, t.optimizer, t.hiddenComm)
                      .str();
    }
    s.ok = true;
    return s;
  }
};

} // namespace

/// Each published job (model, GPUs, sequence, batch, precision, stack) searched
/// freely under its stack: the pick's predicted throughput against the best
/// published run of the job. A pick predicted above it by more than the
/// stack's tolerance must be explained: flagged by the report (MFU above the
/// stack's best published run), within the tolerance of the MFU the stack
/// reaches on a comparable published job (same stack, precision and model
/// kind; parameters and sequence within 2x), or named with its reason in
/// search-notes.json beside the rows. With --check, one that is not fails,
/// and so does a note for a job that needs none.
static int searchEachJob(Calibrator &cal, const std::vector<Row> &rows) {
  struct Job {
    const Row *first = nullptr;
    double best = 0;
    std::string bestId;
  };
  struct Published {
    const Row *row;
    double mfu, params;
    bool moe;
  };
  std::map<std::string, Job> jobs;
  std::vector<std::string> order;
  std::vector<Published> published;
  for (const Row &r : rows) {
    std::string key = llvm::formatv("{0}|{1}|{2}|{3}|{4}|{5}|{6}|{7}", r.model, r.cluster, r.gpus,
                                    r.seq, r.globalBatch, r.precision, r.stack, r.variant);
    auto [it, fresh] = jobs.emplace(key, Job());
    if (fresh) {
      it->second.first = &r;
      order.push_back(key);
    }
    if (r.published > it->second.best)
      it->second.best = r.published, it->second.bestId = r.id;
    StackProfile *p = cal.profile(r.stack, r.variant);
    const ModelDesc *m = nullptr;
    const ClusterSpec *cluster = nullptr;
    JobSpec job;
    if (!p || !cal.setup(r, *p, m, cluster, job))
      return 2;
    bool outlier =
        llvm::any_of(p->tolerance.outliers, [&](const auto &o) { return o.first == r.id; });
    if (!outlier)
      published.push_back({&r, r.published * m->trainFlopsPerToken(r.seq) / cluster->gpu.bf16Flops,
                           m->totalParams(), m->hasMoE()});
  }
  // Jobs explained by hand: best row id -> why.
  std::map<std::string, std::string> notes;
  {
    llvm::SmallString<256> path(cal.dir);
    llvm::sys::path::append(path, "search-notes.json");
    if (auto buf = llvm::MemoryBuffer::getFile(path)) {
      if (std::string deep = llmopt::jsonDepthError((*buf)->getBuffer(), path.str()); !deep.empty())
        return fail(deep), 2;
      llvm::Expected<json::Value> v = json::parse((*buf)->getBuffer());
      const json::Object *o = v ? v->getAsObject() : nullptr;
      if (!o)
        return fail("'" + path + "' must be a JSON object of row id: reason"), 2;
      for (const auto &[id, why] : *o) {
        std::optional<llvm::StringRef> text = why.getAsString();
        if (!text)
          return fail("'" + path + "': the note of " + id.str() + " must be a string"), 2;
        notes[id.str()] = text->str();
      }
    }
  }
  llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10} {3,10} {4,7} {5,8}  {6}\n",
                                "job (best published row)", "stack", "published", "pick", "ratio",
                                "pick MFU", "pick");
  bool broken = false;
  double worst = 0;
  std::set<std::string> usedNotes;
  for (const std::string &key : order) {
    const Job &j = jobs[key];
    const Row &r = *j.first;
    StackProfile *p = cal.profile(r.stack, r.variant);
    const ModelDesc *m = nullptr;
    const ClusterSpec *cluster = nullptr;
    JobSpec job;
    if (!p || !cal.setup(r, *p, m, cluster, job))
      return 2;
    planner::SearchOptions opts;
    opts.topK = 1;
    planner::SearchResult res = planner::search(*m, *cluster, job, opts);
    std::string stackName = r.variant.empty() ? r.stack : r.stack + ":" + r.variant;
    if (res.plans.empty()) {
      llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10:f0} {3,10} FAIL: the search "
                                    "finds no plan for a job that ran\n",
                                    j.bestId, stackName, j.best, "-");
      broken = true;
      continue;
    }
    const PlanEval &pick = res.plans.front();
    double predicted = pick.tokensPerS / r.gpus;
    double ratio = predicted / j.best;
    double ceiling = planner::calibratedMfuCeiling(*m, job);
    bool flagged = ceiling > 0 && pick.mfu > ceiling;
    bool far = ratio > 1 + p->tolerance.maxError;
    std::string verdict;
    if (far && flagged) {
      verdict = "flagged: MFU above the stack's best published run";
    } else if (far) {
      // The best MFU the stack reaches on a comparable published job.
      bool moe = m->hasMoE();
      const Published *ref = nullptr;
      for (const Published &q : published)
        if (q.row->stack == r.stack && q.row->variant == r.variant &&
            q.row->precision == r.precision && q.moe == moe && q.params <= 2 * m->totalParams() &&
            m->totalParams() <= 2 * q.params && q.row->seq <= 2 * r.seq &&
            r.seq <= 2 * q.row->seq && (!ref || q.mfu > ref->mfu))
          ref = &q;
      auto note = notes.find(j.bestId);
      if (ref && pick.mfu <= ref->mfu * (1 + p->tolerance.maxError)) {
        verdict =
            llvm::formatv("explained: the stack reaches {0:p} MFU on {1}", ref->mfu, ref->row->id);
      } else if (note != notes.end()) {
        verdict = "explained: " + note->second;
        usedNotes.insert(note->first);
      } else {
        verdict = "FAIL: far above the best published run, not flagged or explained";
        broken = true;
      }
    }
    if (!far)
      worst = std::max(worst, ratio);
    llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10:f0} {3,10:f0} {4,7:f2} {5,7:p}{6} "
                                  " {7}{8}{9}\n",
                                  j.bestId, stackName, j.best, predicted, ratio, pick.mfu,
                                  flagged ? "!" : " ", planner::describe(pick.config),
                                  verdict.empty() ? "" : "  ", verdict);
  }
  std::set<std::string> selected;
  for (const auto &[key, j] : jobs)
    selected.insert(j.bestId);
  for (const auto &[id, why] : notes)
    if ((selected.count(id) || (only.empty() && exclude.empty())) && !usedNotes.count(id)) {
      llvm::outs() << "FAIL: search-notes.json explains " << id
                   << ", whose pick needs no explanation (or no such job): remove it\n";
      broken = true;
    }
  llvm::outs() << llvm::formatv("\n{0} jobs; the highest ratio within the tolerance: {1:f2}\n",
                                order.size(), worst);
  return check && broken ? 1 : 0;
}

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "llm-opt cost model vs published runs\n");
  auto buf = llvm::MemoryBuffer::getFile(rowsPath);
  if (!buf)
    return fail("cannot read '" + rowsPath + "'"), 2;
  std::vector<Row> rows;
  if (!readRows((*buf)->getBuffer(), rows))
    return 2;
  Calibrator cal;
  cal.dir = llvm::sys::path::parent_path(rowsPath).str();
  if (cal.dir.empty())
    cal.dir = ".";
  llvm::SmallString<256> md(cal.dir);
  llvm::sys::path::append(md, "models");
  cal.modelDir = modelsDir.empty() ? std::string(md) : modelsDir.getValue();

  if (searchJobs)
    return searchEachJob(cal, rows);

  if (!fitStack.empty()) {
    StackProfile *base = cal.profile(fitStack, "");
    if (!base)
      return 2;
    std::vector<const Row *> mine;
    for (const Row &r : rows)
      if (r.stack == fitStack)
        mine.push_back(&r);
    if (mine.empty() || fitParams.empty())
      return fail("--fit needs rows of that stack and --params"), 2;
    StackProfile work = *base;
    for (const std::string &n : fitParams)
      if (!paramRef(work, n))
        return fail("unknown parameter '" + n + "'"), 2;
    // The rows' variants, read once (a variant that does not parse is an
    // error before any fitting).
    for (const Row *r : mine)
      if (!r->variant.empty() && !cal.profile(fitStack, r->variant))
        return 2;
    // Mean squared log error over the stack's rows for a parameter vector
    // (variants keep their own overrides of the fitted fields).
    auto loss = [&](const std::vector<double> &x) {
      for (size_t i = 0; i < x.size(); ++i)
        if (x[i] < 0 || (x[i] > 3 && micro(fitParams[i]) == 1) ||
            (llvm::StringRef(fitParams[i]).starts_with("overlap.") && x[i] > 1))
          return 1e9;
      double sum = 0;
      for (const Row *r : mine) {
        StackProfile p = r->variant.empty() ? work : *cal.profile(fitStack, r->variant);
        for (size_t i = 0; i < x.size(); ++i) {
          bool overridden = false;
          if (!r->variant.empty()) {
            // A field the variant sets stays the variant's.
            double *vref = paramRef(p, fitParams[i]);
            double *bref = paramRef(*base, fitParams[i]);
            overridden = *vref != *bref;
          }
          if (!overridden)
            *paramRef(p, fitParams[i]) = x[i] * micro(fitParams[i]);
        }
        Scored s = cal.score(*r, p);
        if (!s.ok)
          return 1e9;
        double e = std::log(s.predicted / r->published);
        sum += e * e;
      }
      return sum / mine.size();
    };
    const size_t n = fitParams.size();
    std::vector<std::vector<double>> simplex(n + 1, std::vector<double>(n));
    for (size_t i = 0; i < n; ++i) {
      double v = *paramRef(work, fitParams[i]);
      v /= micro(fitParams[i]);
      simplex[0][i] = v;
    }
    for (size_t k = 1; k <= n; ++k) {
      simplex[k] = simplex[0];
      simplex[k][k - 1] = simplex[0][k - 1] > 0 ? simplex[0][k - 1] * 1.2 : 0.1;
    }
    std::vector<double> f(n + 1);
    for (size_t k = 0; k <= n; ++k)
      f[k] = loss(simplex[k]);
    for (int iter = 0; iter < 400; ++iter) {
      std::vector<size_t> order(n + 1);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f[a] < f[b]; });
      std::vector<std::vector<double>> s2;
      std::vector<double> f2;
      for (size_t k : order)
        s2.push_back(simplex[k]), f2.push_back(f[k]);
      simplex = s2, f = f2;
      if (f[n] - f[0] < 1e-10)
        break;
      std::vector<double> centroid(n, 0);
      for (size_t k = 0; k < n; ++k)
        for (size_t i = 0; i < n; ++i)
          centroid[i] += simplex[k][i] / n;
      auto along = [&](double t) {
        std::vector<double> x(n);
        for (size_t i = 0; i < n; ++i)
          x[i] = centroid[i] + t * (simplex[n][i] - centroid[i]);
        return x;
      };
      std::vector<double> xr = along(-1);
      double fr = loss(xr);
      if (fr < f[0]) {
        std::vector<double> xe = along(-2);
        double fe = loss(xe);
        if (fe < fr)
          simplex[n] = xe, f[n] = fe;
        else
          simplex[n] = xr, f[n] = fr;
      } else if (fr < f[n - 1]) {
        simplex[n] = xr, f[n] = fr;
      } else {
        std::vector<double> xc = along(fr < f[n] ? -0.5 : 0.5);
        double fc = loss(xc);
        if (fc < std::min(fr, f[n])) {
          simplex[n] = xc, f[n] = fc;
        } else {
          for (size_t k = 1; k <= n; ++k) {
            for (size_t i = 0; i < n; ++i)
              simplex[k][i] = simplex[0][i] + 0.5 * (simplex[k][i] - simplex[0][i]);
            f[k] = loss(simplex[k]);
          }
        }
      }
    }
    llvm::outs() << llvm::formatv("fit of {0} on {1} rows: rms log error {2:f4}\n", fitStack,
                                  mine.size(), std::sqrt(f[0]));
    for (size_t i = 0; i < n; ++i)
      llvm::outs() << llvm::formatv("  {0} = {1:f4}\n", fitParams[i], simplex[0][i]);
    return 0;
  }

  // The table, per stack.
  struct Stat {
    double sum = 0, max = 0, maxMfu = 0;
    int n = 0;
    std::string worst;
  };
  std::map<std::string, Stat> stats;
  std::map<std::string, StackTolerance> tolerance;
  std::map<std::string, std::pair<double, double>> recorded; // calibration errors
  struct Ceilings {
    double bf16 = 0, fp8 = 0, moeBf16 = 0, moeFp8 = 0;
    std::array<double, 4> stated{};
  };
  std::map<std::string, Ceilings> ceilings;
  bool broken = false;
  llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10} {3,10} {4,8} {5,8}\n", "row", "stack",
                                "published", "predicted", "error", "mem GiB");
  for (const Row &r : rows) {
    StackProfile *p = cal.profile(r.stack, r.variant);
    if (!p)
      return 2;
    Scored s = cal.score(r, *p);
    std::string stackName = r.variant.empty() ? r.stack : r.stack + ":" + r.variant;
    if (!s.ok) {
      llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10:f0} {3,10} {4,8}  {5}\n", r.id,
                                    stackName, r.published, "-", "refused", s.detail);
      broken = true;
      continue;
    }
    double err = s.predicted / r.published - 1;
    std::string outlier;
    for (const auto &[id, why] : p->tolerance.outliers)
      if (id == r.id)
        outlier = why;
    if (!outlier.empty()) {
      llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10:f0} {3,10:f0} {4,7:f1}% {5,8:f1}  "
                                    "(outlier, held to no bound: {6})\n",
                                    r.id, stackName, r.published, s.predicted, 100 * err, s.memGiB,
                                    outlier);
      continue;
    }
    Stat &st = stats[r.stack + " " + (r.precision == "FP8" ? "fp8" : "bf16")];
    Stat &all = stats[r.stack + " all"];
    // The published run's MFU against the bf16 peak (the ceiling the
    // report flags predictions above).
    double mfu = r.published * s.flopsPerToken / s.peak;
    {
      // The ceilings the profile states: dense and MoE rows apart.
      Ceilings &c = ceilings[r.stack];
      double &slot = s.moe ? (r.precision == "FP8" ? c.moeFp8 : c.moeBf16)
                           : (r.precision == "FP8" ? c.fp8 : c.bf16);
      slot = std::max(slot, mfu);
      c.stated = {p->maxCalibratedMfuBf16, p->maxCalibratedMfuFp8, p->maxCalibratedMfuMoeBf16,
                  p->maxCalibratedMfuMoeFp8};
    }
    for (Stat *x : {&st, &all}) {
      x->maxMfu = std::max(x->maxMfu, mfu);
      x->sum += std::abs(err);
      x->n += 1;
      if (std::abs(err) >= x->max)
        x->max = std::abs(err), x->worst = r.id;
    }
    tolerance[r.stack] = p->tolerance;
    recorded[r.stack] = {p->calibratedMeanError, p->calibratedMaxError};
    llvm::outs() << llvm::formatv("{0,-44} {1,-12} {2,10:f0} {3,10:f0} {4,7:f1}% {5,8:f1}{6}\n",
                                  r.id, stackName, r.published, s.predicted, 100 * err, s.memGiB,
                                  s.detail.empty() ? "" : "  (" + s.detail + ")");
  }
  llvm::outs() << llvm::formatv("\n{0,-24} {1,5} {2,12} {3,12} {4,8}  {5}\n", "stack", "rows",
                                "mean |err|", "max |err|", "max MFU", "worst row");
  for (const auto &[key, st] : stats) {
    llvm::outs() << llvm::formatv("{0,-24} {1,5} {2,11:f1}% {3,11:f1}% {4,7:f1}%  {5}\n", key, st.n,
                                  100 * st.sum / st.n, 100 * st.max, 100 * st.maxMfu, st.worst);
  }
  if (check) {
    for (const auto &[key, st] : stats) {
      if (!llvm::StringRef(key).ends_with(" all"))
        continue;
      std::string name = key.substr(0, key.size() - 4);
      const StackTolerance &t = tolerance[name];
      double mean = st.sum / st.n;
      if (mean > t.meanError || st.max > t.maxError) {
        llvm::outs() << llvm::formatv("FAIL {0}: mean {1:f1}% (tolerance {2:f1}%), max "
                                      "{3:f1}% (tolerance {4:f1}%, {5})\n",
                                      name, 100 * mean, 100 * t.meanError, 100 * st.max,
                                      100 * t.maxError, st.worst);
        broken = true;
      } else {
        llvm::outs() << llvm::formatv("ok {0}: mean {1:f1}% <= {2:f1}%, max {3:f1}% <= "
                                      "{4:f1}%\n",
                                      name, 100 * mean, 100 * t.meanError, 100 * st.max,
                                      100 * t.maxError);
      }
      // The errors the profile states of itself (the report weighs gains
      // against them) are the ones the rows give, to 0.1 point (a run with
      // --set or --only scores something else and is not held to them).
      auto [recMean, recMax] = recorded[name];
      if (sets.empty() && only.empty() && exclude.empty() && fitStack.empty() &&
          (std::abs(recMean - mean) > 0.0015 || std::abs(recMax - st.max) > 0.0015)) {
        llvm::outs() << llvm::formatv("FAIL {0}: the profile states calibration.mean_error "
                                      "{1:f1}% and max_error {2:f1}%, the rows give {3:f1}% "
                                      "and {4:f1}%: update data/stacks/{0}.json\n",
                                      name, 100 * recMean, 100 * recMax, 100 * mean, 100 * st.max);
        broken = true;
      }
      // And the MFU ceilings it states, to 0.1 point: the report flags a
      // plan above them.
      const Ceilings &c = ceilings[name];
      std::array<double, 4> got = {c.bf16, c.fp8, c.moeBf16, c.moeFp8};
      static const char *const fields[] = {"max_mfu_bf16", "max_mfu_fp8", "max_mfu_moe_bf16",
                                           "max_mfu_moe_fp8"};
      for (int i = 0; i < 4; ++i)
        if (sets.empty() && only.empty() && exclude.empty() &&
            std::abs(got[i] - c.stated[i]) > 0.0015) {
          llvm::outs() << llvm::formatv("FAIL {0}: the profile states calibration.{1} "
                                        "{2:p}, the rows give {3:p}: update "
                                        "data/stacks/{0}.json\n",
                                        name, fields[i], c.stated[i], got[i]);
          broken = true;
        }
    }
    if (broken)
      return 1;
  }
  return 0;
}
