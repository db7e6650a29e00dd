//===- ModelStats.cpp - whole-model statistics from llm IR ----------------===//

#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace llmopt::llm;

int64_t llmopt::llm::getDefaultSeqLen(ModuleOp module) {
  if (auto a = module->getAttrOfType<IntegerAttr>("llm.seq_len"))
    return a.getInt();
  return 0;
}

FailureOr<func::FuncOp> llmopt::llm::findModelFunc(ModuleOp module) {
  func::FuncOp only;
  int count = 0;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.isExternal())
      continue;
    if (f.getSymName() == "forward")
      return f;
    only = f;
    ++count;
  }
  if (count == 1)
    return only;
  return module.emitError()
         << (count == 0 ? "no model function: expected a func.func @forward"
                        : "several functions and none named @forward: name "
                          "the model function @forward");
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

FailureOr<ModelStats> llmopt::llm::computeModelStats(func::FuncOp func,
                                                     const CostContext &ctx) {
  ModelStats st;
  st.seqLen = ctx.seqLen;
  st.batch = ctx.batch;
  if (auto m = func->getParentOfType<ModuleOp>()) {
    if (auto a = m->getAttrOfType<StringAttr>("llm.name"))
      st.name = a.str();
    if (auto a = m->getAttrOfType<StringAttr>("llm.architecture"))
      st.architecture = a.str();
  }

  // Parameters: unique names, classification by use.
  llvm::StringMap<Operation *> names;
  llvm::DenseMap<Value, double> active; // param value -> active fraction
  bool anyParam = false;
  WalkResult res = func.walk([&](ParamOp p) -> WalkResult {
    anyParam = true;
    auto [it, inserted] = names.try_emplace(p.getName(), p);
    if (!inserted) {
      InFlightDiagnostic d = p.emitOpError()
                             << "duplicate parameter name '" << p.getName() << "'";
      d.attachNote(it->second->getLoc()) << "first declared here";
      return WalkResult::interrupt();
    }
    st.paramsTotal += p.getNumElements();
    st.weightElementBytes = elementBytes(p.getType(), ctx);
    return WalkResult::advance();
  });
  if (res.wasInterrupted())
    return failure();
  if (!anyParam)
    return func.emitError() << "model has no llm.param: nothing to count";

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
      st.gemmParamsActive += l.getInFeatures() * l.getOutFeatures();
    } else if (auto h = dyn_cast<LMHeadOp>(op)) {
      auto w = cast<RankedTensorType>(h.getWeight().getType());
      st.gemmParamsActive += static_cast<double>(w.getNumElements());
      if (embeddingTables.contains(h.getWeight()))
        st.tiedEmbeddings = true;
      else if (auto p = h.getWeight().getDefiningOp<ParamOp>())
        st.paramsLMHead += p.getNumElements();
    } else if (auto r = dyn_cast<MoERouterOp>(op)) {
      st.gemmParamsActive +=
          static_cast<double>(cast<RankedTensorType>(r.getGate().getType()).getNumElements());
    } else if (auto e = dyn_cast<MoEExpertsOp>(op)) {
      double frac = activeFraction(e);
      for (Value w : e.getWeights()) {
        double n = cast<RankedTensorType>(w.getType()).getNumElements();
        st.gemmParamsActive += n * frac;
        inactive += n * (1 - frac);
      }
    } else if (auto a = dyn_cast<AttentionOp>(op)) {
      double s = static_cast<double>(ctx.seqLen);
      if (std::optional<int64_t> w = a.getWindow())
        s = std::min<double>(s, *w);
      st.attentionFlopsPerToken +=
          12.0 * s * a.getNumHeads() * a.getHeadDim();
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
          ls.paramsActive -= static_cast<int64_t>(std::llround(
              cast<RankedTensorType>(w.getType()).getNumElements() * (1 - frac)));
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
  st.opFlopsPerToken = opFlops / static_cast<double>(ctx.tokens());
  st.weightBytes = st.paramsTotal * st.weightElementBytes;
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
       "excluded; full (unmasked) attention; no recomputation (Narayanan et al. 2021)"},
      {"op_flops_per_token", opFlopsPerToken},
      {"weight_bytes", weightBytes},
      {"model_state_bytes", modelStateBytes},
      {"activation_bytes_outside_layers", actBytesOutside},
      {"per_layer", std::move(perLayer)},
  };
}

/// 1234567 -> "1.235 M"
static std::string human(double v, StringRef unit = "") {
  const char *suffix[] = {"", " K", " M", " B", " T", " P", " E"};
  int i = 0;
  while (std::abs(v) >= 1000.0 && i < 6) {
    v /= 1000.0;
    ++i;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format(i == 0 ? "%.0f" : "%.3f", v) << suffix[i] << unit;
  return s;
}

static std::string gib(double bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.2f GiB", bytes / double(1ull << 30));
  return s;
}

static std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

void ModelStats::printTable(raw_ostream &os) const {
  auto row = [&](StringRef key, const std::string &value, StringRef note = "") {
    os << "  " << llvm::left_justify(key, 34) << llvm::right_justify(value, 18);
    if (!note.empty())
      os << "  " << note;
    os << "\n";
  };
  os << "model " << (name.empty() ? "(unnamed)" : name);
  if (!architecture.empty())
    os << " (" << architecture << ")";
  os << ", " << numLayers << " layers";
  if (numMoELayers)
    os << " (" << numMoELayers << " MoE)";
  os << ", seq_len " << seqLen << "\n";
  os << "parameters\n";
  row("total", human(paramsTotal), grouped(paramsTotal));
  if (paramsActive != paramsTotal)
    row("active per token", human(paramsActive), grouped(paramsActive));
  row("embedding (input tables)", human(paramsEmbedding), grouped(paramsEmbedding));
  row("lm head", tiedEmbeddings ? std::string("tied") : human(paramsLMHead),
      tiedEmbeddings ? "shares the input embedding" : grouped(paramsLMHead));
  if (!layers.empty()) {
    bool uniform = llvm::all_of(layers, [&](const LayerStats &l) {
      return l.params == layers.front().params;
    });
    row(uniform ? "per layer" : "per layer (first)", human(layers.front().params),
        "x " + std::to_string(numLayers) +
            (uniform ? std::string("") : std::string(", layers differ")));
  }
  row("other (final norm)", human(paramsOther), grouped(paramsOther));
  os << "training FLOPs per token (6N + attention, Narayanan et al. 2021)\n";
  row("N = GEMM weights per token", human(gemmParamsActive), "LM head in, embedding lookups out");
  row("6N", human(6.0 * gemmParamsActive, "FLOP"));
  row("attention 12 * s * heads * head_dim", human(attentionFlopsPerToken, "FLOP"),
      "per token, summed over layers");
  row("total", human(trainFlopsPerToken, "FLOP"));
  row("sum of op costs", human(opFlopsPerToken, "FLOP"),
      "causal masking, norms and activations counted");
  os << "bytes\n";
  row("weights", gib(weightBytes));
  row("weights + grads + AdamW (16 B/param)", gib(modelStateBytes));
  if (!layers.empty()) {
    const LayerStats &l = layers.front();
    std::string per = "per layer, micro-batch " + std::to_string(batch);
    row("activations, no recompute", gib(l.actBytesNone), per);
    row("activations, selective recompute", gib(l.actBytesSelective), per);
    row("activations, full recompute", gib(l.actBytesFull), per);
  }
  row("activations outside layers", gib(actBytesOutside), "embedding, head, loss");
}
