//===- ValueTest.cpp - forward kernels against hand-computed values -------===//

#include "llmopt-kernels/cpu.h"
#include "llmopt-kernels/init.h"

#include "gtest/gtest.h"
#include <cmath>
#include <cstring>
#include <vector>

using namespace llmopt::kernels::cpu;

namespace {

TEST(Value, Fp8RoundsToTheFormatsGrid) {
  // E4M3: 3 mantissa bits, so [1, 2) is spaced by 1/8; ties go to even.
  EXPECT_EQ(roundToFp8(1.0625f, Fp8::E4M3), 1.0f);  // between 1 and 1.125
  EXPECT_EQ(roundToFp8(1.1875f, Fp8::E4M3), 1.25f); // between 1.125 and 1.25
  EXPECT_EQ(roundToFp8(1.2f, Fp8::E4M3), 1.25f);
  EXPECT_EQ(roundToFp8(-3.3f, Fp8::E4M3), -3.25f);
  EXPECT_EQ(roundToFp8(448.0f, Fp8::E4M3), 448.0f);
  EXPECT_EQ(roundToFp8(1e6f, Fp8::E4M3), 448.0f); // saturates
  EXPECT_EQ(roundToFp8(-1e6f, Fp8::E4M3), -448.0f);
  // Subnormals: multiples of 2^-9 below 2^-6.
  EXPECT_EQ(roundToFp8(0.0029f, Fp8::E4M3), std::ldexp(1.0f, -9) * 1);
  EXPECT_EQ(roundToFp8(0.0009f, Fp8::E4M3), 0.0f);
  // E5M2: 2 mantissa bits, [1, 2) spaced by 1/4; largest 57344.
  EXPECT_EQ(roundToFp8(1.1f, Fp8::E5M2), 1.0f);
  EXPECT_EQ(roundToFp8(1.375f, Fp8::E5M2), 1.5f); // tie between 1.25 and 1.5
  EXPECT_EQ(roundToFp8(6e4f, Fp8::E5M2), 57344.0f);
  EXPECT_TRUE(std::isnan(roundToFp8(NAN, Fp8::E5M2)));
}

TEST(Value, Fp8ScalingUsesTheWholeRange) {
  // amax 2 -> scale 224: 2 maps to 448 exactly and comes back as 2; small
  // values keep about 3 bits of relative precision.
  std::vector<float> x = {2.0f, -0.3f, 0.01f, 0.0f}, y(4);
  fakeQuantizeFp8(x.data(), y.data(), 4, Fp8::E4M3, absMax(x.data(), 4));
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_NEAR(y[1], -0.3f, 0.3f / 16);
  EXPECT_NE(y[1], -0.3f);
  EXPECT_NEAR(y[2], 0.01f, 0.01f / 16);
  EXPECT_EQ(y[3], 0.0f);
  // A tiny amax: the scale is clamped, not infinite, so zeros stay zeros.
  std::vector<float> tiny = {1e-39f, 0.0f}, t(2);
  fakeQuantizeFp8(tiny.data(), t.data(), 2, Fp8::E4M3, 1e-39f);
  EXPECT_FALSE(std::isnan(t[0]) || std::isnan(t[1]));
  EXPECT_EQ(t[1], 0.0f);
  // All zeros: scale 1, nothing changes.
  std::vector<float> z(3, 0.0f);
  fakeQuantizeFp8(z.data(), z.data(), 3, Fp8::E5M2, 0.0f);
  EXPECT_EQ(z[1], 0.0f);
}

TEST(Value, LayerNormNormalizes) {
  std::vector<float> x = {1, 2, 3, 4}, w(4, 1.0f), out(4), mean(1), rstd(1);
  layerNormForward(x.data(), w.data(), nullptr, out.data(), mean.data(), rstd.data(), 1, 4, 0.0f);
  // mean 2.5, variance 1.25.
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(out[0], -1.5f / std::sqrt(1.25f), 1e-6);
  EXPECT_NEAR(out[3], 1.5f / std::sqrt(1.25f), 1e-6);
}

TEST(Value, RMSNormScales) {
  std::vector<float> x = {3, 4}, w = {1, 2}, out(2), rstd(1);
  rmsNormForward(x.data(), w.data(), out.data(), rstd.data(), 1, 2, 0.0f);
  // rms = sqrt((9 + 16) / 2).
  float rms = std::sqrt(12.5f);
  EXPECT_NEAR(out[0], 3 / rms, 1e-6);
  EXPECT_NEAR(out[1], 2 * 4 / rms, 1e-6);
}

TEST(Value, CausalAttentionFirstQuerySeesOnlyItself) {
  AttentionShape a;
  a.seq = 2, a.headDim = 1, a.scale = 1, a.causal = true;
  std::vector<float> q = {1, 1}, k = {0, 5}, v = {7, 11}, out(2), lse(2);
  attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), a);
  EXPECT_FLOAT_EQ(out[0], 7.0f);
  // Second query: softmax(0, 5) over v = (7, 11).
  float p1 = std::exp(5.0f) / (1.0f + std::exp(5.0f));
  EXPECT_NEAR(out[1], 7 * (1 - p1) + 11 * p1, 1e-5);
}

TEST(Value, CrossEntropyOfUniformLogitsIsLogVocab) {
  std::vector<float> logits(2 * 4, 0.5f);
  std::vector<int32_t> labels = {1, 2};
  float loss;
  int64_t counted;
  ASSERT_TRUE(crossEntropyForward(logits.data(), labels.data(), 2, 4, -100, &loss, &counted));
  EXPECT_NEAR(loss, std::log(4.0f), 1e-6);
  labels[0] = 9;
  EXPECT_FALSE(crossEntropyForward(logits.data(), labels.data(), 2, 4, -100, &loss, &counted));
}

TEST(Value, EmbeddingRejectsOutOfRangeTokens) {
  std::vector<int32_t> tokens = {0, 3};
  std::vector<float> table(3 * 2), out(2 * 2);
  EXPECT_FALSE(embeddingForward(tokens.data(), table.data(), out.data(), 2, 3, 2));
}

TEST(Value, AdamWFirstStepMovesByLearningRate) {
  // Step 1: m_hat = g, v_hat = g^2, so the update is lr * sign(g) (eps aside),
  // after decay p (1 - lr wd).
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2, 0), v(2, 0);
  AdamWParams ap;
  ap.lr = 0.1f, ap.weightDecay = 0.01f, ap.eps = 0;
  adamw(p.data(), g.data(), m.data(), v.data(), 2, ap);
  EXPECT_NEAR(p[0], 1.0f * (1 - 0.001f) - 0.1f, 1e-6);
  EXPECT_NEAR(p[1], -2.0f * (1 - 0.001f) + 0.1f, 1e-6);
  EXPECT_DOUBLE_EQ(sumOfSquares(g.data(), 2), 0.25 + 9.0);
}

TEST(Value, RotaryPositionZeroIsIdentity) {
  std::vector<float> x = {1, 2, 3, 4}, out(4);
  rotary(x.data(), out.data(), 1, 1, 1, 4, 10000.0f, RopeScaling(), false);
  EXPECT_EQ(out, x);
}

} // namespace

// Large tensors are initialized by several threads, each from its offset of
// the generator's sequence: the same numbers as one pass, whatever the
// machine's thread count.
TEST(Value, ParallelInitializationIsTheSequentialOne) {
  const int64_t n = (int64_t(1) << 22) + 7; // odd: the last pair is half
  std::vector<float> par(static_cast<size_t>(n)), seq(static_cast<size_t>(n));
  llmopt::kernels::initNormal(par.data(), n, 0.02f, 42, "w");
  llmopt::kernels::initNormalRange(seq.data(), 0, n, 0.02f, 42 ^ llmopt::kernels::nameHash("w"));
  EXPECT_EQ(std::memcmp(par.data(), seq.data(), size_t(n) * 4), 0);
  // A range from a later pair continues the same sequence.
  std::vector<float> tail(static_cast<size_t>(n));
  llmopt::kernels::initNormalRange(tail.data(), 1000, n, 0.02f,
                                   42 ^ llmopt::kernels::nameHash("w"));
  EXPECT_EQ(std::memcmp(tail.data() + 1000, seq.data() + 1000, size_t(n - 1000) * 4), 0);
  double sum = 0, sq = 0;
  for (float v : seq) {
    sum += v;
    sq += double(v) * v;
  }
  EXPECT_NEAR(sum / double(n), 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / double(n)), 0.02, 1e-4);
}

namespace {
/// One fp8 SwiGLU expert (hidden 8, ffn 16) on `rows` (hidden values each)
/// at capacity `cap`; returns its output rows.
std::vector<float> fp8Expert(const std::vector<float> &rows, int64_t cap, int fp8) {
  const int64_t h = 8, f = 16;
  std::vector<float> x(size_t(cap * h), 0.0f), y(x.size());
  std::copy(rows.begin(), rows.end(), x.begin());
  std::vector<float> w1(size_t(f * h)), w3(w1.size()), w2(w1.size());
  for (size_t i = 0; i < w1.size(); ++i) {
    w1[i] = 0.1f * std::sin(float(i));
    w3[i] = 0.1f * std::cos(float(i));
    w2[i] = 0.1f * std::sin(0.5f * float(i) + 1);
  }
  const float *w[3] = {w1.data(), w3.data(), w2.data()};
  llmopt::kernels::cpu::MoEExpertShape s{1, cap, h, f, true};
  s.fp8 = fp8;
  EXPECT_TRUE(llmopt::kernels::cpu::moeExpertsForward(x.data(), w, y.data(), s));
  return y;
}
} // namespace

// fp8 experts scale each row (token) by its own amax: a token's output is
// the same whichever other tokens share its expert (expert parallelism's
// all-to-all mixes different ranks' tokens into one expert's rows), and it
// differs from the unrounded one.
TEST(Value, Fp8ExpertRowsRoundOnTheirOwn) {
  std::vector<float> a(16), b(24);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = std::sin(0.7f * float(i));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = 30.0f * std::cos(1.3f * float(i)); // much larger: a per-tensor scale would change
  std::vector<float> ab(a);
  ab.insert(ab.end(), b.begin(), b.end());
  std::vector<float> alone = fp8Expert(a, 6, 1), shared = fp8Expert(ab, 6, 1),
                     exact = fp8Expert(a, 6, 0);
  EXPECT_EQ(std::vector<float>(alone.begin(), alone.begin() + 16),
            std::vector<float>(shared.begin(), shared.begin() + 16));
  EXPECT_NE(std::vector<float>(alone.begin(), alone.begin() + 16),
            std::vector<float>(exact.begin(), exact.begin() + 16));
  for (size_t i = 0; i < 16; ++i)
    EXPECT_NEAR(alone[i], exact[i], 0.1 * std::abs(exact[i]) + 1e-3);
}
