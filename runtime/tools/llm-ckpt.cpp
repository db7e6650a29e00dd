//===- llm-ckpt.cpp - inspect and export checkpoints -----------------------===//
//
//   llm-ckpt info CKPT_DIR                    step, plan, parameters
//   llm-ckpt export CKPT_DIR OUT.safetensors  whole fp32 weights
//
// Works on the newest checkpoint in CKPT_DIR whatever plan wrote it, with
// the checks a resume makes (checksums, the manifest's numbers, each rank
// file the rank it is named for): the tensor-parallel parts and ZeRO chunks
// are put back together. The export is a safetensors file (8-byte
// little-endian header length, JSON header, raw little-endian data) under
// the model's Hugging Face parameter names, with the step and the run id in
// its metadata, so it loads where the model's config.json does.
//
//===----------------------------------------------------------------------===//

#include "llmopt-runtime/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

using namespace llmopt::runtime;

static int fail(const std::string &msg) {
  std::fprintf(stderr, "llm-ckpt: error: %s\n", msg.c_str());
  return 1;
}

static std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// JSON string escaping for parameter names.
static std::string quoted(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

int main(int argc, char **argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  if (!((cmd == "info" && argc == 3) || (cmd == "export" && argc == 4))) {
    std::fprintf(stderr, "usage: llm-ckpt info CKPT_DIR\n"
                         "       llm-ckpt export CKPT_DIR OUT.safetensors\n");
    return 2;
  }
  Plan plan;
  int64_t step = 0;
  std::vector<WholeTensor> tensors;
  std::string error;
  ResumedCheckpoint which;
  if (!readWholeCheckpoint(argv[2], plan, step, tensors, error, &which))
    return fail(error);

  if (cmd == "info") {
    int64_t total = 0;
    for (const WholeTensor &t : tensors)
      total += int64_t(t.value.size());
    std::printf("model %s, step %lld, %zu parameters (%lld values)\n", plan.model.c_str(),
                static_cast<long long>(step), tensors.size(), static_cast<long long>(total));
    std::printf("written by a plan of %d ranks:", plan.worldSize);
    for (const auto &[axis, n] : plan.mesh)
      std::printf(" %s%d", axis.c_str(), n);
    std::printf("\n");
    std::printf("run %s\n",
                which.runId.empty() ? "unnamed (a version-1 checkpoint)" : which.runId.c_str());
    for (const WholeTensor &t : tensors)
      std::printf("  %-48s %s\n", t.name.c_str(), shapeText(t.shape).c_str());
    return 0;
  }

  std::string header = "{\"__metadata__\": {\"format\": \"pt\", \"step\": \"" +
                       std::to_string(step) + "\", \"model\": " + quoted(plan.model) +
                       (which.runId.empty() ? "" : ", \"run_id\": " + quoted(which.runId)) + "}";
  uint64_t offset = 0;
  for (const WholeTensor &t : tensors) {
    uint64_t bytes = t.value.size() * sizeof(float);
    header += ", " + quoted(t.name) + ": {\"dtype\": \"F32\", \"shape\": " + shapeText(t.shape) +
              ", \"data_offsets\": [" + std::to_string(offset) + ", " +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8)
    header += ' ';
  std::string out = argv[3], tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<unsigned char>(n >> (8 * i));
    f.write(reinterpret_cast<const char *>(len), 8);
    f.write(header.data(), std::streamsize(header.size()));
    for (const WholeTensor &t : tensors)
      f.write(reinterpret_cast<const char *>(t.value.data()),
              std::streamsize(t.value.size() * sizeof(float)));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return fail(out + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    return fail(out + ": cannot move into place");
  }
  std::printf("%s: %zu tensors at step %lld\n", out.c_str(), tensors.size(),
              static_cast<long long>(step));
  return 0;
}
