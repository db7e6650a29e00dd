//===- Calibrate.cpp - efficiency parameters from measured kernel times ---===//
//
// `llm-run --profile` writes what each kernel of a plan took (calls, wall
// time, FLOPs, bytes, GEMM and attention dimensions). The cost model's
// efficiencies are the ratios of what was reached to the datasheet:
//   gemm_efficiency            sum FLOPs / sum (t x peak x shape factor),
//                              the shape factor d / (d + gemm_half_dim) per
//                              GEMM dimension, as the model applies it
//   flash_attention_efficiency sum FLOPs / sum (t x peak)
//   mem_efficiency             sum bytes / sum (t x HBM bandwidth) over the
//                              other (memory-bound) kernels
// time-weighted, so that the kernels that dominate the step dominate the fit.
//
//===----------------------------------------------------------------------===//

#include "llmopt/CostModel/CostModel.h"
#include "llmopt/Support/JSONDepth.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <cstdio>

using namespace llmopt::cost;

bool llmopt::cost::calibrate(GpuSpec &gpu, llvm::StringRef profileJson, DType dtype,
                             std::string &summary, std::string &error) {
  if (std::string deep = jsonDepthError(profileJson, "the profile"); !deep.empty()) {
    error = deep;
    return false;
  }
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(profileJson);
  if (!parsed) {
    error = "the profile is not JSON: " + llvm::toString(parsed.takeError());
    return false;
  }
  const llvm::json::Object *root = parsed->getAsObject();
  const llvm::json::Array *kernels = root ? root->getArray("kernels") : nullptr;
  if (!root || root->getInteger("version") != 1 || !kernels) {
    error = "the profile needs \"version\": 1 and a \"kernels\" array (llm-run --profile)";
    return false;
  }
  double peak = gpu.peakFlops(dtype == DType::FP8 ? DType::BF16 : dtype) * gpu.throughputScale;
  GpuSpec unit = gpu;
  unit.gemmEfficiency = 1;
  double gemmFlops = 0, gemmTime = 0, attnFlops = 0, attnTime = 0, memBytes = 0, memTime = 0;
  int64_t gemmCalls = 0, attnCalls = 0, memCalls = 0;
  for (size_t i = 0; i < kernels->size(); ++i) {
    const llvm::json::Object *k = (*kernels)[i].getAsObject();
    std::optional<double> seconds = k ? k->getNumber("seconds") : std::nullopt,
                          flops = k ? k->getNumber("flops") : std::nullopt,
                          bytes = k ? k->getNumber("bytes") : std::nullopt;
    std::optional<int64_t> calls = k ? k->getInteger("calls") : std::nullopt;
    const llvm::json::Array *dims = k ? k->getArray("dims") : nullptr;
    if (!seconds || !flops || !bytes || !calls || !dims || *seconds < 0 || *flops < 0 ||
        *bytes < 0 || *calls < 0 || !std::isfinite(*seconds)) {
      error = llvm::formatv("kernels[{0}] needs calls, seconds, flops and bytes (non-negative) "
                            "and dims",
                            i)
                  .str();
      return false;
    }
    if (*seconds == 0)
      continue;
    std::vector<double> d;
    for (const llvm::json::Value &v : *dims)
      if (std::optional<double> x = v.getAsNumber())
        d.push_back(*x);
    if (d.size() == 3 && *flops > 0) { // GEMM [rows, in, out]
      gemmFlops += *flops;
      gemmTime += *seconds * peak * gemmEfficiency(unit, d[0], d[2], d[1]);
      gemmCalls += *calls;
    } else if (d.size() == 5 && *flops > 0) { // attention [b, heads, sq, sk, head_dim]
      attnFlops += *flops;
      attnTime += *seconds * peak;
      attnCalls += *calls;
    } else if (*bytes > 0) {
      memBytes += *bytes;
      memTime += *seconds * gpu.hbmBandwidth;
      memCalls += *calls;
    }
  }
  if (gemmCalls == 0 && attnCalls == 0 && memCalls == 0) {
    error = "the profile has no timed kernels";
    return false;
  }
  std::string parts;
  auto fit = [&](const char *name, double &field, double work, double capacity, int64_t calls) {
    if (calls == 0 || capacity <= 0)
      return;
    double old = field;
    field = work / capacity;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s%s %.4g -> %.4g (%lld calls)", parts.empty() ? "" : ", ",
                  name, old, field, static_cast<long long>(calls));
    parts += buf;
  };
  fit("gemm_efficiency", gpu.gemmEfficiency, gemmFlops, gemmTime, gemmCalls);
  fit("flash_attention_efficiency", gpu.flashAttentionEfficiency, attnFlops, attnTime, attnCalls);
  fit("mem_efficiency", gpu.memEfficiency, memBytes, memTime, memCalls);
  summary = "calibrated " + gpu.name + ": " + parts;
  return true;
}
