//===- Interpreter.cpp - run llm IR on the CPU reference kernels ----------===//

#include "llmopt/Reference/Interpreter.h"
#include "llmopt-kernels/cpu.h"
#include "llmopt-kernels/init.h"
#include "llmopt/Dialect/LLM/IR/LLMOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <random>
#include <unordered_map>

using namespace mlir;
using namespace llmopt;
using namespace llmopt::llm;
using namespace llmopt::reference;
namespace k = llmopt::kernels::cpu;

int64_t Tensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Tensor Tensor::floats(std::vector<int64_t> shape, std::vector<float> data) {
  Tensor t;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

Tensor Tensor::idsOf(std::vector<int64_t> shape, std::vector<int32_t> ids) {
  Tensor t;
  t.shape = std::move(shape);
  t.ids = std::move(ids);
  t.isIds = true;
  return t;
}

void Interpreter::initParams(func::FuncOp func, uint64_t seed) {
  func.walk([&](ParamOp p) {
    ParamState &st = params[p.getName()];
    st.shape.assign(p.getType().getShape().begin(), p.getType().getShape().end());
    int64_t n = p.getNumElements();
    st.value.assign(n, 0.0f);
    st.m.assign(n, 0.0f);
    st.v.assign(n, 0.0f);
    switch (p.getInit()) {
    case InitKind::zeros:
      break;
    case InitKind::ones:
      std::fill(st.value.begin(), st.value.end(), 1.0f);
      break;
    case InitKind::normal:
      llmopt::kernels::initNormal(st.value.data(), n, float(p.getStd()->convertToDouble()), seed,
                                  std::string_view(p.getName().data(), p.getName().size()));
      break;
    }
  });
}

namespace {

/// Execution of one function.
struct Run {
  Interpreter &in;
  /// Node-based so that references to tensors stay valid while results are
  /// added (a kernel reads its inputs while its outputs are created).
  std::unordered_map<const void *, Tensor> env;

  Tensor &slot(Value v) { return env[v.getAsOpaquePointer()]; }

  LogicalResult fail(Operation *op, const Twine &msg) {
    in.error = (op->getName().getStringRef() + ": " + msg).str();
    return failure();
  }

  const Tensor &get(Value v) { return env.at(v.getAsOpaquePointer()); }

  /// The shape of a result: static dims from the type, the dynamic ones
  /// (batch, seq) from `like`.
  std::vector<int64_t> shapeOf(Value result, const Tensor &like) {
    auto t = cast<RankedTensorType>(result.getType());
    std::vector<int64_t> s(t.getShape().begin(), t.getShape().end());
    for (size_t i = 0; i < s.size(); ++i)
      if (ShapedType::isDynamic(s[i]))
        s[i] = like.shape[i];
    return s;
  }

  Tensor &make(Value result, std::vector<int64_t> shape) {
    Tensor t;
    t.shape = std::move(shape);
    t.data.assign(t.numElements(), 0.0f);
    return slot(result) = std::move(t);
  }

  static int64_t rows(const Tensor &t) { return t.shape[0] * t.shape[1]; }

  k::RopeScaling scaling(RotaryOp op) {
    k::RopeScaling s;
    auto num = [&](StringRef key, double dflt) { return float(op.getScalingNumber(key, dflt)); };
    // As the lowering: linear divides every frequency, llama3 scales by
    // wavelength, dynamic changes nothing within the model's length (the
    // lowering refuses the rest).
    StringRef type = op.getRopeType();
    if (type == "linear") {
      s.linearFactor = num("factor", 1);
    } else if (type == "llama3") {
      s.factor = num("factor", 0);
      s.lowFreqFactor = num("low_freq_factor", 1);
      s.highFreqFactor = num("high_freq_factor", 4);
      s.originalMaxPositions = num("original_max_position_embeddings", 8192);
    }
    return s;
  }

  template <typename AttnOp> k::AttentionShape attnShape(AttnOp op, const Tensor &q) {
    k::AttentionShape a;
    a.batch = q.shape[0];
    a.seq = q.shape[1];
    a.heads = op.getNumHeadsAttr().getInt();
    a.kvHeads = op.getNumKvHeadsAttr().getInt();
    a.headDim = op.getHeadDimAttr().getInt();
    a.scale = float(op.getScale().convertToDouble());
    a.causal = op.getCausal();
    a.window = op.getWindowAttr() ? op.getWindowAttr().getInt() : 0;
    return a;
  }

  LogicalResult exec(Operation *op);

  LogicalResult runBlock(Block &block, SmallVectorImpl<Tensor> &results) {
    for (Operation &op : block) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(get(v));
        return success();
      }
      if (auto y = dyn_cast<YieldOp>(op)) {
        results.push_back(get(y.getValue()));
        return success();
      }
      if (auto y = dyn_cast<FusedYieldOp>(op)) {
        for (Value v : y.getValues())
          results.push_back(get(v));
        return success();
      }
      if (failed(exec(&op)))
        return failure();
    }
    return success();
  }
};

LogicalResult Run::exec(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParamOp p) {
        auto it = in.params.find(p.getName());
        if (it == in.params.end())
          return fail(op, "parameter '" + p.getName() + "' was not initialized");
        slot(p.getResult()) = Tensor::floats(it->second.shape, it->second.value);
        return success();
      })
      .Case([&](arith::ConstantOp c) {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense || !dense.isSplat() || !isa<FloatType>(dense.getElementType()))
          return fail(op, "only splat float constants are supported");
        auto t = cast<RankedTensorType>(c.getType());
        Tensor &r = make(c.getResult(), {t.getShape().begin(), t.getShape().end()});
        std::fill(r.data.begin(), r.data.end(),
                  float(dense.getSplatValue<APFloat>().convertToDouble()));
        return success();
      })
      .Case([&](LayerOp l) {
        Block &body = l.getBody().front();
        slot(body.getArgument(0)) = get(l.getInput());
        SmallVector<Tensor> out;
        if (failed(runBlock(body, out)))
          return failure();
        slot(l.getResult()) = out.front();
        return success();
      })
      .Case([&](llm::FusedOp f) {
        // The fused kernel computes what its body's ops compute.
        Block &body = f.getBody().front();
        for (auto [arg, v] : llvm::zip(body.getArguments(), f.getInputs()))
          slot(arg) = get(v);
        SmallVector<Tensor> out;
        if (failed(runBlock(body, out)))
          return failure();
        for (auto [r, t] : llvm::zip(f.getResults(), out))
          slot(r) = std::move(t);
        return success();
      })
      .Case([&](EmbeddingOp e) {
        const Tensor &tok = get(e.getTokens()), &table = get(e.getTable());
        Tensor &r = make(e.getResult(), {tok.shape[0], tok.shape[1], table.shape[1]});
        if (!k::embeddingForward(tok.ids.data(), table.data.data(), r.data.data(), rows(tok),
                                 table.shape[0], table.shape[1]))
          return fail(op, "a token id is outside the vocabulary");
        return success();
      })
      .Case([&](PositionEmbeddingOp e) {
        const Tensor &x = get(e.getInput()), &table = get(e.getTable());
        Tensor &r = make(e.getResult(), x.shape);
        if (x.shape[1] > table.shape[0])
          return fail(op, "sequence longer than the position table");
        k::positionEmbeddingForward(x.data.data(), table.data.data(), r.data.data(), x.shape[0],
                                    x.shape[1], x.shape[2]);
        return success();
      })
      .Case([&](RotaryOp rop) {
        const Tensor &q = get(rop.getQ()), &kk = get(rop.getK());
        int64_t hd = rop.getHeadDimAttr().getInt();
        float theta = float(rop.getTheta().convertToDouble());
        k::RopeScaling sc = scaling(rop);
        Tensor &rq = make(rop.getQOut(), q.shape);
        k::rotary(q.data.data(), rq.data.data(), q.shape[0], q.shape[1], q.shape[2] / hd, hd, theta,
                  sc, rop.getInverse());
        Tensor &rk = make(rop.getKOut(), kk.shape);
        k::rotary(kk.data.data(), rk.data.data(), kk.shape[0], kk.shape[1], kk.shape[2] / hd, hd,
                  theta, sc, rop.getInverse());
        return success();
      })
      .Case([&](LayerNormOp n) {
        const Tensor &x = get(n.getInput());
        Tensor &r = make(n.getResult(), x.shape);
        std::vector<float> mean(rows(x)), rstd(rows(x));
        k::layerNormForward(x.data.data(), get(n.getWeight()).data.data(),
                            n.getBias() ? get(n.getBias()).data.data() : nullptr, r.data.data(),
                            mean.data(), rstd.data(), rows(x), x.shape[2],
                            float(n.getEps().convertToDouble()));
        return success();
      })
      .Case([&](RMSNormOp n) {
        const Tensor &x = get(n.getInput());
        Tensor &r = make(n.getResult(), x.shape);
        std::vector<float> rstd(rows(x));
        k::rmsNormForward(x.data.data(), get(n.getWeight()).data.data(), r.data.data(), rstd.data(),
                          rows(x), x.shape[2], float(n.getEps().convertToDouble()));
        return success();
      })
      .Case([&](LinearOp l) {
        const Tensor &x = get(l.getInput());
        Tensor &r = make(l.getResult(), shapeOf(l.getResult(), x));
        k::linearForward(x.data.data(), get(l.getWeight()).data.data(),
                         l.getBias() ? get(l.getBias()).data.data() : nullptr, r.data.data(),
                         rows(x), l.getInFeatures(), l.getOutFeatures(), l.getTransposed());
        return success();
      })
      .Case([&](SplitOp s) {
        const Tensor &x = get(s.getInput());
        int64_t offset = 0, c = x.shape[2];
        for (auto [res, size] : llvm::zip(s.getResults(), s.getSizes())) {
          Tensor &r = make(res, {x.shape[0], x.shape[1], size});
          for (int64_t row = 0; row < rows(x); ++row)
            std::copy_n(x.data.begin() + row * c + offset, size, r.data.begin() + row * size);
          offset += size;
        }
        return success();
      })
      .Case([&](ConcatOp cop) {
        const Tensor &first = get(cop.getInputs().front());
        Tensor &r = make(cop.getResult(), shapeOf(cop.getResult(), first));
        int64_t c = r.shape[2], offset = 0;
        for (Value v : cop.getInputs()) {
          const Tensor &x = get(v);
          int64_t size = x.shape[2];
          for (int64_t row = 0; row < rows(x); ++row)
            std::copy_n(x.data.begin() + row * size, size, r.data.begin() + row * c + offset);
          offset += size;
        }
        return success();
      })
      .Case([&](AttentionOp a) {
        const Tensor &q = get(a.getQ());
        k::AttentionShape sh = attnShape(a, q);
        Tensor &r = make(a.getResult(), q.shape);
        std::vector<float> lse(sh.batch * sh.heads * sh.seq);
        k::attentionForward(q.data.data(), get(a.getK()).data.data(), get(a.getV()).data.data(),
                            r.data.data(), lse.data(), sh);
        return success();
      })
      .Case([&](GeluOp g) {
        const Tensor &x = get(g.getInput());
        Tensor &r = make(g.getResult(), x.shape);
        k::geluForward(x.data.data(), r.data.data(), x.numElements(),
                       g.getApproximate() == GeluApprox::tanh);
        return success();
      })
      .Case([&](SwiGLUOp s) {
        const Tensor &g = get(s.getGate());
        Tensor &r = make(s.getResult(), g.shape);
        k::swigluForward(g.data.data(), get(s.getUp()).data.data(), r.data.data(), g.numElements());
        return success();
      })
      .Case([&](AddOp a) {
        const Tensor &x = get(a.getLhs()), &y = get(a.getRhs());
        Tensor &r = make(a.getResult(), x.shape);
        for (int64_t i = 0; i < x.numElements(); ++i)
          r.data[i] = x.data[i] + y.data[i];
        return success();
      })
      .Case([&](LMHeadOp h) {
        const Tensor &x = get(h.getInput()), &w = get(h.getWeight());
        Tensor &r = make(h.getResult(), {x.shape[0], x.shape[1], w.shape[0]});
        k::linearForward(x.data.data(), w.data.data(), nullptr, r.data.data(), rows(x), w.shape[1],
                         w.shape[0], false);
        return success();
      })
      .Case([&](CrossEntropyOp ce) {
        const Tensor &l = get(ce.getLogits()), &lab = get(ce.getLabels());
        Tensor &r = make(ce.getLoss(), {});
        int64_t counted;
        if (!k::crossEntropyForward(l.data.data(), lab.ids.data(), rows(l), l.shape[2],
                                    ce.getIgnoreIndexAttr().getInt(), r.data.data(), &counted))
          return fail(op, "a label is outside the vocabulary");
        return success();
      })
      // Backward.
      .Case([&](CrossEntropyGradOp g) {
        const Tensor &l = get(g.getLogits()), &lab = get(g.getLabels());
        Tensor &r = make(g.getResult(), l.shape);
        int64_t ignore = g.getIgnoreIndexAttr().getInt(), counted = 0;
        for (int32_t y : lab.ids)
          counted += y != ignore;
        k::crossEntropyBackward(l.data.data(), lab.ids.data(), get(g.getLossGrad()).data[0],
                                counted, r.data.data(), rows(l), l.shape[2], ignore);
        return success();
      })
      .Case([&](LMHeadGradOp g) {
        const Tensor &x = get(g.getInput()), &w = get(g.getWeight());
        Tensor &dx = make(g.getInputGrad(), x.shape);
        Tensor &dw = make(g.getWeightGrad(), w.shape);
        k::linearBackward(get(g.getGrad()).data.data(), x.data.data(), w.data.data(),
                          dx.data.data(), dw.data.data(), nullptr, rows(x), w.shape[1], w.shape[0],
                          false);
        return success();
      })
      .Case([&](LinearGradOp g) {
        const Tensor &x = get(g.getInput()), &w = get(g.getWeight());
        Tensor &dx = make(g.getInputGrad(), x.shape);
        Tensor &dw = make(g.getWeightGrad(), w.shape);
        float *db = nullptr;
        if (g.getBiasGrad())
          db = make(g.getBiasGrad(), shapeOf(g.getBiasGrad(), x)).data.data();
        int64_t in = g.getTransposed() ? w.shape[0] : w.shape[1];
        int64_t out = g.getTransposed() ? w.shape[1] : w.shape[0];
        k::linearBackward(get(g.getGrad()).data.data(), x.data.data(), w.data.data(),
                          dx.data.data(), dw.data.data(), db, rows(x), in, out, g.getTransposed());
        return success();
      })
      .Case([&](LayerNormGradOp g) {
        const Tensor &x = get(g.getInput()), &w = get(g.getWeight());
        int64_t n = rows(x), c = x.shape[2];
        std::vector<float> tmp(x.numElements()), mean(n), rstd(n);
        k::layerNormForward(x.data.data(), w.data.data(), nullptr, tmp.data(), mean.data(),
                            rstd.data(), n, c, float(g.getEps().convertToDouble()));
        Tensor &dx = make(g.getInputGrad(), x.shape);
        Tensor &dw = make(g.getWeightGrad(), w.shape);
        float *db = g.getBiasGrad() ? make(g.getBiasGrad(), w.shape).data.data() : nullptr;
        k::layerNormBackward(get(g.getGrad()).data.data(), x.data.data(), w.data.data(),
                             mean.data(), rstd.data(), dx.data.data(), dw.data.data(), db, n, c);
        return success();
      })
      .Case([&](RMSNormGradOp g) {
        const Tensor &x = get(g.getInput()), &w = get(g.getWeight());
        int64_t n = rows(x), c = x.shape[2];
        std::vector<float> tmp(x.numElements()), rstd(n);
        k::rmsNormForward(x.data.data(), w.data.data(), tmp.data(), rstd.data(), n, c,
                          float(g.getEps().convertToDouble()));
        Tensor &dx = make(g.getInputGrad(), x.shape);
        Tensor &dw = make(g.getWeightGrad(), w.shape);
        k::rmsNormBackward(get(g.getGrad()).data.data(), x.data.data(), w.data.data(), rstd.data(),
                           dx.data.data(), dw.data.data(), n, c);
        return success();
      })
      .Case([&](AttentionGradOp g) {
        const Tensor &q = get(g.getQ()), &kk = get(g.getK()), &v = get(g.getV());
        k::AttentionShape sh = attnShape(g, q);
        std::vector<float> out(q.numElements()), lse(sh.batch * sh.heads * sh.seq);
        k::attentionForward(q.data.data(), kk.data.data(), v.data.data(), out.data(), lse.data(),
                            sh);
        Tensor &dq = make(g.getQGrad(), q.shape);
        Tensor &dk = make(g.getKGrad(), kk.shape);
        Tensor &dv = make(g.getVGrad(), v.shape);
        k::attentionBackward(get(g.getGrad()).data.data(), q.data.data(), kk.data.data(),
                             v.data.data(), get(g.getOut()).data.data(), lse.data(), dq.data.data(),
                             dk.data.data(), dv.data.data(), sh);
        return success();
      })
      .Case([&](GeluGradOp g) {
        const Tensor &x = get(g.getInput());
        Tensor &r = make(g.getResult(), x.shape);
        k::geluBackward(get(g.getGrad()).data.data(), x.data.data(), r.data.data(), x.numElements(),
                        g.getApproximate() == GeluApprox::tanh);
        return success();
      })
      .Case([&](MoERouterOp r) {
        const Tensor &x = get(r.getInput()), &gate = get(r.getGate());
        int64_t k = r.getTopKAttr().getInt();
        Tensor &w = make(r.getWeights(), {x.shape[0], x.shape[1], k});
        Tensor idx =
            Tensor::idsOf({x.shape[0], x.shape[1], k}, std::vector<int32_t>(size_t(rows(x) * k)));
        k::moeRouterForward(x.data.data(), gate.data.data(), w.data.data(), idx.ids.data(), rows(x),
                            x.shape[2], gate.shape[0], k, r.getNormalize());
        slot(r.getIndices()) = std::move(idx);
        return success();
      })
      .Case([&](MoEDispatchOp d) -> LogicalResult {
        const Tensor &x = get(d.getInput()), &idx = get(d.getIndices());
        auto t = d.getType();
        int64_t experts = t.getDimSize(0), n = rows(x), k = idx.shape[2], cap = n;
        double cf = d.getCapacityFactor().convertToDouble();
        if (!t.isDynamicDim(1))
          cap = t.getDimSize(1);
        else if (cf > 0)
          cap = std::min<int64_t>(n, int64_t(std::ceil(cf * double(n * k) / double(experts))));
        Tensor &r = make(d.getResult(), {experts, cap, x.shape[2]});
        if (!k::moeDispatchForward(x.data.data(), idx.ids.data(), r.data.data(), n, x.shape[2], k,
                                   experts, cap))
          return fail(d, "an expert index is out of range");
        return success();
      })
      .Case([&](MoEExpertsOp e) {
        const Tensor &x = get(e.getInput());
        Tensor &r = make(e.getResult(), x.shape);
        std::vector<const float *> w;
        for (Value v : e.getWeights())
          w.push_back(get(v).data.data());
        k::MoEExpertShape sh{x.shape[0], x.shape[1], x.shape[2], get(e.getWeights()[0]).shape[1],
                             e.getActivation() == ExpertActivation::swiglu};
        k::moeExpertsForward(x.data.data(), w.data(), r.data.data(), sh);
        return success();
      })
      .Case([&](MoECombineOp c) -> LogicalResult {
        const Tensor &e = get(c.getInput()), &w = get(c.getWeights()), &idx = get(c.getIndices());
        Tensor &r = make(c.getResult(), {w.shape[0], w.shape[1], e.shape[2]});
        if (!k::moeCombineForward(e.data.data(), w.data.data(), idx.ids.data(), r.data.data(),
                                  rows(w), e.shape[2], w.shape[2], e.shape[0], e.shape[1]))
          return fail(c, "an expert index is out of range");
        return success();
      })
      .Case([&](MoERouterGradOp g) {
        const Tensor &x = get(g.getInput()), &gate = get(g.getGate()), &w = get(g.getWeights());
        Tensor &dx = make(g.getInputGrad(), x.shape);
        Tensor &dg = make(g.getGateGrad(), gate.shape);
        k::moeRouterBackward(get(g.getGrad()).data.data(), x.data.data(), gate.data.data(),
                             w.data.data(), get(g.getIndices()).ids.data(), dx.data.data(),
                             dg.data.data(), rows(x), x.shape[2], gate.shape[0], w.shape[2],
                             g.getNormalize(),
                             g.getAuxLoss() ? float(g.getAuxLoss()->convertToDouble()) : 0.0f);
        return success();
      })
      .Case([&](MoEDispatchGradOp g) -> LogicalResult {
        const Tensor &d = get(g.getGrad()), &idx = get(g.getIndices());
        Tensor &dx = make(g.getResult(), {idx.shape[0], idx.shape[1], d.shape[2]});
        if (!k::moeDispatchBackward(d.data.data(), idx.ids.data(), dx.data.data(), rows(idx),
                                    d.shape[2], idx.shape[2], d.shape[0], d.shape[1]))
          return fail(g, "an expert index is out of range");
        return success();
      })
      .Case([&](MoEExpertsGradOp g) {
        const Tensor &x = get(g.getInput());
        Tensor &dx = make(g.getInputGrad(), x.shape);
        std::vector<const float *> w;
        std::vector<float *> dw;
        for (auto [v, r] : llvm::zip(g.getWeights(), g.getWeightGrads())) {
          w.push_back(get(v).data.data());
          dw.push_back(make(r, get(v).shape).data.data());
        }
        k::MoEExpertShape sh{x.shape[0], x.shape[1], x.shape[2], get(g.getWeights()[0]).shape[1],
                             g.getActivation() == ExpertActivation::swiglu};
        k::moeExpertsBackward(get(g.getGrad()).data.data(), x.data.data(), w.data(), dx.data.data(),
                              dw.data(), sh);
        return success();
      })
      .Case([&](MoECombineGradOp g) -> LogicalResult {
        const Tensor &e = get(g.getExpertOut()), &w = get(g.getWeights()),
                     &idx = get(g.getIndices());
        Tensor &de = make(g.getExpertOutGrad(), e.shape);
        Tensor &dw = make(g.getWeightsGrad(), w.shape);
        if (!k::moeCombineBackward(get(g.getGrad()).data.data(), e.data.data(), w.data.data(),
                                   idx.ids.data(), de.data.data(), dw.data.data(), rows(w),
                                   e.shape[2], w.shape[2], e.shape[0], e.shape[1]))
          return fail(g, "an expert index is out of range");
        return success();
      })
      .Case([&](SwiGLUGradOp g) {
        const Tensor &gate = get(g.getGate());
        Tensor &dg = make(g.getGateGrad(), gate.shape);
        Tensor &du = make(g.getUpGrad(), gate.shape);
        k::swigluBackward(get(g.getGrad()).data.data(), gate.data.data(),
                          get(g.getUp()).data.data(), dg.data.data(), du.data.data(),
                          gate.numElements());
        return success();
      })
      .Case([&](EmbeddingGradOp g) {
        const Tensor &tok = get(g.getTokens());
        auto t = g.getType();
        Tensor &r = make(g.getResult(), {t.getDimSize(0), t.getDimSize(1)});
        k::embeddingBackward(tok.ids.data(), get(g.getGrad()).data.data(), r.data.data(), rows(tok),
                             t.getDimSize(1));
        return success();
      })
      .Case([&](PositionEmbeddingGradOp g) {
        const Tensor &d = get(g.getGrad());
        auto t = g.getType();
        Tensor &r = make(g.getResult(), {t.getDimSize(0), t.getDimSize(1)});
        k::positionEmbeddingBackward(d.data.data(), r.data.data(), d.shape[0], d.shape[1],
                                     d.shape[2]);
        return success();
      })
      .Case([&](GlobalNormOp g) {
        double sum = 0;
        for (Value v : g.getGrads()) {
          const Tensor &t = get(v);
          sum += k::sumOfSquares(t.data.data(), t.numElements());
        }
        make(g.getResult(), {}).data[0] = float(std::sqrt(sum));
        return success();
      })
      .Case([&](AdamWOp a) {
        ParamState &st = in.params[a.getName()];
        const Tensor &g = get(a.getGrad());
        in.lastGrads[a.getName()] = g.data;
        k::AdamWParams p;
        p.lr = float(a.getLr().convertToDouble());
        p.beta1 = float(a.getBeta1().convertToDouble());
        p.beta2 = float(a.getBeta2().convertToDouble());
        p.eps = float(a.getEps().convertToDouble());
        p.weightDecay = float(a.getWeightDecay().convertToDouble());
        double maxNorm = a.getMaxNorm().convertToDouble();
        float norm = get(a.getNorm()).data[0];
        if (maxNorm > 0)
          p.gradScale = float(std::min(1.0, maxNorm / (double(norm) + 1e-6)));
        p.step = in.step + 1;
        k::adamw(st.value.data(), g.data.data(), st.m.data(), st.v.data(), int64_t(st.value.size()),
                 p);
        return success();
      })
      .Default([&](Operation *o) { return fail(o, "the reference interpreter has no kernel"); });
}

} // namespace

FailureOr<std::vector<Tensor>> Interpreter::run(func::FuncOp func, ArrayRef<Tensor> args) {
  error.clear();
  Run r{*this};
  Block &entry = func.getBody().front();
  if (args.size() != entry.getNumArguments()) {
    error = "expected " + std::to_string(entry.getNumArguments()) + " arguments";
    return failure();
  }
  for (auto [arg, t] : llvm::zip(entry.getArguments(), args))
    r.slot(arg) = t;
  SmallVector<Tensor> results;
  if (failed(r.runBlock(entry, results)))
    return failure();
  bool updated = false;
  func.walk([&](AdamWOp) { updated = true; });
  if (updated)
    ++step;
  return std::vector<Tensor>(results.begin(), results.end());
}
