//===- init.h - deterministic parameter initialization ------------*- C++ -*-===//
//
// The same numbers on every platform and in every tool: splitmix64 seeded by
// (seed, parameter name) and Box-Muller, no <random> distribution (whose
// output the standard leaves to the implementation). The compiler's
// reference interpreter and the runtime both initialize parameters with it,
// so a plan trained by the runtime starts from the reference's weights.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_KERNELS_INIT_H
#define LLMOPT_KERNELS_INIT_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <thread>
#include <vector>

namespace llmopt::kernels {

/// FNV-1a of a name.
inline uint64_t nameHash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1).
  double uniform() { return (double(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  /// The state `n` calls of next() later (the generator is a counter).
  void skip(uint64_t n) { state += n * 0x9e3779b97f4a7c15ull; }

private:
  uint64_t state;
};

/// out[i] for i in [begin, end) (begin even) of the sequence below.
inline void initNormalRange(float *out, int64_t begin, int64_t end, float stddev, uint64_t seed) {
  SplitMix64 gen(seed);
  gen.skip(uint64_t(begin)); // two draws per pair of elements
  const double twoPi = 6.283185307179586;
  for (int64_t i = begin; i < end; i += 2) {
    double r = std::sqrt(-2.0 * std::log(gen.uniform()));
    double t = twoPi * gen.uniform();
    out[i] = float(r * std::cos(t)) * stddev;
    if (i + 1 < end)
      out[i + 1] = float(r * std::sin(t)) * stddev;
  }
}

/// out[i] ~ N(0, std^2), reproducibly for (seed, name): Box-Muller over
/// splitmix64 draws 2k and 2k + 1 for elements 2k and 2k + 1. Large tensors
/// are filled by several threads, each from its own offset of the sequence:
/// the same numbers as one thread.
inline void initNormal(float *out, int64_t count, float stddev, uint64_t seed,
                       std::string_view name) {
  uint64_t s = seed ^ nameHash(name);
  int64_t threads = count >= (int64_t(1) << 22)
                        ? std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()), 1, 32)
                        : 1;
  if (threads == 1) {
    initNormalRange(out, 0, count, stddev, s);
    return;
  }
  int64_t chunk = ((count + threads - 1) / threads + 1) / 2 * 2;
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < count; b += chunk)
    pool.emplace_back(initNormalRange, out, b, std::min(count, b + chunk), stddev, s);
  for (std::thread &t : pool)
    t.join();
}

} // namespace llmopt::kernels

#endif // LLMOPT_KERNELS_INIT_H
