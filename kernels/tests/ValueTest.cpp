//===- ValueTest.cpp - forward kernels against hand-computed values -------===//

#include "llmopt-kernels/cpu.h"

#include "gtest/gtest.h"
#include <cmath>
#include <vector>

using namespace llmopt::kernels::cpu;

namespace {

TEST(Value, LayerNormNormalizes) {
  std::vector<float> x = {1, 2, 3, 4}, w(4, 1.0f), out(4), mean(1), rstd(1);
  layerNormForward(x.data(), w.data(), nullptr, out.data(), mean.data(), rstd.data(), 1, 4,
                   0.0f);
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
