//===- EmitPlan.cpp - llm-emit-plan ---------------------------------------===//

#include "CudaSource.h"

#include "llmopt-runtime/plan_limits.h"

#include "llmopt/Dialect/Exec/IR/ExecOps.h"
#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"
#include "llmopt/Support/IRDepth.h"
#include "llmopt/Support/Output.h"
#include "llmopt/Target/ExecToPlan.h"
#include "llmopt/Target/Passes.h"
#include <array>
#include <cmath>
#include <optional>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/SourceMgr.h"

namespace llmopt {
#define GEN_PASS_DEF_EMITPLAN
#include "llmopt/Target/Passes.h.inc"
} // namespace llmopt

using namespace mlir;
using namespace llmopt;
namespace json = llvm::json;

namespace {

std::string dtypeName(Type t) {
  if (t.isF32())
    return "f32";
  if (t.isBF16())
    return "bf16";
  if (t.isF16())
    return "f16";
  if (t.isInteger(32))
    return "i32";
  if (t.isInteger(64))
    return "i64";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

json::Array shapeJSON(ArrayRef<int64_t> shape) {
  json::Array a;
  for (int64_t d : shape)
    a.push_back(d);
  return a;
}

json::Value bufJSON(exec::BufAttr b) {
  json::Object o{{"space", exec::stringifyBufferSpace(b.getSpace()).str()},
                 {"shape", shapeJSON(b.getShape().asArrayRef())},
                 {"dtype", dtypeName(b.getDtype())}};
  if (b.getSpace() == exec::BufferSpace::state || b.getSpace() == exec::BufferSpace::accum)
    o["name"] = b.getName().str();
  else
    o["offset"] = b.getOffset();
  return o;
}

json::Array bufsJSON(ArrayAttr list) {
  json::Array a;
  for (Attribute x : list)
    a.push_back(bufJSON(cast<exec::BufAttr>(x)));
  return a;
}

json::Value attrJSON(Attribute a) {
  if (auto f = dyn_cast<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto b = dyn_cast<BoolAttr>(a))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(a))
    return i.getInt();
  if (auto s = dyn_cast<StringAttr>(a))
    return s.str();
  return nullptr;
}

/// The place (`params[3].std`) of the first number in `v` that is not finite,
/// if any: JSON has no `inf` or `nan`, and llvm::json would print them.
std::optional<std::string> findNonFinite(const json::Value &v, const std::string &path) {
  if (std::optional<double> d = v.getAsNumber(); d && !std::isfinite(*d))
    return path;
  if (const json::Array *a = v.getAsArray())
    for (auto [i, e] : llvm::enumerate(*a))
      if (std::optional<std::string> p = findNonFinite(e, path + "[" + std::to_string(i) + "]"))
        return p;
  if (const json::Object *o = v.getAsObject())
    for (const auto &[k, e] : *o)
      if (std::optional<std::string> p =
              findNonFinite(e, (path.empty() ? "" : path + ".") + k.str()))
        return p;
  return std::nullopt;
}

} // namespace

/// The plan file's JSON from the exec module alone: exec.plan, the
/// exec.param ops and the exec.program ops (docs/plan-format.md).
LogicalResult llmopt::translateExecToPlan(ModuleOp module, std::string &text, int64_t &world,
                                          SmallVectorImpl<exec::FusedOp> &fusedOps) {
  SmallVector<exec::ProgramOp> programs(module.getOps<exec::ProgramOp>());
  SmallVector<exec::PlanOp> headers(module.getOps<exec::PlanOp>());
  if (programs.empty() || headers.size() != 1)
    return module.emitError() << "exec-to-plan: the module needs exec.program ops and one "
                                 "exec.plan: run convert-llm-to-exec first";
  exec::PlanOp header = headers.front();
  // The programs run the ZeRO stage the header names: every update of a
  // sharded optimizer updates a chunk (`shard`), none otherwise.
  for (exec::ProgramOp program : programs)
    for (Region *phase : {&program.getMicroBatch(), &program.getStep()})
      for (exec::KernelOp k : phase->getOps<exec::KernelOp>())
        if (k.getKernel() == "adamw" && k.getParams().contains("shard") != (header.getZero() > 0))
          return k.emitError() << "exec-to-plan: exec.plan says ZeRO-" << header.getZero()
                               << " but program \"" << program.getName() << "\" updates "
                               << k.getParams().get("param")
                               << (header.getZero() > 0 ? " whole: run exec-shard-optimizer"
                                                        : " as a chunk");
  json::Object root;
  root["format"] = "llm-opt-plan";
  root["version"] = 1;
  if (auto name = header.getModelAttr())
    root["model"] = name.str();
  if (auto a = header.getMicroBatchAttr())
    root["micro_batch"] = a.getInt();
  if (auto a = header.getSeqLenAttr())
    root["seq_len"] = a.getInt();
  json::Object mesh;
  for (NamedAttribute na : header.getMesh())
    mesh[na.getName().str()] = attrJSON(na.getValue());
  if (auto prediction = header.getPredictionAttr()) {
    json::Object o;
    for (NamedAttribute na : prediction)
      o[na.getName().str()] = attrJSON(na.getValue());
    root["prediction"] = std::move(o);
  }
  world = header.getWorld();
  root["zero_stage"] = header.getZero();
  root["mesh"] = std::move(mesh);
  root["world_size"] = world;
  if (auto flops = header.getTrainFlopsPerTokenAttr())
    root["train_flops_per_token"] = flops.getValueAsDouble();

  json::Array inputs;
  static const char *inputNames[] = {"tokens", "labels"};
  for (auto [i, a] : llvm::enumerate(header.getInputs())) {
    auto rt = cast<RankedTensorType>(cast<TypeAttr>(a).getValue());
    inputs.push_back(json::Object{{"name", i < 2 ? inputNames[i] : "input"},
                                  {"shape", shapeJSON(rt.getShape())},
                                  {"dtype", dtypeName(rt.getElementType())}});
  }
  root["inputs"] = std::move(inputs);

  json::Array params;
  for (exec::ParamOp p : module.getOps<exec::ParamOp>()) {
    auto t = cast<RankedTensorType>(p.getType());
    json::Object o{{"name", p.getName().str()},
                   {"shape", shapeJSON(t.getShape())},
                   {"dtype", dtypeName(t.getElementType())},
                   {"init", exec::stringifyParamInit(p.getInit()).str()}};
    if (auto std = p.getStdAttr())
      o["std"] = std.getValueAsDouble();
    // A tensor-parallel part: the runtime initializes the whole tensor and
    // keeps part `tp index` of each of `blocks` equal blocks along `dim`.
    if (auto shard = p.getShardAttr()) {
      json::Object so;
      for (NamedAttribute na : shard)
        so[na.getName().str()] = attrJSON(na.getValue());
      o["shard"] = std::move(so);
    }
    params.push_back(std::move(o));
  }
  root["params"] = std::move(params);

  json::Array progs;
  for (exec::ProgramOp prog : programs) {
    // The runtime loads no plan past its bounds: refuse to write one.
    for (auto [what, bytes] : {std::pair<const char *, uint64_t>{"arena", prog.getArena()},
                               {"stash", prog.getStash().value_or(0)}})
      if (bytes > uint64_t(plan_limits::kMaxArenaBytes))
        return prog.emitError() << "exec-to-plan: program \"" << prog.getName() << "\" needs a "
                                << llvm::formatv("{0:f2}", double(bytes) / double(1ull << 40))
                                << " TiB " << what << ", past the "
                                << (plan_limits::kMaxArenaBytes >> 40)
                                << " TiB a plan may ask for (llm-run refuses it): lower the "
                                   "micro-batch (batch=) or the sequence length (seq=), or "
                                   "split the model over more ranks";
    // `backwardStart`: set to the index of the first instruction after an
    // exec.backward marker, if the region has one.
    json::Array chunks;
    auto instructions = [&](Region &region, int64_t *backwardStart = nullptr) {
      json::Array instrs;
      if (region.empty())
        return instrs;
      for (Operation &op : region.front()) {
        if (isa<exec::BackwardOp>(op) && backwardStart)
          *backwardStart = int64_t(instrs.size());
        if (auto c = dyn_cast<exec::ChunkOp>(op))
          chunks.push_back(
              json::Object{{"chunk", c.getIndex()}, {"begin", int64_t(instrs.size())}});
        if (auto k = dyn_cast<exec::KernelOp>(op)) {
          json::Object ps;
          for (NamedAttribute na : k.getParams())
            ps[na.getName().str()] = attrJSON(na.getValue());
          instrs.push_back(json::Object{{"kernel", k.getKernel().str()},
                                        {"ins", bufsJSON(k.getIns())},
                                        {"outs", bufsJSON(k.getOuts())},
                                        {"params", std::move(ps)}});
        } else if (auto f = dyn_cast<exec::FusedOp>(op)) {
          json::Array body, temps;
          for (Attribute e : f.getBody()) {
            auto d = cast<DictionaryAttr>(e);
            json::Object ps;
            for (NamedAttribute na : d.getAs<DictionaryAttr>("params"))
              ps[na.getName().str()] = attrJSON(na.getValue());
            json::Array ins, outs;
            for (int64_t r : d.getAs<DenseI64ArrayAttr>("ins").asArrayRef())
              ins.push_back(r);
            for (int64_t r : d.getAs<DenseI64ArrayAttr>("outs").asArrayRef())
              outs.push_back(r);
            body.push_back(json::Object{{"kernel", d.getAs<StringAttr>("kernel").str()},
                                        {"ins", std::move(ins)},
                                        {"outs", std::move(outs)},
                                        {"params", std::move(ps)}});
          }
          for (Attribute t : f.getTemps()) {
            json::Array shape;
            for (int64_t d : cast<DenseI64ArrayAttr>(t).asArrayRef())
              shape.push_back(d);
            temps.push_back(std::move(shape));
          }
          instrs.push_back(json::Object{{"kernel", "fused"},
                                        {"name", f.getName().str()},
                                        {"ins", bufsJSON(f.getIns())},
                                        {"outs", bufsJSON(f.getOuts())},
                                        {"temps", std::move(temps)},
                                        {"body", std::move(body)}});
          fusedOps.push_back(f);
        } else if (auto ar = dyn_cast<exec::AllReduceOp>(op)) {
          instrs.push_back(json::Object{{"collective", "all_reduce"},
                                        {"axis", ar.getAxis().str()},
                                        {"reduce", exec::stringifyReduceKind(ar.getReduce()).str()},
                                        {"buffers", bufsJSON(ar.getBuffers())}});
        } else if (auto ba = dyn_cast<exec::BucketAllReduceOp>(op)) {
          instrs.push_back(json::Object{{"collective", "bucket_all_reduce"},
                                        {"axis", ba.getAxis().str()},
                                        {"reduce", exec::stringifyReduceKind(ba.getReduce()).str()},
                                        {"bucket", ba.getBucket()},
                                        {"buffers", bufsJSON(ba.getBuffers())}});
        } else if (auto bw = dyn_cast<exec::BucketWaitOp>(op)) {
          instrs.push_back(json::Object{{"collective", "bucket_wait"}, {"bucket", bw.getBucket()}});
        } else if (auto g = dyn_cast<exec::GradReduceScatterOp>(op)) {
          json::Object o{{"collective", "grad_reduce_scatter"},
                         {"axis", g.getAxis().str()},
                         {"reduce", exec::stringifyReduceKind(g.getReduce()).str()},
                         {"ins", bufsJSON(ArrayAttr::get(g.getContext(), {g.getInput()}))},
                         {"outs", bufsJSON(ArrayAttr::get(g.getContext(), {g.getAccum()}))}};
          if (auto bucket = g.getBucketAttr())
            o["bucket"] = bucket.getInt();
          if (g.getFlush())
            o["flush"] = true;
          instrs.push_back(std::move(o));
        } else if (auto rs = dyn_cast<exec::ReduceScatterOp>(op)) {
          instrs.push_back(json::Object{{"collective", "reduce_scatter"},
                                        {"axis", rs.getAxis().str()},
                                        {"reduce", exec::stringifyReduceKind(rs.getReduce()).str()},
                                        {"buffers", bufsJSON(rs.getBuffers())}});
        } else if (auto pg = dyn_cast<exec::ParamGatherOp>(op)) {
          json::Object o{{"collective", "param_gather"},
                         {"axis", pg.getAxis().str()},
                         {"param", pg.getParam().str()},
                         {"buffers", bufsJSON(ArrayAttr::get(pg.getContext(), {pg.getBuffer()}))}};
          if (std::optional<uint64_t> e = pg.getEvent())
            o["event"] = int64_t(*e);
          instrs.push_back(std::move(o));
        } else if (auto pw = dyn_cast<exec::ParamWaitOp>(op)) {
          instrs.push_back(json::Object{{"collective", "param_wait"}, {"event", pw.getEvent()}});
        } else if (auto p2p = dyn_cast<exec::P2POp>(op)) {
          instrs.push_back(json::Object{
              {"collective", exec::stringifyTransferKind(p2p.getKind()).str()},
              {"axis", "pp"},
              {"peer", p2p.getPeer()},
              {"tag", p2p.getTag()},
              {"buffers", bufsJSON(ArrayAttr::get(p2p.getContext(), {p2p.getBuffer()}))}});
        } else if (auto sq = dyn_cast<exec::SeqOp>(op)) {
          instrs.push_back(
              json::Object{{"collective", ("seq_" + exec::stringifySeqKind(sq.getKind())).str()},
                           {"axis", sq.getAxis().str()},
                           {"ins", bufsJSON(sq.getIns())},
                           {"outs", bufsJSON(sq.getOuts())}});
        } else if (auto ring = dyn_cast<exec::RingAttentionOp>(op)) {
          json::Object ps;
          for (NamedAttribute na : ring.getParams())
            ps[na.getName().str()] = attrJSON(na.getValue());
          instrs.push_back(json::Object{
              {"collective",
               ("cp_ring_attention_" + exec::stringifyDirection(ring.getKind())).str()},
              {"axis", ring.getAxis().str()},
              {"ins", bufsJSON(ring.getIns())},
              {"outs", bufsJSON(ring.getOuts())},
              {"params", std::move(ps)}});
        } else if (auto a2a = dyn_cast<exec::AllToAllOp>(op)) {
          instrs.push_back(json::Object{
              {"collective", ("ep_" + exec::stringifyExpertExchange(a2a.getKind())).str()},
              {"axis", a2a.getAxis().str()},
              {"ins", bufsJSON(a2a.getIns())},
              {"outs", bufsJSON(a2a.getOuts())}});
        } else if (auto ag = dyn_cast<exec::AllGatherOp>(op)) {
          instrs.push_back(json::Object{{"collective", "all_gather"},
                                        {"axis", ag.getAxis().str()},
                                        {"buffers", bufsJSON(ag.getBuffers())}});
        }
      }
      return instrs;
    };
    json::Array ranks;
    for (int64_t r : prog.getRanks())
      ranks.push_back(r);
    json::Object outs;
    for (NamedAttribute na : prog.getOutputs())
      outs[na.getName().str()] = bufJSON(cast<exec::BufAttr>(na.getValue()));
    int64_t backwardStart = -1;
    json::Array microInstrs = instructions(prog.getMicroBatch(), &backwardStart);
    json::Object progJSON{{"name", prog.getName().str()},
                          {"ranks", std::move(ranks)},
                          {"arena_bytes", prog.getArena()},
                          {"num_micro_batches", prog.getMicroBatches()},
                          {"outputs", std::move(outs)},
                          {"micro_batch_instructions", std::move(microInstrs)},
                          {"step_instructions", instructions(prog.getStep())}};
    if (std::optional<uint64_t> stash = prog.getStash())
      progJSON["stash_bytes"] = int64_t(*stash);
    if (backwardStart >= 0) {
      // A pipeline stage: its schedule and order are the program's
      // (convert-llm-to-exec laid them out), translated as they are.
      progJSON["backward_start"] = backwardStart;
      if (!prog.getScheduleAttr() || !prog.getOrderAttr())
        return prog.emitOpError() << "exec-to-plan: a pipeline stage's program has no "
                                     "schedule and order; run convert-llm-to-exec";
      progJSON["schedule"] = prog.getScheduleAttr().getValue().str();
      if (!chunks.empty())
        progJSON["chunks"] = std::move(chunks);
      json::Array order;
      ArrayRef<int64_t> o = prog.getOrderAttr().asArrayRef();
      for (size_t i = 0; i + 2 < o.size(); i += 3)
        order.push_back(json::Array{o[i], o[i + 1], o[i + 2]});
      progJSON["order"] = std::move(order);
    }
    progs.push_back(std::move(progJSON));
  }
  root["programs"] = std::move(progs);
  json::Value plan(std::move(root));
  // The verifiers keep non-finite numbers out (a std, a learning rate); this
  // is the last guard before the runtime's parser would meet one.
  if (std::optional<std::string> at = findNonFinite(plan, ""))
    return module.emitError() << "exec-to-plan: " << *at
                              << " is not a finite number, which plan.json cannot hold";
  text = llvm::formatv("{0:1}", plan).str() + "\n";
  return success();
}

namespace {
struct EmitPlanPass : public llmopt::impl::EmitPlanBase<EmitPlanPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (dir.empty()) {
      module.emitError() << "llm-emit-plan: pass dir=PATH";
      return signalPassFailure();
    }
    std::string text;
    int64_t world = 1;
    SmallVector<exec::FusedOp> fusedOps;
    if (failed(translateExecToPlan(module, text, world, fusedOps)))
      return signalPassFailure();
    std::array<uint8_t, 32> hash = llvm::SHA256::hash(
        ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
    std::string hex = llvm::toHex(hash, /*LowerCase=*/true);
    // The fused kernels' CUDA source, checksummed beside the plan.
    std::string sums = hex + "  plan.json\n";
    // The directory is written whole before it appears (a new one), or every
    // file staged and checked before any is renamed into place (an existing
    // one): a full disk leaves the previous plan whole, or no directory.
    std::vector<std::pair<std::string, std::string>> files;
    if (!fusedOps.empty()) {
      std::string cuda;
      if (failed(fusedKernelsCudaSource(fusedOps, cuda)))
        return signalPassFailure();
      std::array<uint8_t, 32> cudaHash = llvm::SHA256::hash(
          ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(cuda.data()), cuda.size()));
      sums += llvm::toHex(cudaHash, /*LowerCase=*/true) + "  kernels.cu\n";
      files.push_back({"kernels.cu", std::move(cuda)});
    }
    files.push_back({"plan.json", text});
    files.push_back({"checksums.sha256", sums});

    // A Slurm batch script launching the plan (one task per rank).
    int64_t perNode = std::max<int64_t>(1, std::min<int64_t>(gpusPerNode, world));
    int64_t nodes = (world + perNode - 1) / perNode;
    // Built by concatenation: the shell's ${VAR:-default} braces would clash
    // with formatv's replacement syntax.
    std::string ranks = std::to_string(world), per = std::to_string(perNode);
    std::string slurm =
        "#!/bin/bash\n"
        "# Launches the plan in this directory: " +
        ranks + " ranks, " + per +
        " per node.\n"
        "# Submit from the plan directory (or set PLAN):\n"
        "#   DATA=/path/to/shard.bin STEPS=1000 sbatch run.slurm\n"
        "#SBATCH --job-name=llm-opt\n"
        "#SBATCH --nodes=" +
        std::to_string(nodes) +
        "\n"
        "#SBATCH --ntasks-per-node=" +
        per +
        "\n"
        "#SBATCH --gpus-per-node=" +
        per +
        "\n"
        "#SBATCH --cpus-per-task=8\n"
        "set -euo pipefail\n"
        "PLAN=\"${PLAN:-${SLURM_SUBMIT_DIR:-$(pwd)}}\"\n"
        "CKPT=\"${CHECKPOINTS:-checkpoints}\"\n"
        "# A requeued job resumes from the newest complete checkpoint.\n"
        "RESUME=()\n"
        "if [ -f \"$CKPT/LATEST\" ]; then RESUME=(--resume \"$CKPT\"); fi\n"
        "srun llm-run \"$PLAN\" --data \"${DATA:?set DATA to the token shards}\" \\\n"
        "  --steps \"${STEPS:-1000}\" --metrics \"${METRICS:-metrics.jsonl}\" \\\n"
        "  --checkpoint-dir \"$CKPT\" --checkpoint-every \"${EVERY:-100}\" \\\n"
        "  \"${RESUME[@]}\"\n";
    files.push_back({"run.slurm", slurm});
    std::string error;
    // Without fused kernels, a previous plan's kernels.cu goes.
    std::vector<std::string> stale;
    if (fusedOps.empty())
      stale.push_back("kernels.cu");
    if (!writeDirectoryAtomically(dir, files, stale, error)) {
      module.emitError() << "llm-emit-plan: " << error;
      return signalPassFailure();
    }
  }
};
} // namespace

void llmopt::registerExecToPlanTranslation() {
  // Both read an exec module (with the llm functions it may still hold) and
  // write what llm-emit-plan writes: plan.json, or kernels.cu (the CUDA
  // source of the exec.fused ops).
  auto dialects = [](DialectRegistry &registry) {
    registry.insert<exec::ExecDialect, llm::LLMDialect, func::FuncDialect, arith::ArithDialect>();
  };
  // Registered on the source rather than the parsed module: the text is
  // scanned for nesting deeper than any plan has before MLIR's parser, which
  // recurses once per level, can overflow its stack on it (as llm-opt does).
  auto translation = [dialects](bool cuda) {
    return [cuda, dialects](const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
                            llvm::raw_ostream &os, MLIRContext *ctx) -> LogicalResult {
      const llvm::MemoryBuffer *input = sourceMgr->getMemoryBuffer(sourceMgr->getMainFileID());
      // Said as llm-opt says it: the file and the byte, not the line, which
      // may be some thousand brackets long.
      if (std::string deep = irDepthError(input->getBuffer()); !deep.empty()) {
        llvm::errs() << input->getBufferIdentifier() << ": error: " << deep << "\n";
        return failure();
      }
      DialectRegistry registry;
      dialects(registry);
      ctx->appendDialectRegistry(registry);
      OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(ctx));
      if (!module || failed(verify(*module)))
        return failure();
      std::string text;
      int64_t world = 1;
      SmallVector<exec::FusedOp> fused;
      if (failed(translateExecToPlan(*module, text, world, fused)))
        return failure();
      if (!cuda) {
        os << text;
        return success();
      }
      if (fused.empty())
        return module->emitError() << "exec-to-cuda: the module has no exec.fused ops, so the "
                                      "plan has no generated kernels (lowered with fuse=false?)";
      std::string source;
      if (failed(fusedKernelsCudaSource(fused, source)))
        return failure();
      os << source;
      return success();
    };
  };
  mlir::TranslateRegistration plan("exec-to-plan", "an exec module to its plan file's plan.json",
                                   translation(false));
  mlir::TranslateRegistration cuda("exec-to-cuda",
                                   "an exec module to its plan's generated kernels (kernels.cu)",
                                   translation(true));
}
