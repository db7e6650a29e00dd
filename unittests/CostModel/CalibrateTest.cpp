//===- CalibrateTest.cpp - efficiencies from a kernel profile -------------===//

#include "llmopt/CostModel/CostModel.h"

#include "gtest/gtest.h"
#include <cstdio>
#include <string>

using namespace llmopt::cost;

namespace {

GpuSpec h100() {
  ClusterSpec cl;
  std::string error;
  EXPECT_TRUE(parseCluster("dgx-h100", "", {}, 8, cl, error)) << error;
  return cl.gpu;
}

/// A profile whose kernels ran exactly as fast as efficiencies (g, a, m)
/// predict on `gpu`.
std::string profile(const GpuSpec &gpu, double g, double a, double m) {
  GpuSpec unit = gpu;
  unit.gemmEfficiency = 1;
  double peak = gpu.peakFlops(DType::BF16) * gpu.throughputScale;
  std::string out = "{\"version\": 1, \"device\": \"test\", \"kernels\": [";
  char buf[512];
  // Two GEMM shapes (the shape factor differs), one attention, one norm.
  int64_t shapes[2][3] = {{8192, 4096, 4096}, {8192, 4096, 128}};
  for (auto &s : shapes) {
    double flops = 2.0 * double(s[0]) * double(s[1]) * double(s[2]);
    double t = flops / (peak * g * gemmEfficiency(unit, double(s[0]), double(s[2]), double(s[1])));
    std::snprintf(buf, sizeof(buf),
                  "{\"kernel\": \"linear_fwd\", \"dims\": [%lld, %lld, %lld], \"calls\": 1, "
                  "\"seconds\": %.17g, \"flops\": %.17g, \"bytes\": 1},",
                  (long long)s[0], (long long)s[1], (long long)s[2], t, flops);
    out += buf;
  }
  double af = 4.0 * 1 * 32 * 8192.0 * 8192.0 * 128 * 0.5;
  std::snprintf(buf, sizeof(buf),
                "{\"kernel\": \"attention_fwd\", \"dims\": [1, 32, 8192, 8192, 128], \"calls\": 1, "
                "\"seconds\": %.17g, \"flops\": %.17g, \"bytes\": 1},",
                af / (peak * a), af);
  out += buf;
  double bytes = 3.0 * 8192 * 4096 * 2;
  std::snprintf(buf, sizeof(buf),
                "{\"kernel\": \"rms_norm_fwd\", \"dims\": [], \"calls\": 2, \"seconds\": %.17g, "
                "\"flops\": 0, \"bytes\": %.17g}]}",
                bytes / (gpu.hbmBandwidth * m), bytes);
  out += buf;
  return out;
}

TEST(Calibrate, RecoversTheEfficienciesAProfileWasMadeWith) {
  GpuSpec gpu = h100();
  std::string summary, error;
  ASSERT_TRUE(calibrate(gpu, profile(gpu, 0.61, 0.42, 0.77), DType::BF16, summary, error)) << error;
  EXPECT_NEAR(gpu.gemmEfficiency, 0.61, 1e-9);
  EXPECT_NEAR(gpu.flashAttentionEfficiency, 0.42, 1e-9);
  EXPECT_NEAR(gpu.memEfficiency, 0.77, 1e-9);
  EXPECT_NE(summary.find("gemm_efficiency 0.8775 -> 0.61 (2 calls)"), std::string::npos) << summary;
}

TEST(Calibrate, KeepsWhatTheProfileDoesNotMeasure) {
  GpuSpec gpu = h100();
  double attention = gpu.flashAttentionEfficiency;
  std::string summary, error;
  ASSERT_TRUE(calibrate(gpu,
                        "{\"version\": 1, \"kernels\": [{\"kernel\": \"add\", \"dims\": [], "
                        "\"calls\": 1, \"seconds\": 1e-3, \"flops\": 0, \"bytes\": 1.675e9}]}",
                        DType::BF16, summary, error))
      << error;
  EXPECT_NEAR(gpu.memEfficiency, 0.5, 1e-9); // 1.675 GB in 1 ms of 3.35 TB/s
  EXPECT_EQ(gpu.flashAttentionEfficiency, attention);
}

TEST(Calibrate, RefusesWhatIsNotAProfile) {
  GpuSpec gpu = h100();
  std::string summary, error;
  EXPECT_FALSE(calibrate(gpu, "{", DType::BF16, summary, error));
  EXPECT_NE(error.find("not JSON"), std::string::npos) << error;
  EXPECT_FALSE(calibrate(gpu, "{\"version\": 1, \"kernels\": [{\"kernel\": \"x\"}]}", DType::BF16,
                         summary, error));
  EXPECT_NE(error.find("kernels[0] needs"), std::string::npos) << error;
  EXPECT_FALSE(calibrate(gpu, "{\"version\": 1, \"kernels\": []}", DType::BF16, summary, error));
  EXPECT_NE(error.find("no timed kernels"), std::string::npos) << error;
}

} // namespace
