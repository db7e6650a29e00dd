//===- CudaTest.cpp - CUDA kernels against the CPU references -------------===//
//
// Each test runs a CUDA kernel and its CPU reference on the same random
// inputs and compares within a per-dtype tolerance (fp32: 1e-4 relative;
// bf16 storage: 2e-2). Without a CUDA device every test skips itself, so the
// suite builds and passes on CPU-only machines.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cuda.h"
#include "llmopt-kernels/cpu.h"

#include "RandomVec.h"
#include "gtest/gtest.h"
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

namespace cpu = llmopt::kernels::cpu;
namespace gpu = llmopt::kernels::cuda;

namespace {

#define NEED_GPU()                                                                                 \
  if (!gpu::deviceAvailable())                                                                     \
  GTEST_SKIP() << "no CUDA device"

/// fp8 GEMMs: sm_89 / sm_90.
int computeCapability() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor;
}
#define NEED_FP8_GPU()                                                                             \
  NEED_GPU();                                                                                      \
  if (computeCapability() < 89)                                                                    \
  GTEST_SKIP() << "fp8 GEMMs need sm_89 / sm_90"

/// A device copy of a host vector, freed at scope exit.
template <typename T> struct Dev {
  T *p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    cudaMemset(p, 0, n * sizeof(T));
  }
  explicit Dev(const std::vector<T> &h) : Dev(h.size()) {
    cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

void expectClose(const std::vector<float> &got, const std::vector<float> &want, double tol,
                 const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(double(got[i]) - want[i]), tol * std::max(1.0, std::abs(double(want[i]))))
        << what << "[" << i << "]";
}

/// bf16 copies of `x`; roundToBf16 also rounds `x` to them (a CPU reference
/// then sees the device's inputs); toFloat widens them back.
std::vector<gpu::bf16> toBf16(const std::vector<float> &x) {
  std::vector<gpu::bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = __float2bfloat16(x[i]);
  return y;
}
std::vector<gpu::bf16> roundToBf16(std::vector<float> &x) {
  std::vector<gpu::bf16> y = toBf16(x);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = __bfloat162float(y[i]);
  return y;
}
std::vector<float> toFloat(const std::vector<gpu::bf16> &x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = __bfloat162float(x[i]);
  return y;
}

TEST(Cuda, RMSNorm) {
  NEED_GPU();
  // With a scratch: rows of 16-byte words take the warp-per-row kernel
  // (150 rows: three blocks of partial sums), others the row terms.
  for (auto [n, c] : {std::pair<int64_t, int64_t>{7, 300}, {150, 64}, {3, 301}}) {
    SCOPED_TRACE("rows " + std::to_string(n) + ", columns " + std::to_string(c));
    auto x = randomVec(n * c, 1), w = randomVec(c, 2), g = randomVec(n * c, 3);
    std::vector<float> out(n * c), rstd(n), dx(n * c), dw(c, 0);
    cpu::rmsNormForward(x.data(), w.data(), out.data(), rstd.data(), n, c, 1e-5f);
    cpu::rmsNormBackward(g.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), n, c);
    Dev<float> dX(x), dW(w), dG(g), dOut(n * c), dRstd(n), dDx(n * c), dDw(c);
    ASSERT_EQ(gpu::rmsNormForward(dX.p, dW.p, dOut.p, dRstd.p, n, c, 1e-5f, nullptr), cudaSuccess);
    ASSERT_EQ(gpu::rmsNormBackward(dG.p, dX.p, dW.p, dRstd.p, dDx.p, dDw.p, n, c, nullptr),
              cudaSuccess);
    expectClose(dOut.host(), out, 1e-4, "rms_norm out");
    expectClose(dDx.host(), dx, 1e-4, "rms_norm dx");
    expectClose(dDw.host(), dw, 1e-4, "rms_norm dweight");
    // With a scratch: the weight gradient summed by column, added to what
    // dweight holds (the previous result: twice the gradient).
    Dev<float> scratch(gpu::normBackwardScratchBytes(n, c) / 4);
    ASSERT_EQ(
        gpu::rmsNormBackward(dG.p, dX.p, dW.p, dRstd.p, dDx.p, dDw.p, n, c, nullptr, scratch.p),
        cudaSuccess);
    std::vector<float> twice(dw);
    for (float &v : twice)
      v *= 2;
    expectClose(dDw.host(), twice, 1e-4, "rms_norm dweight (column sums)");
    expectClose(dDx.host(), dx, 1e-4, "rms_norm dx (column sums)");
  }
}

TEST(Cuda, LayerNorm) {
  NEED_GPU();
  for (auto [n, c] : {std::pair<int64_t, int64_t>{5, 513}, {200, 512}}) {
    SCOPED_TRACE("rows " + std::to_string(n) + ", columns " + std::to_string(c));
    auto x = randomVec(n * c, 4), w = randomVec(c, 5), b = randomVec(c, 6), g = randomVec(n * c, 7);
    std::vector<float> out(n * c), mean(n), rstd(n), dx(n * c), dw(c, 0), db(c, 0);
    cpu::layerNormForward(x.data(), w.data(), b.data(), out.data(), mean.data(), rstd.data(), n, c,
                          1e-5f);
    cpu::layerNormBackward(g.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(),
                           dw.data(), db.data(), n, c);
    Dev<float> dX(x), dW(w), dB(b), dG(g), dOut(n * c), dMean(n), dRstd(n), dDx(n * c), dDw(c),
        dDb(c);
    ASSERT_EQ(
        gpu::layerNormForward(dX.p, dW.p, dB.p, dOut.p, dMean.p, dRstd.p, n, c, 1e-5f, nullptr),
        cudaSuccess);
    ASSERT_EQ(gpu::layerNormBackward(dG.p, dX.p, dW.p, dMean.p, dRstd.p, dDx.p, dDw.p, dDb.p, n, c,
                                     nullptr),
              cudaSuccess);
    expectClose(dOut.host(), out, 1e-4, "layer_norm out");
    expectClose(dDx.host(), dx, 1e-4, "layer_norm dx");
    expectClose(dDw.host(), dw, 1e-4, "layer_norm dweight");
    expectClose(dDb.host(), db, 1e-4, "layer_norm dbias");
    // With a scratch (column sums, added): twice the gradients.
    Dev<float> scratch(gpu::normBackwardScratchBytes(n, c) / 4);
    ASSERT_EQ(gpu::layerNormBackward(dG.p, dX.p, dW.p, dMean.p, dRstd.p, dDx.p, dDw.p, dDb.p, n, c,
                                     nullptr, scratch.p),
              cudaSuccess);
    std::vector<float> dw2(dw), db2(db);
    for (size_t i = 0; i < dw2.size(); ++i)
      dw2[i] *= 2, db2[i] *= 2;
    expectClose(dDw.host(), dw2, 1e-4, "layer_norm dweight (column sums)");
    expectClose(dDb.host(), db2, 1e-4, "layer_norm dbias (column sums)");
    expectClose(dDx.host(), dx, 1e-4, "layer_norm dx (column sums)");
  }
}

TEST(Cuda, Activations) {
  NEED_GPU();
  const int64_t n = 1000;
  auto x = randomVec(n, 8, 2.0f), u = randomVec(n, 9), g = randomVec(n, 10);
  for (bool t : {false, true}) {
    std::vector<float> y(n), dx(n);
    cpu::geluForward(x.data(), y.data(), n, t);
    cpu::geluBackward(g.data(), x.data(), dx.data(), n, t);
    Dev<float> dX(x), dG(g), dY(n), dDx(n);
    ASSERT_EQ(gpu::geluForward(dX.p, dY.p, n, t, nullptr), cudaSuccess);
    ASSERT_EQ(gpu::geluBackward(dG.p, dX.p, dDx.p, n, t, nullptr), cudaSuccess);
    expectClose(dY.host(), y, 1e-4, "gelu");
    expectClose(dDx.host(), dx, 1e-4, "gelu dx");
  }
  std::vector<float> y(n), dg(n), du(n);
  cpu::swigluForward(x.data(), u.data(), y.data(), n);
  cpu::swigluBackward(g.data(), x.data(), u.data(), dg.data(), du.data(), n);
  Dev<float> dX(x), dU(u), dG(g), dY(n), dDg(n), dDu(n);
  ASSERT_EQ(gpu::swigluForward(dX.p, dU.p, dY.p, n, nullptr), cudaSuccess);
  ASSERT_EQ(gpu::swigluBackward(dG.p, dX.p, dU.p, dDg.p, dDu.p, n, nullptr), cudaSuccess);
  expectClose(dY.host(), y, 1e-4, "swiglu");
  expectClose(dDg.host(), dg, 1e-4, "swiglu dgate");
  expectClose(dDu.host(), du, 1e-4, "swiglu dup");
}

TEST(Cuda, RMSNormBF16) {
  NEED_GPU();
  const int64_t n = 4, c = 256;
  auto x = randomVec(n * c, 11), w = randomVec(c, 12);
  std::vector<gpu::bf16> xb = roundToBf16(x), wb = roundToBf16(w);
  std::vector<float> out(n * c), rstd(n);
  cpu::rmsNormForward(x.data(), w.data(), out.data(), rstd.data(), n, c, 1e-5f);
  Dev<gpu::bf16> dX(xb), dW(wb), dOut(n * c);
  Dev<float> dRstd(n);
  ASSERT_EQ(gpu::rmsNormForward(dX.p, dW.p, dOut.p, dRstd.p, n, c, 1e-5f, nullptr), cudaSuccess);
  expectClose(toFloat(dOut.host()), out, 2e-2, "rms_norm bf16");
  // The backward on 16-byte words of 8 bf16 (c = 256) with a scratch.
  auto g = randomVec(n * c, 13);
  std::vector<gpu::bf16> gb = roundToBf16(g);
  std::vector<float> dx(n * c), dw(c, 0);
  cpu::rmsNormBackward(g.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), n, c);
  Dev<gpu::bf16> dG(gb), dDx(n * c);
  Dev<float> dDw(c), scratch(gpu::normBackwardScratchBytes(n, c) / 4);
  ASSERT_EQ(gpu::rmsNormBackward(dG.p, dX.p, dW.p, dRstd.p, dDx.p, dDw.p, n, c, nullptr, scratch.p),
            cudaSuccess);
  expectClose(toFloat(dDx.host()), dx, 3e-2, "rms_norm bf16 dx");
  expectClose(dDw.host(), dw, 1e-3, "rms_norm bf16 dweight");
}

TEST(Cuda, EmbeddingAndRotary) {
  NEED_GPU();
  const int64_t vocab = 11, h = 8, n = 6, heads = 2, hd = 4, seq = 3;
  std::vector<int32_t> tok = {1, 4, 1, 10, 0, 4};
  auto table = randomVec(vocab * h, 13), g = randomVec(n * h, 14);
  std::vector<float> out(n * h), dt(vocab * h, 0);
  ASSERT_TRUE(cpu::embeddingForward(tok.data(), table.data(), out.data(), n, vocab, h));
  cpu::embeddingBackward(tok.data(), g.data(), dt.data(), n, h);
  Dev<int32_t> dTok(tok);
  Dev<float> dTable(table), dG(g), dOut(n * h), dDt(vocab * h);
  ASSERT_EQ(gpu::embeddingForward(dTok.p, dTable.p, dOut.p, n, h, nullptr), cudaSuccess);
  ASSERT_EQ(gpu::embeddingBackward(dTok.p, dG.p, dDt.p, n, h, nullptr), cudaSuccess);
  expectClose(dOut.host(), out, 0, "embedding");
  expectClose(dDt.host(), dt, 1e-5, "embedding dtable");
  // In token order (deterministic): positions {4}, {0, 2}, {1, 5}, {3};
  // in chunks of at most 64 and of 1 positions; added to what the table's
  // gradient holds.
  std::vector<int32_t> order = gpu::embeddingOrder(tok.data(), n);
  EXPECT_EQ(order, (std::vector<int32_t>{4, 0, 2, 1, 5, 3, 4, 0, 1, 2, 3, 4, 4, 0, 1, 3, 5, 6}));
  std::vector<int32_t> single = gpu::embeddingOrder(tok.data(), n, 1);
  EXPECT_EQ(single,
            (std::vector<int32_t>{4, 0, 2, 1, 5, 3, 4, 0, 1, 3, 5, 6, 6, 0, 1, 2, 3, 4, 5, 6}));
  Dev<float> scratch(n * h);
  float times = 1;
  for (const std::vector<int32_t> *o : {&order, &single}) {
    Dev<int32_t> dOrder(*o);
    ASSERT_EQ(
        gpu::embeddingBackwardOrdered(dTok.p, dOrder.p, dG.p, dDt.p, n, h, scratch.p, nullptr),
        cudaSuccess);
    times += 1;
    std::vector<float> want(dt);
    for (float &v : want)
      v *= times;
    expectClose(dDt.host(), want, 1e-5, "embedding dtable (in token order)");
  }

  // A vocabulary-parallel part (tensor parallelism): rows [4, 8) of the
  // table; the other tokens' rows are zero forward and left out backward.
  {
    const int64_t offset = 4, part = 4;
    std::vector<float> partTable(table.begin() + offset * h, table.begin() + (offset + part) * h);
    std::vector<float> pOut(n * h), pDt(part * h, 0.0f);
    cpu::embeddingForwardPart(tok.data(), partTable.data(), pOut.data(), n, offset, part, h);
    cpu::embeddingBackwardPart(tok.data(), g.data(), pDt.data(), n, offset, part, h);
    Dev<float> dPart(partTable), dPOut(n * h), dPDt(part * h);
    Dev<int32_t> dOrder(order);
    ASSERT_EQ(gpu::embeddingForwardPart(dTok.p, dPart.p, dPOut.p, n, h, offset, part, nullptr),
              cudaSuccess);
    ASSERT_EQ(gpu::embeddingBackwardOrderedPart(dTok.p, dOrder.p, dG.p, dPDt.p, n, h, scratch.p,
                                                offset, part, nullptr),
              cudaSuccess);
    expectClose(dPOut.host(), pOut, 0, "embedding part");
    expectClose(dPDt.host(), pDt, 1e-5, "embedding part dtable (in token order)");
  }

  // Rotary with theta 10000 and no scaling: inverse frequencies theta^(-2i/d).
  auto x = randomVec(2 * seq * heads * hd, 15);
  std::vector<double> inv = cpu::ropeInverseFrequencies(hd, 10000.0f, cpu::RopeScaling{});
  std::vector<float> y(x.size());
  cpu::rotary(x.data(), y.data(), 2, seq, heads, hd, 10000.0f, cpu::RopeScaling{}, false);
  Dev<float> dx(x), dy(x.size());
  Dev<float> dcs(gpu::rotaryTable(inv, seq));
  ASSERT_EQ(gpu::rotary(dx.p, dy.p, 2, seq, heads, hd, dcs.p, false, nullptr), cudaSuccess);
  expectClose(dy.host(), y, 1e-5, "rotary");
}

TEST(Cuda, CrossEntropy) {
  NEED_GPU();
  // vocab 1001: rows starting at every alignment (the 16-byte words'
  // head and tail); with and without the forward's row log-sum-exps.
  for (int64_t vocab : {1000, 1001})
    for (bool keep : {false, true}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + (keep ? ", kept lse" : ""));
      const int64_t n = 5;
      auto logits = randomVec(n * vocab, 16, 3.0f);
      std::vector<int32_t> labels = {3, -100, 999, 0, 512};
      float loss = 0;
      int64_t counted = 0;
      ASSERT_TRUE(
          cpu::crossEntropyForward(logits.data(), labels.data(), n, vocab, -100, &loss, &counted));
      std::vector<float> d(n * vocab);
      cpu::crossEntropyBackward(logits.data(), labels.data(), 1.0f, counted, d.data(), n, vocab,
                                -100);
      Dev<float> dL(logits), dRow(n), dLoss(1), dOne(std::vector<float>{1.0f}), dScratch(1),
          dD(n * vocab), dLse(n);
      Dev<int32_t> dLab(labels);
      ASSERT_EQ(gpu::crossEntropyForward(dL.p, dLab.p, dRow.p, dLoss.p, n, vocab, -100, nullptr,
                                         keep ? dLse.p : nullptr),
                cudaSuccess);
      ASSERT_EQ(gpu::crossEntropyBackward(dL.p, dLab.p, dOne.p, dScratch.p, dD.p, n, vocab, -100,
                                          nullptr, keep ? dLse.p : nullptr),
                cudaSuccess);
      expectClose(dLoss.host(), {loss}, 1e-4, "cross_entropy");
      expectClose(dD.host(), d, 1e-4, "cross_entropy dlogits");
      // Rows 5 elements apart beyond the vocabulary (logits and gradient in
      // padded rows): the same loss and gradient, the gradient's padding 0.
      const int64_t pitch = vocab + 5;
      std::vector<float> wide(n * pitch, 7.0f), dwant(n * pitch, 0.0f);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < vocab; ++j) {
          wide[r * pitch + j] = logits[r * vocab + j];
          dwant[r * pitch + j] = d[r * vocab + j];
        }
      Dev<float> dWide(wide), dWideD(std::vector<float>(n * pitch, 3.0f));
      ASSERT_EQ(gpu::crossEntropyForward(dWide.p, dLab.p, dRow.p, dLoss.p, n, vocab, -100, nullptr,
                                         keep ? dLse.p : nullptr, pitch),
                cudaSuccess);
      ASSERT_EQ(gpu::crossEntropyBackward(dWide.p, dLab.p, dOne.p, dScratch.p, dWideD.p, n, vocab,
                                          -100, nullptr, keep ? dLse.p : nullptr, pitch, pitch),
                cudaSuccess);
      expectClose(dLoss.host(), {loss}, 1e-4, "cross_entropy (padded rows)");
      expectClose(dWideD.host(), dwant, 1e-4, "cross_entropy dlogits (padded rows)");
    }
}

/// Parameters, gradients and moments (v non-negative) for the AdamW tests.
std::array<std::vector<float>, 4> adamwInputs(int64_t n) {
  std::vector<float> v = randomVec(size_t(n), 20, 0.1f);
  for (float &x : v)
    x = std::abs(x);
  return {randomVec(size_t(n), 17), randomVec(size_t(n), 18), randomVec(size_t(n), 19, 0.1f), v};
}

TEST(Cuda, AdamW) {
  NEED_GPU();
  const int64_t n = 777;
  auto [p, g, m, v] = adamwInputs(n);
  cpu::AdamWParams cp;
  cp.lr = 1e-3f, cp.gradScale = 0.5f, cp.step = 3;
  gpu::AdamWArgs ga{cp.lr, cp.beta1, cp.beta2, cp.eps, cp.weightDecay, cp.gradScale, cp.step};
  Dev<float> dP(p), dG(g), dM(m), dV(v);
  Dev<gpu::bf16> dW(static_cast<size_t>(n));
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), n, cp);
  ASSERT_EQ(gpu::adamw(dP.p, dG.p, dM.p, dV.p, dW.p, n, ga, nullptr), cudaSuccess);
  expectClose(dP.host(), p, 1e-5, "adamw param");
  expectClose(dM.host(), m, 1e-5, "adamw m");
  expectClose(dV.host(), v, 1e-5, "adamw v");
}

// The CUDA-graph variant reads the norm and the step from device memory:
// norm 4 with max_norm 2 clips by 0.5 (as above), step 3.
TEST(Cuda, AdamWFromDeviceNormAndStep) {
  NEED_GPU();
  const int64_t n = 777;
  auto [p, g, m, v] = adamwInputs(n);
  cpu::AdamWParams cp;
  cp.lr = 1e-3f, cp.step = 3;
  cp.gradScale = float(std::min(1.0, 2.0 / (4.0 + 1e-6)));
  gpu::AdamWArgs ga{cp.lr, cp.beta1, cp.beta2, cp.eps, cp.weightDecay, 1.0f, 0};
  Dev<float> dP(p), dG(g), dM(m), dV(v), dNorm(std::vector<float>{4.0f});
  Dev<int64_t> dStep(std::vector<int64_t>{3});
  Dev<gpu::bf16> dW(static_cast<size_t>(n));
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), n, cp);
  ASSERT_EQ(gpu::adamwDevice(dP.p, dG.p, dM.p, dV.p, dW.p, n, ga, dNorm.p, 2.0, dStep.p, nullptr),
            cudaSuccess);
  expectClose(dP.host(), p, 1e-5, "adamw param");
  expectClose(dM.host(), m, 1e-5, "adamw m");
  expectClose(dV.host(), v, 1e-5, "adamw v");
  // The norm on the device: sqrt of an fp64 sum.
  Dev<double> dSum(std::vector<double>{16.0});
  Dev<float> dOut(1);
  ASSERT_EQ(gpu::sqrtOfSum(dSum.p, dOut.p, nullptr), cudaSuccess);
  EXPECT_EQ(dOut.host()[0], 4.0f);
  // ZeRO's partial sum, rounded to fp32 as the host rounds it.
  const double partial = 1.0 + 3.0 * std::ldexp(1.0, -30);
  Dev<double> dPartial(std::vector<double>{partial});
  ASSERT_EQ(gpu::floatOfSum(dPartial.p, dOut.p, nullptr), cudaSuccess);
  EXPECT_EQ(dOut.host()[0], float(partial));
}

} // namespace

#include "llmopt-kernels/gemm.h"
/// The fp8 linear's backward as the CUDA backend runs it (Transformer
/// Engine's hybrid recipe): dy in E5M2, x and W in E4M3, per-tensor
/// scaling; dx = dy W and dW = dy^T x as TN products of transposed copies
/// (quantizeFp8Transposed: the transpose of quantizeFp8's bytes), against
/// the CPU reference on the same rounded operands.
TEST(Cuda, LinearFp8Backward) {
  NEED_FP8_GPU();
  std::string error;
  auto gemm = gpu::Gemm::create(error);
  ASSERT_TRUE(gemm) << error;
  const int64_t n = 32, in = 64, out = 48;
  auto x = randomVec(n * in, 43), w = randomVec(in * out, 44, 0.1f), g = randomVec(n * out, 45);
  std::vector<float> xq(x.size()), wq(w.size()), gq(g.size()), dx(n * in), dw(in * out, 0.0f);
  cpu::fakeQuantizeFp8(x.data(), xq.data(), n * in, cpu::Fp8::E4M3, cpu::absMax(x.data(), n * in));
  cpu::fakeQuantizeFp8(w.data(), wq.data(), in * out, cpu::Fp8::E4M3,
                       cpu::absMax(w.data(), in * out));
  cpu::fakeQuantizeFp8(g.data(), gq.data(), n * out, cpu::Fp8::E5M2,
                       cpu::absMax(g.data(), n * out));
  cpu::linearBackward(gq.data(), xq.data(), wq.data(), dx.data(), dw.data(), nullptr, n, in, out,
                      false);
  Dev<float> dX(x), dW(w), dG(g), dDx(n * in), dDw(in * out), f(24);
  Dev<uint8_t> gQ(n * out), gQT(n * out), xQT(n * in), wQT(in * out);
  ASSERT_EQ(gpu::quantizeFp8(dG.p, n * out, true, gQ.p, f.p, f.p + 4, nullptr, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::quantizeFp8Transposed(dG.p, n, out, true, gQT.p, f.p, f.p + 4, f.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(
      gpu::quantizeFp8Transposed(dX.p, n, in, false, xQT.p, f.p + 8, f.p + 12, nullptr, nullptr),
      cudaSuccess);
  ASSERT_EQ(
      gpu::quantizeFp8Transposed(dW.p, out, in, false, wQT.p, f.p + 16, f.p + 20, nullptr, nullptr),
      cudaSuccess);
  std::vector<uint8_t> rows = gQ.host(), cols = gQT.host();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < out; ++c)
      ASSERT_EQ(cols[size_t(c * n + r)], rows[size_t(r * out + c)]) << r << "," << c;
  ASSERT_TRUE(gemm->fp8Product(gQ.p, true, wQT.p, false, f.p + 4, f.p + 20, dDx.p, n, out, in,
                               CUDA_R_32F, 0.0f, nullptr, error))
      << error;
  ASSERT_TRUE(gemm->fp8Product(gQT.p, true, xQT.p, false, f.p + 4, f.p + 12, dDw.p, out, n, in,
                               CUDA_R_32F, 0.0f, nullptr, error))
      << error;
  expectClose(dDx.host(), dx, 1e-3, "fp8 linear dx");
  expectClose(dDw.host(), dw, 1e-3, "fp8 linear dweight");
  EXPECT_FALSE(gemm->fp8Product(gQ.p, true, gQ.p, true, f.p + 4, f.p + 4, dDx.p, n, out, n,
                                CUDA_R_32F, 0.0f, nullptr, error));
}

#ifdef LLMOPT_HAVE_CUDNN
#include "llmopt-kernels/cudnn_attention.h"
#endif

namespace {
/// Multi-tensor AdamW (one launch, a block per chunk) against one launch
/// per tensor: bit-identical, with per-tensor weight decay, a tensor of
/// several chunks and one without a bf16 working copy; with the norm and
/// step on the host and on the device.
TEST(Cuda, AdamWMultiTensorIsPerTensor) {
  NEED_GPU();
  const std::vector<int64_t> counts = {gpu::kAdamWChunk + 4464, 4099, 37};
  const float decay[] = {0.1f, 0.0f, 0.1f};
  for (bool device : {false, true}) {
    std::vector<std::unique_ptr<Dev<float>>> one, multi; // p, g, m, v per tensor
    std::vector<std::unique_ptr<Dev<gpu::bf16>>> w1, w2;
    std::vector<gpu::AdamWTensor> tensors;
    Dev<float> dNorm(std::vector<float>{4.0f});
    Dev<int64_t> dStep(std::vector<int64_t>{3});
    for (size_t t = 0; t < counts.size(); ++t) {
      auto [p, g, m, v] = adamwInputs(counts[t]);
      for (auto *list : {&one, &multi})
        for (const std::vector<float> *x : {&p, &g, &m, &v})
          list->push_back(std::make_unique<Dev<float>>(*x));
      w1.push_back(std::make_unique<Dev<gpu::bf16>>(size_t(counts[t])));
      w2.push_back(std::make_unique<Dev<gpu::bf16>>(size_t(counts[t])));
      bool working = t != 1;
      gpu::AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, decay[t], 0.5f, 3};
      if (device)
        ASSERT_EQ(gpu::adamwDevice(one[4 * t]->p, one[4 * t + 1]->p, one[4 * t + 2]->p,
                                   one[4 * t + 3]->p, working ? w1[t]->p : nullptr, counts[t], a,
                                   dNorm.p, 2.0, dStep.p, nullptr),
                  cudaSuccess);
      else
        ASSERT_EQ(gpu::adamw(one[4 * t]->p, one[4 * t + 1]->p, one[4 * t + 2]->p, one[4 * t + 3]->p,
                             working ? w1[t]->p : nullptr, counts[t], a, nullptr),
                  cudaSuccess);
      tensors.push_back({multi[4 * t]->p, multi[4 * t + 1]->p, multi[4 * t + 2]->p,
                         multi[4 * t + 3]->p, working ? w2[t]->p : nullptr, counts[t], decay[t]});
    }
    std::vector<gpu::AdamWChunk> chunks = gpu::adamwChunks(counts);
    Dev<char> dTensors(tensors.size() * sizeof(gpu::AdamWTensor)),
        dChunks(chunks.size() * sizeof(gpu::AdamWChunk));
    cudaMemcpy(dTensors.p, tensors.data(), dTensors.n, cudaMemcpyHostToDevice);
    cudaMemcpy(dChunks.p, chunks.data(), dChunks.n, cudaMemcpyHostToDevice);
    gpu::AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.5f, 3};
    ASSERT_EQ(gpu::adamwMulti(reinterpret_cast<const gpu::AdamWTensor *>(dTensors.p),
                              reinterpret_cast<const gpu::AdamWChunk *>(dChunks.p),
                              int64_t(chunks.size()), a, device ? dNorm.p : nullptr, 2.0,
                              device ? dStep.p : nullptr, nullptr),
              cudaSuccess);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(multi[i]->host(), one[i]->host()) << "tensor " << i / 4 << " state " << i % 4;
    for (size_t t = 0; t < counts.size(); ++t)
      EXPECT_EQ(toFloat(w2[t]->host()), toFloat(w1[t]->host())) << "working copy " << t;
  }
}

TEST(Cuda, LinearThroughCuBLASLt) {
  NEED_GPU();
  std::string error;
  auto gemm = gpu::Gemm::create(error);
  ASSERT_TRUE(gemm) << error;
  // out = 37: output-gradient rows of 148 bytes, padded to 16 (an odd vocabulary).
  for (auto [transposed, out] : {std::pair{false, int64_t(24)}, std::pair{true, int64_t(24)},
                                 std::pair{false, int64_t(37)}, std::pair{true, int64_t(37)}}) {
    const int64_t n = 6, in = 40;
    auto x = randomVec(n * in, 30), w = randomVec(in * out, 31), b = randomVec(out, 32),
         g = randomVec(n * out, 33);
    std::vector<float> y(n * out), dx(n * in), dw(in * out, 0), db(out, 0);
    cpu::linearForward(x.data(), w.data(), b.data(), y.data(), n, in, out, transposed);
    cpu::linearBackward(g.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), n, in, out,
                        transposed);
    Dev<float> dX(x), dW(w), dB(b), dG(g), dY(n * out), dDx(n * in), dDw(in * out);
    gpu::LinearShape s{n, in, out, transposed, CUDA_R_32F};
    ASSERT_TRUE(gemm->linearForward(dX.p, dW.p, dB.p, dY.p, s, nullptr, error)) << error;
    ASSERT_TRUE(gemm->linearBackward(dG.p, dX.p, dW.p, dDx.p, dDw.p, s, nullptr, error)) << error;
    expectClose(dY.host(), y, 1e-4, "linear y");
    expectClose(dDx.host(), dx, 1e-4, "linear dx");
    expectClose(dDw.host(), dw, 1e-4, "linear dweight");
    int64_t wide = gpu::linearPaddedOut(out, CUDA_R_32F);
    if (wide == out)
      continue;
    // y written in padded rows, dy read from them (padding zero): the same
    // results; dW accumulates (twice the gradient).
    s.ld = wide;
    Dev<float> dYw(n * wide);
    std::vector<float> gw(n * wide, 0.0f), yw(n * wide, 0.0f), dw2(dw);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < out; ++j) {
        gw[r * wide + j] = g[r * out + j];
        yw[r * wide + j] = y[r * out + j];
      }
    for (float &v : dw2)
      v *= 2;
    Dev<float> dGw(gw);
    ASSERT_TRUE(gemm->linearForward(dX.p, dW.p, dB.p, dYw.p, s, nullptr, error)) << error;
    ASSERT_TRUE(gemm->linearBackward(dGw.p, dX.p, dW.p, dDx.p, dDw.p, s, nullptr, error)) << error;
    std::vector<float> gotY = dYw.host();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = out; j < wide; ++j)
        gotY[r * wide + j] = 0; // the padding's values are unspecified
    expectClose(gotY, yw, 1e-4, "linear y (padded rows)");
    expectClose(dDx.host(), dx, 1e-4, "linear dx (padded rows)");
    expectClose(dDw.host(), dw2, 1e-4, "linear dweight (padded rows)");
    s.ld = out + 1;
    EXPECT_FALSE(gemm->linearForward(dX.p, dW.p, dB.p, dYw.p, s, nullptr, error));
  }
  EXPECT_GE(gemm->cachedAlgorithms(), 3u);

  // The GeLU epilogue (tanh): pre-activation and activation in one GEMM.
  const int64_t n = 6, in = 40, out = 24;
  auto x = randomVec(n * in, 34), w = randomVec(in * out, 35), b = randomVec(out, 36);
  std::vector<float> pre(n * out), act(n * out);
  cpu::linearForward(x.data(), w.data(), b.data(), pre.data(), n, in, out, true);
  cpu::geluForward(pre.data(), act.data(), n * out, true);
  Dev<float> dX(x), dW(w), dB(b), dPre(n * out), dAct(n * out);
  gpu::LinearShape s{n, in, out, true, CUDA_R_32F};
  ASSERT_TRUE(gemm->linearForward(dX.p, dW.p, dB.p, dAct.p, s, nullptr, error, dPre.p)) << error;
  expectClose(dPre.host(), pre, 1e-4, "linear pre-activation");
  expectClose(dAct.host(), act, 1e-3, "linear gelu epilogue");
}

// The heuristic's choices survive in a file: a second Gemm that reads it
// has the problems cached and computes the same; a file of anything else is
// not read.
TEST(Cuda, GemmAlgorithmCacheFile) {
  NEED_GPU();
  std::string error;
  auto first = gpu::Gemm::create(error);
  ASSERT_TRUE(first) << error;
  const int64_t n = 8, in = 32, out = 16;
  auto x = randomVec(n * in, 90), w = randomVec(in * out, 91);
  Dev<float> dX(x), dW(w), dY(n * out), dY2(n * out);
  gpu::LinearShape sh{n, in, out, false, CUDA_R_32F};
  ASSERT_TRUE(first->linearForward(dX.p, dW.p, nullptr, dY.p, sh, nullptr, error)) << error;
  std::string path = ::testing::TempDir() + "/llmopt-cublaslt-cache.bin";
  ASSERT_TRUE(first->saveAlgorithms(path, error)) << error;
  auto second = gpu::Gemm::create(error);
  ASSERT_TRUE(second) << error;
  ASSERT_TRUE(second->loadAlgorithms(path));
  EXPECT_EQ(second->cachedAlgorithms(), first->cachedAlgorithms());
  ASSERT_TRUE(second->linearForward(dX.p, dW.p, nullptr, dY2.p, sh, nullptr, error)) << error;
  expectClose(dY2.host(), dY.host(), 0.0, "the same algorithm's result");
  std::string junk = ::testing::TempDir() + "/llmopt-not-a-cache.bin";
  std::FILE *f = std::fopen(junk.c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs("something else\n", f);
  std::fclose(f);
  auto third = gpu::Gemm::create(error);
  ASSERT_TRUE(third) << error;
  EXPECT_FALSE(third->loadAlgorithms(junk));
  EXPECT_EQ(third->cachedAlgorithms(), 0u);
  std::remove(path.c_str());
  std::remove(junk.c_str());
}

TEST(Cuda, LinearFp8) {
  NEED_FP8_GPU();
  std::string error;
  auto gemm = gpu::Gemm::create(error);
  ASSERT_TRUE(gemm) << error;
  const int64_t n = 32, in = 64, out = 48; // multiples of 16, as fp8 GEMMs want
  auto x = randomVec(n * in, 40), w = randomVec(in * out, 41, 0.1f), b = randomVec(out, 42);
  // The CPU reference: operands rounded to E4M3 with per-tensor scaling.
  std::vector<float> xq(x.size()), wq(w.size()), y(n * out);
  cpu::fakeQuantizeFp8(x.data(), xq.data(), n * in, cpu::Fp8::E4M3, cpu::absMax(x.data(), n * in));
  cpu::fakeQuantizeFp8(w.data(), wq.data(), in * out, cpu::Fp8::E4M3,
                       cpu::absMax(w.data(), in * out));
  cpu::linearForward(xq.data(), wq.data(), nullptr, y.data(), n, in, out, false);
  // amax / scale pairs 16 bytes apart. (The first H100 run, with the scale
  // pointers 4 bytes apart, got "cublasLtMatmul: not supported"; whether
  // their alignment was the cause is not yet known.)
  Dev<float> dX(x), dW(w), dB(b), dY(n * out), scratch(16);
  Dev<uint8_t> qX(n * in), qW(in * out);
  ASSERT_EQ(gpu::quantizeFp8(dX.p, n * in, false, qX.p, scratch.p, scratch.p + 4, nullptr, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::quantizeFp8(dW.p, in * out, false, qW.p, scratch.p + 8, scratch.p + 12, nullptr,
                             nullptr),
            cudaSuccess);
  auto s = scratch.host();
  EXPECT_FLOAT_EQ(s[0], cpu::absMax(x.data(), n * in));
  EXPECT_FLOAT_EQ(s[4], s[0] / 448.0f);
  gpu::LinearShape shape{n, in, out, false, CUDA_R_32F};
  ASSERT_TRUE(gemm->linearForwardFp8(qX.p, qW.p, scratch.p + 4, scratch.p + 12, nullptr, dY.p,
                                     shape, nullptr, error))
      << error;
  // Same rounded operands, fp32 accumulation: close up to summation order.
  expectClose(dY.host(), y, 1e-3, "fp8 linear y");
  EXPECT_FALSE(gemm->linearForwardFp8(qX.p, qW.p, scratch.p + 4, scratch.p + 12, nullptr, dY.p,
                                      gpu::LinearShape{n, in, out, true, CUDA_R_32F}, nullptr,
                                      error));
  EXPECT_FALSE(gemm->linearForwardFp8(qX.p, qW.p, scratch.p + 4, scratch.p + 12, dB.p, dY.p, shape,
                                      nullptr, error));
}
} // namespace

namespace {
/// Random inputs for attention of shape `a` (seeds seed..seed+3), rounded to
/// bf16 when `round` (the reference then sees the device's inputs), and
/// the CPU reference's output, log-sum-exps and gradients.
struct AttentionReference {
  size_t qn = 0, kn = 0;
  std::vector<float> q, k, v, g, out, lse, dq, dk, dv;
};
AttentionReference attentionReference(const cpu::AttentionShape &a, uint32_t seed,
                                      bool round = false) {
  AttentionReference r;
  r.qn = size_t(a.batch * a.seq * a.heads * a.headDim);
  r.kn = size_t(a.batch * a.seq * a.kvHeads * a.headDim);
  r.q = randomVec(r.qn, seed), r.k = randomVec(r.kn, seed + 1), r.v = randomVec(r.kn, seed + 2);
  r.g = randomVec(r.qn, seed + 3);
  if (round)
    for (std::vector<float> *x : {&r.q, &r.k, &r.v, &r.g})
      roundToBf16(*x);
  r.out.resize(r.qn), r.lse.resize(size_t(a.batch * a.heads * a.seq)), r.dq.resize(r.qn);
  r.dk.resize(r.kn), r.dv.resize(r.kn);
  cpu::attentionForward(r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(), a);
  cpu::attentionBackward(r.g.data(), r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(),
                         r.dq.data(), r.dk.data(), r.dv.data(), a);
  return r;
}

TEST(Cuda, AttentionBaseline) {
  NEED_GPU();
  for (auto [heads, kvHeads, window] : {std::tuple{4, 2, 0}, std::tuple{2, 1, 3}}) {
    cpu::AttentionShape a;
    a.batch = 2, a.seq = 9, a.heads = heads, a.kvHeads = kvHeads, a.headDim = 8;
    a.scale = 0.35f, a.causal = true, a.window = window;
    gpu::AttentionDims d{a.batch,   a.seq,   a.heads,  a.kvHeads,
                         a.headDim, a.scale, a.causal, a.window};
    AttentionReference r = attentionReference(a, 40);
    size_t qn = r.qn, kn = r.kn;
    const auto &[q, k, v, g, out, lse, dq, dk, dv] =
        std::tie(r.q, r.k, r.v, r.g, r.out, r.lse, r.dq, r.dk, r.dv);
    Dev<float> dQ(q), dK(k), dV(v), dG(g), dOut(qn), dLse(lse.size()), dDq(qn), dDk(kn), dDv(kn),
        scratch(2 * kn);
    ASSERT_EQ(gpu::attentionForward(dQ.p, dK.p, dV.p, dOut.p, dLse.p, d, nullptr), cudaSuccess);
    ASSERT_EQ(gpu::attentionBackward(dG.p, dQ.p, dK.p, dV.p, dOut.p, dLse.p, dDq.p, dDk.p, dDv.p,
                                     scratch.p, d, nullptr),
              cudaSuccess);
    expectClose(dOut.host(), out, 1e-4, "attention out");
    expectClose(dDq.host(), dq, 1e-4, "attention dq");
    expectClose(dDk.host(), dk, 1e-4, "attention dk");
    expectClose(dDv.host(), dv, 1e-4, "attention dv");
  }
}
} // namespace

namespace {
/// Context parallelism on the baseline kernels: a rank's queries at
/// positions {0, 1, 6, 7} of 8 against two blocks of keys (its own and the
/// other rank's, {2, 3, 4, 5}) merged by log-sum-exp equal the CPU's
/// attention of those queries over the whole sequence; the backward of each
/// block with the merged statistics sums to the whole backward's.
TEST(Cuda, AttentionRingBlocks) {
  NEED_GPU();
  const int64_t local = 4, whole = 8, heads = 2, kvHeads = 1, hd = 8;
  std::vector<int32_t> mine = {0, 1, 6, 7}, other = {2, 3, 4, 5};
  auto q = randomVec(local * heads * hd, 80), g = randomVec(local * heads * hd, 81);
  auto kw = randomVec(whole * kvHeads * hd, 82), vw = randomVec(whole * kvHeads * hd, 83);
  // The whole reference: queries at their positions, keys in position order.
  cpu::AttentionShape a;
  a.batch = 1, a.seq = local, a.heads = heads, a.kvHeads = kvHeads, a.headDim = hd;
  a.scale = 0.3f, a.causal = true, a.kvSeq = whole, a.qPos = mine.data();
  std::vector<float> out(q.size()), lse(local * heads), dq(q.size()), dk(kw.size()), dv(vw.size());
  cpu::attentionForward(q.data(), kw.data(), vw.data(), out.data(), lse.data(), a);
  cpu::attentionBackward(g.data(), q.data(), kw.data(), vw.data(), out.data(), lse.data(),
                         dq.data(), dk.data(), dv.data(), a);
  // Each block: its keys' rows of the whole.
  auto rowsOf = [&](const std::vector<float> &w, const std::vector<int32_t> &pos) {
    std::vector<float> r;
    for (int32_t p : pos)
      r.insert(r.end(), w.begin() + p * kvHeads * hd, w.begin() + (p + 1) * kvHeads * hd);
    return r;
  };
  gpu::AttentionDims d{1, local, heads, kvHeads, hd, 0.3f, true, 0};
  Dev<int32_t> dMine(mine), dOther(other);
  d.qPos = dMine.p;
  Dev<float> dQ(q), dG(g), dOut(std::vector<float>(q.size(), 0.0f)),
      dLse(std::vector<float>(lse.size(), -INFINITY)), ob(q.size()), lb(lse.size());
  std::vector<float> sumDq(q.size(), 0.0f), gotDk(kw.size(), 0.0f), gotDv(vw.size(), 0.0f);
  const std::vector<int32_t> *blocks[] = {&mine, &other};
  for (const std::vector<int32_t> *pos : blocks) {
    Dev<float> dK(rowsOf(kw, *pos)), dV(rowsOf(vw, *pos));
    d.kPos = pos == &mine ? dMine.p : dOther.p;
    ASSERT_EQ(gpu::attentionForward(dQ.p, dK.p, dV.p, ob.p, lb.p, d, nullptr), cudaSuccess);
    ASSERT_EQ(gpu::attentionMerge(dOut.p, dLse.p, ob.p, lb.p, d, nullptr), cudaSuccess);
  }
  expectClose(dOut.host(), out, 1e-4, "ring attention out");
  expectClose(dLse.host(), lse, 1e-4, "ring attention lse");
  for (const std::vector<int32_t> *pos : blocks) {
    Dev<float> dK(rowsOf(kw, *pos)), dV(rowsOf(vw, *pos)), bq(q.size()),
        bk(pos->size() * kvHeads * hd), bv(pos->size() * kvHeads * hd),
        scratch(2 * pos->size() * kvHeads * hd);
    d.kPos = pos == &mine ? dMine.p : dOther.p;
    ASSERT_EQ(gpu::attentionBackward(dG.p, dQ.p, dK.p, dV.p, dOut.p, dLse.p, bq.p, bk.p, bv.p,
                                     scratch.p, d, nullptr),
              cudaSuccess);
    std::vector<float> hq = bq.host(), hk = bk.host(), hv = bv.host();
    for (size_t i = 0; i < hq.size(); ++i)
      sumDq[i] += hq[i];
    for (size_t j = 0; j < pos->size(); ++j)
      for (int64_t c = 0; c < kvHeads * hd; ++c) {
        gotDk[(*pos)[j] * kvHeads * hd + c] = hk[j * kvHeads * hd + c];
        gotDv[(*pos)[j] * kvHeads * hd + c] = hv[j * kvHeads * hd + c];
      }
  }
  expectClose(sumDq, dq, 1e-4, "ring attention dq");
  expectClose(gotDk, dk, 1e-4, "ring attention dk");
  expectClose(gotDv, dv, 1e-4, "ring attention dv");
}

// The tensor-core attention against the CPU reference: GQA, a sliding
// window, no mask, and a sequence long enough for several chunks of
// (batch, head) pairs' scores; fp32 within 1e-4, bf16 storage within 3e-2.
TEST(Cuda, AttentionGemm) {
  NEED_GPU();
  std::string error;
  auto gemm = gpu::Gemm::create(error);
  ASSERT_TRUE(gemm) << error;
  struct Case {
    int64_t batch, seq, heads, kvHeads, headDim, window;
    bool causal;
  };
  for (Case c : {Case{2, 9, 4, 2, 8, 0, true}, Case{2, 17, 2, 1, 16, 3, true},
                 Case{1, 12, 3, 3, 8, 0, false}, Case{2, 64, 4, 1, 32, 0, true}}) {
    cpu::AttentionShape a;
    a.batch = c.batch, a.seq = c.seq, a.heads = c.heads, a.kvHeads = c.kvHeads;
    a.headDim = c.headDim, a.scale = 1.0f / std::sqrt(float(c.headDim)), a.causal = c.causal;
    a.window = c.window;
    gpu::AttentionDims d{a.batch,   a.seq,   a.heads,  a.kvHeads,
                         a.headDim, a.scale, a.causal, a.window};
    AttentionReference r = attentionReference(a, 70);
    size_t qn = r.qn, kn = r.kn;
    const auto &[q, k, v, g, out, lse, dq, dk, dv] =
        std::tie(r.q, r.k, r.v, r.g, r.out, r.lse, r.dq, r.dk, r.dv);
    {
      Dev<float> dQ(q), dK(k), dV(v), dG(g), dOut(qn), dLse(lse.size()), dDq(qn), dDk(kn), dDv(kn),
          scratch(gpu::attentionGemmScratchBytes(d, 4) / 4 + 1);
      ASSERT_TRUE(gpu::attentionForwardGemm(*gemm, dQ.p, dK.p, dV.p, dOut.p, dLse.p, d, scratch.p,
                                            nullptr, error))
          << error;
      ASSERT_TRUE(gpu::attentionBackwardGemm(*gemm, dG.p, dQ.p, dK.p, dV.p, dOut.p, dLse.p, dDq.p,
                                             dDk.p, dDv.p, d, scratch.p, nullptr, error))
          << error;
      expectClose(dOut.host(), out, 1e-4, "attention out");
      expectClose(dLse.host(), lse, 1e-4, "attention lse");
      expectClose(dDq.host(), dq, 1e-4, "attention dq");
      expectClose(dDk.host(), dk, 1e-4, "attention dk");
      expectClose(dDv.host(), dv, 1e-4, "attention dv");
    }
    Dev<gpu::bf16> bQ(toBf16(q)), bK(toBf16(k)), bV(toBf16(v)), bG(toBf16(g)), bOut(qn), bDq(qn),
        bDk(kn), bDv(kn), bScratch(gpu::attentionGemmScratchBytes(d, 2) / 2 + 1);
    Dev<float> bLse(lse.size());
    ASSERT_TRUE(gpu::attentionForwardGemm(*gemm, bQ.p, bK.p, bV.p, bOut.p, bLse.p, d, bScratch.p,
                                          nullptr, error))
        << error;
    ASSERT_TRUE(gpu::attentionBackwardGemm(*gemm, bG.p, bQ.p, bK.p, bV.p, bOut.p, bLse.p, bDq.p,
                                           bDk.p, bDv.p, d, bScratch.p, nullptr, error))
        << error;
    expectClose(toFloat(bOut.host()), out, 3e-2, "bf16 attention out");
    expectClose(toFloat(bDq.host()), dq, 6e-2, "bf16 attention dq");
    expectClose(toFloat(bDk.host()), dk, 6e-2, "bf16 attention dk");
    expectClose(toFloat(bDv.host()), dv, 6e-2, "bf16 attention dv");
  }
}

#ifdef LLMOPT_HAVE_CUDNN
// cuDNN's fused attention (bf16) against the CPU reference: causal with GQA,
// unmasked; the log-sum-exps must be the ones the GEMM attention's backward
// reads. The sliding window is refused (the GEMM attention takes it).
TEST(Cuda, AttentionCudnn) {
  NEED_GPU();
  std::string error;
  auto cudnn = gpu::CudnnAttention::create(error);
  ASSERT_TRUE(cudnn) << error;
  struct Case {
    int64_t batch, seq, heads, kvHeads, headDim;
    bool causal;
  };
  for (Case c :
       {Case{2, 64, 4, 2, 64, true}, Case{1, 128, 2, 1, 128, true}, Case{2, 32, 4, 4, 32, false}}) {
    cpu::AttentionShape a;
    a.batch = c.batch, a.seq = c.seq, a.heads = c.heads, a.kvHeads = c.kvHeads;
    a.headDim = c.headDim, a.scale = 1.0f / std::sqrt(float(c.headDim)), a.causal = c.causal;
    gpu::AttentionDims d{a.batch, a.seq, a.heads, a.kvHeads, a.headDim, a.scale, a.causal, 0};
    ASSERT_TRUE(gpu::CudnnAttention::supports(d));
    // The reference sees the rounded inputs.
    AttentionReference r = attentionReference(a, 80, /*round=*/true);
    size_t qn = r.qn, kn = r.kn;
    const auto &[out, lse, dq, dk, dv] = std::tie(r.out, r.lse, r.dq, r.dk, r.dv);
    Dev<gpu::bf16> bQ(toBf16(r.q)), bK(toBf16(r.k)), bV(toBf16(r.v)), bG(toBf16(r.g)), bOut(qn),
        bDq(qn), bDk(kn), bDv(kn);
    Dev<float> bLse(lse.size());
    ASSERT_TRUE(cudnn->forward(bQ.p, bK.p, bV.p, bOut.p, bLse.p, d, nullptr, error)) << error;
    ASSERT_TRUE(cudnn->backward(bG.p, bQ.p, bK.p, bV.p, bOut.p, bLse.p, bDq.p, bDk.p, bDv.p, d,
                                nullptr, error))
        << error;
    expectClose(toFloat(bOut.host()), out, 3e-2, "cuDNN attention out");
    expectClose(bLse.host(), lse, 1e-2, "cuDNN attention lse");
    expectClose(toFloat(bDq.host()), dq, 6e-2, "cuDNN attention dq");
    expectClose(toFloat(bDk.host()), dk, 6e-2, "cuDNN attention dk");
    expectClose(toFloat(bDv.host()), dv, 6e-2, "cuDNN attention dv");
  }
  gpu::AttentionDims window{1, 16, 2, 2, 64, 0.125f, true, 4};
  EXPECT_FALSE(gpu::CudnnAttention::supports(window));
}
#endif

TEST(Cuda, SmallKernels) {
  NEED_GPU();
  const int64_t rows = 6, c = 10;
  auto a = randomVec(rows * c, 60), b = randomVec(rows * c, 61), bias = randomVec(c, 62);
  Dev<float> dA(a), dB(b), dBias(bias), dY(rows * c), dSum(c);
  std::vector<float> want(rows * c);
  ASSERT_EQ(gpu::add(dA.p, dB.p, dY.p, rows * c, nullptr), cudaSuccess);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = a[i] + b[i];
  expectClose(dY.host(), want, 1e-6, "add");
  ASSERT_EQ(gpu::scale(dA.p, dY.p, rows * c, 0.5f, nullptr), cudaSuccess);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = a[i] * 0.5f;
  expectClose(dY.host(), want, 1e-6, "scale");
  // acc += scale x (the step driver's ZeRO gradient chunks), and plain +=.
  Dev<float> dAcc(b);
  ASSERT_EQ(gpu::addInto(dAcc.p, dA.p, rows * c, nullptr, 0.25f), cudaSuccess);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = b[i] + a[i] * 0.25f;
  expectClose(dAcc.host(), want, 1e-6, "add_into scaled");
  ASSERT_EQ(gpu::addInto(dAcc.p, dA.p, rows * c, nullptr), cudaSuccess);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] += a[i];
  expectClose(dAcc.host(), want, 1e-6, "add_into");
  ASSERT_EQ(gpu::biasAdd(dA.p, dBias.p, dY.p, rows * c, c, nullptr), cudaSuccess);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = a[i] + bias[i % c];
  expectClose(dY.host(), want, 1e-6, "bias_add");
  ASSERT_EQ(gpu::sumRows(dA.p, dSum.p, rows, c, nullptr), cudaSuccess);
  std::vector<float> sums(c, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j)
      sums[j] += a[r * c + j];
  expectClose(dSum.host(), sums, 1e-5, "sum_rows");
  {
    // Many rows: chunks of rows summed apart, then in chunk order; added
    // (sumRowsInto) to what the output holds.
    const int64_t tall = 5000, w = 70;
    auto t = randomVec(tall * w, 65);
    ASSERT_GT(gpu::sumRowsScratchBytes(tall, w), 0u);
    Dev<float> dT(t), dS(std::vector<float>(w, 1.0f));
    Dev<double> partial(gpu::sumRowsScratchBytes(tall, w) / 8);
    ASSERT_EQ(gpu::sumRowsInto(dT.p, dS.p, tall, w, nullptr, partial.p), cudaSuccess);
    std::vector<float> want(w, 1.0f);
    for (int64_t r = 0; r < tall; ++r)
      for (int64_t j = 0; j < w; ++j)
        want[j] += t[r * w + j];
    expectClose(dS.host(), want, 1e-4, "sum_rows (row chunks)");
  }
  // Split columns [3, 7) out and back.
  Dev<float> dPart(rows * 4);
  ASSERT_EQ(gpu::columns(dA.p, dPart.p, rows, c, 3, 4, true, nullptr), cudaSuccess);
  std::vector<float> part(rows * 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < 4; ++j)
      part[r * 4 + j] = a[r * c + 3 + j];
  expectClose(dPart.host(), part, 0, "split");
  {
    // Columns [8, 16) of 24, in 16-byte words: out and back into zeros.
    auto wide = randomVec(rows * 24, 66);
    Dev<float> dWide(wide), dMid(rows * 8), dBack(rows * 24);
    ASSERT_EQ(gpu::columns(dWide.p, dMid.p, rows, 24, 8, 8, true, nullptr), cudaSuccess);
    ASSERT_EQ(gpu::columns(dMid.p, dBack.p, rows, 24, 8, 8, false, nullptr), cudaSuccess);
    std::vector<float> mid(rows * 8), back(rows * 24, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 8; ++j)
        mid[r * 8 + j] = back[r * 24 + 8 + j] = wide[r * 24 + 8 + j];
    expectClose(dMid.host(), mid, 0, "split (16-byte words)");
    expectClose(dBack.host(), back, 0, "concat (16-byte words)");
  }
  // Position embeddings (positions 2, 0, 1 of a 3-position table).
  const int64_t batch = 2, seq = 3, h = 4;
  auto x = randomVec(batch * seq * h, 63), table = randomVec(3 * h, 64);
  std::vector<int32_t> pos = {2, 0, 1};
  std::vector<float> y(x.size()), dtab(table.size(), 0.0f);
  cpu::positionEmbeddingForward(x.data(), table.data(), y.data(), batch, seq, h, pos.data());
  cpu::positionEmbeddingBackward(x.data(), dtab.data(), batch, seq, h, pos.data());
  Dev<float> dX(x), dT(table), dO(x.size()), dDt(table.size());
  Dev<int32_t> dPos(pos);
  ASSERT_EQ(gpu::positionEmbeddingForward(dX.p, dT.p, dO.p, batch, seq, h, dPos.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::positionEmbeddingBackward(dX.p, dDt.p, batch, seq, h, dPos.p, nullptr),
            cudaSuccess);
  expectClose(dO.host(), y, 1e-6, "position fwd");
  expectClose(dDt.host(), dtab, 1e-5, "position bwd");
  // Sum of squares and its root.
  Dev<double> scratch(1);
  Dev<float> dNorm(1);
  ASSERT_EQ(gpu::sumSquares(dA.p, rows * c, scratch.p, dNorm.p, true, nullptr), cudaSuccess);
  EXPECT_NEAR(dNorm.host()[0], std::sqrt(cpu::sumOfSquares(a.data(), rows * c)), 1e-4);
}

TEST(Cuda, ChunkedSumOfSquaresIsExactAndDeterministic) {
  NEED_GPU();
  // Arrays of odd sizes, one off the 16-byte grid and one empty, over
  // several chunks: added to what the sum held, in fp64 as the CPU.
  const std::vector<int64_t> counts = {3, gpu::kSquaresChunk, 0, 2 * gpu::kSquaresChunk + 17, 1001};
  int64_t total = 1;
  for (int64_t n : counts)
    total += n;
  auto x = randomVec(size_t(total), 91, 3.0f);
  Dev<float> dX(x);
  std::vector<const float *> arrays;
  double want = 0.25;
  int64_t at = 1; // the first array off the 16-byte grid
  for (int64_t n : counts) {
    arrays.push_back(dX.p + at);
    for (int64_t i = 0; i < n; ++i)
      want += double(x[size_t(at + i)]) * double(x[size_t(at + i)]);
    at += n;
  }
  auto chunks = gpu::squaresChunks(arrays, counts);
  Dev<gpu::SquaresChunk> dChunks(chunks);
  Dev<double> partials(chunks.size()), sum(std::vector<double>{0.25}),
      again(std::vector<double>{0.25});
  ASSERT_EQ(gpu::sumSquaresChunks(dChunks.p, int64_t(chunks.size()), partials.p, sum.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::sumSquaresChunks(dChunks.p, int64_t(chunks.size()), partials.p, again.p, nullptr),
            cudaSuccess);
  double got = sum.host()[0];
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(got, again.host()[0]); // the same bits
  // No chunks: the sum as it was.
  ASSERT_EQ(gpu::sumSquaresChunks(dChunks.p, 0, partials.p, again.p, nullptr), cudaSuccess);
  EXPECT_EQ(again.host()[0], got);
}

/// The CPU reference's cross-entropy of `z` [rows, vocab] (mean over the
/// counted rows; ignore index -100): its loss and gradient.
void referenceCrossEntropy(const std::vector<float> &z, const std::vector<int32_t> &labels,
                           int64_t rows, int64_t vocab, float &loss, std::vector<float> &dz) {
  int64_t counted = 0;
  ASSERT_TRUE(
      cpu::crossEntropyForward(z.data(), labels.data(), rows, vocab, -100, &loss, &counted));
  dz.assign(z.size(), 0.0f);
  cpu::crossEntropyBackward(z.data(), labels.data(), 1.0f, counted, dz.data(), rows, vocab, -100);
}

TEST(Cuda, VocabularyParallelCrossEntropyOfOnePartIsCrossEntropy) {
  NEED_GPU();
  const int64_t rows = 5, vocab = 37;
  auto z = randomVec(rows * vocab, 70);
  std::vector<int32_t> labels = {3, 36, -100, 0, 11};
  float loss = 0;
  std::vector<float> dz;
  ASSERT_NO_FATAL_FAILURE(referenceCrossEntropy(z, labels, rows, vocab, loss, dz));
  Dev<float> dZ(z), lse(rows), target(rows), dLoss(1), one(std::vector<float>{1.0f}), dG(z.size());
  Dev<int32_t> dL(labels);
  Dev<unsigned long long> scratch(1);
  ASSERT_EQ(
      gpu::vpCrossEntropyStats(dZ.p, dL.p, lse.p, target.p, rows, vocab, vocab, 0, -100, nullptr),
      cudaSuccess);
  ASSERT_EQ(gpu::vpCrossEntropyLoss(lse.p, target.p, dL.p, dLoss.p, rows, 1, -100, nullptr),
            cudaSuccess);
  ASSERT_EQ(gpu::vpCrossEntropyBackward(dZ.p, dL.p, lse.p, one.p, dG.p, rows, vocab, vocab, 1, 0,
                                        -100, scratch.p, nullptr),
            cudaSuccess);
  EXPECT_NEAR(dLoss.host()[0], loss, 1e-4);
  expectClose(dG.host(), dz, 1e-5, "vp ce grad");
}

// A padded vocabulary over two parts (37 entries padded to 2 x 19: the
// second part's last entry is padding) and over three (3 x 19: the third
// part is all padding, its log-sum-exp -inf) equals the cross-entropy of
// the 37: the padding is left out of the log-sum-exps and gets no gradient.
TEST(Cuda, VocabularyParallelCrossEntropyLeavesPaddingOut) {
  NEED_GPU();
  const int64_t rows = 4, vocab = 37, part = 19;
  auto z = randomVec(rows * vocab, 71);
  std::vector<int32_t> labels = {36, 18, 19, -100};
  float loss = 0;
  std::vector<float> dz;
  ASSERT_NO_FATAL_FAILURE(referenceCrossEntropy(z, labels, rows, vocab, loss, dz));
  Dev<int32_t> dL(labels);
  Dev<float> dLoss(1), one(std::vector<float>{1.0f});
  Dev<unsigned long long> scratch(1);
  for (int64_t parts : {2, 3}) {
    SCOPED_TRACE(std::to_string(parts) + " parts");
    // The plan's layout: the log-sum-exps gathered into [parts, rows], the
    // targets summed over the parts (its all-reduce). Each part's padding
    // is a logit that would dominate were it counted.
    Dev<float> all(parts * rows), target(parts * rows);
    std::vector<std::unique_ptr<Dev<float>>> dZ, dG;
    for (int64_t p = 0; p < parts; ++p) {
      std::vector<float> logits(rows * part, 50.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < part && p * part + j < vocab; ++j)
          logits[r * part + j] = z[r * vocab + p * part + j];
      dZ.push_back(std::make_unique<Dev<float>>(logits));
      dG.push_back(std::make_unique<Dev<float>>(rows * part));
      int64_t real = std::clamp<int64_t>(vocab - p * part, 0, part);
      ASSERT_EQ(gpu::vpCrossEntropyStats(dZ[p]->p, dL.p, all.p + p * rows, target.p + p * rows,
                                         rows, part, real, p * part, -100, nullptr),
                cudaSuccess);
    }
    std::vector<float> t = target.host(), sum(rows, 0.0f), lse = all.host();
    for (int64_t p = 0; p < parts; ++p)
      for (int64_t r = 0; r < rows; ++r)
        sum[r] += t[p * rows + r];
    if (parts == 3) {
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_TRUE(std::isinf(lse[2 * rows + r]) && lse[2 * rows + r] < 0);
    }
    Dev<float> dSum(sum);
    ASSERT_EQ(gpu::vpCrossEntropyLoss(all.p, dSum.p, dL.p, dLoss.p, rows, parts, -100, nullptr),
              cudaSuccess);
    EXPECT_NEAR(dLoss.host()[0], loss, 1e-4);
    for (int64_t p = 0; p < parts; ++p) {
      int64_t real = std::clamp<int64_t>(vocab - p * part, 0, part);
      ASSERT_EQ(gpu::vpCrossEntropyBackward(dZ[p]->p, dL.p, all.p, one.p, dG[p]->p, rows, part,
                                            real, parts, p * part, -100, scratch.p, nullptr),
                cudaSuccess);
      std::vector<float> want(rows * part, 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < real; ++j)
          want[r * part + j] = dz[r * vocab + p * part + j];
      expectClose(dG[p]->host(), want, 1e-5, "padded vp ce grad");
    }
  }
}

TEST(Cuda, MoEDispatchAndCombine) {
  NEED_GPU();
  const int64_t tokens = 5, topK = 2, h = 3, experts = 3, capacity = 3; // expert 1 overflows
  std::vector<int32_t> idx = {1, 0, 1, 2, 1, 0, 2, 1, 0, 2};
  auto x = randomVec(tokens * h, 80), w = randomVec(tokens * topK, 81),
       d = randomVec(tokens * h, 82);
  size_t rowsN = size_t(experts * capacity * h);
  std::vector<float> rows(rowsN), back(tokens * h), out(tokens * h), de(rowsN), dw(tokens * topK);
  ASSERT_TRUE(cpu::moeDispatchForward(x.data(), idx.data(), rows.data(), tokens, h, topK, experts,
                                      capacity));
  ASSERT_TRUE(cpu::moeDispatchBackward(rows.data(), idx.data(), back.data(), tokens, h, topK,
                                       experts, capacity));
  ASSERT_TRUE(cpu::moeCombineForward(rows.data(), w.data(), idx.data(), out.data(), tokens, h, topK,
                                     experts, capacity));
  ASSERT_TRUE(cpu::moeCombineBackward(d.data(), rows.data(), w.data(), idx.data(), de.data(),
                                      dw.data(), tokens, h, topK, experts, capacity));
  Dev<float> dX(x), dW(w), dD(d), dRows(rowsN), dBack(tokens * h), dOut(tokens * h), dDe(rowsN),
      dDw(tokens * topK);
  Dev<int32_t> dIdx(idx), bad(1);
  Dev<int64_t> slots(tokens * topK);
  bool ok = false;
  ASSERT_EQ(gpu::moeDispatchForward(dX.p, dIdx.p, dRows.p, tokens, h, topK, experts, capacity,
                                    slots.p, bad.p, nullptr, ok),
            cudaSuccess);
  ASSERT_TRUE(ok);
  ASSERT_EQ(gpu::moeDispatchBackward(dRows.p, dIdx.p, dBack.p, tokens, h, topK, experts, capacity,
                                     slots.p, bad.p, nullptr, ok),
            cudaSuccess);
  ASSERT_EQ(gpu::moeCombineForward(dRows.p, dW.p, dIdx.p, dOut.p, tokens, topK, h, experts,
                                   capacity, slots.p, bad.p, nullptr, ok),
            cudaSuccess);
  ASSERT_EQ(gpu::moeCombineBackward(dD.p, dRows.p, dW.p, dIdx.p, dDe.p, dDw.p, tokens, topK, h,
                                    experts, capacity, slots.p, bad.p, nullptr, ok),
            cudaSuccess);
  expectClose(dRows.host(), rows, 0, "dispatch");
  expectClose(dBack.host(), back, 1e-6, "dispatch backward");
  expectClose(dOut.host(), out, 1e-5, "combine");
  expectClose(dDe.host(), de, 1e-5, "combine backward rows");
  expectClose(dDw.host(), dw, 1e-5, "combine backward weights");
  std::vector<int32_t> wrong = idx;
  wrong[3] = 7;
  Dev<int32_t> dWrong(wrong);
  ASSERT_EQ(gpu::moeDispatchForward(dX.p, dWrong.p, dRows.p, tokens, h, topK, experts, capacity,
                                    slots.p, bad.p, nullptr, ok),
            cudaSuccess);
  EXPECT_FALSE(ok);
  // Unchecked (no flag: what the backend does with the router's indices):
  // the bad choice is dropped, nothing is written out of bounds.
  ASSERT_EQ(gpu::moeDispatchForward(dX.p, dWrong.p, dRows.p, tokens, h, topK, experts, capacity,
                                    slots.p, nullptr, nullptr, ok),
            cudaSuccess);
  EXPECT_TRUE(ok);
  EXPECT_EQ(slots.host()[3], -1);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

/// `x` in the device storage type T (bf16: rounded), and back in fp32.
template <typename T> std::vector<T> stored(const std::vector<float> &x);
template <> std::vector<float> stored<float>(const std::vector<float> &x) { return x; }
template <> std::vector<gpu::bf16> stored<gpu::bf16>(const std::vector<float> &x) {
  return toBf16(x);
}
std::vector<float> widened(const std::vector<float> &x) { return x; }
std::vector<float> widened(const std::vector<gpu::bf16> &x) { return toFloat(x); }

/// The router on cuBLASLt in storage type T against the CPU reference on
/// the same (rounded) inputs: top-k choices exactly, weights and gradients
/// within `tol`; renormalized and not, with and without the load-balancing
/// loss (local counts, and the whole sequence's counts passed in).
template <typename T> void checkRouter(gpu::Gemm &gemm, double tol) {
  std::string error;
  const int64_t tokens = 37, hidden = 24, experts = 6, topK = 2;
  std::vector<float> seqCounts = {9, 14, 11, 20, 5, 15};
  for (bool normalize : {true, false})
    for (int auxCase = 0; auxCase < 3; ++auxCase) {
      auto x = widened(stored<T>(randomVec(tokens * hidden, 90))),
           gate = widened(stored<T>(randomVec(experts * hidden, 91, 0.3f))),
           dwt = randomVec(tokens * topK, 92);
      float coef = auxCase ? 0.01f : 0.0f;
      std::vector<float> w(tokens * topK), dx(tokens * hidden), dg(experts * hidden, 0.0f),
          cnt(experts);
      std::vector<int32_t> idx(tokens * topK);
      cpu::moeRouterForward(x.data(), gate.data(), w.data(), idx.data(), tokens, hidden, experts,
                            topK, normalize);
      cpu::moeRouterBackward(dwt.data(), x.data(), gate.data(), w.data(), idx.data(), dx.data(),
                             dg.data(), tokens, hidden, experts, topK, normalize, coef,
                             auxCase == 2 ? seqCounts.data() : nullptr, 2 * tokens, 0.5f);
      cpu::moeExpertCounts(idx.data(), cnt.data(), tokens, experts, topK);
      gpu::MoERouterDims d{tokens, hidden, experts, topK, normalize};
      Dev<float> dW(tokens * topK), dDwt(dwt), dDg(experts * hidden), dCnt(experts),
          dSeq(seqCounts);
      gpu::MoEAux aux{coef, auxCase == 2 ? dSeq.p : nullptr, 2 * tokens, 0.5f};
      Dev<int32_t> dIdx(tokens * topK);
      Dev<char> scratch(gpu::moeRouterScratchBytes(d, sizeof(T)));
      Dev<T> dX(stored<T>(x)), dG(stored<T>(gate)), dDx(tokens * hidden);
      ASSERT_TRUE(
          gpu::moeRouterForwardGemm(gemm, dX.p, dG.p, dW.p, dIdx.p, d, scratch.p, nullptr, error))
          << error;
      ASSERT_TRUE(gpu::moeRouterBackwardGemm(gemm, dDwt.p, dX.p, dG.p, dW.p, dIdx.p, dDx.p, dDg.p,
                                             d, aux, scratch.p, nullptr, error))
          << error;
      ASSERT_EQ(gpu::moeExpertCounts(dIdx.p, dCnt.p, tokens, experts, topK, nullptr), cudaSuccess);
      EXPECT_EQ(dIdx.host(), idx) << "normalize " << normalize << " aux " << auxCase;
      expectClose(dW.host(), w, tol, "router weights");
      expectClose(widened(dDx.host()), dx, tol, "router dx");
      expectClose(dDg.host(), dg, tol, "router dgate");
      expectClose(dCnt.host(), cnt, 0, "expert counts");
    }
}

TEST(Cuda, MoERouter) {
  NEED_GPU();
  std::string error;
  auto gemm = gpu::Gemm::create(error);
  ASSERT_TRUE(gemm) << error;
  checkRouter<float>(*gemm, 1e-4);
  checkRouter<gpu::bf16>(*gemm, 3e-2);
}

/// The experts' MLPs as batched GEMMs in storage type T against the CPU
/// reference, SwiGLU and GeLU, with the zero rows of a dropless dispatch;
/// all experts in one batch, and in groups of two (a scratch budget of two
/// experts: the second group one expert, at an offset).
template <typename T> void checkExperts(gpu::Gemm &gemm, double tol) {
  std::string error;
  const int64_t experts = 3, capacity = 5, hidden = 16, ffn = 24;
  size_t perExpert = gpu::moeExpertsScratchBytes({1, capacity, hidden, ffn, true}, sizeof(T));
  // rows 4: the busiest expert's load (the experts compute rows 0-3 only).
  for (int64_t rows : {int64_t(0), int64_t(4)})
    for (size_t budget : {size_t(0), 2 * perExpert})
      for (bool swiglu : {true, false}) {
        int count = swiglu ? 3 : 2;
        auto x = randomVec(experts * capacity * hidden, 93),
             g = widened(stored<T>(randomVec(experts * capacity * hidden, 94)));
        // The last rows of each expert empty (loads 3, 4, 3), in the rows and in
        // their output gradient, as a dispatch and the combine's backward leave
        // them.
        for (int64_t e = 0; e < experts; ++e)
          for (int64_t c = 3 + e % 2; c < capacity; ++c)
            for (int64_t i = 0; i < hidden; ++i)
              x[(e * capacity + c) * hidden + i] = g[(e * capacity + c) * hidden + i] = 0;
        x = widened(stored<T>(x));
        std::vector<std::vector<float>> w, dw;
        std::vector<std::unique_ptr<Dev<T>>> dWs;
        std::vector<std::unique_ptr<Dev<float>>> dDws;
        const float *wp[3] = {};
        float *dwp[3] = {}, *dDwp[3] = {};
        const T *dWp[3] = {};
        for (int i = 0; i < count; ++i) {
          w.push_back(widened(stored<T>(randomVec(experts * ffn * hidden, 95 + i, 0.2f))));
          dw.emplace_back(experts * ffn * hidden, 0.0f);
          dWs.push_back(std::make_unique<Dev<T>>(stored<T>(w.back())));
          dDws.push_back(std::make_unique<Dev<float>>(experts * ffn * hidden));
          wp[i] = w.back().data();
          dwp[i] = dw.back().data();
          dWp[i] = dWs.back()->p;
          dDwp[i] = dDws.back()->p;
        }
        std::vector<float> y(x.size()), dx(x.size());
        cpu::MoEExpertShape sh{experts, capacity, hidden, ffn, swiglu};
        cpu::moeExpertsForward(x.data(), wp, y.data(), sh);
        cpu::moeExpertsBackward(g.data(), x.data(), wp, dx.data(), dwp, sh);
        gpu::MoEExpertDims d{experts, capacity, hidden, ffn, swiglu, budget, rows};
        EXPECT_EQ(gpu::moeExpertsScratchBytes(d, sizeof(T)), (budget ? 2 : 3) * perExpert);
        Dev<char> scratch(gpu::moeExpertsScratchBytes(d, sizeof(T)));
        // Outputs start as garbage: rows past `rows` must be written zero.
        Dev<T> dX(stored<T>(x)), dG(stored<T>(g)),
            dY(stored<T>(std::vector<float>(x.size(), 7.0f))),
            dDx(stored<T>(std::vector<float>(x.size(), 7.0f)));
        ASSERT_TRUE(gpu::moeExpertsForwardGemm(gemm, dX.p, dWp, dY.p, d, scratch.p, nullptr, error))
            << error;
        ASSERT_TRUE(gpu::moeExpertsBackwardGemm(gemm, dG.p, dX.p, dWp, dDx.p, dDwp, d, scratch.p,
                                                nullptr, error))
            << error;
        expectClose(widened(dY.host()), y, tol, swiglu ? "swiglu experts" : "gelu experts");
        expectClose(widened(dDx.host()), dx, tol, "experts dx");
        for (int i = 0; i < count; ++i)
          expectClose(dDws[size_t(i)]->host(), dw[size_t(i)], tol, "experts dweight");
      }
}

TEST(Cuda, MoEExperts) {
  NEED_GPU();
  std::string error;
  auto gemm = gpu::Gemm::create(error);
  ASSERT_TRUE(gemm) << error;
  checkExperts<float>(*gemm, 1e-4);
  checkExperts<gpu::bf16>(*gemm, 6e-2);
}
} // namespace

// Host-side helpers of the CUDA library: these run without a GPU.
TEST(CudaHost, EmbeddingOrderGroupsPositionsByTokenInChunks) {
  // Token 7 at positions 0, 2, 3, 5 (chunks of 3: {0, 2, 3}, {5}), token 1
  // at 1, token 9 at 4.
  std::vector<int32_t> tok = {7, 1, 7, 7, 9, 7};
  std::vector<int32_t> order = gpu::embeddingOrder(tok.data(), 6, 3);
  // positions | K | first chunk per token (+ end) | C | chunk starts (+ end)
  EXPECT_EQ(order, (std::vector<int32_t>{1, 0, 2, 3, 5, 4, 3, 0, 1, 3, 4, 4, 0, 1, 4, 5, 6}));
  EXPECT_EQ(gpu::embeddingOrder(tok.data(), 0), (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(CudaHost, RotaryTableIsTheCosAndSinOfPositionTimesFrequency) {
  std::vector<double> inv = {1.0, 0.25};
  std::vector<float> t = gpu::rotaryTable(inv, 3);
  ASSERT_EQ(t.size(), 12u);
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(t[size_t(p * 4 + i * 2)], float(std::cos(p * inv[size_t(i)])));
      EXPECT_EQ(t[size_t(p * 4 + i * 2 + 1)], float(std::sin(p * inv[size_t(i)])));
    }
}

TEST(CudaHost, PaddedSizesAndScratch) {
  // Rows of 16-byte multiples stay; others round up to 128 elements.
  EXPECT_EQ(gpu::linearPaddedOut(50304, CUDA_R_16BF), 50304);
  EXPECT_EQ(gpu::linearPaddedOut(50257, CUDA_R_16BF), 50304);
  EXPECT_EQ(gpu::linearPaddedOut(37, CUDA_R_32F), 128);
  EXPECT_EQ(gpu::linearPaddedOut(24, CUDA_R_32F), 24);
  // Column sums: one chunk (no scratch) below 1024 rows, at most 64 chunks.
  EXPECT_EQ(gpu::sumRowsScratchBytes(1000, 8), 0u);
  EXPECT_EQ(gpu::sumRowsScratchBytes(16384, 768), size_t(32 * 768 * 8));
  EXPECT_EQ(gpu::sumRowsScratchBytes(1 << 20, 4), size_t(64 * 4 * 8));
  // The norms' scratch holds the row terms or the per-block partials.
  EXPECT_GE(gpu::normBackwardScratchBytes(16384, 768), size_t(16384 * 768 * 4));
  EXPECT_GE(gpu::normBackwardScratchBytes(1, 768), size_t(2 * 768 * 4));
  // Multi-tensor AdamW: chunks of at most kAdamWChunk, in tensor order.
  auto chunks = gpu::adamwChunks({gpu::kAdamWChunk + 10, 3, 0, gpu::kAdamWChunk});
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(std::make_tuple(chunks[0].tensor, chunks[0].begin, chunks[0].end),
            std::make_tuple(0, int64_t(0), gpu::kAdamWChunk));
  EXPECT_EQ(std::make_tuple(chunks[1].tensor, chunks[1].begin, chunks[1].end),
            std::make_tuple(0, gpu::kAdamWChunk, gpu::kAdamWChunk + 10));
  EXPECT_EQ(std::make_tuple(chunks[2].tensor, chunks[2].begin, chunks[2].end),
            std::make_tuple(1, int64_t(0), int64_t(3)));
  EXPECT_EQ(std::make_tuple(chunks[3].tensor, chunks[3].begin, chunks[3].end),
            std::make_tuple(3, int64_t(0), gpu::kAdamWChunk));
  // Sums of squares: chunks of at most kSquaresChunk of each array, in
  // array order, none for an empty array.
  std::vector<float> buf(size_t(gpu::kSquaresChunk) + 8);
  const float *b = buf.data();
  auto sq = gpu::squaresChunks({b, b + 1, b + 2}, {gpu::kSquaresChunk + 3, 0, 5});
  ASSERT_EQ(sq.size(), 3u);
  EXPECT_EQ(std::make_tuple(sq[0].x, sq[0].n), std::make_tuple(b, gpu::kSquaresChunk));
  EXPECT_EQ(std::make_tuple(sq[1].x, sq[1].n), std::make_tuple(b + gpu::kSquaresChunk, int64_t(3)));
  EXPECT_EQ(std::make_tuple(sq[2].x, sq[2].n), std::make_tuple(b + 2, int64_t(5)));
  // The router's scratch: fp32 logits and 16-bit logit gradients in rows of
  // 8 (E = 6), and E counts, each part 256-byte aligned.
  EXPECT_EQ(gpu::moeRouterScratchBytes({37, 24, 6, 2, false}, 2), size_t(1280 + 768 + 256));
  // The experts' scratch: six [capacity, ffn] activations and an fp32
  // [capacity, hidden] per expert of a group; all experts when that is
  // under 1 GiB, else one at a time (Mixtral 8x7B's worst-case dropless
  // capacity of 16384 rows).
  EXPECT_EQ(gpu::moeExpertsScratchBytes({3, 5, 16, 24, true}, 2), size_t(3 * (6 * 256 + 512)));
  EXPECT_EQ(gpu::moeExpertsScratchBytes({8, 16384, 4096, 14336, true}, 2),
            size_t(6) * 16384 * 14336 * 2 + size_t(16384) * 4096 * 4);
}
