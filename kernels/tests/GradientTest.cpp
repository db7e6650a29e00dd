//===- GradientTest.cpp - backward kernels against finite differences -----===//
//
// For each kernel family: a random input, a random output weighting w, the
// scalar L = sum(w * forward(x)); the backward kernel's gradient must match
// (L(x + h e_i) - L(x - h e_i)) / 2h for every input element, in fp32 with a
// step h = 1e-2 and a tolerance that holds for smooth functions of O(1)
// values.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include "RandomVec.h"
#include "gtest/gtest.h"
#include <cmath>
#include <functional>
#include <random>
#include <vector>

using namespace llmopt::kernels::cpu;

namespace {

double dot(const std::vector<float> &a, const std::vector<float> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += double(a[i]) * double(b[i]);
  return s;
}

/// Checks `analytic` (the gradient of L with respect to `x`) against central
/// differences of `loss`, which reads `x`.
void checkGradient(std::vector<float> &x, const std::vector<float> &analytic,
                   const std::function<double()> &loss, const char *what, double tol = 2e-2) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const float h = 1e-2f;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float saved = x[i];
    x[i] = saved + h;
    double up = loss();
    x[i] = saved - h;
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2 * h);
    double err = std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, err);
    EXPECT_LT(err, tol) << what << "[" << i << "]: analytic " << analytic[i] << ", numeric "
                        << numeric;
    if (err >= tol)
      return;
  }
}

TEST(Gradient, LayerNorm) {
  const int64_t n = 3, c = 8;
  auto x = randomVec(n * c, 1), w = randomVec(c, 2), b = randomVec(c, 3);
  auto ow = randomVec(n * c, 4);
  std::vector<float> out(n * c), mean(n), rstd(n);
  auto loss = [&] {
    layerNormForward(x.data(), w.data(), b.data(), out.data(), mean.data(), rstd.data(), n, c,
                     1e-5f);
    return dot(out, ow);
  };
  loss();
  std::vector<float> dx(n * c), dw(c, 0), db(c, 0);
  layerNormBackward(ow.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(),
                    db.data(), n, c);
  checkGradient(x, dx, loss, "layer_norm dx");
  checkGradient(w, dw, loss, "layer_norm dweight");
  checkGradient(b, db, loss, "layer_norm dbias");
}

TEST(Gradient, RMSNorm) {
  const int64_t n = 3, c = 8;
  auto x = randomVec(n * c, 5), w = randomVec(c, 6), ow = randomVec(n * c, 7);
  std::vector<float> out(n * c), rstd(n);
  auto loss = [&] {
    rmsNormForward(x.data(), w.data(), out.data(), rstd.data(), n, c, 1e-5f);
    return dot(out, ow);
  };
  loss();
  std::vector<float> dx(n * c), dw(c, 0);
  rmsNormBackward(ow.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), n, c);
  checkGradient(x, dx, loss, "rms_norm dx");
  checkGradient(w, dw, loss, "rms_norm dweight");
}

class LinearGradient : public ::testing::TestWithParam<bool> {};

TEST_P(LinearGradient, InputWeightBias) {
  bool transposed = GetParam();
  const int64_t n = 4, in = 5, out = 3;
  auto x = randomVec(n * in, 8), w = randomVec(in * out, 9), b = randomVec(out, 10);
  auto ow = randomVec(n * out, 11);
  std::vector<float> y(n * out);
  auto loss = [&] {
    linearForward(x.data(), w.data(), b.data(), y.data(), n, in, out, transposed);
    return dot(y, ow);
  };
  std::vector<float> dx(n * in), dw(in * out, 0), db(out, 0);
  linearBackward(ow.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), n, in, out,
                 transposed);
  checkGradient(x, dx, loss, "linear dx", 1e-3);
  checkGradient(w, dw, loss, "linear dweight", 1e-3);
  checkGradient(b, db, loss, "linear dbias", 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LinearGradient, ::testing::Values(false, true));

class GeluGradient : public ::testing::TestWithParam<bool> {};

TEST_P(GeluGradient, MatchesFiniteDifferences) {
  const int64_t n = 16;
  auto x = randomVec(n, 12, 2.0f), ow = randomVec(n, 13);
  std::vector<float> y(n), dx(n);
  auto loss = [&] {
    geluForward(x.data(), y.data(), n, GetParam());
    return dot(y, ow);
  };
  geluBackward(ow.data(), x.data(), dx.data(), n, GetParam());
  checkGradient(x, dx, loss, "gelu dx");
}

INSTANTIATE_TEST_SUITE_P(Approximations, GeluGradient, ::testing::Values(false, true));

TEST(Gradient, SwiGLU) {
  const int64_t n = 16;
  auto g = randomVec(n, 14, 2.0f), u = randomVec(n, 15), ow = randomVec(n, 16);
  std::vector<float> y(n), dg(n), du(n);
  auto loss = [&] {
    swigluForward(g.data(), u.data(), y.data(), n);
    return dot(y, ow);
  };
  swigluBackward(ow.data(), g.data(), u.data(), dg.data(), du.data(), n);
  checkGradient(g, dg, loss, "swiglu dgate");
  checkGradient(u, du, loss, "swiglu dup");
}

TEST(Gradient, RotaryIsOrthogonal) {
  // Backward is the inverse rotation; with scaling as Llama 3.1 uses it.
  const int64_t b = 2, s = 5, h = 2, d = 8;
  RopeScaling sc{8.0f, 1.0f, 4.0f, 4.0f};
  auto x = randomVec(b * s * h * d, 17), ow = randomVec(b * s * h * d, 18);
  std::vector<float> y(x.size()), dx(x.size());
  auto loss = [&] {
    rotary(x.data(), y.data(), b, s, h, d, 10000.0f, sc, false);
    return dot(y, ow);
  };
  rotary(ow.data(), dx.data(), b, s, h, d, 10000.0f, sc, true);
  checkGradient(x, dx, loss, "rotary dx", 1e-3);
}

/// The rotary frequencies of each Hugging Face rope type against values
/// computed independently from transformers' definitions (head_dim 16, base
/// 10000; linear factor 4; llama3 factor 8, low 1, high 4, original length
/// 64: the first pair is high-frequency, unchanged; the next two are in the
/// smoothed band; the rest are divided by the factor).
TEST(Rotary, FrequenciesOfEachRopeType) {
  const double none[] = {1.0,  0.31622776601683794,  0.1,   0.03162277660168379,
                         0.01, 0.003162277660168379, 0.001, 0.00031622776601683794};
  const double linear[] = {0.25,   0.07905694150420949,   0.025,   0.007905694150420948,
                           0.0025, 0.0007905694150420947, 0.00025, 7.905694150420948e-05};
  const double llama3[] = {1.0,
                           0.24438459943539834,
                           0.013042256043820465,
                           0.003952847075210474,
                           0.00125,
                           0.00039528470752104737,
                           0.000125,
                           3.952847075210474e-05};
  RopeScaling lin;
  lin.linearFactor = 4;
  RopeScaling l3{8.0f, 1.0f, 4.0f, 64.0f};
  std::vector<double> a = ropeInverseFrequencies(16, 10000.0f, RopeScaling{});
  std::vector<double> b = ropeInverseFrequencies(16, 10000.0f, lin);
  std::vector<double> c = ropeInverseFrequencies(16, 10000.0f, l3);
  ASSERT_EQ(a.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(a[i], none[i], 1e-6 * none[i]) << i;
    EXPECT_NEAR(b[i], linear[i], 1e-6 * linear[i]) << i;
    EXPECT_NEAR(c[i], llama3[i], 1e-6 * llama3[i]) << i;
  }
}

struct AttnCase {
  int64_t heads, kvHeads;
  bool causal;
  int64_t window;
};

class AttentionGradient : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionGradient, QKV) {
  AttnCase p = GetParam();
  AttentionShape a;
  a.batch = 2, a.seq = 5, a.heads = p.heads, a.kvHeads = p.kvHeads, a.headDim = 4;
  a.scale = 0.5f, a.causal = p.causal, a.window = p.window;
  size_t qn = a.batch * a.seq * a.heads * a.headDim;
  size_t kn = a.batch * a.seq * a.kvHeads * a.headDim;
  auto q = randomVec(qn, 19), k = randomVec(kn, 20), v = randomVec(kn, 21);
  auto ow = randomVec(qn, 22);
  std::vector<float> out(qn), lse(a.batch * a.heads * a.seq);
  auto loss = [&] {
    attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), a);
    return dot(out, ow);
  };
  loss();
  std::vector<float> dq(qn), dk(kn), dv(kn);
  attentionBackward(ow.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                    dk.data(), dv.data(), a);
  checkGradient(q, dq, loss, "attention dq");
  checkGradient(k, dk, loss, "attention dk");
  checkGradient(v, dv, loss, "attention dv");
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionGradient,
                         ::testing::Values(AttnCase{2, 2, true, 0},   // MHA causal
                                           AttnCase{4, 2, true, 0},   // GQA
                                           AttnCase{4, 1, true, 0},   // MQA
                                           AttnCase{2, 2, false, 0},  // full
                                           AttnCase{2, 1, true, 2})); // window

TEST(Gradient, CrossEntropy) {
  const int64_t n = 4, vocab = 7;
  auto logits = randomVec(n * vocab, 23);
  std::vector<int32_t> labels = {3, -100, 0, 6};
  float l = 0;
  int64_t counted = 0;
  auto loss = [&] {
    float value;
    int64_t c;
    crossEntropyForward(logits.data(), labels.data(), n, vocab, -100, &value, &c);
    return double(value);
  };
  ASSERT_TRUE(crossEntropyForward(logits.data(), labels.data(), n, vocab, -100, &l, &counted));
  EXPECT_EQ(counted, 3);
  std::vector<float> d(n * vocab);
  crossEntropyBackward(logits.data(), labels.data(), 1.0f, counted, d.data(), n, vocab, -100);
  checkGradient(logits, d, loss, "cross_entropy dlogits", 1e-3);
}

TEST(Gradient, EmbeddingsAccumulate) {
  // Repeated tokens add up; learned positions sum over the batch.
  const int64_t vocab = 5, hidden = 3;
  std::vector<int32_t> tokens = {1, 4, 1};
  auto table = randomVec(vocab * hidden, 24), ow = randomVec(3 * hidden, 25);
  std::vector<float> out(3 * hidden);
  auto loss = [&] {
    embeddingForward(tokens.data(), table.data(), out.data(), 3, vocab, hidden);
    return dot(out, ow);
  };
  std::vector<float> dtable(vocab * hidden, 0);
  embeddingBackward(tokens.data(), ow.data(), dtable.data(), 3, hidden);
  checkGradient(table, dtable, loss, "embedding dtable", 1e-3);

  const int64_t batch = 2, seq = 3;
  auto x = randomVec(batch * seq * hidden, 26), pos = randomVec(seq * hidden, 27);
  auto pw = randomVec(batch * seq * hidden, 28);
  std::vector<float> y(x.size());
  auto ploss = [&] {
    positionEmbeddingForward(x.data(), pos.data(), y.data(), batch, seq, hidden);
    return dot(y, pw);
  };
  std::vector<float> dpos(seq * hidden, 0);
  positionEmbeddingBackward(pw.data(), dpos.data(), batch, seq, hidden);
  checkGradient(pos, dpos, ploss, "position dtable", 1e-3);
}

struct MoECase {
  bool swiglu, normalize;
  int64_t capacity; ///< rows per expert; below n drops tokens
};

class MoEGradient : public ::testing::TestWithParam<MoECase> {};

TEST_P(MoEGradient, WholeLayer) {
  // router -> dispatch -> experts -> combine, differentiated end to end.
  MoECase p = GetParam();
  const int64_t n = 5, hidden = 4, experts = 3, topK = 2, ffn = 6;
  MoEExpertShape s{experts, p.capacity, hidden, ffn, p.swiglu};
  auto x = randomVec(n * hidden, 40), gate = randomVec(experts * hidden, 41);
  std::vector<std::vector<float>> w = {randomVec(experts * ffn * hidden, 42, 0.5f),
                                       randomVec(experts * ffn * hidden, 43, 0.5f)};
  if (p.swiglu)
    w.push_back(randomVec(experts * hidden * ffn, 44, 0.5f));
  auto ow = randomVec(n * hidden, 45);
  size_t rows = size_t(experts * p.capacity * hidden);
  std::vector<float> probs(n * topK), d(rows), e(rows), y(n * hidden);
  std::vector<int32_t> idx(n * topK);
  auto loss = [&] {
    const float *ws[3] = {w[0].data(), w[1].data(), p.swiglu ? w[2].data() : nullptr};
    moeRouterForward(x.data(), gate.data(), probs.data(), idx.data(), n, hidden, experts, topK,
                     p.normalize);
    EXPECT_TRUE(
        moeDispatchForward(x.data(), idx.data(), d.data(), n, hidden, topK, experts, p.capacity));
    moeExpertsForward(d.data(), ws, e.data(), s);
    EXPECT_TRUE(moeCombineForward(e.data(), probs.data(), idx.data(), y.data(), n, hidden, topK,
                                  experts, p.capacity));
    return dot(y, ow);
  };
  loss();
  std::vector<float> de(rows), dprobs(n * topK), dd(rows), dxe(n * hidden), dxr(n * hidden);
  std::vector<float> dgate(gate.size(), 0);
  std::vector<std::vector<float>> dw;
  for (auto &v : w)
    dw.emplace_back(v.size(), 0.0f);
  ASSERT_TRUE(moeCombineBackward(ow.data(), e.data(), probs.data(), idx.data(), de.data(),
                                 dprobs.data(), n, hidden, topK, experts, p.capacity));
  const float *ws[3] = {w[0].data(), w[1].data(), p.swiglu ? w[2].data() : nullptr};
  float *dws[3] = {dw[0].data(), dw[1].data(), p.swiglu ? dw[2].data() : nullptr};
  moeExpertsBackward(de.data(), d.data(), ws, dd.data(), dws, s);
  ASSERT_TRUE(
      moeDispatchBackward(dd.data(), idx.data(), dxe.data(), n, hidden, topK, experts, p.capacity));
  moeRouterBackward(dprobs.data(), x.data(), gate.data(), probs.data(), idx.data(), dxr.data(),
                    dgate.data(), n, hidden, experts, topK, p.normalize);
  for (size_t i = 0; i < dxe.size(); ++i)
    dxe[i] += dxr[i];
  checkGradient(x, dxe, loss, "moe dx");
  checkGradient(gate, dgate, loss, "moe dgate");
  for (size_t i = 0; i < w.size(); ++i)
    checkGradient(w[i], dw[i], loss, "moe dweight");
}

INSTANTIATE_TEST_SUITE_P(Variants, MoEGradient,
                         ::testing::Values(MoECase{true, true, 5},   // Mixtral, dropless
                                           MoECase{true, false, 5},  // unnormalized
                                           MoECase{false, true, 5},  // GeLU experts
                                           MoECase{true, true, 2})); // capacity drops

TEST(MoE, RouterAuxLossGradient) {
  // The router's backward with a load-balancing coefficient is the gradient
  // of  sum(weights * ow) + aux  (the top-k choice held fixed, as in the
  // loss's definition; the finite differences are small enough not to flip
  // it).
  const int64_t n = 6, hidden = 4, experts = 4, topK = 2;
  const float coef = 0.5f;
  auto x = randomVec(n * hidden, 50), gate = randomVec(experts * hidden, 51),
       ow = randomVec(n * topK, 52);
  std::vector<float> w(n * topK);
  std::vector<int32_t> idx(n * topK);
  moeRouterForward(x.data(), gate.data(), w.data(), idx.data(), n, hidden, experts, topK, true);
  const std::vector<int32_t> fixed = idx;
  auto loss = [&] {
    moeRouterForward(x.data(), gate.data(), w.data(), idx.data(), n, hidden, experts, topK, true);
    EXPECT_EQ(idx, fixed);
    return dot(w, ow) +
           moeAuxLoss(x.data(), gate.data(), fixed.data(), n, hidden, experts, topK, coef);
  };
  loss();
  std::vector<float> dx(n * hidden), dgate(gate.size(), 0.0f);
  moeRouterBackward(ow.data(), x.data(), gate.data(), w.data(), idx.data(), dx.data(), dgate.data(),
                    n, hidden, experts, topK, true, coef);
  checkGradient(x, dx, loss, "router+aux dx");
  checkGradient(gate, dgate, loss, "router+aux dgate");
  // Balanced routing of uniform probabilities gives aux = coef exactly.
  std::vector<float> zeros(n * hidden, 0.0f);
  std::vector<int32_t> even = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_NEAR(moeAuxLoss(zeros.data(), gate.data(), even.data(), n, hidden, experts, topK, coef),
              coef * 1.0f, 1e-6);
}

TEST(MoE, SlotsDropPastCapacity) {
  // Expert 1 takes tokens 0, 1 and 2; with capacity 2 the third copy drops.
  std::vector<int32_t> idx = {1, 0, 1, 2, 1, 0};
  std::vector<int64_t> slots(6);
  ASSERT_TRUE(moeSlots(idx.data(), 3, 2, 3, 2, slots.data()));
  EXPECT_EQ(slots, (std::vector<int64_t>{0, 0, 1, 0, -1, 1}));
  idx[3] = 3;
  EXPECT_FALSE(moeSlots(idx.data(), 3, 2, 3, 2, slots.data()));
}

} // namespace

namespace {
TEST(ContextParallel, AttentionOnChunksEqualsWhole) {
  // cp = 2 over a sequence of 8 in 4 chunks of 2: rank 0 holds positions
  // {0, 1, 6, 7}, rank 1 {2, 3, 4, 5} (causal load balancing). Each rank's
  // queries against the whole keys give the whole attention's rows; the
  // ranks' key / value gradients sum to the whole ones.
  AttentionShape whole;
  whole.batch = 1, whole.seq = 8, whole.heads = 2, whole.kvHeads = 1, whole.headDim = 4;
  whole.scale = 0.5f;
  int64_t qw = whole.heads * whole.headDim, kw = whole.kvHeads * whole.headDim;
  auto q = randomVec(8 * qw, 60), k = randomVec(8 * kw, 61), v = randomVec(8 * kw, 62);
  auto g = randomVec(8 * qw, 63);
  std::vector<float> out(8 * qw), lse(2 * 8), dq(8 * qw), dk(8 * kw), dv(8 * kw);
  attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), whole);
  attentionBackward(g.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(),
                    dk.data(), dv.data(), whole);
  std::vector<float> dkSum(dk.size(), 0), dvSum(dv.size(), 0);
  for (std::vector<int32_t> pos : {std::vector<int32_t>{0, 1, 6, 7}, {2, 3, 4, 5}}) {
    AttentionShape a = whole;
    a.seq = 4, a.kvSeq = 8, a.qPos = pos.data();
    auto rows = [&](const std::vector<float> &x) {
      std::vector<float> r;
      for (int32_t p : pos)
        r.insert(r.end(), x.begin() + p * qw, x.begin() + (p + 1) * qw);
      return r;
    };
    std::vector<float> lq = rows(q), lg = rows(g), lo(4 * qw), ll(2 * 4), ldq(4 * qw), ldk(8 * kw),
                       ldv(8 * kw);
    attentionForward(lq.data(), k.data(), v.data(), lo.data(), ll.data(), a);
    attentionBackward(lg.data(), lq.data(), k.data(), v.data(), lo.data(), ll.data(), ldq.data(),
                      ldk.data(), ldv.data(), a);
    std::vector<float> wo = rows(out), wdq = rows(dq);
    for (size_t i = 0; i < lo.size(); ++i) {
      EXPECT_NEAR(lo[i], wo[i], 1e-5) << "out " << i;
      EXPECT_NEAR(ldq[i], wdq[i], 1e-5) << "dq " << i;
    }
    for (size_t i = 0; i < dk.size(); ++i) {
      dkSum[i] += ldk[i];
      dvSum[i] += ldv[i];
    }
  }
  for (size_t i = 0; i < dk.size(); ++i) {
    EXPECT_NEAR(dkSum[i], dk[i], 1e-5) << "dk " << i;
    EXPECT_NEAR(dvSum[i], dv[i], 1e-5) << "dv " << i;
  }
}

TEST(ContextParallel, RotaryAndPositionsAtChunkPositions) {
  // Rotating rows at explicit positions equals the whole rotation's rows.
  const int64_t s = 6, h = 1, d = 4;
  auto x = randomVec(s * h * d, 64), table = randomVec(s * d, 65);
  std::vector<float> whole(x.size()), wp(x.size());
  rotary(x.data(), whole.data(), 1, s, h, d, 10000.0f, RopeScaling{}, false);
  positionEmbeddingForward(x.data(), table.data(), wp.data(), 1, s, d);
  std::vector<int32_t> pos = {4, 1};
  std::vector<float> lx, lr(2 * d), lp(2 * d);
  for (int32_t p : pos)
    lx.insert(lx.end(), x.begin() + p * d, x.begin() + (p + 1) * d);
  rotary(lx.data(), lr.data(), 1, 2, h, d, 10000.0f, RopeScaling{}, false, pos.data());
  positionEmbeddingForward(lx.data(), table.data(), lp.data(), 1, 2, d, pos.data());
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_FLOAT_EQ(lr[r * d + c], whole[pos[r] * d + c]);
      EXPECT_FLOAT_EQ(lp[r * d + c], wp[pos[r] * d + c]);
    }
}
} // namespace
