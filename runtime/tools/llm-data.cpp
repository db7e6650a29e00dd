//===- llm-data.cpp - make token shards ------------------------------------===//
//
//   llm-data bytes IN.txt OUT.bin    one token per byte (vocabulary 256)
//   llm-data info SHARD.bin          header and token range
//
// A byte-level tokenizer needs no vocabulary file: enough for tests and the
// demo. Real datasets come tokenized in this format already (llm.c's).
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/data.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace llmopt::runtime;

int main(int argc, char **argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  std::string error;
  if (cmd == "bytes" && argc == 4) {
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "llm-data: %s: cannot read\n", argv[2]);
      return 1;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() < 2) {
      std::fprintf(stderr, "llm-data: %s: needs at least two bytes of text\n", argv[2]);
      return 1;
    }
    std::vector<int32_t> tokens;
    for (char c : bytes)
      tokens.push_back(int32_t(static_cast<unsigned char>(c)));
    if (!writeShard(argv[3], tokens, error)) {
      std::fprintf(stderr, "llm-data: %s\n", error.c_str());
      return 1;
    }
    std::printf("%s: %zu tokens (bytes), vocabulary 256\n", argv[3], tokens.size());
    return 0;
  }
  if (cmd == "info" && argc == 3) {
    TokenData d;
    if (!d.open({argv[2]}, error)) {
      std::fprintf(stderr, "llm-data: %s\n", error.c_str());
      return 1;
    }
    std::printf("%s: %lld tokens, largest id %d\n", argv[2], static_cast<long long>(d.size()),
                d.maxToken());
    return 0;
  }
  std::fprintf(stderr, "usage: llm-data bytes IN.txt OUT.bin | llm-data info SHARD.bin\n");
  return 2;
}
