//===- RandomVec.h - random test inputs ------------------------*- C++ -*-===//

#ifndef LLMOPT_KERNELS_TESTS_RANDOMVEC_H
#define LLMOPT_KERNELS_TESTS_RANDOMVEC_H

#include <cstdint>
#include <random>
#include <vector>

/// `n` values drawn from N(0, scale^2), reproducibly for `seed`.
inline std::vector<float> randomVec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(gen);
  return v;
}

#endif // LLMOPT_KERNELS_TESTS_RANDOMVEC_H
