//===- FusedSourceTest.cpp - the generated fused kernels' source ----------===//
//
// The generator is all a plan can put into what the runtime compiles: its
// output is fixed text and checked values of the description, and any
// description outside what it writes is refused by name.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/fused_source.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace llmopt::fused;

namespace {

/// GPT-2's residual add and layer norm, bf16 activations and f32 weights.
Kernel addLayerNorm() {
  Kernel k;
  k.name = "fused_72a05ec885e4e0cf";
  k.ins = {{Scalar::BF16, false}, {Scalar::BF16, false}, {Scalar::F32, true}, {Scalar::F32, true}};
  k.outs = {{Scalar::BF16, false}, {Scalar::BF16, false}};
  k.body = {{"add", {0, 1}, {4}, 0, false}, {"layer_norm_fwd", {4, 2, 3}, {5}, 1e-5, false}};
  return k;
}

std::string refusal(const Kernel &k) {
  std::string source, error;
  EXPECT_FALSE(cudaSource({k}, source, error));
  return error;
}

} // namespace

TEST(FusedSource, WritesEachNameOnceFromItsDescription) {
  std::string source, error;
  Kernel k = addLayerNorm();
  ASSERT_TRUE(cudaSource({k, k}, source, error)) << error;
  EXPECT_NE(source.find("extern \"C\" cudaError_t fused_72a05ec885e4e0cf("), std::string::npos);
  EXPECT_NE(source.find("rsqrtf(blockSum(v, red) / float(cols) + 1.000000e-05f)"),
            std::string::npos);
  EXPECT_NE(source.find("const __nv_bfloat16 *__restrict__ in0"), std::string::npos);
  // One kernel for the two instructions of the name.
  std::string kernel = "__launch_bounds__(256) fused_72a05ec885e4e0cf_kernel(";
  size_t at = source.find(kernel);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(source.find(kernel, at + 1), std::string::npos);
}

TEST(FusedSource, RefusesWhatItDoesNotWrite) {
  Kernel k = addLayerNorm();
  k.name = "fused_x(){}";
  EXPECT_EQ(refusal(k), "a fused kernel's name must be fused_ and up to 122 of [a-z0-9_]");
  k.name = "main";
  EXPECT_EQ(refusal(k), "a fused kernel's name must be fused_ and up to 122 of [a-z0-9_]");

  k = addLayerNorm();
  k.body[0].kernel = "system";
  EXPECT_EQ(refusal(k), "fused kernel 'fused_72a05ec885e4e0cf': body[0]: 'system' is not a kernel "
                        "the fused kernels generate");
  k = addLayerNorm();
  k.body[1].ins = {4, 2, 3, 0};
  EXPECT_EQ(refusal(k), "fused kernel 'fused_72a05ec885e4e0cf': body[1]: wrong number of buffers "
                        "for 'layer_norm_fwd'");
  k = addLayerNorm();
  k.body[0].ins = {0, 6};
  EXPECT_EQ(refusal(k), "fused kernel 'fused_72a05ec885e4e0cf': body[0]: names buffer 6 of 6");
  k = addLayerNorm();
  k.body[0].outs = {1};
  EXPECT_EQ(refusal(k), "fused kernel 'fused_72a05ec885e4e0cf': body[0]: writes buffer 1, not an "
                        "output or temporary");
  k = addLayerNorm();
  k.body[1].eps = std::nan("");
  EXPECT_EQ(refusal(k), "fused kernel 'fused_72a05ec885e4e0cf': body[1]: eps must be a finite "
                        "number");

  // One name, two kernels: the second would run the first's code.
  Kernel other = addLayerNorm();
  other.outs[0].type = Scalar::F32;
  std::string source, error;
  EXPECT_FALSE(cudaSource({addLayerNorm(), other}, source, error));
  EXPECT_EQ(error, "fused kernel 'fused_72a05ec885e4e0cf' is described twice, differently");
}
