//===- ModelStats.cpp - whole-model statistics from llm IR ----------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace llmopt::llm;

int64_t llmopt::llm::getDefaultSeqLen(ModuleOp module) {
  auto a = module->getAttrOfType<IntegerAttr>("llm.seq_len");
  if (!a || a.getValue().getSignificantBits() > 64)
    return 0;
  return a.getValue().getSExtValue();
}

FailureOr<func::FuncOp> llmopt::llm::findModelFunc(ModuleOp module) {
  if (auto f = dyn_cast_or_null<func::FuncOp>(
          findEntryFunction(module, LLMDialect::kForwardAttrName).getOperation()))
    return f;
  func::FuncOp only;
  int count = 0;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.isExternal())
      continue;
    only = f;
    ++count;
  }
  if (count == 1)
    return only;
  return module.emitError() << (count == 0
                                    ? "no model function: expected a func.func marked llm.forward"
                                    : "several functions and none marked llm.forward: mark "
                                      "the model function with the unit attribute llm.forward");
}

/// Elements of a static shape as a double, which cannot overflow.
static double numElements(Type type) {
  double n = 1;
  for (int64_t d : cast<ShapedType>(type).getShape())
    n *= static_cast<double>(d);
  return n;
}

/// Fraction of the expert stack a token uses: top_k / num_experts, read from
/// the dispatch op feeding `experts`.
static double activeFraction(MoEExpertsOp experts) {
  auto dispatch = experts.getInput().getDefiningOp<MoEDispatchOp>();
  if (!dispatch)
    return 1.0;
  auto idx = cast<RankedTensorType>(dispatch.getIndices().getType());
  return static_cast<double>(idx.getDimSize(2)) / experts.getNumExperts();
}

/// Rejects two layers with one index: they would be one pipeline unit twice.
static LogicalResult checkLayerIndices(func::FuncOp func) {
  llvm::DenseMap<int64_t, LayerOp> seen;
  WalkResult res = func.walk([&](LayerOp layer) -> WalkResult {
    int64_t index = layer.getIndexAttr().getInt();
    auto [it, inserted] = seen.try_emplace(index, layer);
    if (inserted)
      return WalkResult::advance();
    InFlightDiagnostic d = layer.emitOpError() << "duplicate layer index " << index
                                               << ": every llm.layer needs its own index";
    d.attachNote(it->second.getLoc()) << "layer " << index << " first defined here";
    return WalkResult::interrupt();
  });
  return failure(res.wasInterrupted());
}

/// Rejects a sequence longer than a learned position table: there are no
/// positions to look up past its last row.
static LogicalResult checkPositionTables(func::FuncOp func, int64_t seqLen) {
  WalkResult res = func.walk([&](PositionEmbeddingOp op) -> WalkResult {
    int64_t rows = cast<RankedTensorType>(op.getTable().getType()).getDimSize(0);
    if (seqLen <= rows)
      return WalkResult::advance();
    InFlightDiagnostic d = op.emitOpError() << "sequence length " << seqLen << " exceeds the "
                                            << rows << " positions of the learned position table";
    if (auto p = op.getTable().getDefiningOp<ParamOp>())
      d << " '" << p.getName() << "'";
    d << "; use a sequence length of at most " << rows;
    return WalkResult::interrupt();
  });
  return failure(res.wasInterrupted());
}

FailureOr<ModelStats> llmopt::llm::computeModelStats(func::FuncOp func, const CostContext &ctx) {
  ModelStats st;
  st.seqLen = ctx.seqLen;
  st.batch = ctx.batch;
  if (auto m = func->getParentOfType<ModuleOp>()) {
    if (auto a = m->getAttrOfType<StringAttr>("llm.name"))
      st.name = a.str();
    if (auto a = m->getAttrOfType<StringAttr>("llm.architecture"))
      st.architecture = a.str();
  }

  // Parameters: unique names, an exact total, bytes per parameter (a model
  // may mix element types, e.g. fp32 norms in a bf16 model).
  llvm::StringMap<Operation *> names;
  bool anyParam = false;
  WalkResult res = func.walk([&](ParamOp p) -> WalkResult {
    anyParam = true;
    auto [it, inserted] = names.try_emplace(p.getName(), p);
    if (!inserted) {
      InFlightDiagnostic d = p.emitOpError() << "duplicate parameter name '" << p.getName() << "'";
      d.attachNote(it->second->getLoc()) << "first declared here";
      return WalkResult::interrupt();
    }
    if (llvm::AddOverflow(st.paramsTotal, p.getNumElements(), st.paramsTotal)) {
      p.emitOpError() << "total parameter count overflows 64 bits at '" << p.getName()
                      << "': check the parameter shapes";
      return WalkResult::interrupt();
    }
    st.weightBytes += static_cast<double>(p.getNumElements()) * elementBytes(p.getType(), ctx);
    return WalkResult::advance();
  });
  if (res.wasInterrupted())
    return failure();
  if (!anyParam)
    return func.emitError() << "model has no llm.param: nothing to count";
  if (failed(checkLayerIndices(func)) || failed(checkPositionTables(func, ctx.seqLen)))
    return failure();

  // Embeddings, head, GEMM weights.
  llvm::DenseSet<Value> embeddingTables;
  func.walk([&](Operation *op) {
    if (auto e = dyn_cast<EmbeddingOp>(op))
      embeddingTables.insert(e.getTable());
    else if (auto e = dyn_cast<PositionEmbeddingOp>(op))
      embeddingTables.insert(e.getTable());
  });
  for (Value t : embeddingTables)
    if (auto p = t.getDefiningOp<ParamOp>())
      st.paramsEmbedding += p.getNumElements();

  double inactive = 0;
  func.walk([&](Operation *op) {
    if (auto l = dyn_cast<LinearOp>(op)) {
      st.gemmParamsActive +=
          static_cast<double>(l.getInFeatures()) * static_cast<double>(l.getOutFeatures());
    } else if (auto h = dyn_cast<LMHeadOp>(op)) {
      st.gemmParamsActive += numElements(h.getWeight().getType());
      if (embeddingTables.contains(h.getWeight()))
        st.tiedEmbeddings = true;
      else if (auto p = h.getWeight().getDefiningOp<ParamOp>())
        st.paramsLMHead += p.getNumElements();
    } else if (auto r = dyn_cast<MoERouterOp>(op)) {
      st.gemmParamsActive += numElements(r.getGate().getType());
    } else if (auto e = dyn_cast<MoEExpertsOp>(op)) {
      double frac = activeFraction(e);
      for (Value w : e.getWeights()) {
        double n = numElements(w.getType());
        st.gemmParamsActive += n * frac;
        inactive += n * (1 - frac);
      }
    } else if (auto a = dyn_cast<AttentionOp>(op)) {
      double s = static_cast<double>(ctx.seqLen);
      if (std::optional<int64_t> w = a.getWindow())
        s = std::min<double>(s, *w);
      st.attentionFlopsPerToken += 12.0 * s * a.getNumHeads() * a.getHeadDim();
    }
  });
  st.paramsActive = st.paramsTotal - static_cast<int64_t>(std::llround(inactive));
  st.trainFlopsPerToken = 6.0 * st.gemmParamsActive + st.attentionFlopsPerToken;

  // Per-layer and outside-layer costs.
  double opFlops = 0;
  llvm::DenseMap<Value, double> savedOutside;
  int64_t layerParams = 0;
  for (Operation &op : func.getBody().front()) {
    if (auto layer = dyn_cast<LayerOp>(op)) {
      OpCost c = layer.getCost(ctx);
      LayerStats ls;
      ls.index = layer.getIndexAttr().getInt();
      ls.params = c.params;
      ls.paramsActive = c.params;
      layer.getBody().walk([&](MoEExpertsOp e) {
        ls.moe = true;
        double frac = activeFraction(e);
        for (Value w : e.getWeights())
          ls.paramsActive -=
              static_cast<int64_t>(std::llround(numElements(w.getType()) * (1 - frac)));
      });
      ls.fwdFlops = c.fwdFlops;
      ls.bwdFlops = c.bwdFlops;
      ls.actBytesNone = c.savedBytes();
      ls.actBytesSelective = ls.actBytesNone - c.selectiveDropBytes;
      ls.actBytesFull = tensorBytes(layer.getInput().getType(), ctx);
      opFlops += c.fwdFlops + c.bwdFlops;
      layerParams += c.params;
      st.numMoELayers += ls.moe;
      st.layers.push_back(ls);
      continue;
    }
    if (auto costOp = dyn_cast<CostOpInterface>(op)) {
      OpCost c = costOp.getCost(ctx);
      opFlops += c.fwdFlops + c.bwdFlops;
      st.actBytesOutside += c.savedExtraBytes;
      for (const SavedTensor &t : c.saved) {
        double &b = savedOutside[t.value];
        b = std::max(b, t.bytes);
      }
    }
  }
  for (auto &kv : savedOutside)
    st.actBytesOutside += kv.second;
  st.numLayers = static_cast<int64_t>(st.layers.size());
  st.paramsOther = st.paramsTotal - layerParams - st.paramsEmbedding - st.paramsLMHead;
  st.opFlopsPerToken = opFlops / ctx.tokens();
  st.modelStateBytes = 16.0 * st.paramsTotal;
  return st;
}

llvm::json::Value ModelStats::toJSON() const {
  llvm::json::Array perLayer;
  for (const LayerStats &l : layers)
    perLayer.push_back(llvm::json::Object{
        {"index", l.index},
        {"params", l.params},
        {"params_active", l.paramsActive},
        {"moe", l.moe},
        {"fwd_flops", l.fwdFlops},
        {"bwd_flops", l.bwdFlops},
        {"activation_bytes", llvm::json::Object{{"none", l.actBytesNone},
                                                {"selective", l.actBytesSelective},
                                                {"full", l.actBytesFull}}},
    });
  return llvm::json::Object{
      {"name", name},
      {"architecture", architecture},
      {"seq_len", seqLen},
      {"micro_batch", batch},
      {"params_total", paramsTotal},
      {"params_active", paramsActive},
      {"params_embedding", paramsEmbedding},
      {"params_lm_head", paramsLMHead},
      {"params_other", paramsOther},
      {"tied_embeddings", tiedEmbeddings},
      {"layers", numLayers},
      {"moe_layers", numMoELayers},
      {"gemm_params_active", gemmParamsActive},
      {"attention_flops_per_token", attentionFlopsPerToken},
      {"train_flops_per_token", trainFlopsPerToken},
      {"train_flops_method",
       "6 * N_gemm + 12 * sum_attention(seq * heads * head_dim); N_gemm = GEMM "
       "weights a token passes through, LM head included, embedding lookups "
       "excluded; full (unmasked) attention; no recomputation (Narayanan et "
       "al. 2021)"},
      {"op_flops_per_token", opFlopsPerToken},
      {"weight_bytes", weightBytes},
      {"model_state_bytes", modelStateBytes},
      {"activation_bytes_outside_layers", actBytesOutside},
      {"per_layer", std::move(perLayer)},
  };
}

/// Scales `v` by `base` until it is below `base` and prints it with the
/// prefix reached: 1234567 -> "1.235 M".
static std::string scaled(double v, double base, ArrayRef<StringRef> prefixes, StringRef unit,
                          const char *fmt) {
  size_t i = 0;
  while (std::abs(v) >= base && i + 1 < prefixes.size()) {
    v /= base;
    ++i;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format(i == 0 ? "%.0f" : fmt, v);
  if (!prefixes[i].empty() || !unit.empty())
    os << " " << prefixes[i] << unit;
  return s;
}

/// Counts: "124.440 M", "112".
static std::string count(double v) {
  return scaled(v, 1000.0, {"", "K", "M", "B", "T", "P", "E"}, "", "%.3f");
}

/// FLOPs with SI prefixes: "45.028 GFLOP", "576 FLOP".
static std::string flop(double v) {
  return scaled(v, 1000.0, {"", "k", "M", "G", "T", "P", "E", "Z"}, "FLOP", "%.3f");
}

/// Bytes with binary prefixes: "512 B", "1.50 KiB", "3.25 GiB".
static std::string bytes(double v) {
  return scaled(v, 1024.0, {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}, "B", "%.2f");
}

/// 1234567 -> "1,234,567"; any int64_t, INT64_MIN included.
static std::string grouped(int64_t v) {
  uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits = std::to_string(magnitude), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

void ModelStats::printTable(raw_ostream &os) const {
  // Rows are collected first so that the label and value columns can be as
  // wide as their longest entry. A row with an empty value is a heading.
  struct Row {
    std::string key, value, note;
  };
  std::vector<Row> rows;
  auto heading = [&](std::string text) { rows.push_back({std::move(text), "", ""}); };
  auto row = [&](std::string key, std::string value, std::string note = "") {
    rows.push_back({"  " + key, std::move(value), std::move(note)});
  };

  std::string title;
  llvm::raw_string_ostream t(title);
  t << "model " << (name.empty() ? "(unnamed)" : name);
  if (!architecture.empty())
    t << " (" << architecture << ")";
  t << ", " << numLayers << " layers";
  if (numMoELayers)
    t << " (" << numMoELayers << " MoE)";
  t << ", seq_len " << seqLen;
  heading(title);

  heading("parameters");
  row("total", count(paramsTotal), grouped(paramsTotal));
  if (paramsActive != paramsTotal)
    row("active per token", count(paramsActive), grouped(paramsActive));
  row("embedding (input tables)", count(paramsEmbedding), grouped(paramsEmbedding));
  row("lm head", tiedEmbeddings ? std::string("tied") : count(paramsLMHead),
      tiedEmbeddings ? "shares the input embedding" : grouped(paramsLMHead));
  if (!layers.empty()) {
    bool uniform = llvm::all_of(
        layers, [&](const LayerStats &l) { return l.params == layers.front().params; });
    row(uniform ? "per layer" : "per layer (first)", count(layers.front().params),
        "x " + std::to_string(numLayers) +
            (uniform ? std::string("") : std::string(", layers differ")));
  }
  row("other (final norm)", count(paramsOther), grouped(paramsOther));
  heading("training FLOPs per token (6N + attention, Narayanan et al. 2021)");
  row("N = GEMM weights per token", count(gemmParamsActive), "LM head in, embedding lookups out");
  row("6N", flop(6.0 * gemmParamsActive));
  row("attention 12 * s * heads * head_dim", flop(attentionFlopsPerToken),
      "per token, summed over layers");
  row("total", flop(trainFlopsPerToken));
  row("sum of op costs", flop(opFlopsPerToken), "causal masking, norms and activations counted");
  heading("bytes");
  row("weights", bytes(weightBytes));
  row("weights + grads + AdamW (16 B/param)", bytes(modelStateBytes));
  if (!layers.empty()) {
    const LayerStats &l = layers.front();
    std::string per = "per layer, micro-batch " + std::to_string(batch);
    row("activations, no recompute", bytes(l.actBytesNone), per);
    row("activations, selective recompute", bytes(l.actBytesSelective), per);
    row("activations, full recompute", bytes(l.actBytesFull), per);
  }
  row("activations outside layers", bytes(actBytesOutside), "embedding, head, loss");

  size_t keyWidth = 0, valueWidth = 0;
  for (const Row &r : rows) {
    if (r.value.empty())
      continue;
    keyWidth = std::max(keyWidth, r.key.size());
    valueWidth = std::max(valueWidth, r.value.size());
  }
  for (const Row &r : rows) {
    if (r.value.empty()) {
      os << r.key << "\n";
      continue;
    }
    os << llvm::left_justify(r.key, keyWidth) << "  " << llvm::right_justify(r.value, valueWidth);
    if (!r.note.empty())
      os << "  " << r.note;
    os << "\n";
  }
}
