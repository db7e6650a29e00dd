//===- fp8.cpp - fp8 rounding with per-tensor scaling ---------------------===//
//
// What an fp8 GEMM does to its inputs, in fp32: scale the tensor so that its
// largest magnitude meets the format's largest value, round every element to
// the format, and (here) scale back. The GEMM itself then runs on the rounded
// values with fp32 accumulation, as tensor cores do.
//
//===----------------------------------------------------------------------===//

#include "llmopt-kernels/cpu.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace llmopt::kernels::cpu {

namespace {
struct Format {
  int mantissaBits;
  int minExponent; // of the normal numbers
  float max;
};
Format formatOf(Fp8 f) { return f == Fp8::E4M3 ? Format{3, -6, 448.0f} : Format{2, -14, 57344.0f}; }
} // namespace

float fp8Max(Fp8 format) { return formatOf(format).max; }

float roundToFp8(float x, Fp8 format) {
  if (std::isnan(x))
    return x;
  Format f = formatOf(format);
  float a = std::fabs(x);
  if (a >= f.max)
    return std::copysign(f.max, x);
  if (a == 0)
    return x;
  int e = 0;
  std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1): the exponent of a is e - 1
  int exponent = std::max(e - 1, f.minExponent); // subnormals share the smallest
  float quantum = std::ldexp(1.0f, exponent - f.mantissaBits);
  float r = std::nearbyint(a / quantum) * quantum; // ties to even
  return std::copysign(std::min(r, f.max), x);
}

float absMax(const float *x, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(x[i]));
  return m;
}

void fakeQuantizeFp8(const float *x, float *y, int64_t n, Fp8 format, float amax) {
  // Clamped: a tiny amax must not make the scale infinite (0 * inf).
  float scale = amax > 0 && std::isfinite(amax)
                    ? float(std::min(double(fp8Max(format)) / double(amax), double(FLT_MAX)))
                    : 1.0f;
  for (int64_t i = 0; i < n; ++i)
    y[i] = roundToFp8(x[i] * scale, format) / scale;
}

void fakeQuantizeFp8Rows(const float *x, float *y, int64_t rows, int64_t cols, Fp8 format,
                         const float *amax) {
  for (int64_t r = 0; r < rows; ++r)
    fakeQuantizeFp8(x + r * cols, y + r * cols, cols, format,
                    amax ? amax[r] : absMax(x + r * cols, cols));
}

} // namespace llmopt::kernels::cpu
