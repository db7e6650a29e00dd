//===- sha256.h - SHA-256 (FIPS 180-4) ------------------------------*- C++ -*-===//

#ifndef LLMOPT_RUNTIME_SHA256_H
#define LLMOPT_RUNTIME_SHA256_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace llmopt::runtime {

/// The SHA-256 of `data` as 64 lower-case hex digits.
std::string sha256Hex(const std::string &data);

/// SHA-256 over data given in pieces (a file written as it is hashed).
class Sha256 {
public:
  void update(const void *data, size_t n);
  /// The digest as 64 lower-case hex digits; the object is spent.
  std::string hex();

private:
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char pending[64];
  size_t pendingBytes = 0;
  uint64_t total = 0;
};

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_SHA256_H
