//===- sha256.cpp - SHA-256 (FIPS 180-4) ----------------------------------===//

#include "llmopt-runtime/sha256.h"

#include <cstdint>

namespace llmopt::runtime {

namespace {
constexpr uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 |
           uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = hh + S1 + ch + K[t] + w[t];
    uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}
} // namespace

void Sha256::update(const void *data, size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  total += n;
  if (pendingBytes) {
    size_t take = n < 64 - pendingBytes ? n : 64 - pendingBytes;
    for (size_t k = 0; k < take; ++k)
      pending[pendingBytes + k] = p[k];
    pendingBytes += take;
    p += take;
    n -= take;
    if (pendingBytes < 64)
      return;
    block(h, pending);
    pendingBytes = 0;
  }
  for (; n >= 64; p += 64, n -= 64)
    block(h, p);
  for (size_t k = 0; k < n; ++k)
    pending[k] = p[k];
  pendingBytes = n;
}

std::string Sha256::hex() {
  unsigned char tail[128] = {0};
  for (size_t k = 0; k < pendingBytes; ++k)
    tail[k] = pending[k];
  tail[pendingBytes] = 0x80;
  size_t len = pendingBytes + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = total * 8;
  for (int k = 0; k < 8; ++k)
    tail[len - 1 - k] = static_cast<unsigned char>(bits >> (8 * k));
  block(h, tail);
  if (len == 128)
    block(h, tail + 64);
  static const char *hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h)
    for (int k = 7; k >= 0; --k)
      out += hex[(v >> (4 * k)) & 0xF];
  return out;
}

std::string sha256Hex(const std::string &data) {
  Sha256 s;
  s.update(data.data(), data.size());
  return s.hex();
}

} // namespace llmopt::runtime
