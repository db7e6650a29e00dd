//===- Stack.cpp - training stack profiles --------------------------------===//
//
// Reads the stack profiles (data/stacks/*.json, compiled in as
// StackProfiles.inc, or a user's file) with every field checked: a missing
// or misspelt field is an error naming it, never a silent default.
//
//===----------------------------------------------------------------------===//

#include "llmopt/CostModel/Stack.h"
#include "llmopt/Support/JSONDepth.h"

#include "JSONFields.h"
#include "JSONMerge.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace llmopt::cost;
namespace json = llvm::json;

namespace {
struct BuiltinStack {
  const char *name;
  const char *text;
};
// Generated from data/stacks/*.json by lib/CostModel/CMakeLists.txt: the
// default stack first.
const BuiltinStack kBuiltinStacks[] = {
#include "StackProfiles.inc"
};
} // namespace

const char *llmopt::cost::toString(CPKind k) {
  switch (k) {
  case CPKind::None:
    return "none";
  case CPKind::Ring:
    return "ring";
  case CPKind::Ulysses:
    return "ulysses";
  }
  return "?";
}

const char *llmopt::cost::toString(EPLayout l) {
  switch (l) {
  case EPLayout::None:
    return "none";
  case EPLayout::DataParallel:
    return "dp-cp";
  case EPLayout::DataTensorParallel:
    return "dp-cp-tp";
  }
  return "?";
}

bool StackProfile::hasSchedule(const char *s) const {
  return llvm::is_contained(caps.schedules, s);
}
bool StackProfile::hasRecompute(const char *r) const {
  return llvm::is_contained(caps.recompute, r);
}
bool StackCapabilities::hasHybridSharding(int zero) const {
  return llvm::is_contained(hybridSharding, zero);
}

bool StackProfile::hasZero(int stage, bool withPP) const {
  return llvm::is_contained(withPP ? caps.zeroStagesWithPP : caps.zeroStages, stage);
}

std::vector<std::string> llmopt::cost::stackNames() {
  std::vector<std::string> names;
  for (const BuiltinStack &s : kBuiltinStacks)
    names.push_back(s.name);
  return names;
}

const char *llmopt::cost::defaultStackName() { return kBuiltinStacks[0].name; }

namespace {

bool readProfile(const json::Object &root, StackProfile &s, std::string &error) {
  Fields f(root, "", error);
  bool ok = f.string("name", s.name) && f.string("title", s.title) &&
            f.string("versions", s.versions) && f.string("provenance", s.provenance);
  if (!ok)
    return false;
  f.allow("variants"); // optional; applied by the caller

  const json::Object *caps = f.object("capabilities");
  if (!caps)
    return false;
  {
    Fields c(*caps, "capabilities.", error);
    StackCapabilities &k = s.caps;
    ok = c.boolean("tensor_parallel", k.tensorParallel) &&
         c.boolean("sequence_parallel", k.sequenceParallel) &&
         c.boolean("tensor_parallel_with_pp", k.tensorParallelWithPP) &&
         c.boolean("moe_tensor_parallel_needs_sp", k.moeTensorParallelNeedsSP) &&
         (!caps->get("context_parallel_shards_parameters") ||
          c.boolean("context_parallel_shards_parameters", k.contextParallelShardsParameters)) &&
         (!caps->get("vocab_padding") || c.integer("vocab_padding", k.vocabPadding, -1, 1 << 20)) &&
         (!caps->get("tensor_parallel_unpadded_vocab") ||
          c.boolean("tensor_parallel_unpadded_vocab", k.tensorParallelUnpaddedVocab)) &&
         (!caps->get("fp8_dense_only") || c.boolean("fp8_dense_only", k.fp8DenseOnly)) &&
         (!caps->get("tensor_or_pipeline_parallel_needs_fsdp") ||
          c.boolean("tensor_or_pipeline_parallel_needs_fsdp",
                    k.tensorOrPipelineParallelNeedsFsdp)) &&
         (!caps->get("pp_inside_dp_needs_matching_expert_groups") ||
          c.boolean("pp_inside_dp_needs_matching_expert_groups",
                    k.ppInsideDpNeedsMatchingExpertGroups)) &&
         c.strings("pipeline_schedules", k.schedules, {"1f1b", "interleaved-1f1b", "gpipe"}) &&
         c.boolean("uneven_stages", k.unevenStages) &&
         c.boolean("uneven_interleaving", k.unevenInterleaving) &&
         c.integer("max_virtual_stages", k.maxVirtualStages, 0, 1 << 20) &&
         c.choice<CPKind>(
             "context_parallel", k.contextParallel,
             {{"none", CPKind::None}, {"ring", CPKind::Ring}, {"ulysses", CPKind::Ulysses}}) &&
         c.choice<EPLayout>("expert_parallel", k.expertParallel,
                            {{"none", EPLayout::None},
                             {"dp-cp", EPLayout::DataParallel},
                             {"dp-cp-tp", EPLayout::DataTensorParallel}}) &&
         c.ints("zero_stages", k.zeroStages, 0, 3) &&
         c.ints("zero_stages_with_pp", k.zeroStagesWithPP, 0, 3) &&
         c.boolean("optimizer_offload", k.optimizerOffload) &&
         c.ints("hybrid_sharding", k.hybridSharding, 1, 3) &&
         c.strings("recompute", k.recompute,
                   {"none", "selective", "full", "per-stage", "partial"}) &&
         c.boolean("fp8", k.fp8) && c.noOthers();
    if (!ok)
      return false;
    if (k.zeroStages.empty())
      return c.fail("zero_stages", "must list at least one stage (0: plain data parallelism)");
    if (k.recompute.empty())
      return c.fail("recompute", "must list at least one mode (\"none\")");
    for (int z : k.zeroStagesWithPP)
      if (!llvm::is_contained(k.zeroStages, z))
        return c.fail("zero_stages_with_pp", llvm::formatv("has {0}, which zero_stages lacks", z));
  }

  const json::Object *eff = f.object("efficiency");
  if (!eff)
    return false;
  {
    Fields e(*eff, "efficiency.", error);
    StackEfficiency &x = s.eff;
    ok = e.number("gemm", x.gemm, 0.01, 2) && e.number("fp8_gemm", x.fp8Gemm, 0, 1) &&
         e.number("attention", x.attention, 0.01, 3) && e.number("memory", x.memory, 0.01, 2) &&
         e.number("host_overhead_per_layer_us", x.hostOverheadPerLayer, 0, 1e6, 1e-6) &&
         e.number("moe_expert_overhead_us", x.moeExpertOverhead, 0, 1e6, 1e-6) && e.noOthers();
    if (!ok)
      return false;
  }

  const json::Object *ov = f.object("overlap");
  if (!ov)
    return false;
  {
    Fields o(*ov, "overlap.", error);
    StackOverlap &x = s.overlap;
    ok = o.number("comm_slowdown", x.commSlowdown, 0, 1) &&
         o.number("tp_overlap", x.tpOverlap, 0, 1) && o.boolean("dp_overlap", x.dpOverlap) &&
         o.integer("zero3_prefetch_layers", x.zero3Prefetch, 0, 64) &&
         o.boolean("cp_overlap", x.cpOverlap) && o.boolean("pp_overlap", x.ppOverlap) &&
         o.number("ep_overlap", x.epOverlap, 0, 1) && o.noOthers();
    if (!ok)
      return false;
  }

  const json::Object *moe = f.object("moe_dispatch");
  if (!moe)
    return false;
  {
    Fields m(*moe, "moe_dispatch.", error);
    ok = m.choice<MoEDispatch>(
             "sizing", s.moeDispatch,
             {{"worst-case", MoEDispatch::WorstCase}, {"routed", MoEDispatch::Routed}}) &&
         m.number("margin", s.moeDispatchMargin, 0, 100) && m.noOthers();
    if (!ok)
      return false;
  }

  const json::Object *tol = f.object("tolerance");
  if (!tol)
    return false;
  {
    Fields t(*tol, "tolerance.", error);
    ok = t.number("mean_error", s.tolerance.meanError, 0, 10) &&
         t.number("max_error", s.tolerance.maxError, 0, 10);
    if (!ok)
      return false;
    const json::Value *out = t.get("outliers");
    const json::Object *o = out ? out->getAsObject() : nullptr;
    if (!o)
      return t.fail("outliers", "must be an object of row id to the reason it is held to no bound");
    for (const auto &kv : *o) {
      std::optional<llvm::StringRef> why = kv.second.getAsString();
      if (!why || why->empty())
        return t.fail("outliers", "'" + kv.first.str() + "' needs a reason (a string)");
      s.tolerance.outliers.push_back({kv.first.str(), why->str()});
    }
    if (!t.noOthers())
      return false;
  }

  const json::Object *cal = f.object("calibration");
  if (!cal)
    return false;
  {
    // What the fit says of itself; the rows and the command are free text
    // for readers, the MFU ceilings are used.
    Fields c(*cal, "calibration.", error);
    std::string text;
    ok = c.string("rows", text) && c.string("command", text) && c.string("fitted", text) &&
         c.number("mean_error", s.calibratedMeanError, 0, 10) &&
         c.number("max_error", s.calibratedMaxError, 0, 10) &&
         c.number("max_mfu_bf16", s.maxCalibratedMfuBf16, 0, 1) &&
         c.number("max_mfu_fp8", s.maxCalibratedMfuFp8, 0, 2) &&
         c.number("max_mfu_moe_bf16", s.maxCalibratedMfuMoeBf16, 0, 1) &&
         c.number("max_mfu_moe_fp8", s.maxCalibratedMfuMoeFp8, 0, 2) && c.noOthers();
    if (!ok)
      return false;
  }
  return f.noOthers();
}
} // namespace

bool llmopt::cost::parseStackProfile(const std::string &text, const std::string &filename,
                                     const std::string &variant, StackProfile &out,
                                     std::string &error) {
  auto fail = [&](const std::string &msg) {
    error = "stack profile '" + filename + "': " + msg;
    return false;
  };
  if (std::string deep = jsonDepthError(text, "stack profile '" + filename + "'"); !deep.empty()) {
    error = deep;
    return false;
  }
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return fail("not valid JSON: " + llvm::toString(parsed.takeError()));
  json::Object *root = parsed->getAsObject();
  if (!root)
    return fail("must be a JSON object");
  json::Object merged = *root;
  if (!variant.empty()) {
    const json::Value *vs = root->get("variants");
    const json::Object *variants = vs ? vs->getAsObject() : nullptr;
    const json::Value *v = variants ? variants->get(variant) : nullptr;
    if (!v || !v->getAsObject()) {
      std::vector<std::string> names;
      if (variants)
        for (const auto &kv : *variants)
          names.push_back(kv.first.str());
      std::sort(names.begin(), names.end());
      return fail("has no variant '" + variant + "'" +
                  (names.empty() ? std::string(" (it has none)")
                                 : "; its variants: " + llvm::join(names, ", ")));
    }
    const json::Object &over = *v->getAsObject();
    for (const auto &kv : over)
      if (kv.first == "name" || kv.first == "variants")
        return fail("variant '" + variant + "' may not change '" + kv.first.str() + "'");
    mergeJSON(merged, over);
  }
  StackProfile s;
  std::string err;
  if (!readProfile(merged, s, err))
    return fail(err + (variant.empty() ? "" : " (variant '" + variant + "')"));
  if (const json::Value *vs = root->get("variants"))
    if (!vs->getAsObject())
      return fail("field 'variants' must be an object of variants by name");
  s.variant = variant;
  out = std::move(s);
  return true;
}

bool llmopt::cost::getStackProfile(const std::string &spec, StackProfile &out, std::string &error) {
  auto [name, variant] = llvm::StringRef(spec).split(':');
  for (const BuiltinStack &s : kBuiltinStacks)
    if (name == s.name)
      return parseStackProfile(s.text, std::string("data/stacks/") + s.name + ".json",
                               variant.str(), out, error);
  error = "unknown stack '" + name.str() + "': use one of " + llvm::join(stackNames(), ", ") +
          " (or stack-profile=FILE for a profile of your own)";
  return false;
}

json::Value llmopt::cost::toJSON(const StackProfile &s) {
  return json::Object{
      {"name", s.name},
      {"variant", s.variant},
      {"title", s.title},
      {"versions", s.versions},
      {"provenance", s.provenance},
      {"efficiency", json::Object{{"gemm", s.eff.gemm},
                                  {"fp8_gemm", s.eff.fp8Gemm},
                                  {"attention", s.eff.attention},
                                  {"memory", s.eff.memory},
                                  {"host_overhead_per_layer_us", s.eff.hostOverheadPerLayer * 1e6},
                                  {"moe_expert_overhead_us", s.eff.moeExpertOverhead * 1e6}}},
      {"overlap", json::Object{{"comm_slowdown", s.overlap.commSlowdown},
                               {"tp_overlap", s.overlap.tpOverlap},
                               {"dp_overlap", s.overlap.dpOverlap},
                               {"zero3_prefetch_layers", s.overlap.zero3Prefetch},
                               {"cp_overlap", s.overlap.cpOverlap},
                               {"pp_overlap", s.overlap.ppOverlap},
                               {"ep_overlap", s.overlap.epOverlap}}},
      {"calibrated_mean_error", s.calibratedMeanError},
      {"calibrated_max_error", s.calibratedMaxError},
      {"max_calibrated_mfu_bf16", s.maxCalibratedMfuBf16},
      {"max_calibrated_mfu_fp8", s.maxCalibratedMfuFp8},
      {"max_calibrated_mfu_moe_bf16", s.maxCalibratedMfuMoeBf16},
      {"max_calibrated_mfu_moe_fp8", s.maxCalibratedMfuMoeFp8},
  };
}
