//===- data.cpp - token shards --------------------------------------------===//

#include "llmopt-runtime/data.h"
#include "llmopt-runtime/file.h"
#include "llmopt-runtime/sha256.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace llmopt::runtime {

bool TokenData::open(const std::vector<std::string> &paths, std::string &error) {
  tokens.clear();
  if (paths.empty()) {
    error = "no data shards given (--data FILE)";
    return false;
  }
  for (const std::string &path : paths) {
    // A FIFO or a device is refused before a byte is read (a FIFO used to
    // block the rank for ever).
    int64_t fileBytes = 0;
    std::string why;
    bool notRegular = false;
    int fd = openRegularFile(path, fileBytes, why, &notRegular);
    if (fd < 0) {
      error = path + ": " + (notRegular ? why : "cannot open the token shard") +
              " (--data takes token shard files: llm-data bytes makes one)";
      return false;
    }
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    int32_t header[256];
    if (fileBytes < int64_t(sizeof(header)) || !readAt(fd, header, sizeof(header), 0)) {
      error = path + ": shorter than the 1024-byte shard header";
      return false;
    }
    if (header[0] != kShardMagic) {
      error =
          path + ": not a token shard (magic " + std::to_string(header[0]) + ", expected 20240520)";
      return false;
    }
    if (header[1] != 1 && header[1] != 2) {
      error = path + ": unknown shard version " + std::to_string(header[1]) +
              " (1: uint16 tokens, 2: uint32 tokens)";
      return false;
    }
    int64_t count = header[2];
    if (count <= 0) {
      error = path + ": the header says it holds no tokens";
      return false;
    }
    size_t width = header[1] == 1 ? 2 : 4;
    // The claimed count against the file's size, before anything is
    // allocated (a header claiming 2^31 tokens used to allocate 8 GB first).
    int64_t held = (fileBytes - int64_t(sizeof(header))) / int64_t(width);
    if (held < count) {
      error = path + ": truncated: the header promises " + std::to_string(count) +
              " tokens, the file holds " + std::to_string(held);
      return false;
    }
    std::vector<char> raw(size_t(count) * width);
    if (!readAt(fd, raw.data(), raw.size(), int64_t(sizeof(header)))) {
      error = path + ": truncated: the header promises " + std::to_string(count) + " tokens";
      return false;
    }
    tokens.reserve(tokens.size() + size_t(count));
    for (int64_t i = 0; i < count; ++i) {
      if (width == 2) {
        uint16_t t;
        std::copy_n(raw.data() + 2 * i, 2, reinterpret_cast<char *>(&t));
        tokens.push_back(int32_t(t));
      } else {
        uint32_t t;
        std::copy_n(raw.data() + 4 * i, 4, reinterpret_cast<char *>(&t));
        if (t > 0x7fffffffu) {
          error = path + ": token " + std::to_string(t) + " does not fit an int32 id";
          return false;
        }
        tokens.push_back(int32_t(t));
      }
    }
  }
  return true;
}

int32_t TokenData::maxToken() const {
  return tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
}

std::string TokenData::fingerprint() const {
  const uint64_t n = tokens.size();
  const size_t edge = std::min<size_t>(tokens.size(), 4096);
  Sha256 h;
  h.update(&n, sizeof n);
  h.update(tokens.data(), edge * sizeof(int32_t));
  h.update(tokens.data() + (tokens.size() - edge), edge * sizeof(int32_t));
  return h.hex();
}

void TokenData::batch(int64_t step, int64_t globalSequences, int64_t firstSequence,
                      int64_t sequences, int64_t seq, std::vector<int32_t> &x,
                      std::vector<int32_t> &y) const {
  x.resize(size_t(sequences * seq));
  y.resize(size_t(sequences * seq));
  int64_t n = size();
  for (int64_t j = 0; j < sequences; ++j) {
    int64_t start = (step * globalSequences + firstSequence + j) * seq;
    for (int64_t t = 0; t < seq; ++t) {
      x[size_t(j * seq + t)] = tokens[size_t((start + t) % n)];
      y[size_t(j * seq + t)] = tokens[size_t((start + t + 1) % n)];
    }
  }
}

bool writeShard(const std::string &path, const std::vector<int32_t> &toks, std::string &error) {
  bool small = std::all_of(toks.begin(), toks.end(), [](int32_t t) { return t >= 0 && t < 65536; });
  int32_t header[256] = {0};
  header[0] = kShardMagic;
  header[1] = small ? 1 : 2;
  header[2] = int32_t(toks.size());
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      error = path + ": cannot write";
      return false;
    }
    f.write(reinterpret_cast<const char *>(header), sizeof(header));
    for (int32_t t : toks) {
      if (small) {
        uint16_t v = uint16_t(t);
        f.write(reinterpret_cast<const char *>(&v), 2);
      } else {
        uint32_t v = uint32_t(t);
        f.write(reinterpret_cast<const char *>(&v), 4);
      }
    }
    f.flush();
    f.close();
    if (!f) {
      error = path + ": write failed (is the disk full?)";
      std::remove(tmp.c_str()); // no half-written shard is left behind
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": cannot rename the temporary file into place";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace llmopt::runtime
