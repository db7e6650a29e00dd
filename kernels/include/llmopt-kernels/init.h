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

#include <cmath>
#include <cstdint>
#include <string_view>

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

private:
  uint64_t state;
};

/// out[i] ~ N(0, std^2), reproducibly for (seed, name).
inline void initNormal(float *out, int64_t count, float stddev, uint64_t seed,
                       std::string_view name) {
  SplitMix64 gen(seed ^ nameHash(name));
  const double twoPi = 6.283185307179586;
  for (int64_t i = 0; i < count; i += 2) {
    double r = std::sqrt(-2.0 * std::log(gen.uniform()));
    double t = twoPi * gen.uniform();
    out[i] = float(r * std::cos(t)) * stddev;
    if (i + 1 < count)
      out[i + 1] = float(r * std::sin(t)) * stddev;
  }
}

} // namespace llmopt::kernels

#endif // LLMOPT_KERNELS_INIT_H
