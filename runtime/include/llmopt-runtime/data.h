//===- data.h - token shards ------------------------------------------*- C++ -*-===//
//
// The token files llm.c and its tokenized datasets use: a header of 256
// int32 (magic 20240520, version, token count, then zeros) followed by the
// tokens. Version 1 (llm.c's) stores uint16 tokens; version 2, llm-opt's own,
// stores uint32 tokens for vocabularies over 65536.
//
// Batches are deterministic: step k reads the global batch of G sequences of
// S + 1 tokens starting at token k * G * S (sequence j at + j * S), wrapping
// around the data; rank r of the data-parallel group takes sequences
// [r * b, (r + 1) * b) of it. A step number is all a resumed run needs.
//
//===----------------------------------------------------------------------===//

#ifndef LLMOPT_RUNTIME_DATA_H
#define LLMOPT_RUNTIME_DATA_H

#include <cstdint>
#include <string>
#include <vector>

namespace llmopt::runtime {

constexpr int32_t kShardMagic = 20240520;

class TokenData {
public:
  /// Reads the shards in `paths` (in order). Fails with `error` naming the
  /// file on a path that is not a regular file (a FIFO, a device), a bad
  /// header, a token count of zero, or a file shorter than its header's
  /// count (checked before the tokens are allocated).
  bool open(const std::vector<std::string> &paths, std::string &error);

  /// Fills this rank's tokens and labels ([batch, seq] each) for `step`.
  void batch(int64_t step, int64_t globalSequences, int64_t firstSequence, int64_t sequences,
             int64_t seq, std::vector<int32_t> &tokens, std::vector<int32_t> &labels) const;

  int64_t size() const { return int64_t(tokens.size()); }
  int32_t maxToken() const;
  /// The SHA-256 (hex) of the token count and the first and last 4096
  /// tokens: ranks launched on different data differ in it (llm-run
  /// compares it).
  std::string fingerprint() const;

private:
  std::vector<int32_t> tokens;
};

/// Writes `tokens` as a shard (version 1 when they all fit in uint16).
bool writeShard(const std::string &path, const std::vector<int32_t> &tokens, std::string &error);

} // namespace llmopt::runtime

#endif // LLMOPT_RUNTIME_DATA_H
