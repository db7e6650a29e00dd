//===- LLMToExec.cpp - convert-llm-to-exec --------------------------------===//

#include "llmopt-runtime/schedule.h"
#include "llmopt/Conversion/Passes.h"
#include "llmopt/Dialect/Exec/IR/ExecOps.h"
#include "llmopt/Dialect/LLM/Analysis/ModelStats.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/xxhash.h"

#include <optional>

namespace llmopt {
#define GEN_PASS_DEF_CONVERTLLMTOEXEC
#include "llmopt/Conversion/Passes.h.inc"
} // namespace llmopt

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::exec;

namespace {

struct Converter {
  func::FuncOp func;
  Builder b;
  OpBuilder ob;
  llvm::DenseMap<Value, int64_t> offsets;
  /// Values a pipeline stage keeps in its micro-batch's stash (llm.stashed).
  llvm::DenseSet<Value> stashed;
  /// Prefetched ZeRO-3 gathers not yet waited for, by gathered value.
  llvm::DenseMap<Value, int64_t> pendingGathers;
  int64_t gatherEvents = 0;

  Converter(func::FuncOp f) : func(f), b(f.getContext()), ob(f.getContext()) {}

  /// Values that live in a named buffer rather than the arena (weight
  /// gradients a linear's backward adds straight into their accumulators).
  llvm::DenseMap<Value, BufAttr> overrides;

  FailureOr<BufAttr> buf(Value v) {
    if (auto it = overrides.find(v); it != overrides.end())
      return it->second;
    auto t = cast<RankedTensorType>(v.getType());
    auto shape = b.getDenseI64ArrayAttr(t.getShape());
    Type elt = t.getElementType();
    if (auto arg = dyn_cast<BlockArgument>(v))
      return BufAttr::get(b.getContext(), BufferSpace::input, arg.getArgNumber(),
                          b.getStringAttr(""), shape, elt);
    if (auto p = v.getDefiningOp<llm::ParamOp>())
      return BufAttr::get(b.getContext(), BufferSpace::state, 0, p.getNameAttr(), shape, elt);
    auto it = offsets.find(v);
    if (it == offsets.end() || it->second < 0) {
      emitError(v.getLoc()) << "convert-llm-to-exec: a value has no arena offset; run "
                               "llm-plan-memory first";
      return failure();
    }
    return BufAttr::get(b.getContext(),
                        stashed.contains(v) ? BufferSpace::stash : BufferSpace::arena, it->second,
                        b.getStringAttr(""), shape, elt);
  }

  FailureOr<ArrayAttr> bufs(ValueRange values) {
    SmallVector<Attribute> out;
    for (Value v : values) {
      FailureOr<BufAttr> a = buf(v);
      if (failed(a))
        return failure();
      out.push_back(*a);
    }
    return b.getArrayAttr(out);
  }

  /// While converting the body of an llm.fused: kernels are recorded as
  /// body entries over buffer numbers instead of emitted.
  SmallVector<Attribute> *captured = nullptr;
  llvm::DenseMap<Value, int64_t> refs;

  LogicalResult kernel(Location loc, StringRef name, ValueRange ins, ValueRange outs,
                       ArrayRef<NamedAttribute> params = {}) {
    if (captured) {
      auto numbers = [&](ValueRange vs) {
        SmallVector<int64_t> out;
        for (Value v : vs)
          out.push_back(refs.lookup(v));
        return b.getDenseI64ArrayAttr(out);
      };
      captured->push_back(b.getDictionaryAttr(
          {b.getNamedAttr("kernel", b.getStringAttr(name)), b.getNamedAttr("ins", numbers(ins)),
           b.getNamedAttr("outs", numbers(outs)),
           b.getNamedAttr("params", b.getDictionaryAttr(params))}));
      return success();
    }
    FailureOr<ArrayAttr> i = bufs(ins), o = bufs(outs);
    if (failed(i) || failed(o))
      return failure();
    SmallVector<NamedAttribute> ps(params);
    // Under context parallelism the kernels that depend on positions learn
    // which chunks this rank holds from the cp axis.
    if (cp > 1 && llvm::is_contained(
                      {StringRef("rotary"), StringRef("attention_fwd"), StringRef("attention_bwd"),
                       StringRef("position_embedding_fwd"), StringRef("position_embedding_bwd")},
                      name))
      ps.push_back(b.getNamedAttr("cp", b.getStringAttr("cp")));
    KernelOp::create(ob, loc, b.getStringAttr(name), *i, *o, b.getDictionaryAttr(ps));
    return success();
  }

  int64_t cp = 1;

  NamedAttribute f64(StringRef k, double v) { return b.getNamedAttr(k, b.getF64FloatAttr(v)); }
  NamedAttribute i64(StringRef k, int64_t v) { return b.getNamedAttr(k, b.getI64IntegerAttr(v)); }
  NamedAttribute flag(StringRef k, bool v) { return b.getNamedAttr(k, b.getBoolAttr(v)); }

  /// The kernel parameters of a GEMM with `gemm` input type: fp8 `recipe`
  /// ("e4m3" forward, "hybrid" backward) with per-tensor scaling whose amax
  /// is taken over the axes that split its operands (tensor parallelism: the
  /// weight and some activations; context parallelism: the sequence).
  /// Fails for 16-bit GEMMs of a 32-bit model, which are not lowered.
  /// `experts`: the weights of MoE experts, which scale activations per row
  /// (no amax over the sequence's chunks) and need the amax over `tp` only
  /// where tensor parallelism splits their ffn.
  LogicalResult gemmParams(Operation *op, std::optional<Type> gemm, StringRef recipe,
                           SmallVectorImpl<NamedAttribute> &params,
                           std::optional<ValueRange> experts = std::nullopt) {
    if (!gemm)
      return success();
    if (!isa<Float8E4M3FNType>(*gemm))
      return op->emitOpError() << "convert-llm-to-exec: " << *gemm
                               << " GEMMs are not lowered; fp8 GEMMs take f8E4M3FN (the "
                                  "backward uses f8E5M2 for gradients)";
    params.push_back(b.getNamedAttr("fp8", b.getStringAttr(recipe)));
    SmallVector<StringRef> axes;
    if (experts) {
      auto tpSplit = [](Value w) {
        if (auto g = w.getDefiningOp<ZeroGatherOp>())
          w = g.getParam();
        auto p = w.getDefiningOp<llm::ParamOp>();
        auto shard = p ? p->getAttrOfType<DictionaryAttr>("llm.shard") : DictionaryAttr();
        auto axis = shard ? shard.getAs<StringAttr>("axis") : StringAttr();
        return axis && axis.getValue() == "tp";
      };
      if (llvm::any_of(*experts, tpSplit))
        axes.push_back("tp");
    } else {
      if (vpParts > 1)
        axes.push_back("tp");
      if (cp > 1)
        axes.push_back("cp");
    }
    if (!axes.empty())
      params.push_back(b.getNamedAttr("amax_axis", b.getStringAttr(llvm::join(axes, ","))));
    return success();
  }

  template <typename AttnOp> SmallVector<NamedAttribute> attnParams(AttnOp a) {
    return {i64("heads", a.getNumHeadsAttr().getInt()),
            i64("kv_heads", a.getNumKvHeadsAttr().getInt()),
            i64("head_dim", a.getHeadDimAttr().getInt()),
            f64("scale", a.getScale().convertToDouble()),
            flag("causal", a.getCausal()),
            i64("window", a.getWindowAttr() ? a.getWindowAttr().getInt() : 0)};
  }

  LogicalResult ringAttention(Location loc, Direction kind, StringAttr axis, ValueRange ins,
                              ValueRange outs, ArrayRef<NamedAttribute> params) {
    FailureOr<ArrayAttr> i = bufs(ins), o = bufs(outs);
    if (failed(i) || failed(o))
      return failure();
    RingAttentionOp::create(ob, loc, DirectionAttr::get(b.getContext(), kind), axis, *i, *o,
                            b.getDictionaryAttr(params));
    return success();
  }

  LogicalResult allReduce(Location loc, StringRef axis, Value v) {
    FailureOr<BufAttr> a = buf(v);
    if (failed(a))
      return failure();
    exec::AllReduceOp::create(ob, loc, b.getStringAttr(axis),
                              ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                              b.getArrayAttr({*a}));
    return success();
  }

  LogicalResult seq(Location loc, SeqKind kind, StringRef axis, Value in, Value out) {
    FailureOr<ArrayAttr> i = bufs(in), o = bufs(out);
    if (failed(i) || failed(o))
      return failure();
    SeqOp::create(ob, loc, SeqKindAttr::get(b.getContext(), kind), b.getStringAttr(axis), *i, *o);
    return success();
  }

  /// Scratch buffers of the vocabulary-parallel cross-entropy: per-row local
  /// log-sum-exp [1, rows, 1], every rank's [1, parts * rows, 1], and the
  /// target logit [rows].
  std::tuple<BufAttr, BufAttr, BufAttr> vpScratch(BufAttr logits, StringRef axis) {
    ArrayRef<int64_t> shape = logits.getShape().asArrayRef();
    int64_t rows = 1;
    for (int64_t d : shape.drop_back())
      rows *= d;
    auto scratch = [&](StringRef name, ArrayRef<int64_t> dims) {
      return BufAttr::get(b.getContext(), BufferSpace::accum, 0,
                          b.getStringAttr(("scratch:" + name).str()), b.getDenseI64ArrayAttr(dims),
                          b.getF32Type());
    };
    return {scratch("vp_lse", {1, rows, 1}), scratch("vp_lse_all", {1, rows * vpParts, 1}),
            scratch("vp_target", {rows})};
  }

  /// The vocabulary-parallel loss kernels' parameters: the axis, the
  /// ignored label and, for a padded vocabulary, its real size (`classes`:
  /// the padding's logits are left out).
  DictionaryAttr vpParams(StringRef axis, int64_t ignore, IntegerAttr vocabSize) {
    SmallVector<NamedAttribute> params = {b.getNamedAttr("shard", b.getStringAttr(axis)),
                                          i64("ignore_index", ignore)};
    if (vocabSize)
      params.push_back(i64("classes", vocabSize.getInt()));
    return b.getDictionaryAttr(params);
  }

  void vpStats(Location loc, BufAttr logits, BufAttr labels, BufAttr lse, BufAttr all,
               BufAttr target, StringRef axis, int64_t ignore, IntegerAttr vocabSize) {
    KernelOp::create(ob, loc, b.getStringAttr("vp_ce_stats"), b.getArrayAttr({logits, labels}),
                     b.getArrayAttr({lse, target}), vpParams(axis, ignore, vocabSize));
    SeqOp::create(ob, loc, SeqKindAttr::get(b.getContext(), SeqKind::all_gather),
                  b.getStringAttr(axis), b.getArrayAttr({lse}), b.getArrayAttr({all}));
  }

  int64_t vpParts = 1;

  /// AdamW's scalar parameters. The norm and the updates are not converted
  /// op by op: the step phase builds them per program.
  SmallVector<NamedAttribute> adamwParams(AdamWOp a) {
    return {b.getNamedAttr("param", a.getNameAttr()),
            f64("lr", a.getLr().convertToDouble()),
            f64("beta1", a.getBeta1().convertToDouble()),
            f64("beta2", a.getBeta2().convertToDouble()),
            f64("eps", a.getEps().convertToDouble()),
            f64("weight_decay", a.getWeightDecay().convertToDouble()),
            f64("max_norm", a.getMaxNorm().convertToDouble())};
  }

  LogicalResult convert(Operation *op);

  /// One exec.fused: the body's kernels over numbered buffers (inputs,
  /// outputs, then f32 temporaries), named by a hash of what the generated
  /// kernel depends on (kernels, their wiring and parameters, dtypes).
  LogicalResult fused(llm::FusedOp f) {
    FailureOr<ArrayAttr> ins = bufs(f.getInputs()), outs = bufs(f.getResults());
    if (failed(ins) || failed(outs))
      return failure();
    Block &block = f.getBody().front();
    // A GEMM with a GeLU epilogue: linear_fwd writes the pre-activation and
    // the activation.
    if (llvm::range_size(block.without_terminator()) == 2 && f.getNumResults() == 2) {
      auto l = dyn_cast<LinearOp>(&block.front());
      auto g = dyn_cast<GeluOp>(block.front().getNextNode());
      auto yield = cast<FusedYieldOp>(block.getTerminator());
      if (l && g && yield.getValues()[0] == l.getResult() &&
          yield.getValues()[1] == g.getResult()) {
        SmallVector<Attribute> gemmIns;
        for (Value v : l->getOperands())
          gemmIns.push_back((*ins)[cast<BlockArgument>(v).getArgNumber()]);
        KernelOp::create(
            ob, f.getLoc(), b.getStringAttr("linear_fwd"), b.getArrayAttr(gemmIns), *outs,
            b.getDictionaryAttr({flag("transposed", l.getTransposed()),
                                 b.getNamedAttr("epilogue", b.getStringAttr("gelu_tanh"))}));
        return success();
      }
    }
    refs.clear();
    for (BlockArgument a : block.getArguments())
      refs[a] = a.getArgNumber();
    int64_t next = int64_t(block.getNumArguments());
    for (Value v : block.getTerminator()->getOperands())
      if (!refs.count(v))
        refs[v] = next++;
      else
        return f.emitOpError() << "convert-llm-to-exec: a fused region yields one value twice "
                                  "or yields an input";
    SmallVector<Attribute> temps, body;
    for (Operation &op : block.without_terminator())
      for (Value r : op.getResults())
        if (!refs.count(r)) {
          refs[r] = next++;
          temps.push_back(b.getDenseI64ArrayAttr(cast<RankedTensorType>(r.getType()).getShape()));
        }
    captured = &body;
    for (Operation &op : block.without_terminator())
      if (failed(convert(&op))) {
        captured = nullptr;
        return failure();
      }
    captured = nullptr;
    std::string signature;
    llvm::raw_string_ostream os(signature);
    os << b.getArrayAttr(body);
    for (ArrayAttr list : {*ins, *outs})
      for (Attribute a : list) {
        auto buf = cast<BufAttr>(a);
        os << buf.getDtype() << (buf.getShape().size() == 1 ? "v" : "a") << ";";
      }
    os << temps.size();
    std::string name = "fused_" + llvm::utohexstr(llvm::xxh3_64bits(signature), true);
    exec::FusedOp::create(ob, f.getLoc(), b.getStringAttr(name), *ins, *outs, b.getArrayAttr(temps),
                          b.getArrayAttr(body));
    return success();
  }
};

LogicalResult Converter::convert(Operation *op) {
  Location loc = op->getLoc();
  // The compute stream waits for a prefetched gather right before its first
  // reader.
  if (!pendingGathers.empty())
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (auto it = pendingGathers.find(v); it != pendingGathers.end()) {
          ParamWaitOp::create(ob, loc, b.getI64IntegerAttr(it->second));
          pendingGathers.erase(it);
        }
    });
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](llm::ParamOp) { return success(); })
      .Case([&](arith::ConstantOp c) -> LogicalResult {
        if (c->hasAttr("llm.loss_scale_seed"))
          return kernel(loc, "loss_scale_fill", {}, c.getResult());
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
          return c.emitOpError() << "convert-llm-to-exec: only splat float constants";
        return kernel(loc, "fill", {}, c.getResult(),
                      {f64("value", dense.getSplatValue<APFloat>().convertToDouble())});
      })
      .Case([&](EmbeddingOp e) {
        SmallVector<NamedAttribute> ps;
        if (auto axis = e->getAttrOfType<StringAttr>("llm.vocab_axis"))
          ps.push_back(b.getNamedAttr("shard", axis));
        return kernel(loc, "embedding_fwd", {e.getTokens(), e.getTable()}, e.getResult(), ps);
      })
      .Case([&](PositionEmbeddingOp e) {
        return kernel(loc, "position_embedding_fwd", {e.getInput(), e.getTable()}, e.getResult());
      })
      .Case([&](RotaryOp r) -> LogicalResult {
        SmallVector<NamedAttribute> p = {i64("head_dim", r.getHeadDimAttr().getInt()),
                                         f64("theta", r.getTheta().convertToDouble()),
                                         flag("inverse", r.getInverse())};
        auto num = [&](StringRef key, double dflt) { return r.getScalingNumber(key, dflt); };
        // Hugging Face's rope types: "linear" divides every frequency by the
        // factor, "llama3" scales by wavelength, "dynamic" (NTK) changes
        // nothing up to the model's length; the others are refused rather
        // than trained with other positions than the model's.
        StringRef type = r.getRopeType();
        if (type == "linear") {
          p.push_back(f64("linear_factor", num("factor", 1)));
        } else if (type == "llama3") {
          p.push_back(f64("factor", num("factor", 0)));
          p.push_back(f64("low_freq_factor", num("low_freq_factor", 1)));
          p.push_back(f64("high_freq_factor", num("high_freq_factor", 4)));
          p.push_back(f64("original_max_positions", num("original_max_position_embeddings", 8192)));
        } else if (type == "dynamic") {
          int64_t cp = 1;
          if (auto plan = r->getParentOfType<ModuleOp>()->getAttrOfType<PlanAttr>("llm.plan"))
            cp = plan.getCp();
          int64_t seq = cast<ShapedType>(r.getQ().getType()).getDimSize(1) * cp;
          double limit = num("max_position_embeddings", 0);
          if (limit <= 0 || double(seq) > limit)
            return r.emitOpError()
                   << "rope_scaling type \"dynamic\" (NTK) changes the frequencies beyond "
                      "the model's "
                   << int64_t(limit) << " positions, which the lowering does not do: train "
                   << "at a sequence of at most " << int64_t(limit) << " (got " << seq << ")";
        } else if (type != "default") {
          return r.emitOpError() << "rope_scaling type \"" << type
                                 << "\" is not lowered (linear, dynamic up to the model's "
                                    "length and llama3 are): the model would train with other "
                                    "positions than it was trained with";
        }
        return kernel(loc, "rotary", {r.getQ(), r.getK()}, {r.getQOut(), r.getKOut()}, p);
      })
      .Case([&](LayerNormOp n) {
        SmallVector<Value> ins = {n.getInput(), n.getWeight()};
        if (n.getBias())
          ins.push_back(n.getBias());
        return kernel(loc, "layer_norm_fwd", ins, n.getResult(),
                      {f64("eps", n.getEps().convertToDouble())});
      })
      .Case([&](RMSNormOp n) {
        return kernel(loc, "rms_norm_fwd", {n.getInput(), n.getWeight()}, n.getResult(),
                      {f64("eps", n.getEps().convertToDouble())});
      })
      .Case([&](LinearOp l) -> LogicalResult {
        SmallVector<NamedAttribute> params = {flag("transposed", l.getTransposed())};
        if (failed(gemmParams(l, l.getGemm(), "e4m3", params)))
          return failure();
        SmallVector<Value> ins = {l.getInput(), l.getWeight()};
        if (l.getBias())
          ins.push_back(l.getBias());
        return kernel(loc, "linear_fwd", ins, l.getResult(), params);
      })
      .Case([&](SplitOp s) { return kernel(loc, "split", s.getInput(), s.getResults()); })
      .Case([&](ConcatOp c) { return kernel(loc, "concat", c.getInputs(), c.getResult()); })
      .Case([&](AttentionOp a) -> LogicalResult {
        if (auto ring = a->getAttrOfType<StringAttr>("llm.cp_ring"))
          return ringAttention(loc, Direction::fwd, ring, {a.getQ(), a.getK(), a.getV()},
                               a.getResult(), attnParams(a));
        return kernel(loc, "attention_fwd", {a.getQ(), a.getK(), a.getV()}, a.getResult(),
                      attnParams(a));
      })
      .Case([&](GeluOp g) {
        return kernel(loc, "gelu_fwd", g.getInput(), g.getResult(),
                      {flag("tanh", g.getApproximate() == GeluApprox::tanh)});
      })
      .Case([&](SwiGLUOp s) {
        return kernel(loc, "swiglu_fwd", {s.getGate(), s.getUp()}, s.getResult());
      })
      .Case([&](AddOp a) {
        return kernel(loc, "add", {a.getLhs(), a.getRhs()}, a.getResult());
      })
      .Case([&](LMHeadOp h) {
        return kernel(loc, "linear_fwd", {h.getInput(), h.getWeight()}, h.getResult(),
                      {flag("transposed", false)});
      })
      .Case([&](CrossEntropyOp c) -> LogicalResult {
        int64_t ignore = c.getIgnoreIndexAttr().getInt();
        if (auto axis = c.getVocabAxisAttr()) {
          // Vocabulary-parallel: local log-sum-exp and target logit per row,
          // gathered / summed over the axis, combined into the mean loss.
          FailureOr<BufAttr> logits = buf(c.getLogits()), labels = buf(c.getLabels()),
                             loss = buf(c.getLoss());
          if (failed(logits) || failed(labels) || failed(loss))
            return failure();
          auto [lse, all, target] = vpScratch(*logits, axis.getValue());
          vpStats(loc, *logits, *labels, lse, all, target, axis.getValue(), ignore,
                  c.getVocabSizeAttr());
          exec::AllReduceOp::create(ob, loc, axis,
                                    ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                    b.getArrayAttr({target}));
          KernelOp::create(ob, loc, b.getStringAttr("vp_ce_loss"),
                           b.getArrayAttr({all, target, *labels}), b.getArrayAttr({*loss}),
                           b.getDictionaryAttr({i64("ignore_index", ignore)}));
          return success();
        }
        return kernel(loc, "cross_entropy_fwd", {c.getLogits(), c.getLabels()}, c.getLoss(),
                      {i64("ignore_index", ignore)});
      })
      .Case([&](CrossEntropyGradOp g) -> LogicalResult {
        int64_t ignore = g.getIgnoreIndexAttr().getInt();
        if (auto axis = g.getVocabAxisAttr()) {
          FailureOr<BufAttr> logits = buf(g.getLogits()), labels = buf(g.getLabels()),
                             dloss = buf(g.getLossGrad()), out = buf(g.getResult());
          if (failed(logits) || failed(labels) || failed(dloss) || failed(out))
            return failure();
          auto [lse, all, target] = vpScratch(*logits, axis.getValue());
          vpStats(loc, *logits, *labels, lse, all, target, axis.getValue(), ignore,
                  g.getVocabSizeAttr());
          KernelOp::create(ob, loc, b.getStringAttr("vp_ce_bwd"),
                           b.getArrayAttr({*logits, *labels, all, *dloss}), b.getArrayAttr({*out}),
                           vpParams(axis.getValue(), ignore, g.getVocabSizeAttr()));
          return success();
        }
        return kernel(loc, "cross_entropy_bwd", {g.getLogits(), g.getLabels(), g.getLossGrad()},
                      g.getResult(), {i64("ignore_index", ignore)});
      })
      .Case([&](LMHeadGradOp g) {
        return kernel(loc, "linear_bwd", {g.getGrad(), g.getInput(), g.getWeight()},
                      {g.getInputGrad(), g.getWeightGrad()}, {flag("transposed", false)});
      })
      .Case([&](LinearGradOp g) -> LogicalResult {
        SmallVector<Value> outs = {g.getInputGrad(), g.getWeightGrad()};
        if (g.getBiasGrad())
          outs.push_back(g.getBiasGrad());
        SmallVector<NamedAttribute> params = {flag("transposed", g.getTransposed())};
        if (failed(gemmParams(g, g.getGemm(), "hybrid", params)))
          return failure();
        return kernel(loc, "linear_bwd", {g.getGrad(), g.getInput(), g.getWeight()}, outs, params);
      })
      .Case([&](LayerNormGradOp g) {
        SmallVector<Value> outs = {g.getInputGrad(), g.getWeightGrad()};
        if (g.getBiasGrad())
          outs.push_back(g.getBiasGrad());
        return kernel(loc, "layer_norm_bwd", {g.getGrad(), g.getInput(), g.getWeight()}, outs,
                      {f64("eps", g.getEps().convertToDouble())});
      })
      .Case([&](RMSNormGradOp g) {
        return kernel(loc, "rms_norm_bwd", {g.getGrad(), g.getInput(), g.getWeight()},
                      {g.getInputGrad(), g.getWeightGrad()},
                      {f64("eps", g.getEps().convertToDouble())});
      })
      .Case([&](AttentionGradOp g) -> LogicalResult {
        if (auto ring = g->getAttrOfType<StringAttr>("llm.cp_ring"))
          return ringAttention(loc, Direction::bwd, ring,
                               {g.getGrad(), g.getQ(), g.getK(), g.getV(), g.getOut()},
                               {g.getQGrad(), g.getKGrad(), g.getVGrad()}, attnParams(g));
        return kernel(loc, "attention_bwd", {g.getGrad(), g.getQ(), g.getK(), g.getV(), g.getOut()},
                      {g.getQGrad(), g.getKGrad(), g.getVGrad()}, attnParams(g));
      })
      .Case([&](GeluGradOp g) {
        return kernel(loc, "gelu_bwd", {g.getGrad(), g.getInput()}, g.getResult(),
                      {flag("tanh", g.getApproximate() == GeluApprox::tanh)});
      })
      .Case([&](SwiGLUGradOp g) {
        return kernel(loc, "swiglu_bwd", {g.getGrad(), g.getGate(), g.getUp()},
                      {g.getGateGrad(), g.getUpGrad()});
      })
      .Case([&](EmbeddingGradOp g) {
        SmallVector<NamedAttribute> ps;
        if (auto axis = g->getAttrOfType<StringAttr>("llm.vocab_axis"))
          ps.push_back(b.getNamedAttr("shard", axis));
        return kernel(loc, "embedding_bwd", {g.getTokens(), g.getGrad()}, g.getResult(), ps);
      })
      .Case([&](PositionEmbeddingGradOp g) {
        return kernel(loc, "position_embedding_bwd", g.getGrad(), g.getResult());
      })
      .Case([&](MoERouterOp r) {
        return kernel(
            loc, "moe_router_fwd", {r.getInput(), r.getGate()}, {r.getWeights(), r.getIndices()},
            {i64("top_k", r.getTopKAttr().getInt()), flag("normalize", r.getNormalize())});
      })
      .Case([&](MoERouterGradOp g) -> LogicalResult {
        SmallVector<NamedAttribute> params = {i64("top_k", g.getTopKAttr().getInt()),
                                              flag("normalize", g.getNormalize())};
        SmallVector<Value> ins = {g.getGrad(), g.getInput(), g.getGate(), g.getWeights(),
                                  g.getIndices()};
        std::optional<APFloat> aux = g.getAuxLoss();
        if (aux)
          params.push_back(f64("aux_loss", aux->convertToDouble()));
        int64_t sp = seqParts(g.getInput().getType());
        if (!aux || (sp == 1 && cp == 1))
          return kernel(loc, "moe_router_bwd", ins, {g.getInputGrad(), g.getGateGrad()}, params);
        // The router saw a chunk of the sequence (SP over tp, CP over cp):
        // the load-balancing loss counts the whole sequence's choices, and
        // under CP, whose gradients are averaged over the chunks, each
        // chunk's share is scaled by cp.
        FailureOr<ArrayAttr> io = bufs(ins);
        FailureOr<ArrayAttr> oo = bufs(ValueRange{g.getInputGrad(), g.getGateGrad()});
        if (failed(io) || failed(oo))
          return failure();
        int64_t experts = cast<RankedTensorType>(g.getGate().getType()).getDimSize(0);
        auto counts = BufAttr::get(b.getContext(), BufferSpace::accum, 0,
                                   b.getStringAttr("scratch:moe_counts"),
                                   b.getDenseI64ArrayAttr({experts}), b.getF32Type());
        KernelOp::create(ob, loc, b.getStringAttr("moe_expert_counts"), b.getArrayAttr({(*io)[4]}),
                         b.getArrayAttr({counts}),
                         b.getDictionaryAttr({i64("top_k", g.getTopKAttr().getInt())}));
        for (auto [axis, parts] : {std::pair<StringRef, int64_t>{"tp", sp}, {"cp", cp}})
          if (parts > 1)
            exec::AllReduceOp::create(ob, loc, b.getStringAttr(axis),
                                      ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                      b.getArrayAttr({counts}));
        int64_t tokens = 1;
        for (int64_t d : cast<BufAttr>((*io)[1]).getShape().asArrayRef().drop_back())
          tokens *= d;
        params.push_back(i64("aux_tokens", tokens * sp * cp));
        params.push_back(f64("aux_scale", double(cp)));
        SmallVector<Attribute> all((*io).begin(), (*io).end());
        all.push_back(counts);
        KernelOp::create(ob, loc, b.getStringAttr("moe_router_bwd"), b.getArrayAttr(all), *oo,
                         b.getDictionaryAttr(params));
        return success();
      })
      .Case([&](MoEDispatchOp d) {
        return kernel(loc, "moe_dispatch_fwd", {d.getInput(), d.getIndices()}, d.getResult());
      })
      .Case([&](MoEDispatchGradOp d) {
        return kernel(loc, "moe_dispatch_bwd", {d.getGrad(), d.getIndices()}, d.getResult());
      })
      .Case([&](MoEExpertsOp e) -> LogicalResult {
        SmallVector<Value> ins = {e.getInput()};
        llvm::append_range(ins, e.getWeights());
        SmallVector<NamedAttribute> params = {
            flag("swiglu", e.getActivation() == ExpertActivation::swiglu)};
        if (failed(gemmParams(e, e.getGemm(), "e4m3", params, e.getWeights())))
          return failure();
        return kernel(loc, "moe_experts_fwd", ins, e.getResult(), params);
      })
      .Case([&](MoEExpertsGradOp e) -> LogicalResult {
        SmallVector<Value> ins = {e.getGrad(), e.getInput()}, outs = {e.getInputGrad()};
        llvm::append_range(ins, e.getWeights());
        llvm::append_range(outs, e.getWeightGrads());
        SmallVector<NamedAttribute> params = {
            flag("swiglu", e.getActivation() == ExpertActivation::swiglu)};
        if (failed(gemmParams(e, e.getGemm(), "hybrid", params, e.getWeights())))
          return failure();
        return kernel(loc, "moe_experts_bwd", ins, outs, params);
      })
      .Case([&](MoECombineOp c) {
        return kernel(loc, "moe_combine_fwd", {c.getInput(), c.getWeights(), c.getIndices()},
                      c.getResult());
      })
      .Case([&](MoECombineGradOp c) {
        return kernel(loc, "moe_combine_bwd",
                      {c.getGrad(), c.getExpertOut(), c.getWeights(), c.getIndices()},
                      {c.getExpertOutGrad(), c.getWeightsGrad()});
      })
      .Case([&](llm::FusedOp f) { return fused(f); })
      .Case([&](TPCopyOp c) { return kernel(loc, "copy", c.getInput(), c.getResult()); })
      .Case([&](TPSliceOp t) {
        return kernel(loc, "tp_slice", t.getInput(), t.getResult(),
                      {b.getNamedAttr("shard", t.getAxisAttr()), i64("parts", t.getParts())});
      })
      .Case([&](TPUnsliceOp t) {
        return kernel(loc, "tp_unslice", t.getInput(), t.getResult(),
                      {b.getNamedAttr("shard", t.getAxisAttr()), i64("parts", t.getParts())});
      })
      .Case([&](llm::AllReduceOp a) -> LogicalResult {
        if (failed(kernel(loc, "copy", a.getInput(), a.getResult())))
          return failure();
        return allReduce(loc, a.getAxis(), a.getResult());
      })
      .Case([&](TPReduceOp r) -> LogicalResult {
        // Sum the partial outputs, then add the bias once.
        if (failed(kernel(loc, "copy", r.getInput(), r.getResult())) ||
            failed(allReduce(loc, r.getAxis(), r.getResult())))
          return failure();
        if (!r.getBias())
          return success();
        return kernel(loc, "bias_add", {r.getResult(), r.getBias()}, r.getResult());
      })
      .Case([&](BiasGradOp g) { return kernel(loc, "sum_rows", g.getGrad(), g.getResult()); })
      .Case([&](ZeroGatherOp g) -> LogicalResult {
        FailureOr<BufAttr> out = buf(g.getResult());
        if (failed(out))
          return failure();
        IntegerAttr event;
        if (g->hasAttr("llm.prefetch")) {
          event = b.getI64IntegerAttr(gatherEvents++);
          pendingGathers[g.getResult()] = event.getInt();
        }
        ParamGatherOp::create(ob, loc, g.getAxisAttr(),
                              g.getParam().getDefiningOp<llm::ParamOp>().getNameAttr(), *out,
                              event);
        return success();
      })
      .Case([&](EPDispatchOp e) -> LogicalResult {
        FailureOr<ArrayAttr> i = bufs(e.getInput()), o = bufs(e.getResult());
        if (failed(i) || failed(o))
          return failure();
        AllToAllOp::create(ob, loc,
                           ExpertExchangeAttr::get(b.getContext(), ExpertExchange::dispatch),
                           e.getAxisAttr(), *i, *o);
        return success();
      })
      .Case([&](EPCombineOp e) -> LogicalResult {
        FailureOr<ArrayAttr> i = bufs(e.getInput()), o = bufs(e.getResult());
        if (failed(i) || failed(o))
          return failure();
        AllToAllOp::create(ob, loc,
                           ExpertExchangeAttr::get(b.getContext(), ExpertExchange::combine),
                           e.getAxisAttr(), *i, *o);
        return success();
      })
      .Case([&](CPGatherOp g) {
        return seq(loc, SeqKind::cp_all_gather, g.getAxis(), g.getInput(), g.getResult());
      })
      .Case([&](CPScatterOp g) {
        return seq(loc, SeqKind::cp_reduce_scatter, g.getAxis(), g.getInput(), g.getResult());
      })
      .Case([&](SPGatherOp g) {
        return seq(loc, SeqKind::all_gather, g.getAxis(), g.getInput(), g.getResult());
      })
      .Case([&](SPSplitOp g) {
        return seq(loc, SeqKind::split, g.getAxis(), g.getInput(), g.getResult());
      })
      .Case([&](SPScatterOp r) -> LogicalResult {
        if (failed(seq(loc, SeqKind::reduce_scatter, r.getAxis(), r.getInput(), r.getResult())))
          return failure();
        if (!r.getBias())
          return success();
        return kernel(loc, "bias_add", {r.getResult(), r.getBias()}, r.getResult());
      })
      .Default([&](Operation *o) -> LogicalResult {
        return o->emitOpError() << "convert-llm-to-exec: no kernel for this op yet";
      });
}

struct ConvertLLMToExecPass : public llmopt::impl::ConvertLLMToExecBase<ConvertLLMToExecPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = dyn_cast_or_null<func::FuncOp>(
        findEntryFunction(module, LLMDialect::kTrainStepAttrName).getOperation());
    if (!func || !func->hasAttr("llm.arena_bytes")) {
      module.emitError() << "convert-llm-to-exec: needs a memory-planned @train_step "
                            "(llm-build-training-step, llm-specialize-shapes, llm-plan-memory)";
      return signalPassFailure();
    }
    if (bucketBytes < 0) {
      module.emitError() << "convert-llm-to-exec: bucket-bytes must be 0 (no buckets) or "
                            "positive, got "
                         << int64_t(bucketBytes);
      return signalPassFailure();
    }
    int64_t dp = 1, tp = 1, ep = 1, cp = 1, micro = 1, zero = 0;
    if (auto plan = module->getAttrOfType<PlanAttr>("llm.plan")) {
      if (plan.getShard() > 0) {
        module.emitError() << "convert-llm-to-exec: the plan shards ZeRO over groups of "
                           << plan.getShard()
                           << " ranks (hybrid sharding), which the lowering does not run; "
                              "plan with fix=shard:0 or stack=llm-run-cpu";
        return signalPassFailure();
      }
      cp = plan.getCp();
      if (cp > 1 && !module->hasAttr("llm.cp")) {
        module.emitError() << "convert-llm-to-exec: the plan has cp " << cp
                           << "; run llm-partition-cp first";
        return signalPassFailure();
      }
      ep = plan.getEp();

      if (plan.getPp() > 1 && !module->hasAttr("llm.pp")) {
        module.emitError() << "convert-llm-to-exec: the plan has pp " << plan.getPp()
                           << "; run llm-partition-pp first";
        return signalPassFailure();
      }
      tp = plan.getTp();
      dp = plan.getDp();
      micro = plan.getNumMicroBatches();
      zero = plan.getZero();
      if (zero == 3 && plan.getDp() > 1 && func.getBody().front().getOps<ZeroGatherOp>().empty()) {
        module.emitError() << "convert-llm-to-exec: the plan has ZeRO-3; run llm-shard-params "
                              "first";
        return signalPassFailure();
      }
      // Sharding over one rank is no sharding.
      if (dp == 1)
        zero = 0;
    }

    bool lossScaling = module->hasAttr("llm.loss_scale");
    Converter cv(func);
    cv.vpParts = tp;
    cv.cp = cp;
    Block &body = func.getBody().front();
    for (Operation &op : body) {
      if (auto offs = op.getAttrOfType<DenseI64ArrayAttr>("llm.offsets"))
        for (auto [r, off] : llvm::zip(op.getResults(), offs.asArrayRef()))
          cv.offsets[r] = off;
      if (auto st = op.getAttrOfType<DenseBoolArrayAttr>("llm.stashed"))
        for (auto [r, s] : llvm::zip(op.getResults(), st.asArrayRef()))
          if (s)
            cv.stashed.insert(r);
    }

    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<AdamWOp> updates(body.getOps<AdamWOp>());
    SmallVector<GlobalNormOp> norms(body.getOps<GlobalNormOp>());
    if (ret.getNumOperands() != 2 || norms.size() != 1 || updates.empty()) {
      func.emitError() << "convert-llm-to-exec: @train_step must end in one llm.global_norm "
                          "and llm.adamw updates, and return (loss, grad_norm)";
      return signalPassFailure();
    }
    FailureOr<BufAttr> loss = cv.buf(ret.getOperand(0)), norm = cv.buf(ret.getOperand(1));
    if (failed(loss) || failed(norm))
      return signalPassFailure();
    MLIRContext *ctx = module.getContext();
    Builder b(ctx);
    auto accum = [&](StringRef name, Value like) {
      auto t = cast<RankedTensorType>(like.getType());
      return BufAttr::get(ctx, BufferSpace::accum, 0, b.getStringAttr(name),
                          b.getDenseI64ArrayAttr(t.getShape()), b.getF32Type());
    };
    BufAttr lossAcc = accum("loss", ret.getOperand(0));
    SmallVector<Attribute> gradAccs;
    for (AdamWOp a : updates)
      gradAccs.push_back(accum(("grad:" + a.getName()).str(), a.getGrad()));

    int64_t pp = 1;
    if (auto a = module->getAttrOfType<IntegerAttr>("llm.pp"))
      pp = a.getInt();
    auto stageOf = [](Operation *op) -> int64_t {
      auto a = op->getAttrOfType<IntegerAttr>("llm.stage");
      return a ? a.getInt() : -2;
    };
    // What the partition passes decided for each parameter: its pipeline
    // stage; shared by the first and last stage; a TP part (its squares sum
    // over tp in the norm); applied to sequence chunks (SP: one partial
    // gradient per chunk).
    llvm::StringMap<int64_t> paramStage;
    llvm::StringSet<> tied, tpSharded, epSharded, spPartial;
    for (llm::ParamOp p : body.getOps<llm::ParamOp>()) {
      paramStage[p.getName()] = stageOf(p);
      if (p->hasAttr("llm.pp_tied"))
        tied.insert(p.getName());
      if (auto shard = p->getAttrOfType<DictionaryAttr>("llm.shard")) {
        auto axis = shard.getAs<StringAttr>("axis");
        (axis && axis.getValue() == "ep" ? epSharded : tpSharded).insert(p.getName());
      }
      if (p->hasAttr("llm.sp_partial"))
        spPartial.insert(p.getName());
    }
    // ZeRO-2/3: each micro-batch's gradients are reduce-scattered as they
    // are made and only this rank's chunk is accumulated (over edp for
    // experts, dp otherwise); chunks are padded to ceil(n / d).
    llvm::DenseMap<Attribute, StringAttr> chunkedOver;
    if (zero >= 2)
      for (auto [a, acc] : llvm::zip(updates, gradAccs)) {
        bool expert = epSharded.contains(a.getName());
        int64_t d = expert ? dp / ep : dp, n = 1;
        for (int64_t s : cast<BufAttr>(acc).getShape().asArrayRef())
          n *= s;
        acc = BufAttr::get(ctx, BufferSpace::accum, 0,
                           b.getStringAttr(("grad_shard:" + a.getName()).str()),
                           b.getDenseI64ArrayAttr({(n + d - 1) / d}), b.getF32Type());
        chunkedOver[acc] = b.getStringAttr(expert ? "edp" : "dp");
      }
    SmallVector<AdamWOp> allUpdates = updates;
    SmallVector<Attribute> allGradAccs = gradAccs;
    // One program per pipeline stage (stage -2: no pipeline, one program).
    auto build = [&](int64_t stage) -> LogicalResult {
      SmallVector<AdamWOp> updates;
      SmallVector<Attribute> gradAccs;
      for (auto [a, acc] : llvm::zip(allUpdates, allGradAccs))
        if (stage < 0 || paramStage.lookup(a.getName()) == stage ||
            (tied.contains(a.getName()) && (stage == 0 || stage == pp - 1))) {
          updates.push_back(a);
          gradAccs.push_back(acc);
        }
      OpBuilder mb(ctx);
      mb.setInsertionPointToEnd(module.getBody());
      SmallVector<int64_t> ranks;
      int64_t group = dp * cp * tp, firstRank = stage >= 0 ? stage * group : 0;
      for (int64_t r = firstRank; r < firstRank + group; ++r)
        ranks.push_back(r);
      auto outputs = mb.getDictionaryAttr(
          {mb.getNamedAttr("loss", lossAcc), mb.getNamedAttr("grad_norm", *norm)});
      int64_t arena = func->getAttrOfType<IntegerAttr>("llm.arena_bytes").getInt();
      if (auto perStage = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_arena_bytes");
          perStage && stage >= 0)
        arena = perStage[stage];
      std::string name = stage >= 0 ? "stage_" + std::to_string(stage) : "train_step";
      IntegerAttr stash;
      if (auto perStage = func->getAttrOfType<DenseI64ArrayAttr>("llm.stage_stash_bytes");
          perStage && stage >= 0 && perStage[stage] > 0)
        stash = mb.getI64IntegerAttr(perStage[stage]);
      // A pipeline stage's schedule and the order of its parts: interleaved
      // stages hold several model chunks each and need whole groups of pp
      // micro-batches (Narayanan et al. 2021), else they run one
      // micro-batch after another.
      StringAttr scheduleName;
      DenseI64ArrayAttr order;
      if (stage >= 0) {
        auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
        int64_t vpp = plan && plan.getVpp() > 1 ? plan.getVpp() : 1;
        schedule::Kind kind =
            vpp > 1 ? (micro % pp == 0 ? schedule::Kind::Interleaved : schedule::Kind::Sequential)
            : plan && plan.getSchedule() == PipelineSchedule::gpipe ? schedule::Kind::GPipe
                                                                    : schedule::Kind::OneFOneB;
        std::vector<schedule::Pass> passes = schedule::stageOrder(kind, micro, pp, stage, vpp);
        if (passes.empty())
          return module.emitError()
                 << "convert-llm-to-exec: stage " << stage << " of " << pp << " cannot lay out "
                 << micro << " micro-batches in the " << schedule::name(kind) << " schedule";
        SmallVector<int64_t> triples;
        for (const schedule::Pass &p : passes)
          triples.append({p.microBatch, p.chunk, int64_t(p.backward)});
        scheduleName = mb.getStringAttr(schedule::name(kind));
        order = mb.getDenseI64ArrayAttr(triples);
      }
      auto program =
          ProgramOp::create(mb, func.getLoc(), mb.getStringAttr(name),
                            mb.getDenseI64ArrayAttr(ranks), mb.getI64IntegerAttr(arena),
                            mb.getI64IntegerAttr(micro), outputs, stash, scheduleName, order);
      Block *microBlock = new Block(), *stepBlock = new Block();
      program.getMicroBatch().push_back(microBlock);
      program.getStep().push_back(stepBlock);
      Location loc = func.getLoc();

      // Micro-batch phase: forward and backward, then the gradients and the
      // loss added to their accumulators.
      cv.ob.setInsertionPointToEnd(microBlock);
      auto addInto = [&](BufAttr acc, BufAttr value) {
        KernelOp::create(cv.ob, loc, b.getStringAttr("add"), b.getArrayAttr({acc, value}),
                         b.getArrayAttr({acc}), b.getDictionaryAttr({}));
      };
      // Each parameter's gradient is added to its accumulator as soon as it is
      // made, so that its buffer is free for the rest of the backward (the
      // memory plan counts it live only until then).
      llvm::DenseMap<Value, BufAttr> accumulateAt;
      for (auto [a, acc] : llvm::zip(updates, gradAccs)) {
        // A shared weight's gradient: this stage's part (summed in the step).
        Value grad = a.getGrad();
        if (auto sum = grad.getDefiningOp<AddOp>(); sum && sum->hasAttr("llm.pp_tied_sum"))
          grad = stageOf(sum.getLhs().getDefiningOp()) == stage ? sum.getLhs() : sum.getRhs();
        accumulateAt[grad] = cast<BufAttr>(acc);
      }

      // Data-parallel gradient buckets (no ZeRO): an accumulator joins the
      // open bucket once its gradient is added; a full bucket starts its
      // all-reduce (during the last micro-batch only) right there.
      // Expert gradients (expert parallelism) go in buckets of their own
      // over the ranks holding the same experts (edp); the step then scales
      // them by 1 / ep as it does unbucketed ones.
      bool bucketing = zero == 0 && dp > 1 && bucketBytes > 0;
      llvm::DenseMap<Attribute, bool> bucketable; // accumulator -> expert
      if (bucketing)
        for (auto [a, acc] : llvm::zip(updates, gradAccs)) {
          bool expert = epSharded.contains(a.getName());
          if (!tied.contains(a.getName()) && (!expert || dp / ep > 1))
            bucketable[acc] = expert;
        }
      struct OpenBucket {
        SmallVector<Attribute> members;
        int64_t bytes = 0;
      } open[2]; // dense (dp), experts (edp)
      SmallVector<Attribute> bucketed;
      int64_t buckets = 0;
      auto startBucket = [&](Location at, bool expert) {
        OpenBucket &o = open[expert ? 1 : 0];
        if (o.members.empty())
          return;
        BucketAllReduceOp::create(cv.ob, at, b.getStringAttr(expert ? "edp" : "dp"),
                                  ReduceKindAttr::get(b.getContext(), ReduceKind::avg),
                                  b.getI64IntegerAttr(buckets++), b.getArrayAttr(o.members));
        llvm::append_range(bucketed, o.members);
        o.members.clear();
        o.bytes = 0;
      };

      // ZeRO-2/3 gradient buckets: the reduce-scatters of one axis join the
      // open bucket of that axis; the member that fills it to
      // `bucket-bytes` (or the last before a schedule boundary) is marked
      // flush and starts the bucket's one collective.
      struct ScatterBucket {
        int64_t id = -1, bytes = 0;
        GradReduceScatterOp last;
      };
      llvm::StringMap<ScatterBucket> openScatter;
      int64_t scatterBuckets = 0;
      auto closeScatter = [&](ScatterBucket &sb) {
        if (sb.last)
          sb.last.setFlush(true);
        sb = ScatterBucket();
      };
      auto closeScatters = [&] {
        for (auto &entry : openScatter)
          closeScatter(entry.second);
      };

      // Pipeline stages mark where each micro-batch's backward begins: at the
      // first of the stage's ops after the loss.
      Operation *lossOp = ret.getOperand(0).getDefiningOp();
      bool marked = stage < 0;
      // Interleaved stages: which model chunk the next instructions belong
      // to (llm.chunk from llm-partition-pp); a marker where it changes.
      int64_t chunk = 0, transfers = 0;
      auto enterChunk = [&](Operation *op, StringRef key, Location at) {
        auto c = op->getAttrOfType<IntegerAttr>(key);
        if (!c || c.getInt() == chunk)
          return;
        chunk = c.getInt();
        closeScatters();
        ChunkOp::create(cv.ob, at, b.getI64IntegerAttr(chunk));
      };
      for (Operation &op : body.without_terminator()) {
        if (isa<AdamWOp, GlobalNormOp>(op))
          continue;
        bool mine = stageOf(&op) == stage;
        if (auto t = dyn_cast<PPTransferOp>(op))
          mine = int64_t(t.getFrom()) == stage || int64_t(t.getTo()) == stage;
        if (!marked && mine && lossOp && lossOp->isBeforeInBlock(&op)) {
          closeScatters();
          BackwardOp::create(cv.ob, op.getLoc());
          marked = true;
        }
        if (auto t = dyn_cast<PPTransferOp>(op); t && stage >= 0) {
          // One side sends what the other receives; the tag (the transfer's
          // number in the step) pairs them whatever order a schedule runs.
          int64_t from = t.getFrom(), to = t.getTo(), tag = transfers++;
          if (from != stage && to != stage)
            continue;
          FailureOr<BufAttr> x = cv.buf(from == stage ? t.getInput() : t.getResult());
          if (failed(x))
            return failure();
          enterChunk(&op, from == stage ? "llm.from_chunk" : "llm.to_chunk", op.getLoc());
          P2POp::create(cv.ob, op.getLoc(),
                        TransferKindAttr::get(b.getContext(), from == stage ? TransferKind::send
                                                                            : TransferKind::recv),
                        b.getI64IntegerAttr(from == stage ? to : from), b.getI64IntegerAttr(tag),
                        *x);
          continue;
        }
        if (mine)
          enterChunk(&op, "llm.chunk", op.getLoc());
        if (stage >= 0 && stageOf(&op) != stage)
          continue;
        // A linear's weight and bias gradients read only by the step are
        // added by the linear_bwd itself into their fp32 accumulators
        // (`accumulate`; llm-plan-memory gave them no buffer): no gradient
        // buffers of their own and no adds' passes over them (Megatron's
        // fp32 main-gradient accumulation: no 16-bit rounding of the weight
        // gradients).
        llvm::SmallDenseSet<Value> accumulated;
        if (accumulatesWeightGradients(&op, zero)) {
          for (Value r : op.getResults().drop_front()) {
            auto it = accumulateAt.find(r);
            if (it == accumulateAt.end()) {
              op.emitOpError() << "convert-llm-to-exec: a weight gradient added in place has no "
                                  "accumulator on this stage";
              return failure();
            }
            cv.overrides[r] = it->second;
            accumulated.insert(r);
          }
        }
        if (failed(cv.convert(&op)))
          return failure();
        if (!accumulated.empty()) {
          auto made = cast<KernelOp>(cv.ob.getInsertionBlock()->back());
          NamedAttrList params(made.getParams());
          params.set("accumulate", b.getBoolAttr(true));
          made.setParamsAttr(params.getDictionary(ctx));
        }
        for (Value r : op.getResults())
          if (auto it = accumulateAt.find(r); it != accumulateAt.end()) {
            FailureOr<BufAttr> g = cv.buf(r);
            if (failed(g))
              return failure();
            bool direct = accumulated.contains(r);
            if (direct) {
              // The accumulator holds the gradient already.
            } else if (StringAttr axis = chunkedOver.lookup(it->second)) {
              auto rs = GradReduceScatterOp::create(
                  cv.ob, op.getLoc(), axis, ReduceKindAttr::get(b.getContext(), ReduceKind::avg),
                  *g, it->second, IntegerAttr(), UnitAttr());
              if (bucketBytes > 0) {
                ScatterBucket &sb = openScatter[axis.getValue()];
                if (sb.id < 0)
                  sb.id = scatterBuckets++;
                rs.setBucketAttr(b.getI64IntegerAttr(sb.id));
                sb.last = rs;
                int64_t n = 1;
                for (int64_t d : g->getShape().asArrayRef())
                  n *= d;
                sb.bytes += 4 * n;
                if (sb.bytes >= bucketBytes)
                  closeScatter(sb);
              }
            } else
              addInto(it->second, *g);
            if (auto e = bucketable.find(it->second); e != bucketable.end()) {
              OpenBucket &o = open[e->second ? 1 : 0];
              o.members.push_back(it->second);
              int64_t n = 1;
              for (int64_t d : it->second.getShape().asArrayRef())
                n *= d;
              o.bytes += 4 * n;
              if (o.bytes >= bucketBytes)
                startBucket(op.getLoc(), e->second);
            }
            accumulateAt.erase(it);
          }
      }
      startBucket(func.getLoc(), false);
      startBucket(func.getLoc(), true);
      closeScatters();
      if (!cv.pendingGathers.empty()) {
        func.emitError() << "convert-llm-to-exec: a prefetched parameter gather has no reader "
                            "on its stage";
        return failure();
      }
      if (!accumulateAt.empty()) {
        func.emitError() << "convert-llm-to-exec: a parameter gradient is not computed on the "
                            "stage that updates it";
        return failure();
      }
      if (stage < 0 || stage == pp - 1)
        addInto(lossAcc, *loss);

      // Step phase: average over micro-batches and data-parallel ranks, norm,
      // update.
      cv.ob.setInsertionPointToEnd(stepBlock);
      // The buckets' all-reduces complete before anything reads them.
      for (int64_t k = 0; k < buckets; ++k)
        BucketWaitOp::create(cv.ob, loc, b.getI64IntegerAttr(k));
      SmallVector<Attribute> all(gradAccs);
      all.push_back(lossAcc);
      if (micro > 1)
        for (Attribute acc : all)
          KernelOp::create(cv.ob, loc, b.getStringAttr("scale"), b.getArrayAttr({acc}),
                           b.getArrayAttr({acc}),
                           b.getDictionaryAttr({cv.f64("factor", 1.0 / double(micro))}));
      StringAttr dpAxis = b.getStringAttr("dp");
      auto avg = ReduceKindAttr::get(b.getContext(), ReduceKind::avg);
      // Context parallelism: each rank's gradients and loss are of its
      // chunks' tokens (equal counts); their average is the sequence's.
      if (cp > 1)
        exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("cp"), avg, b.getArrayAttr(all));
      SmallVector<Attribute> tiedAccs;
      for (auto [a, acc] : llvm::zip(updates, gradAccs))
        if (tied.contains(a.getName()))
          tiedAccs.push_back(acc);
      if (!tiedAccs.empty())
        exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("pp_tied"),
                                  ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                  b.getArrayAttr(tiedAccs));
      // The gradient norm over the whole model. Squares of tp-sharded
      // gradients are summed over tp, replicated ones count once; under ZeRO
      // each rank squares its dp chunk and the sums go over dp.
      SmallVector<Attribute> sharded, replicated, partial, experts;
      for (auto [a, acc] : llvm::zip(updates, gradAccs)) {
        if (epSharded.contains(a.getName())) {
          experts.push_back(acc);
          // Under sequence parallelism each tp rank routed its own chunk.
          if (spPartial.contains(a.getName()))
            partial.push_back(acc);
          continue;
        }
        // A shared weight counts once in the norm: on the first stage.
        if (tied.contains(a.getName()) && stage != 0)
          continue;
        (tpSharded.contains(a.getName()) ? sharded : replicated).push_back(acc);
        if (spPartial.contains(a.getName()))
          partial.push_back(acc);
      }
      if (!partial.empty())
        exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("tp"),
                                  ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                  b.getArrayAttr(partial));
      if (zero == 0 && dp > 1) {
        // Expert gradients already hold the ep ranks' tokens: they average
        // over the expert-data-parallel ranks and count each rank's share
        // once (1/ep), which is the average over dp.
        SmallVector<Attribute> dense;
        for (Attribute acc : all)
          if (!llvm::is_contained(experts, acc) && !llvm::is_contained(bucketed, acc))
            dense.push_back(acc);
        exec::AllReduceOp::create(cv.ob, loc, dpAxis, avg, b.getArrayAttr(dense));
        if (!experts.empty()) {
          SmallVector<Attribute> unbucketed;
          for (Attribute acc : experts)
            if (!llvm::is_contained(bucketed, acc))
              unbucketed.push_back(acc);
          if (dp / ep > 1 && !unbucketed.empty())
            exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("edp"), avg,
                                      b.getArrayAttr(unbucketed));
          for (Attribute acc : experts)
            KernelOp::create(cv.ob, loc, b.getStringAttr("scale"), b.getArrayAttr({acc}),
                             b.getArrayAttr({acc}),
                             b.getDictionaryAttr({cv.f64("factor", 1.0 / double(ep))}));
        }
      }
      // Under ZeRO, expert gradients and optimizer state are sharded over the
      // ranks holding the same experts (edp), the rest over dp.
      StringAttr edpAxis = b.getStringAttr("edp");
      SmallVector<Attribute> denseGrads;
      for (Attribute acc : gradAccs)
        if (!llvm::is_contained(experts, acc))
          denseGrads.push_back(acc);
      if (zero > 0) {
        // ZeRO-1/2: each rank reduces, clips and updates only its chunk of
        // every gradient and keeps AdamW moments for that chunk; the updated
        // chunks are gathered back into whole parameters.
        // (ZeRO-2/3 reduce-scattered each micro-batch's already.)
        exec::AllReduceOp::create(cv.ob, loc, dpAxis, avg, b.getArrayAttr({lossAcc}));
        if (!denseGrads.empty() && zero < 2)
          ReduceScatterOp::create(cv.ob, loc, dpAxis, avg, b.getArrayAttr(denseGrads));
        if (!experts.empty()) {
          if (zero < 2)
            ReduceScatterOp::create(cv.ob, loc, edpAxis, avg, b.getArrayAttr(experts));
          for (Attribute acc : experts)
            KernelOp::create(cv.ob, loc, b.getStringAttr("scale"), b.getArrayAttr({acc}),
                             b.getArrayAttr({acc}),
                             b.getDictionaryAttr({cv.f64("factor", 1.0 / double(ep))}));
        }
      }
      // Only the last stage computed the loss; the others add their zero.
      if (pp > 1)
        exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("pp"),
                                  ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                  b.getArrayAttr({lossAcc}));
      // Dynamic loss scaling: unscale the (reduced) gradients, note a
      // non-finite one anywhere, skip the update then (AdamW reads the flag)
      // and let the runtime move the scale.
      std::optional<BufAttr> found;
      if (lossScaling) {
        auto scratch = [&](StringRef n) {
          return BufAttr::get(ctx, BufferSpace::accum, 0, b.getStringAttr(n),
                              b.getDenseI64ArrayAttr({}), b.getF32Type());
        };
        found = scratch("scratch:found_inf");
        auto unscale = [&](ArrayRef<Attribute> grads, BufAttr into, StringAttr zeroAxis) {
          SmallVector<NamedAttribute> ps;
          if (zero > 0)
            ps.push_back(b.getNamedAttr("shard", zeroAxis));
          KernelOp::create(cv.ob, loc, b.getStringAttr("loss_unscale"), b.getArrayAttr(grads),
                           b.getArrayAttr({into}), b.getDictionaryAttr(ps));
        };
        unscale(denseGrads, *found, dpAxis);
        if (!experts.empty()) {
          BufAttr more = scratch("scratch:found_inf_experts");
          unscale(experts, more, edpAxis);
          KernelOp::create(cv.ob, loc, b.getStringAttr("add"), b.getArrayAttr({*found, more}),
                           b.getArrayAttr({*found}), b.getDictionaryAttr({}));
        }
        for (auto [axis, size] :
             {std::pair<StringRef, int64_t>{"dp", dp}, {"tp", tp}, {"cp", cp}, {"pp", pp}})
          if (size > 1)
            exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr(axis),
                                      ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                      b.getArrayAttr({*found}));
      }
      if (zero == 0 && tp == 1 && pp == 1 && experts.empty()) {
        KernelOp::create(cv.ob, loc, b.getStringAttr("global_norm"), b.getArrayAttr(gradAccs),
                         b.getArrayAttr({*norm}), b.getDictionaryAttr({}));
      } else {
        auto sumSquares = [&](ArrayRef<Attribute> grads, BufAttr into, bool overTp,
                              StringAttr zeroAxis) {
          SmallVector<NamedAttribute> shard;
          if (zero > 0)
            shard.push_back(b.getNamedAttr("shard", zeroAxis));
          KernelOp::create(cv.ob, loc, b.getStringAttr("sum_squares"), b.getArrayAttr(grads),
                           b.getArrayAttr({into}), b.getDictionaryAttr(shard));
          if (zero > 0)
            exec::AllReduceOp::create(cv.ob, loc, zeroAxis,
                                      ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                      b.getArrayAttr({into}));
          if (overTp)
            exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("tp"),
                                      ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                      b.getArrayAttr({into}));
        };
        if (tp > 1) {
          BufAttr rest =
              BufAttr::get(ctx, BufferSpace::accum, 0, b.getStringAttr("norm_sq_replicated"),
                           b.getDenseI64ArrayAttr({}), b.getF32Type());
          sumSquares(sharded, *norm, /*overTp=*/true, dpAxis);
          sumSquares(replicated, rest, /*overTp=*/false, dpAxis);
          KernelOp::create(cv.ob, loc, b.getStringAttr("add"), b.getArrayAttr({*norm, rest}),
                           b.getArrayAttr({*norm}), b.getDictionaryAttr({}));
        } else {
          sumSquares(replicated, *norm, /*overTp=*/false, dpAxis); // tp 1: nothing is tp-sharded
        }
        if (!experts.empty()) {
          // Each ep rank squares its own experts.
          BufAttr mine =
              BufAttr::get(ctx, BufferSpace::accum, 0, b.getStringAttr("scratch:norm_sq_experts"),
                           b.getDenseI64ArrayAttr({}), b.getF32Type());
          sumSquares(experts, mine, /*overTp=*/false, edpAxis);
          exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("ep"),
                                    ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                    b.getArrayAttr({mine}));
          KernelOp::create(cv.ob, loc, b.getStringAttr("add"), b.getArrayAttr({*norm, mine}),
                           b.getArrayAttr({*norm}), b.getDictionaryAttr({}));
        }
        // Every stage squares its own parameters' gradients.
        if (pp > 1)
          exec::AllReduceOp::create(cv.ob, loc, b.getStringAttr("pp"),
                                    ReduceKindAttr::get(b.getContext(), ReduceKind::sum),
                                    b.getArrayAttr({*norm}));
        KernelOp::create(cv.ob, loc, b.getStringAttr("sqrt"), b.getArrayAttr({*norm}),
                         b.getArrayAttr({*norm}), b.getDictionaryAttr({}));
      }
      SmallVector<Attribute> states, expertStates;
      for (auto [a, acc] : llvm::zip(updates, gradAccs)) {
        bool expert = epSharded.contains(a.getName());
        SmallVector<NamedAttribute> ps = cv.adamwParams(a);
        if (zero > 0)
          ps.push_back(b.getNamedAttr("shard", expert ? edpAxis : dpAxis));
        SmallVector<Attribute> adamIns = {acc, *norm};
        if (found)
          adamIns.push_back(*found);
        KernelOp::create(cv.ob, loc, b.getStringAttr("adamw"), b.getArrayAttr(adamIns),
                         b.getArrayAttr({}), b.getDictionaryAttr(ps));
        auto t = cast<RankedTensorType>(a.getGrad().getType());
        (expert ? expertStates : states)
            .push_back(BufAttr::get(ctx, BufferSpace::state, 0, a.getNameAttr(),
                                    b.getDenseI64ArrayAttr(t.getShape()), t.getElementType()));
      }
      // ZeRO-1/2 gather the updated chunks into whole parameters; ZeRO-3 keeps
      // chunks and gathers where they are used.
      if (zero > 0 && zero < 3 && !states.empty())
        AllGatherOp::create(cv.ob, loc, dpAxis, b.getArrayAttr(states));
      if (zero > 0 && zero < 3 && !expertStates.empty())
        AllGatherOp::create(cv.ob, loc, edpAxis, b.getArrayAttr(expertStates));
      if (found)
        KernelOp::create(cv.ob, loc, b.getStringAttr("loss_scale_update"), b.getArrayAttr({*found}),
                         b.getArrayAttr({}), b.getDictionaryAttr({}));
      return success();
    };
    for (int64_t stage = pp > 1 ? 0 : -2; stage < (pp > 1 ? pp : -1); ++stage)
      if (failed(build(stage)))
        return signalPassFailure();
    describePlan(module, func);
  }

  /// exec.plan and exec.param: what the plan file says besides the
  /// programs, so that it is a translation of the exec ops alone.
  void describePlan(ModuleOp module, func::FuncOp step) {
    MLIRContext *ctx = module.getContext();
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    Location loc = module.getLoc();
    auto plan = module->getAttrOfType<PlanAttr>("llm.plan");
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    // Ranks: pp x dp x cp x tp; ep subdivides dp.
    int64_t dp = plan ? plan.getDp() : 1, tp = plan ? plan.getTp() : 1,
            pp = plan ? plan.getPp() : 1, cp = plan ? plan.getCp() : 1,
            ep = plan ? plan.getEp() : 1;
    auto mesh = b.getDictionaryAttr({b.getNamedAttr("cp", i64(cp)), b.getNamedAttr("dp", i64(dp)),
                                     b.getNamedAttr("ep", i64(ep)), b.getNamedAttr("pp", i64(pp)),
                                     b.getNamedAttr("tp", i64(tp))});
    // The optimizer sharding the programs really do (none over one rank).
    int64_t zero = 0;
    for (ProgramOp prog : module.getOps<ProgramOp>())
      if ((!prog.getStep().empty() && !prog.getStep().front().getOps<AllGatherOp>().empty()) ||
          (!prog.getMicroBatch().empty() &&
           !prog.getMicroBatch().front().getOps<ParamGatherOp>().empty()))
        zero = plan ? plan.getZero() : 0;
    SmallVector<Type> inputs(step.getArgumentTypes());
    auto header = exec::PlanOp::create(b, loc, mesh, i64(dp * tp * pp * cp), i64(zero),
                                       b.getTypeArrayAttr(inputs), StringAttr(), IntegerAttr(),
                                       IntegerAttr(), DictionaryAttr(), FloatAttr());
    if (auto name = module->getAttrOfType<StringAttr>("llm.name"))
      header.setModelAttr(name);
    if (auto a = module->getAttrOfType<IntegerAttr>("llm.micro_batch"))
      header.setMicroBatchAttr(i64(a.getInt()));
    if (auto a = module->getAttrOfType<IntegerAttr>("llm.seq_len"))
      header.setSeqLenAttr(i64(a.getInt()));
    if (plan)
      header.setPredictionAttr(b.getDictionaryAttr(
          {b.getNamedAttr("num_micro_batches", i64(plan.getNumMicroBatches())),
           b.getNamedAttr("peak_memory_bytes", i64(plan.getPeakMemoryBytes())),
           b.getNamedAttr("step_time_s", b.getF64FloatAttr(plan.getStepTimeS().getValueAsDouble())),
           b.getNamedAttr("zero", i64(plan.getZero()))}));
    // Model FLOPs per token (6N + attention), for the runtime's MFU.
    if (auto forward = dyn_cast_or_null<func::FuncOp>(
            findEntryFunction(module, LLMDialect::kForwardAttrName).getOperation())) {
      CostContext cc;
      auto seq = module->getAttrOfType<IntegerAttr>("llm.seq_len");
      cc.seqLen = seq ? seq.getInt() : 1;
      ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
      if (FailureOr<ModelStats> st = computeModelStats(forward, cc); succeeded(st))
        header.setTrainFlopsPerTokenAttr(b.getF64FloatAttr(st->trainFlopsPerToken));
    }
    llvm::StringSet<> seen;
    step.walk([&](llm::ParamOp p) {
      if (!seen.insert(p.getName()).second)
        return;
      auto param = exec::ParamOp::create(
          b, loc, p.getNameAttr(), TypeAttr::get(p.getType()),
          ParamInitAttr::get(ctx, *symbolizeParamInit(stringifyInitKind(p.getInit()))), FloatAttr(),
          DictionaryAttr());
      if (p.getStd())
        param.setStdAttr(b.getF64FloatAttr(p.getStd()->convertToDouble()));
      if (auto shard = p->getAttrOfType<DictionaryAttr>("llm.shard"))
        param.setShardAttr(shard);
    });
  }
};
} // namespace
