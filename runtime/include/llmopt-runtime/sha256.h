//===- sha256.h - SHA-256 (FIPS 180-4) ------------------------------*- C++ -*-===//

#ifndef LLMOPT_RUNTIME_SHA256_H
#define LLMOPT_RUNTIME_SHA256_H

#include <string>

namespace llmopt::runtime {

/// The SHA-256 of `data` as 64 lower-case hex digits.
std::string sha256Hex(const std::string &data);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_SHA256_H
